// Package redistest starts a real redis-server for tests: on a unix socket
// in a temporary directory, without persistence, stopped when the test ends.
//
// Tests that need Redis call Start. Where the redis-server binary is not
// installed, Start skips the test, except under CI (the environment variable
// CI set to "true"), where it fails it: CI installs redis-server, so a
// missing binary there is a broken set-up, not a reason to pass.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long Start waits for the server to accept
// connections.
const startTimeout = 10 * time.Second

// Server is a running redis-server. Its methods may be called from any
// goroutine.
type Server struct {
	// Socket is the path of the server's unix socket.
	Socket string
	// URL is the go-redis URL of the server (unix://…).
	URL string

	bin  string
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Binary returns the path of redis-server, or "" if it is not installed.
func Binary() string {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return ""
	}
	return p
}

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
	// Unix socket paths are limited to about 100 bytes: t.TempDir can be
	// longer, so the socket lives in a short directory of its own.
	dir, err := os.MkdirTemp("", "redis")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &Server{bin: bin, dir: dir, Socket: filepath.Join(dir, "r.sock")}
	s.URL = "unix://" + s.Socket
	if err := s.start(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// start runs the server and waits until its log says it accepts
// connections.
func (s *Server) start() error {
	cmd := exec.Command(s.bin,
		"--port", "0",
		"--unixsocket", s.Socket,
		"--unixsocketperm", "700",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--loglevel", "notice",
		"--logfile", "")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan struct{})
	done := make(chan struct{})
	var logged strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			if !signalled {
				logged.WriteString(line + "\n")
				if strings.Contains(strings.ToLower(line), "ready to accept connections") {
					signalled = true
					close(ready)
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(done)
	}()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case <-ready:
	case <-done:
		return fmt.Errorf("redis-server exited before accepting connections:\n%s", logged.String())
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-done
		return errors.New("redis-server did not accept connections within " + startTimeout.String())
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
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
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
	_ = os.Remove(s.Socket)
}

// Restart starts the server again on the same socket after Kill. It is
// empty, as a crashed server without persistence comes back.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		t.Fatalf("redistest: restart: %v", err)
	}
}

// Stop stops the server (SIGKILL: nothing is persisted anyway) and waits
// for it. It is called when the test ends.
func (s *Server) Stop() { s.Kill() }

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
