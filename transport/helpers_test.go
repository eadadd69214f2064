package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitTimeout bounds every wait on a channel; tests never sleep to wait.
const waitTimeout = 10 * time.Second

type connKey struct{}

// tlsServer is an httptest HTTP/2 TLS server that counts new connections
// and stashes each net.Conn in the request context.
type tlsServer struct {
	*httptest.Server
	newConns atomic.Int32
}

func startTLSServer(t *testing.T, h http.Handler, http2 bool) *tlsServer {
	t.Helper()
	s := &tlsServer{Server: httptest.NewUnstartedServer(h)}
	s.EnableHTTP2 = http2
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.newConns.Add(1)
		}
	}
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // expected handshake failures
	s.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, c)
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *tlsServer) clientTLS() *tls.Config {
	return s.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u
}

// dialT dials and registers Close as a cleanup (runs before the server's
// Close, so httptest does not wait on a live HTTP/2 conn).
func dialT(t *testing.T, raw string, cfg Config) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := Dial(ctx, mustURL(t, raw), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func get(t *testing.T, c *Conn, base, path string) (*http.Response, error) {
	t.Helper()
	return getCtx(context.Background(), t, c, base, path)
}

func getCtx(ctx context.Context, t *testing.T, c *Conn, base, path string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	require.NoError(t, err)
	return c.RoundTrip(req)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func waitDone(t *testing.T, c *Conn) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(waitTimeout):
		t.Fatalf("Done not closed within %v (InFlight=%d Available=%d)", waitTimeout, c.InFlight(), c.Available())
	}
}

func requireNotDone(t *testing.T, c *Conn) {
	t.Helper()
	select {
	case <-c.Done():
		t.Fatalf("Done closed unexpectedly: %v", c.Err())
	default:
	}
	require.NoError(t, c.Err())
}

func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out after %v", waitTimeout)
		panic("unreachable")
	}
}

type rtResult struct {
	resp *http.Response
	err  error
}

func goGet(t *testing.T, c *Conn, base, path string) <-chan rtResult {
	ch := make(chan rtResult, 1)
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	require.NoError(t, err)
	go func() {
		resp, err := c.RoundTrip(req)
		ch <- rtResult{resp, err}
	}()
	return ch
}

// countGoroutines counts live goroutines whose stack contains substr.
func countGoroutines(substr string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, substr) {
			count++
		}
	}
	return count
}

// watcherCount counts the Conns' watcher goroutines, the only goroutines
// this package starts (whether already running or not yet scheduled).
func watcherCount() int {
	return countGoroutines("created by github.com/sluicehq/sluice/transport.dial")
}

// freezeProxy forwards TCP between the client and target until Freeze;
// after that it silently drops everything in both directions (a peer that
// stops reading and writing, without closing).
type freezeProxy struct {
	ln     net.Listener
	target string
	frozen chan struct{}
	stop   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func startFreezeProxy(t *testing.T, target string) *freezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &freezeProxy{ln: ln, target: target, frozen: make(chan struct{}), stop: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *freezeProxy) Addr() string { return p.ln.Addr().String() }

func (p *freezeProxy) Freeze() { p.once.Do(func() { close(p.frozen) }) }

func (p *freezeProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(u, c)
		go p.pipe(c, u)
	}
}

func (p *freezeProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-p.frozen:
				<-p.stop // hold the bytes forever
				return
			default:
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (p *freezeProxy) close() {
	close(p.stop)
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// fakeH2 is a minimal cleartext HTTP/2 server speaking raw frames, for the
// cases a real net/http server cannot be made to produce on demand (GOAWAY
// with a chosen last-stream-id, GOAWAY without closing TCP).
type fakeH2 struct {
	ln      net.Listener
	headers chan uint32   // stream ids of received HEADERS frames
	pings   chan struct{} // one per PING answered (dropped when full)
	readErr chan error    // the read loop's terminal error
	wmu     sync.Mutex
	c       net.Conn
	closed  bool
}

const (
	frameHeaders  = 0x1
	flagEndStream = 0x1
	flagEndHdrs   = 0x4
)

func startFakeH2(t *testing.T) *fakeH2 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &fakeH2{ln: ln, headers: make(chan uint32, 16), pings: make(chan struct{}, 64), readErr: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		f.wmu.Lock()
		if f.closed {
			f.wmu.Unlock()
			c.Close()
			return
		}
		f.c = c
		f.wmu.Unlock()
		f.readErr <- f.serve(c)
	}()
	t.Cleanup(func() {
		ln.Close()
		f.wmu.Lock()
		f.closed = true
		if f.c != nil {
			f.c.Close()
		}
		f.wmu.Unlock()
		<-done
	})
	return f
}

func (f *fakeH2) URL() string { return "http://" + f.ln.Addr().String() }

func (f *fakeH2) serve(c net.Conn) error {
	preface := make([]byte, len(http2Preface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return err
	}
	if string(preface) != http2Preface {
		return io.ErrUnexpectedEOF
	}
	f.write(frameSettings, 0, 0, nil)
	hdr := make([]byte, 9)
	for {
		if _, err := io.ReadFull(c, hdr); err != nil {
			return err
		}
		length := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags := hdr[3], hdr[4]
		stream := binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff
		payload := make([]byte, length)
		if _, err := io.ReadFull(c, payload); err != nil {
			return err
		}
		switch {
		case typ == frameSettings && flags&flagAck == 0:
			f.write(frameSettings, flagAck, 0, nil)
		case typ == framePing && flags&flagAck == 0:
			f.write(framePing, flagAck, 0, payload)
			select {
			case f.pings <- struct{}{}:
			default:
			}
		case typ == frameHeaders:
			f.headers <- stream
		}
	}
}

const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

func (f *fakeH2) write(typ, flags byte, stream uint32, payload []byte) {
	var b bytes.Buffer
	b.Write([]byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags})
	binary.Write(&b, binary.BigEndian, stream)
	b.Write(payload)
	f.wmu.Lock()
	defer f.wmu.Unlock()
	f.c.Write(b.Bytes())
}

// goAway sends GOAWAY(lastStreamID, code) and keeps the TCP conn open.
func (f *fakeH2) goAway(lastStreamID, code uint32) {
	p := make([]byte, 8)
	binary.BigEndian.PutUint32(p, lastStreamID)
	binary.BigEndian.PutUint32(p[4:], code)
	f.write(frameGoAway, 0, 0, p)
}

// closeConn closes the server side of the TCP connection.
func (f *fakeH2) closeConn() {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	f.c.Close()
}

// rst resets stream with code.
func (f *fakeH2) rst(stream, code uint32) {
	p := make([]byte, 4)
	binary.BigEndian.PutUint32(p, code)
	f.write(frameRSTStream, 0, stream, p)
}

// respond200 ends stream with a HEADERS frame holding only ":status: 200"
// (HPACK static table index 8, encoded as the single byte 0x88).
func (f *fakeH2) respond200(stream uint32) {
	f.write(frameHeaders, flagEndStream|flagEndHdrs, stream, []byte{0x88})
}
