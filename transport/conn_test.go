package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHTTP2SharesOneConnection(t *testing.T) {
	var mu sync.Mutex
	remotes := map[string]int{}
	srv := startTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes[r.RemoteAddr]++
		mu.Unlock()
		fmt.Fprintf(w, "%d %s", r.ProtoMajor, r.URL.Path)
	}), true)
	c := dialT(t, srv.URL, Config{TLSConfig: srv.clientTLS()})
	require.Equal(t, "HTTP/2.0", c.Protocol())

	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/r/%d", srv.URL, i), nil)
			resp, err := c.RoundTrip(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			switch {
			case err != nil:
				errs <- err
			case resp.ProtoMajor != 2:
				errs <- fmt.Errorf("client proto %s", resp.Proto)
			case string(b) != fmt.Sprintf("2 /r/%d", i):
				errs <- fmt.Errorf("body %q", b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.Len(t, remotes, 1, "all requests on one TCP connection")
	assert.EqualValues(t, 1, srv.newConns.Load())
	requireNotDone(t, c)
	assert.Equal(t, 0, c.InFlight())
	assert.Positive(t, c.Available())
}

func TestH2C(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Proto)
	}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)

	c := dialT(t, srv.URL, Config{H2C: true})
	require.Equal(t, "HTTP/2.0", c.Protocol())
	resp, err := get(t, c, srv.URL, "/")
	require.NoError(t, err)
	assert.Equal(t, 2, resp.ProtoMajor)
	assert.Equal(t, "HTTP/2.0", readAll(t, resp))
}

func TestHTTP2RequiredAndHTTP1Fallback(t *testing.T) {
	srv := startTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Proto)
	}), false) // server offers only http/1.1 via ALPN

	_, err := Dial(context.Background(), mustURL(t, srv.URL), Config{TLSConfig: srv.clientTLS()})
	var de *DialError
	require.ErrorAs(t, err, &de)
	require.ErrorIs(t, err, ErrHTTP2Required)
	assert.Equal(t, NotSent, Classify(err))

	c := dialT(t, srv.URL, Config{TLSConfig: srv.clientTLS(), AllowHTTP1: true})
	require.Equal(t, "HTTP/1.1", c.Protocol())
	for range 3 { // sequential requests reuse the single HTTP/1.1 conn
		resp, err := get(t, c, srv.URL, "/")
		require.NoError(t, err)
		assert.Equal(t, "HTTP/1.1", readAll(t, resp))
	}
	assert.EqualValues(t, 2, srv.newConns.Load(), "one rejected by ALPN, one HTTP/1.1")

	// http:// needs H2C (or AllowHTTP1).
	_, err = Dial(context.Background(), mustURL(t, "http://127.0.0.1:1"), Config{})
	require.ErrorIs(t, err, ErrHTTP2Required)
}

func TestDialErrorsAreTypedAndRedacted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more

	for _, raw := range []string{
		"https://bot:s3cr3t@" + addr + "/api/v10?token=t0k3n",
		"http://bot:s3cr3t@" + addr + "/api/v10?token=t0k3n",
		"ftp://bot:s3cr3t@" + addr + "/?token=t0k3n",
		"https://bot:s3cr3t@/?token=t0k3n",
	} {
		_, err := Dial(context.Background(), mustURL(t, raw), Config{H2C: true, DialTimeout: waitTimeout})
		var de *DialError
		require.ErrorAs(t, err, &de, raw)
		assert.Equal(t, NotSent, Classify(err))
		assert.NotContains(t, err.Error(), "s3cr3t")
		assert.NotContains(t, err.Error(), "t0k3n")
		assert.NotContains(t, err.Error(), "bot")
	}

	// Untrusted certificate: TLS error inside a DialError.
	srv := startTLSServer(t, http.NotFoundHandler(), true)
	_, err = Dial(context.Background(), mustURL(t, srv.URL), Config{})
	var de *DialError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, srv.Listener.Addr().String(), de.Addr)

	// Context expiry.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Dial(ctx, mustURL(t, srv.URL), Config{TLSConfig: srv.clientTLS()})
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorAs(t, err, &de)
}

// A server-side close in the middle of a request: the request was sent,
// so it is ConnectionDied; Done closes with the cause.
func TestAbruptCloseMidRequest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reset  bool
		reason error
	}{
		{"FIN", false, io.ErrUnexpectedEOF},
		{"RST", true, syscall.ECONNRESET},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/die" {
					return
				}
				nc := r.Context().Value(connKey{}).(net.Conn)
				if tlsc, ok := nc.(*tls.Conn); ok {
					nc = tlsc.NetConn() // no close_notify: abrupt
				}
				if tc.reset {
					nc.(*net.TCPConn).SetLinger(0)
				}
				nc.Close()
			}), true)
			c := dialT(t, srv.URL, Config{TLSConfig: srv.clientTLS()})
			resp, err := get(t, c, srv.URL, "/ok")
			require.NoError(t, err)
			readAll(t, resp)

			_, err = get(t, c, srv.URL, "/die")
			require.Error(t, err)
			t.Logf("request error: %v", err)
			assert.Equal(t, ConnectionDied, Classify(err))
			var cde *ConnectionDiedError
			require.ErrorAs(t, err, &cde)
			assert.True(t, cde.Sent)
			assert.ErrorIs(t, err, ErrConnectionDied)

			waitDone(t, c)
			t.Logf("death reason: %v", c.Err())
			require.ErrorIs(t, c.Err(), tc.reason)
			assert.Equal(t, 0, c.Available())

			_, err = get(t, c, srv.URL, "/ok")
			assert.Equal(t, NotSent, Classify(err))
			assert.ErrorIs(t, err, tc.reason)
		})
	}
}

func TestServerCloseClientConnections(t *testing.T) {
	entered := make(chan struct{}, 1)
	srv := startTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
	}), true)
	c := dialT(t, srv.URL, Config{TLSConfig: srv.clientTLS()})
	res := goGet(t, c, srv.URL, "/hang")
	recv(t, entered)
	srv.CloseClientConnections()

	r := recv(t, res)
	require.Error(t, r.err)
	t.Logf("request error: %v", r.err)
	assert.Equal(t, ConnectionDied, Classify(r.err))
	waitDone(t, c)
	t.Logf("death reason: %v", c.Err())
	require.Error(t, c.Err())
	assert.NotErrorIs(t, c.Err(), ErrClosed)
}

// Go's HTTP/2 server turns a "Connection: close" response header into a
// graceful GOAWAY: the in-flight request finishes, then the Conn is dead.
func TestGoAwayGraceful(t *testing.T) {
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := startTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			entered <- struct{}{}
			<-release
			fmt.Fprint(w, "slow")
		case "/close":
			w.Header().Set("Connection", "close")
			fmt.Fprint(w, "bye")
		}
	}), true)
	c := dialT(t, srv.URL, Config{TLSConfig: srv.clientTLS()})
	slow := goGet(t, c, srv.URL, "/slow")
	recv(t, entered)

	resp, err := get(t, c, srv.URL, "/close")
	require.NoError(t, err)
	assert.Equal(t, "bye", readAll(t, resp))
	requireNotDone(t, c) // /slow is still in flight

	close(release)
	r := recv(t, slow)
	require.NoError(t, r.err)
	assert.Equal(t, "slow", readAll(t, r.resp))

	waitDone(t, c)
	t.Logf("death reason: %v", c.Err())
	require.Error(t, c.Err())
	assert.ErrorIs(t, c.Err(), ErrGoAway)

	_, err = get(t, c, srv.URL, "/after")
	assert.Equal(t, NotSent, Classify(err))
	var cde *ConnectionDiedError
	require.ErrorAs(t, err, &cde)
	assert.False(t, cde.Sent)
}

// GOAWAY with last-stream-id 1 while streams 1 and 3 are open: stream 3 is
// NotSent, new requests are NotSent, stream 1 completes, then the Conn
// closes itself (ErrGoAway) although the server keeps TCP open.
func TestGoAwayLastStreamID(t *testing.T) {
	f := startFakeH2(t)
	c := dialT(t, f.URL(), Config{H2C: true})

	a := goGet(t, c, f.URL(), "/a")
	require.EqualValues(t, 1, recv(t, f.headers))
	b := goGet(t, c, f.URL(), "/b")
	require.EqualValues(t, 3, recv(t, f.headers))

	f.goAway(1, 0)
	rb := recv(t, b)
	require.Error(t, rb.err)
	t.Logf("stream 3 error: %v", rb.err)
	assert.Equal(t, NotSent, Classify(rb.err))
	var cde *ConnectionDiedError
	require.ErrorAs(t, rb.err, &cde)
	assert.False(t, cde.Sent)

	requireNotDone(t, c) // stream 1 still in flight
	assert.Equal(t, 0, c.Available())
	_, err := get(t, c, f.URL(), "/c")
	t.Logf("new request error: %v", err)
	assert.Equal(t, NotSent, Classify(err))
	requireNotDone(t, c)

	f.respond200(1)
	ra := recv(t, a)
	require.NoError(t, ra.err)
	assert.Equal(t, 200, ra.resp.StatusCode)
	readAll(t, ra.resp)

	waitDone(t, c)
	var ga *GoAwayError
	require.ErrorAs(t, c.Err(), &ga)
	assert.Equal(t, GoAwayError{LastStreamID: 1, Code: 0}, *ga)
	assert.ErrorIs(t, c.Err(), ErrGoAway)
	// The client closed the socket; the server saw EOF, not the reverse.
	assert.ErrorIs(t, recv(t, f.readErr), io.EOF)
}

// A stream at or below last-stream-id may have been processed: when the
// server then closes TCP without answering it, it is ConnectionDied.
func TestGoAwayThenServerCloses(t *testing.T) {
	f := startFakeH2(t)
	c := dialT(t, f.URL(), Config{H2C: true})
	a := goGet(t, c, f.URL(), "/a")
	require.EqualValues(t, 1, recv(t, f.headers))
	f.goAway(1, 0)
	f.closeConn()
	ra := recv(t, a)
	require.Error(t, ra.err)
	t.Logf("stream 1 error: %v", ra.err)
	assert.Equal(t, ConnectionDied, Classify(ra.err))
	waitDone(t, c)
	var ga *GoAwayError
	require.ErrorAs(t, c.Err(), &ga)
	assert.EqualValues(t, 1, ga.LastStreamID)
}

func TestGoAwayWithErrorCode(t *testing.T) {
	f := startFakeH2(t)
	c := dialT(t, f.URL(), Config{H2C: true})
	a := goGet(t, c, f.URL(), "/a")
	require.EqualValues(t, 1, recv(t, f.headers))

	f.goAway(0, 0xb) // ENHANCE_YOUR_CALM, nothing processed
	ra := recv(t, a)
	require.Error(t, ra.err)
	t.Logf("stream 1 error: %v", ra.err)
	assert.Equal(t, NotSent, Classify(ra.err))

	waitDone(t, c)
	t.Logf("death reason: %v", c.Err())
	require.ErrorIs(t, c.Err(), ErrGoAway)
	assert.Contains(t, c.Err().Error(), "ENHANCE_YOUR_CALM")
}

// A peer that stops answering (frozen proxy): the liveness PING fails and
// the Conn dies within PingInterval+PingTimeout.
func TestPingTimeout(t *testing.T) {
	srv := startTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			<-r.Context().Done()
		}
	}), true)
	p := startFreezeProxy(t, srv.Listener.Addr().String())
	tlsCfg := srv.clientTLS()
	tlsCfg.ServerName = "127.0.0.1"
	base := "https://" + p.Addr()
	c := dialT(t, base, Config{TLSConfig: tlsCfg, PingInterval: 50 * time.Millisecond, PingTimeout: 100 * time.Millisecond})

	resp, err := get(t, c, base, "/ok")
	require.NoError(t, err)
	readAll(t, resp)

	p.Freeze()
	start := time.Now()
	res := goGet(t, c, base, "/hang")
	waitDone(t, c)
	t.Logf("dead after %v: %v", time.Since(start), c.Err())
	require.ErrorIs(t, c.Err(), ErrPingTimeout)

	r := recv(t, res)
	require.Error(t, r.err)
	t.Logf("request error: %v", r.err)
	assert.Equal(t, ConnectionDied, Classify(r.err))
}

func TestPingKeepsHealthyConnAlive(t *testing.T) {
	f := startFakeH2(t) // answers PINGs
	c := dialT(t, f.URL(), Config{H2C: true, PingInterval: 5 * time.Millisecond, PingTimeout: time.Second})
	a := goGet(t, c, f.URL(), "/a")
	require.EqualValues(t, 1, recv(t, f.headers))
	for range 5 { // five answered liveness PINGs while stream 1 is open
		recv(t, f.pings)
	}
	requireNotDone(t, c)
	f.respond200(1)
	ra := recv(t, a)
	require.NoError(t, ra.err)
	readAll(t, ra.resp)
	requireNotDone(t, c)
}

// GOAWAY while nothing is in flight and the server keeps TCP open:
// net/http never reports it; the watcher must notice and close.
func TestGoAwayIdleServerKeepsTCPOpen(t *testing.T) {
	f := startFakeH2(t)
	c := dialT(t, f.URL(), Config{H2C: true})
	a := goGet(t, c, f.URL(), "/a")
	require.EqualValues(t, 1, recv(t, f.headers))
	f.respond200(1)
	ra := recv(t, a)
	require.NoError(t, ra.err)
	readAll(t, ra.resp)
	requireNotDone(t, c)

	f.goAway(1, 0)
	waitDone(t, c)
	var ga *GoAwayError
	require.ErrorAs(t, c.Err(), &ga)
	assert.EqualValues(t, 1, ga.LastStreamID)
	assert.ErrorIs(t, recv(t, f.readErr), io.EOF, "client closed the socket")
}

func TestRefusedStreamIsNotSent(t *testing.T) {
	f := startFakeH2(t)
	c := dialT(t, f.URL(), Config{H2C: true})
	a := goGet(t, c, f.URL(), "/a")
	require.EqualValues(t, 1, recv(t, f.headers))
	f.rst(1, 0x7) // REFUSED_STREAM
	ra := recv(t, a)
	require.Error(t, ra.err)
	t.Logf("error: %v", ra.err)
	assert.Equal(t, NotSent, Classify(ra.err))
	requireNotDone(t, c)

	b := goGet(t, c, f.URL(), "/b") // the connection is still fine
	require.EqualValues(t, 3, recv(t, f.headers))
	f.respond200(3)
	rb := recv(t, b)
	require.NoError(t, rb.err)
	readAll(t, rb.resp)
}

// RST_STREAM PROTOCOL_ERROR makes net/http retire the conn once idle.
func TestResetProtocolErrorRetiresConn(t *testing.T) {
	f := startFakeH2(t)
	c := dialT(t, f.URL(), Config{H2C: true})
	a := goGet(t, c, f.URL(), "/a")
	require.EqualValues(t, 1, recv(t, f.headers))
	f.rst(1, 0x1)
	ra := recv(t, a)
	require.Error(t, ra.err)
	t.Logf("error: %v", ra.err)
	assert.Equal(t, Other, Classify(ra.err))
	waitDone(t, c)
	t.Logf("death reason: %v", c.Err())
	require.ErrorIs(t, c.Err(), ErrUnusable)
}

// A caller's "Connection: close" must not retire the shared connection.
func TestConnectionCloseRequestDoesNotKillConn(t *testing.T) {
	srv := startTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Header.Get("Connection"))
	}), true)
	c := dialT(t, srv.URL, Config{TLSConfig: srv.clientTLS()})
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Close = true
	req.Header.Set("Connection", "keep-alive, close")
	resp, err := c.RoundTrip(req)
	require.NoError(t, err)
	assert.Same(t, req, resp.Request)
	assert.Empty(t, readAll(t, resp))
	assert.True(t, req.Close, "caller's request not modified")
	assert.Equal(t, "keep-alive, close", req.Header.Get("Connection"))

	resp, err = get(t, c, srv.URL, "/again")
	require.NoError(t, err)
	readAll(t, resp)
	requireNotDone(t, c)
	assert.EqualValues(t, 1, srv.newConns.Load())
	require.NotNil(t, resp.TLS)
	assert.Equal(t, "h2", resp.TLS.NegotiatedProtocol)
}

func TestCloseIdempotentAndNoLeaks(t *testing.T) {
	entered := make(chan struct{}, 1)
	srv := startTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			entered <- struct{}{}
			<-r.Context().Done()
		}
	}), true)
	base := watcherCount()

	c := dialT(t, srv.URL, Config{TLSConfig: srv.clientTLS()})
	assert.Equal(t, base+1, watcherCount())
	res := goGet(t, c, srv.URL, "/hang")
	recv(t, entered)

	var wg sync.WaitGroup
	for range 3 { // concurrent Closes: all return after the first finishes
		wg.Add(1)
		go func() { defer wg.Done(); assert.NoError(t, c.Close()) }()
	}
	wg.Wait()
	require.NoError(t, c.Close())
	waitDone(t, c)
	require.Equal(t, ErrClosed, c.Err())
	// Close returns once the watcher has closed its done channel, its last
	// statement; its goroutine ends right after (counted by its stack).
	require.Eventually(t, func() bool { return watcherCount() == base }, waitTimeout, time.Millisecond,
		"the watcher exits with Close")

	r := recv(t, res)
	t.Logf("in-flight error: %v", r.err)
	assert.Equal(t, ConnectionDied, Classify(r.err))

	_, err := get(t, c, srv.URL, "/")
	assert.Equal(t, NotSent, Classify(err))
	assert.ErrorIs(t, err, ErrClosed)

	// The watcher also exits when the conn dies without Close.
	c2 := dialT(t, srv.URL, Config{TLSConfig: srv.clientTLS()})
	srv.CloseClientConnections()
	waitDone(t, c2)
	c2.Close()
	require.Eventually(t, func() bool { return watcherCount() == base }, waitTimeout, time.Millisecond,
		"the watcher exits when the conn dies")

	// net/http's read loops end once the sockets are closed.
	require.Eventually(t, func() bool {
		return countGoroutines("(*http2ClientConn).readLoop") == 0
	}, waitTimeout, time.Millisecond)
}

func TestRequestCanceled(t *testing.T) {
	entered := make(chan struct{}, 1)
	srv := startTLSServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			entered <- struct{}{}
			<-r.Context().Done()
		}
	}), true)
	c := dialT(t, srv.URL, Config{TLSConfig: srv.clientTLS()})

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := getCtx(ctx, t, c, srv.URL, "/hang")
		errc <- err
	}()
	recv(t, entered)
	cancel()
	err := recv(t, errc)
	assert.Equal(t, Canceled, Classify(err))
	assert.ErrorIs(t, err, context.Canceled)

	requireNotDone(t, c)
	resp, err := get(t, c, srv.URL, "/ok")
	require.NoError(t, err)
	readAll(t, resp)
}

func TestRoundTripOnDeadConnClosesBody(t *testing.T) {
	srv := startTLSServer(t, http.NotFoundHandler(), true)
	c := dialT(t, srv.URL, Config{TLSConfig: srv.clientTLS()})
	c.Close()
	body := &closeTracker{Reader: strings.NewReader("x")}
	req, err := http.NewRequest(http.MethodPost, srv.URL, body)
	require.NoError(t, err)
	_, err = c.RoundTrip(req)
	assert.Equal(t, NotSent, Classify(err))
	assert.True(t, body.closed)
}

type closeTracker struct {
	io.Reader
	closed bool
}

func (c *closeTracker) Close() error { c.closed = true; return nil }
