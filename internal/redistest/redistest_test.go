package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartKillRestart(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("a killed server still answers")
	}
	s.Restart(t)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("restarted server: %v", err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after a restart the server should be empty and reachable: n=%d err=%v", n, err)
	}
}

func TestStartWithArguments(t *testing.T) {
	s := redistest.StartWith(t, "--requirepass", "pw", "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
	ctx := context.Background()
	if err := client(t, s.URL, "").Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without the password: %v, want NOAUTH", err)
	}
	if err := client(t, s.URL, "pw").Ping(ctx).Err(); err != nil {
		t.Fatalf("PING with the password: %v", err)
	}
	c := s.Client(t) // with the password
	if got, err := c.ConfigGet(ctx, "maxmemory-policy").Result(); err != nil || got["maxmemory-policy"] != "allkeys-lru" {
		t.Fatalf("maxmemory-policy: %v, %v", got, err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	s.FlushAll(t)
}

func TestPauseResume(t *testing.T) {
	s := redistest.Start(t)
	c := client(t, s.URL, "")
	s.Pause()
	if err := ping(c, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING of a paused server: %v, want a timeout", err)
	}
	s.Resume()
	if err := ping(c, 10*time.Second); err != nil {
		t.Fatalf("PING of a resumed server: %v", err)
	}
	s.Pause() // left paused: the end of the test must still stop it
}

func TestFlushAll(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	c := s.Client(t)
	if err := c.MSet(ctx, "a", 1, "b", 2).Err(); err != nil {
		t.Fatal(err)
	}
	s.FlushAll(t)
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("after FlushAll: %d keys, %v", n, err)
	}
}

func TestRelay(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	t.Run("relay", testRelay) // its clients, relay and server end with it
	goleak.VerifyNone(t, leaks)
}

func testRelay(t *testing.T) {
	s := redistest.Start(t)
	r := redistest.NewRelay(t, s.Socket)
	if r.URL != "unix://"+r.Socket {
		t.Fatalf("URL %q is not the socket %q", r.URL, r.Socket)
	}
	ctx := context.Background()
	direct := client(t, s.URL, "")
	relayed := client(t, r.URL, "")
	if err := relayed.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the relay: %v", err)
	}
	if v, err := direct.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET of a key set through the relay: %q, %v", v, err)
	}
	if v, err := relayed.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET through the relay: %q, %v", v, err)
	}
	raw, err := net.Dial("unix", r.Socket) // a connection open across the cut
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rawPing := func(d time.Duration) error {
		if _, err := raw.Write([]byte("PING\r\n")); err != nil {
			return err
		}
		raw.SetReadDeadline(time.Now().Add(d))
		buf := make([]byte, len("+PONG\r\n"))
		if _, err := io.ReadFull(raw, buf); err != nil {
			return err
		}
		if string(buf) != "+PONG\r\n" {
			return fmt.Errorf("reply %q", buf)
		}
		return nil
	}
	if err := rawPing(10 * time.Second); err != nil {
		t.Fatalf("PING on a raw connection through the relay: %v", err)
	}

	r.BlackHole()
	if err := ping(relayed, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING through a black hole: %v, want a timeout", err)
	}
	if err := ping(client(t, r.URL, ""), 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING of a new client through a black hole: %v, want a timeout", err)
	}
	if err := rawPing(200 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING on a raw connection through a black hole: %v, want a timeout", err)
	}
	if err := ping(direct, 10*time.Second); err != nil {
		t.Fatalf("direct PING during the black hole: %v", err)
	}

	r.Heal()
	if err := ping(client(t, r.URL, ""), 10*time.Second); err != nil {
		t.Fatalf("PING of a new client through a healed relay: %v", err)
	}
	if err := ping(relayed, 10*time.Second); err != nil {
		t.Fatalf("PING of the old client through a healed relay: %v", err)
	}
	// The PING sent during the cut is lost (unless the relay had not read
	// it yet): the open connection answers the next one.
	if err := rawPing(10 * time.Second); err != nil {
		t.Fatalf("PING on a raw connection open across the cut, after Heal: %v", err)
	}

	r.BlackHole()
	if err := ping(client(t, r.URL, ""), 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING through a black hole: %v, want a timeout", err)
	}
	r.Close() // with connections open, cut
	r.Close() // twice: nothing
	if _, err := raw.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("Close left a connection open: read %v, want EOF", err)
	}
	if _, err := os.Stat(r.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left the socket: %v", err)
	}
}

// client returns a client of url, with password if not "", that tries
// each command once and whose connection deadlines follow the context's.
// It is closed when t ends.
func client(t testing.TB, url, password string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.Password = password
	opt.MaxRetries = -1
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// ping sends one PING on c, giving up after d.
func ping(c *redis.Client, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Ping(ctx).Err()
}

// isTimeout reports whether err is a deadline's: the context's, or the
// connection's set from it.
func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
