package redisproc_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/redisproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func binary(t *testing.T) string {
	t.Helper()
	bin := redisproc.Binary()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed, and CI=true requires it")
		}
		t.Skip("redis-server is not installed")
	}
	return bin
}

func TestStartKillRestartClose(t *testing.T) {
	s, err := redisproc.Start(context.Background(), binary(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("a started server does not answer: %v", err)
	}
	if s.URL != "unix://"+s.Socket {
		t.Fatalf("URL %q is not the socket %q", s.URL, s.Socket)
	}
	s.Kill()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("a killed server still answers")
	}
	if _, err := os.Stat(s.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the socket of a killed server remains: %v", err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("restarted server: %v", err)
	}
	s.Close()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("a closed server still answers")
	}
	if _, err := os.Stat(s.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left the socket: %v", err)
	}
	s.Close() // twice: nothing
}

func TestStartEndsWithItsContext(t *testing.T) {
	bin := binary(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	want := errors.New("given up")
	cancel(want)
	if _, err := redisproc.Start(ctx, bin); !errors.Is(err, want) {
		t.Fatalf("Start with an ended context: %v, want %v", err, want)
	}
}

func TestStartFailsWithoutABinary(t *testing.T) {
	if _, err := redisproc.Start(context.Background(), ""); err == nil {
		t.Fatal("Start without a binary did not fail")
	}
	if _, err := redisproc.Start(context.Background(), "/nonexistent/redis-server"); err == nil {
		t.Fatal("Start with a missing binary did not fail")
	}
	// A program that exits at once, without the log line.
	if bin, err := exec.LookPath("true"); err == nil {
		_, err := redisproc.Start(context.Background(), bin)
		if err == nil || !strings.Contains(err.Error(), "exited before accepting connections") {
			t.Fatalf("Start of a program that exits: %v", err)
		}
	}
}

func TestStartWithArguments(t *testing.T) {
	s, err := redisproc.Start(context.Background(), binary(t), "--requirepass", "pw")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	check := func(when string) {
		t.Helper()
		if err := s.Ping(ctx); err != nil {
			t.Fatalf("%s: a server that refuses a PING without a password still answers: %v", when, err)
		}
		if err := ping(t, s, "", time.Second); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Fatalf("%s: PING without the password: %v, want NOAUTH", when, err)
		}
		if err := ping(t, s, "pw", time.Second); err != nil {
			t.Fatalf("%s: PING with the password: %v", when, err)
		}
	}
	check("started")
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	check("restarted")
}

func TestPauseResume(t *testing.T) {
	s, err := redisproc.Start(context.Background(), binary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Pause()
	if err := ping(t, s, "", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING of a paused server: %v, want a timeout", err)
	}
	s.Resume()
	if err := ping(t, s, "", 10*time.Second); err != nil {
		t.Fatalf("PING of a resumed server: %v", err)
	}
	s.Pause()
	s.Kill() // must not hang on a paused server
	if err := s.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ping(t, s, "", 10*time.Second); err != nil {
		t.Fatalf("PING of a server restarted after a pause: %v", err)
	}
	s.Pause()
	s.Close() // nor must Close
}

// ping sends one PING, with password if not "", to s on a fresh client
// whose connection deadlines follow the context's, which ends after d.
func ping(t *testing.T, s *redisproc.Server, password string, d time.Duration) error {
	t.Helper()
	opt, err := redis.ParseURL(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	opt.Password = password
	opt.MaxRetries = -1
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	defer c.Close()
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
