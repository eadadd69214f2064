// Package redisproc runs a private redis-server: on a unix socket in a
// temporary directory of its own, without persistence, for as long as the
// process that started it wants it. The tests use it through
// internal/redistest; "sluice demo -processes N" uses it when no -redis URL
// is given.
//
// Start takes extra redis-server arguments (a password, a memory limit…),
// which Restart reuses. Kill and Restart play a crash and a recovery; Pause
// and Resume freeze the server and thaw it (SIGSTOP, SIGCONT), as a hung
// server or a long GC-like stall would look to its clients.
//
// The server never outlives the process that started it on Linux: it gets
// SIGKILL when that process dies (Pdeathsig), even if it dies by SIGKILL,
// and it runs in a process group of its own, so a Ctrl-C in the terminal
// reaches only the program, which stops it in its own time (Close). On
// other systems it stays in the caller's process group, so a Ctrl-C stops
// it too, and only a caller killed outright (SIGKILL) leaves it running.
package redisproc

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
	"time"

	"github.com/redis/go-redis/v9"
)

// StartTimeout bounds how long Start and Restart wait for the server to
// accept connections.
const StartTimeout = 10 * time.Second

// Binary returns the path of redis-server on PATH, or "" if it is not
// installed.
func Binary() string {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return ""
	}
	return p
}

// Server is a running redis-server. Its methods may be called from any
// goroutine.
type Server struct {
	// Socket is the path of the server's unix socket.
	Socket string
	// URL is the go-redis URL of the server (unix://…).
	URL string

	bin  string
	args []string // extra arguments, after the package's own
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start starts the redis-server binary bin (see Binary) on a unix socket in
// a new temporary directory, and returns once its log says it accepts
// connections, or with an error if it exits first, does not within
// StartTimeout, or ctx ends. Close stops it and removes the directory.
//
// args are appended to the server's command line, after the package's own
// options (which they may override, but the socket and the directory are
// the package's): for example "--requirepass", "pw", or "--maxmemory",
// "2mb", "--maxmemory-policy", "allkeys-lru". Restart reuses them.
func Start(ctx context.Context, bin string, args ...string) (*Server, error) {
	if bin == "" {
		return nil, errors.New("redisproc: no redis-server binary")
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	// Unix socket paths are limited to about 100 bytes: the directory is
	// a short one of its own, directly in the temporary directory.
	dir, err := os.MkdirTemp("", "redis")
	if err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	s := &Server{bin: bin, args: append([]string(nil), args...), dir: dir, Socket: filepath.Join(dir, "r.sock")}
	s.URL = "unix://" + s.Socket
	if err := s.start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	return s, nil
}

// start runs the server and waits until its log says it accepts
// connections.
func (s *Server) start(ctx context.Context) error {
	args := []string{
		"--port", "0",
		"--unixsocket", s.Socket,
		"--unixsocketperm", "700",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--loglevel", "notice",
		"--logfile", "",
	}
	cmd := exec.Command(s.bin, append(args, s.args...)...)
	cmd.SysProcAttr = sysProcAttr()
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
	var logged strings.Builder // read only after ready or done
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
	timer := time.NewTimer(StartTimeout)
	defer timer.Stop()
	select {
	case <-ready:
	case <-done:
		return fmt.Errorf("redis-server exited before accepting connections:\n%s", logged.String())
	case <-timer.C:
		_ = cmd.Process.Kill()
		<-done
		return errors.New("redis-server did not accept connections within " + StartTimeout.String())
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return context.Cause(ctx)
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// Kill stops the server at once (SIGKILL), as a crash would, and waits
// until it has exited. Its data is lost. Killing a stopped server does
// nothing; a paused one (Pause) is killed as a running one.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	// SIGKILL ends a stopped process too; SIGCONT makes sure a paused
	// server is not left waiting for one. The process is not reaped
	// before done, so the signal cannot reach another one.
	if sigCont != nil {
		_ = cmd.Process.Signal(sigCont)
	}
	<-done
	_ = os.Remove(s.Socket)
}

// Restart starts the server again on the same socket, with the same
// arguments, killing it first if it runs (or is paused). It is empty, as a
// crashed server without persistence comes back, and not paused.
func (s *Server) Restart(ctx context.Context) error {
	s.Kill()
	if err := s.start(ctx); err != nil {
		return fmt.Errorf("redisproc: restart: %w", err)
	}
	return nil
}

// Pause freezes the server (SIGSTOP): the process stays alive and its
// socket still accepts connections, but nothing is read or answered until
// Resume. Kill, Restart and Close work on a paused server. Pausing a
// stopped or paused server does nothing, as does Pause on systems without
// SIGSTOP (Windows).
func (s *Server) Pause() { s.signal(sigStop) }

// Resume thaws a paused server (SIGCONT): it answers what it was sent
// meanwhile. Resuming a running or stopped server does nothing.
func (s *Server) Resume() { s.signal(sigCont) }

// signal sends sig to the server if it runs.
func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && sig != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Close stops the server (SIGKILL: nothing is persisted anyway), waits for
// it and removes its directory. A paused server is closed as a running one.
func (s *Server) Close() {
	s.Kill()
	_ = os.RemoveAll(s.dir)
}

// Ping reports whether the server answers now: one attempt, no retries.
// It sends no password: a server started with --requirepass answers with
// an error reply (NOAUTH), which Ping counts as answering.
func (s *Server) Ping(ctx context.Context) error {
	opt, err := redis.ParseURL(s.URL)
	if err != nil {
		return err
	}
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	defer c.Close()
	err = c.Ping(ctx).Err()
	var reply redis.Error
	if errors.As(err, &reply) {
		return nil // an error reply is an answer
	}
	return err
}
