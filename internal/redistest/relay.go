package redistest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// Relay forwards connections to a server byte for byte, on a unix socket of
// its own, until the test cuts it (BlackHole) and heals it (Heal): clients
// given its URL instead of the server's see a network partition, while
// those of the server itself do not. Its methods may be called from any
// goroutine.
type Relay struct {
	// Socket is the path of the relay's unix socket.
	Socket string
	// URL is the go-redis URL of the relay (unix://…).
	URL string

	target string
	dir    string
	ln     net.Listener
	ctx    context.Context // ends with Close, to abandon dials
	cancel context.CancelFunc
	holed  atomic.Bool
	wg     sync.WaitGroup // every goroutine the relay started

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // open, both sides
	closed bool
}

// NewRelay starts a relay to the unix socket target (a Server's Socket)
// and closes it when t ends.
func NewRelay(t testing.TB, target string) *Relay {
	t.Helper()
	// Unix socket paths are limited to about 100 bytes: t.TempDir's can
	// be longer.
	dir, err := os.MkdirTemp("", "relay")
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	sock := filepath.Join(dir, "r.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("redistest: %v", err)
	}
	r := &Relay{Socket: sock, URL: "unix://" + sock, target: target, dir: dir, ln: ln, conns: map[net.Conn]struct{}{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	t.Cleanup(r.Close)
	r.wg.Add(1)
	go r.accept()
	return r
}

// BlackHole cuts the relay: from then on, the bytes of every connection,
// open or new, are read and dropped in both directions, and no connection
// is closed, as packets vanish in a network partition. New connections are
// still accepted (as a connect could succeed before the cut). Bytes being
// forwarded when BlackHole is called may still arrive.
func (r *Relay) BlackHole() { r.holed.Store(true) }

// Heal ends BlackHole: every connection, open or new, is forwarded again.
// The bytes dropped meanwhile stay lost, so a connection open across the
// cut has likely lost part of a request or a reply: its client is expected
// to time out and drop it, as go-redis does. An end of a connection seen
// during the cut (the server or the client closed it) is not forwarded,
// before or after Heal.
func (r *Relay) Heal() { r.holed.Store(false) }

// Close closes the relay's socket and every connection, waits for every
// goroutine the relay started and removes its directory. Closing it again
// does nothing.
func (r *Relay) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.cancel()
	r.ln.Close()
	r.wg.Wait()
	os.RemoveAll(r.dir)
}

// accept accepts connections until Close, and relays each.
func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // closed: a unix listener has no transient errors
		}
		r.wg.Add(1)
		go r.relay(c)
	}
}

// relay connects c to the target and forwards between them until either
// ends.
func (r *Relay) relay(c net.Conn) {
	defer r.wg.Done()
	if !r.track(c) {
		return
	}
	var d net.Dialer
	up, err := d.DialContext(r.ctx, "unix", r.target)
	if err != nil {
		r.untrack(c) // as a refused connection would end
		return
	}
	if !r.track(up) {
		r.untrack(c)
		return
	}
	r.wg.Add(2)
	go r.pipe(up, c)
	go r.pipe(c, up)
}

// pipe forwards from src to dst until src ends or dst fails, dropping what
// it reads while the relay is cut. At the end it closes src, and dst too
// unless the relay is cut.
func (r *Relay) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !r.holed.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	r.untrack(src)
	if !r.holed.Load() {
		r.untrack(dst)
	}
}

// track records an open connection, for Close to close it; after Close, it
// closes it and returns false.
func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

// untrack closes a connection and forgets it.
func (r *Relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}
