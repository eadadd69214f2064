// Package redistest starts a real redis-server for tests: on a unix socket
// in a temporary directory, without persistence, stopped when the test ends.
// The server is run by package internal/redisproc.
//
// Tests that need Redis call Start, or StartWith to give redis-server
// arguments of their own (a password, a memory limit…). Where the
// redis-server binary is not installed, they skip the test, except under CI
// (the environment variable CI set to "true"), where they fail it: CI
// installs redis-server, so a missing binary there is a broken set-up, not a
// reason to pass.
//
// Tests of failures play them with the Server (Kill and Restart: a crash;
// Pause and Resume: a frozen server) or with a Relay between the clients and
// the server (BlackHole and Heal: a network partition).
package redistest

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisproc"
)

// Server is a running redis-server. Its methods may be called from any
// goroutine.
type Server struct {
	// Socket is the path of the server's unix socket.
	Socket string
	// URL is the go-redis URL of the server (unix://…).
	URL string

	proc     *redisproc.Server
	password string // of --requirepass, for Client, Ping and FlushAll
}

// Binary returns the path of redis-server, or "" if it is not installed.
func Binary() string { return redisproc.Binary() }

// Start starts a redis-server for t and stops it when t ends. Without the
// binary it skips t, or fails it under CI=true. It is StartWith without
// arguments.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t)
}

// StartWith is Start with args appended to the redis-server command line
// (see redisproc.Start), for example "--maxmemory", "2mb",
// "--maxmemory-policy", "allkeys-lru". Restart reuses them. With
// "--requirepass", "pw", URL stays without the password (clients of the
// code under test must be given it), while Client, Ping and FlushAll use it.
func StartWith(t testing.TB, args ...string) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("redistest: redis-server is not installed, and CI=true requires it (apt-get install -y redis-server)")
		}
		t.Skip("redistest: redis-server is not installed")
	}
	p, err := redisproc.Start(context.Background(), bin, args...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() {
		p.Resume() // if the test left it paused
		p.Close()
	})
	s := &Server{Socket: p.Socket, URL: p.URL, proc: p}
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--requirepass" {
			s.password = args[i+1]
		}
	}
	return s
}

// options returns the client options of the server, with its password.
func (s *Server) options() (*redis.Options, error) {
	opt, err := redis.ParseURL(s.URL)
	if err != nil {
		return nil, err
	}
	opt.Password = s.password
	return opt, nil
}

// Client returns a go-redis client of the server, closed when t ends. It
// uses the password StartWith was given, if any.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := s.options()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// Kill stops the server at once (SIGKILL), as a crash would, and waits
// until it has exited. Its data is lost.
func (s *Server) Kill() { s.proc.Kill() }

// Restart starts the server again on the same socket after Kill. It is
// empty, as a crashed server without persistence comes back.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.proc.Restart(context.Background()); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// Pause freezes the server (SIGSTOP) until Resume: its socket still
// accepts connections, but nothing is answered, as a hung server would.
// Kill, Restart and Stop work on a paused server, and the end of the test
// resumes it before stopping it.
func (s *Server) Pause() { s.proc.Pause() }

// Resume thaws a paused server (SIGCONT): it answers what it was sent
// meanwhile.
func (s *Server) Resume() { s.proc.Resume() }

// FlushAll empties the server (FLUSHALL) through a client of its own, or
// fails t.
func (s *Server) FlushAll(t testing.TB) {
	t.Helper()
	opt, err := s.options()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("redistest: FLUSHALL: %v", err)
	}
}

// Stop stops the server (SIGKILL: nothing is persisted anyway) and waits
// for it. It is called when the test ends.
func (s *Server) Stop() { s.proc.Kill() }

// Ping reports whether the server answers now. It uses the password
// StartWith was given, if any.
func (s *Server) Ping(ctx context.Context) error {
	opt, err := s.options()
	if err != nil {
		return err
	}
	c := redis.NewClient(opt)
	defer c.Close()
	return c.Ping(ctx).Err()
}
