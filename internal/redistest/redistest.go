// Package redistest starts a real redis-server for tests: on a unix socket
// in a temporary directory, without persistence, stopped when the test ends.
// The server is run by package internal/redisproc.
//
// Tests that need Redis call Start. Where the redis-server binary is not
// installed, Start skips the test, except under CI (the environment variable
// CI set to "true"), where it fails it: CI installs redis-server, so a
// missing binary there is a broken set-up, not a reason to pass.
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

	proc *redisproc.Server
}

// Binary returns the path of redis-server, or "" if it is not installed.
func Binary() string { return redisproc.Binary() }

// Start starts a redis-server for t and stops it when t ends. Without the
// binary it skips t, or fails it under CI=true.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("redistest: redis-server is not installed, and CI=true requires it (apt-get install -y redis-server)")
		}
		t.Skip("redistest: redis-server is not installed")
	}
	p, err := redisproc.Start(context.Background(), bin)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(p.Close)
	return &Server{Socket: p.Socket, URL: p.URL, proc: p}
}

// Client returns a go-redis client of the server, closed when t ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(s.URL)
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

// Stop stops the server (SIGKILL: nothing is persisted anyway) and waits
// for it. It is called when the test ends.
func (s *Server) Stop() { s.proc.Kill() }

// Ping reports whether the server answers now.
func (s *Server) Ping(ctx context.Context) error {
	opt, err := redis.ParseURL(s.URL)
	if err != nil {
		return err
	}
	c := redis.NewClient(opt)
	defer c.Close()
	return c.Ping(ctx).Err()
}
