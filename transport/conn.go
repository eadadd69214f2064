package transport

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Conn is exactly one client connection to the upstream. It never dials
// again: when it dies, Done is closed, Err reports why, and the owner must
// Dial a new Conn. All methods are safe for concurrent use.
type Conn struct {
	cc       *http.ClientConn
	raw      *watchConn // the (decrypted) byte stream under net/http
	tlsState *tls.ConnectionState
	proto    string
	h2       bool

	pingTimeout time.Duration // 0 when pings are disabled

	kick        chan struct{} // cap 1: "state may have changed" for watch
	done        chan struct{} // closed once, by markDead
	watcherDone chan struct{} // closed when watch returns
	closeOnce   sync.Once

	// active counts RoundTrip calls in progress and started counts calls
	// ever made; together they make drained() race-free (see there).
	active  atomic.Int64
	started atomic.Uint64
	// claimed counts requests an owner picked this connection for and has
	// not yet handed to RoundTrip (Claim, Unclaim), for Load.
	claimed atomic.Int32
	// answered counts responses received (headers), for Answered.
	answered atomic.Uint64

	mu     sync.Mutex
	dead   bool
	reason error
}

// Dial opens one connection to baseURL's host: TLS with ALPN "h2" for
// https://, cleartext HTTP/2 with prior knowledge for http:// when cfg.H2C is
// set, HTTP/1.1 only when cfg.AllowHTTP1 permits it. Only the scheme, host
// and port of baseURL are used. Errors are *DialError and never contain the
// URL's user information, path or query.
//
// ctx bounds connection establishment only; cancelling it later does not
// affect the returned Conn. The caller must call Close.
func Dial(ctx context.Context, baseURL *url.URL, cfg Config) (*Conn, error) {
	if baseURL == nil {
		return nil, &DialError{Err: errors.New("nil URL")}
	}
	scheme := strings.ToLower(baseURL.Scheme)
	host, port := baseURL.Hostname(), baseURL.Port()
	switch scheme {
	case "https":
		if port == "" {
			port = "443"
		}
	case "http":
		if port == "" {
			port = "80"
		}
		if !cfg.H2C && !cfg.AllowHTTP1 {
			return nil, &DialError{Addr: net.JoinHostPort(host, port), Err: ErrHTTP2Required}
		}
	default:
		return nil, &DialError{Addr: net.JoinHostPort(host, port), Err: fmt.Errorf("unsupported URL scheme %q", scheme)}
	}
	addr := net.JoinHostPort(host, port)
	if host == "" {
		return nil, &DialError{Addr: addr, Err: errors.New("URL has no host")}
	}
	if d := cfg.dialTimeout(); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	c, err := dial(ctx, scheme, host, addr, cfg)
	if err != nil {
		return nil, &DialError{Addr: addr, Err: err}
	}
	return c, nil
}

// dial does the work of Dial. net/http is always told the connection is
// cleartext ("http" scheme, prior-knowledge HTTP/2 or plain HTTP/1.1): TLS
// and ALPN are done here, so that the Conn can wrap the decrypted stream
// (watchConn) and see exactly what the server sends. The request's own URL
// scheme still fills :scheme, and the TLS state is still reported in
// Response.TLS.
func dial(ctx context.Context, scheme, host, addr string, cfg Config) (*Conn, error) {
	nc, err := cfg.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &Conn{
		kick:        make(chan struct{}, 1),
		done:        make(chan struct{}),
		watcherDone: make(chan struct{}),
	}
	var tlsState *tls.ConnectionState
	switch {
	case scheme == "https":
		tlsCfg := &tls.Config{}
		if cfg.TLSConfig != nil {
			tlsCfg = cfg.TLSConfig.Clone()
		}
		tlsCfg.NextProtos = []string{"h2"}
		if cfg.AllowHTTP1 {
			tlsCfg.NextProtos = append(tlsCfg.NextProtos, "http/1.1")
		}
		if tlsCfg.ServerName == "" {
			tlsCfg.ServerName = host
		}
		tc := tls.Client(nc, tlsCfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			if strings.Contains(err.Error(), "no application protocol") {
				return nil, fmt.Errorf("%w: %w", ErrHTTP2Required, err)
			}
			return nil, err
		}
		st := tc.ConnectionState()
		tlsState = &st
		switch {
		case st.NegotiatedProtocol == "h2":
			c.h2 = true
		case !cfg.AllowHTTP1:
			tc.Close()
			return nil, ErrHTTP2Required
		}
		nc = tc
	case cfg.H2C:
		c.h2 = true
	}
	c.raw = newWatchConn(nc, c.h2, c.nudge)
	if cfg.pingInterval() > 0 {
		c.pingTimeout = cfg.pingTimeout()
	}
	c.tlsState = tlsState

	var protos http.Protocols
	c.proto = "HTTP/1.1"
	if c.h2 {
		c.proto = "HTTP/2.0"
		protos.SetUnencryptedHTTP2(true)
	} else {
		protos.SetHTTP1(true)
	}
	var used atomic.Bool
	tr := &http.Transport{
		Proxy: nil, // never use environment proxies
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if used.Swap(true) {
				return nil, errors.New("transport: single connection already used")
			}
			return c.raw, nil
		},
		Protocols:              &protos,
		MaxResponseHeaderBytes: cfg.MaxResponseHeaderBytes,
		DisableCompression:     cfg.DisableCompression,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: cfg.pingInterval(),
			PingTimeout:     cfg.pingTimeout(),
		},
	}
	cc, err := tr.NewClientConn(ctx, "http", addr)
	if err != nil {
		c.raw.Close()
		return nil, err
	}
	c.cc = cc
	go c.watch()
	cc.SetStateHook(c.onStateChange)
	return c, nil
}

// RoundTrip sends req on this connection only and returns the response.
// It never opens another connection. The URL's scheme and host only fill
// in :scheme and :authority. Like http.ClientConn.RoundTrip it waits when
// the server's stream concurrency limit is reached. req.Body is always
// closed. A request asking for "Connection: close" (or Request.Close) is
// sent without it (on a copy; req is not modified), because net/http would
// otherwise retire the shared connection after that request.
//
// Errors: a connection-level failure is a *ConnectionDiedError (Sent false
// when the request provably was not processed, see Classify); cancellation
// of req's context returns the context error; other errors are returned
// unchanged. After Done is closed RoundTrip fails immediately with
// &ConnectionDiedError{Reason: c.Err(), Sent: false}.
func (c *Conn) RoundTrip(req *http.Request) (*http.Response, error) {
	if c.isDead() {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, &ConnectionDiedError{Reason: c.Err(), Sent: false}
	}
	orig := req
	if req.Close || hasToken(req.Header["Connection"], "close") {
		// net/http would retire the whole connection after this request;
		// one caller must not do that to everyone sharing it.
		req = req.Clone(req.Context())
		req.Close = false
		req.Header.Del("Connection")
	}
	// Order matters for drained: active before started.
	c.active.Add(1)
	c.started.Add(1)
	resp, err := c.cc.RoundTrip(req)
	c.active.Add(-1)
	if err != nil {
		err = c.wrapError(err)
		c.nudge()
		return nil, err
	}
	c.answered.Add(1)
	resp.Request = orig
	if resp.TLS == nil {
		resp.TLS = c.tlsState
	}
	return resp, nil
}

// hasToken reports whether a comma-separated header contains token.
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}

// wrapError turns a connection-level error from ClientConn.RoundTrip into
// a *ConnectionDiedError. See Classify for the tables.
func (c *Conn) wrapError(err error) error {
	if isCanceled(err) {
		return err
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "stream error: "):
		// Stream-level (RST_STREAM): not a connection death, even if the
		// conn was retired meanwhile. Classify: REFUSED_STREAM is NotSent,
		// other codes are Other.
		return err
	case containsAny(msg, notSentMessages):
		return &ConnectionDiedError{Reason: err, Sent: false}
	case isConnLevel(err, msg), c.cc.Err() != nil:
		// Conservative: once the conn is closed, an unrecognised
		// error is treated as "may have been sent".
		return &ConnectionDiedError{Reason: err, Sent: true}
	}
	return err
}

// Done returns a channel that is closed exactly once, when the connection
// is dead: the peer closed or reset it, a PING went unanswered, it stopped
// accepting requests (GOAWAY) and its in-flight requests finished, or Close
// was called.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns nil while Done is open and the reason for the death after:
// ErrClosed, a *GoAwayError (errors.Is ErrGoAway), ErrPingTimeout,
// ErrServerClosed, an error wrapping ErrUnusable, or an error wrapping the
// failed read or write. See the package documentation.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason
}

// Available reports how many more requests can be sent right now without
// waiting for a stream slot. It is 0 once the connection received GOAWAY
// or died.
func (c *Conn) Available() int { return c.cc.Available() }

// InFlight reports the number of requests in flight on the connection
// (a request stays in flight until its response body is fully read or
// closed). It is 0 once the connection is closed.
func (c *Conn) InFlight() int { return c.cc.InFlight() }

// Claim counts in Load a request the caller is about to send on c, until
// Unclaim, which the caller calls once, just before RoundTrip (or when it
// gives the request up). An owner that picks the least loaded of several
// connections then spreads the requests it dispatches together, before any
// of them reached RoundTrip, instead of piling them on one connection that
// a reset would end together.
func (c *Conn) Claim() { c.claimed.Add(1) }

// Unclaim ends a Claim.
func (c *Conn) Unclaim() { c.claimed.Add(-1) }

// Load reports how many requests the connection carries or is about to:
// InFlight plus the requests Claimed for it and not yet Unclaimed.
func (c *Conn) Load() int { return c.InFlight() + int(c.claimed.Load()) }

// Answered reports how many responses the connection delivered (their
// headers). An owner can tell a connection that served requests from one
// that died young: a server that accepts connections and drops them at
// once, or sends GOAWAY before any answer, calls for a growing backoff.
func (c *Conn) Answered() uint64 { return c.answered.Load() }

// Accepted reports whether the server accepted the connection as an
// HTTP server: over HTTP/2, it sent its SETTINGS frame (the first thing an
// HTTP/2 server sends, before it reads any request); over HTTP/1.1, it
// answered a request. A connection that dies without being accepted tells
// that the server refuses connections; one that was accepted and then
// dropped tells that it is reachable.
func (c *Conn) Accepted() bool {
	if c.h2 {
		return c.raw.sawSettings.Load()
	}
	return c.Answered() > 0
}

// Protocol returns "HTTP/2.0", or "HTTP/1.1" for an AllowHTTP1 fallback.
func (c *Conn) Protocol() string { return c.proto }

// Close closes the connection, interrupting in-flight requests (they fail
// with a *ConnectionDiedError, Sent true). Done is closed and Err returns
// ErrClosed unless the connection had already died. Close is idempotent;
// when it returns, the Conn's own goroutine has exited and the socket is
// closed. It always returns nil.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.markDead(ErrClosed)
		c.cc.Close()
		c.cc.SetStateHook(nil)
		<-c.watcherDone
	})
	return nil
}

func (c *Conn) isDead() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// nudge asks the watcher to re-check the connection state. Never blocks.
func (c *Conn) nudge() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// onStateChange is the http.ClientConn state hook. It runs inside net/http
// (sometimes synchronously in RoundTrip or Body.Close), so it only nudges
// the watcher.
func (c *Conn) onStateChange(*http.ClientConn) { c.nudge() }

// closeWait bounds how long the watcher waits, after net/http reported the
// connection closed, for the socket close that always follows.
const closeWait = time.Second

// watch is the only goroutine a Conn starts and the only place (besides
// Close) that declares the Conn dead. It wakes on nudges (state hook calls,
// failed RoundTrips, reads after a GOAWAY) and exits once the Conn is dead.
//
// When ClientConn.Err turns non-nil it waits for the socket to be closed
// before deriving the reason: net/http marks the conn closed, aborts the
// streams (whose RoundTrips and state hook calls can reach us first) and
// only then closes the socket, which is when watchConn learns how the
// close happened.
//
// It also catches the case net/http does not report at all: a connection
// that will never accept another request but is still open (GOAWAY
// received with nothing in flight, server has not closed TCP).
func (c *Conn) watch() {
	defer close(c.watcherDone)
	for {
		select {
		case <-c.done:
			return
		case <-c.kick:
		}
		switch {
		case c.cc.Err() != nil:
			t := time.NewTimer(closeWait)
			select {
			case <-c.raw.closedCh:
			case <-c.done:
			case <-t.C:
			}
			t.Stop()
			c.markDead(nil)
		case c.drained():
			c.markDead(c.drainedReason())
		default:
			continue
		}
		c.cc.Close()
		return
	}
}

// drained reports whether the connection is open but will never accept a
// request again: no stream in flight and no slot available. That is the
// state after a GOAWAY (or any other reason the HTTP/2 client stops using
// the conn) once the remaining streams have finished. A server advertising
// SETTINGS_MAX_CONCURRENT_STREAMS = 0 looks the same; such a conn is
// useless anyway.
//
// Available and InFlight are read under separate locks, so a usable conn
// that is full (Available 0) and then empties (InFlight 0) between the two
// reads could look drained. The active/started counters rule that out: if
// no RoundTrip was in progress when the check began and none started
// before it ended, no stream was added during the check, so the stream
// count could only fall; InFlight 0 then means it stayed 0, and a usable
// conn with no streams has Available > 0. (Response bodies being read keep
// their stream counted in InFlight; this package never calls Reserve.)
func (c *Conn) drained() bool {
	gen := c.started.Load()
	if c.active.Load() != 0 {
		return false
	}
	if c.cc.InFlight() != 0 || c.cc.Available() != 0 {
		return false
	}
	return c.started.Load() == gen
}

// markDead records the reason (derived from what was observed when nil)
// and closes done, once.
//
// No http.ClientConn method is called while c.mu is held.
func (c *Conn) markDead(reason error) {
	var h1Err error
	if reason == nil && !c.h2 {
		h1Err = c.cc.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return
	}
	if reason == nil {
		reason = c.deathReason(h1Err)
	}
	c.dead = true
	c.reason = reason
	close(c.done)
}

// deathReason explains a death that net/http reported only as "connection
// closed" (http.ClientConn.Err carries no cause for HTTP/2). Our own Close
// and the drained case pass their reason to markDead directly; everything
// else is derived from what watchConn saw, in this order:
//
//   - A GOAWAY frame was received: *GoAwayError. This covers net/http
//     closing the conn once idle after GOAWAY, the server closing it, and
//     anything else that ends a connection that was going away anyway.
//   - The HTTP/2 client closed the socket while its read loop was blocked
//     in Read, no write had failed, and a PING of ours had been
//     unacknowledged for (about) PingTimeout: that is closeForLostPing, so
//     ErrPingTimeout. (The read loop itself closes only after it stopped
//     reading; the other closers that act while it reads, idle-after-GOAWAY
//     and idle-after-PROTOCOL_ERROR, are recognised by their frames.)
//   - The client closed while reading after the server reset a stream with
//     PROTOCOL_ERROR (net/http then retires the conn when idle): wraps
//     ErrUnusable. (Also when no read or write error explains a close
//     after such a reset: see the last case.)
//   - The first read error not caused by a local close: EOF or unexpected
//     EOF (FIN or TLS close_notify) is ErrServerClosed, anything else (RST,
//     TLS alert) is wrapped.
//   - The first write error.
//   - For HTTP/1.1, the ClientConn's own error (h1Err).
//   - Otherwise the HTTP/2 client closed the connection by itself (a
//     protocol error detected by its read loop).
func (c *Conn) deathReason(h1Err error) error {
	o := c.raw.observed()
	switch {
	case o.goAway != nil:
		return o.goAway
	case c.h2 && c.pingTimeout > 0 && o.closedWhileReading && o.werr == nil &&
		o.pingsOutstanding > 0 && o.closedAt.Sub(o.pingSince) >= c.pingTimeout*9/10:
		return ErrPingTimeout
	case c.h2 && o.closedWhileReading && o.rstProtocol:
		return &wrapped{msg: "transport: server reset a stream with PROTOCOL_ERROR", err: ErrUnusable}
	case o.rerr != nil && (errors.Is(o.rerr, io.EOF) || errors.Is(o.rerr, io.ErrUnexpectedEOF)):
		return ErrServerClosed
	case o.rerr != nil:
		return &wrapped{msg: "transport: connection read failed", err: o.rerr}
	case o.werr != nil:
		return &wrapped{msg: "transport: connection write failed", err: o.werr}
	case h1Err != nil:
		return &wrapped{msg: "transport: connection closed", err: h1Err}
	case c.h2 && o.rstProtocol:
		// The same retirement, closed by the read loop's own goroutine
		// once the reset stream was forgotten (not while it read): which
		// goroutine closes is a race inside net/http.
		return &wrapped{msg: "transport: server reset a stream with PROTOCOL_ERROR", err: ErrUnusable}
	}
	return errors.New("transport: connection closed by the HTTP/2 client (protocol error)")
}

// drainedReason is the death reason when drained() is true.
func (c *Conn) drainedReason() error {
	if ga := c.raw.observed().goAway; ga != nil {
		return ga
	}
	return ErrUnusable
}

// watchConn wraps the byte stream net/http reads and writes: the TCP conn
// for h2c, the *tls.Conn (plaintext side) for https. For HTTP/2 it follows
// the frame boundaries in both directions (headers only, payloads are
// skipped) and records GOAWAY (last-stream-id, error code), RST_STREAM with
// PROTOCOL_ERROR, and PINGs sent by the client minus ACKs received. After a
// GOAWAY it nudges the watcher on every Read: when net/http asks for more
// bytes, every frame read so far has been processed, so the GOAWAY is
// visible in the ClientConn state. It also keeps the first read and write
// errors not caused by a local Close, and whether a local Close interrupted
// a blocked Read (see Conn.deathReason).
type watchConn struct {
	net.Conn
	h2           bool
	onGoAwayRead func()

	reading  atomic.Bool
	closed   atomic.Bool
	closedCh chan struct{} // closed by Close, after closedWhileReading is set
	sawGA    atomic.Bool
	// sawSettings is set when the server's first SETTINGS frame was
	// read: it speaks HTTP/2 on this connection (Conn.Accepted).
	sawSettings atomic.Bool

	rscan frameScanner // server-to-client; only the single reader uses it
	wmu   sync.Mutex   // guards wscan (net/http serialises writes anyway)
	wscan frameScanner // client-to-server, after the 24-byte preface

	mu  sync.Mutex
	obs observation
}

type observation struct {
	rerr, werr         error
	closedWhileReading bool
	closedAt           time.Time
	goAway             *GoAwayError
	rstProtocol        bool
	pingsOutstanding   int
	pingSince          time.Time // when pingsOutstanding last left 0
}

// HTTP/2 frame types and flags used by the scanner (RFC 9113 section 6).
const (
	frameRSTStream  = 0x3
	frameSettings   = 0x4
	framePing       = 0x6
	frameGoAway     = 0x7
	flagAck         = 0x1
	errCodeProtocol = 0x1
	clientPreface   = len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
)

func newWatchConn(nc net.Conn, h2 bool, onGoAwayRead func()) *watchConn {
	w := &watchConn{Conn: nc, h2: h2, onGoAwayRead: onGoAwayRead, closedCh: make(chan struct{})}
	w.rscan.onFrame = w.serverFrame
	w.wscan.onFrame = w.clientFrame
	w.wscan.skip = clientPreface
	return w
}

func (w *watchConn) Read(p []byte) (int, error) {
	if w.sawGA.Load() {
		w.onGoAwayRead()
	}
	w.reading.Store(true)
	n, err := w.Conn.Read(p)
	w.reading.Store(false)
	if n > 0 && w.h2 {
		w.rscan.scan(p[:n])
	}
	if err != nil && !w.closed.Load() {
		w.mu.Lock()
		if w.obs.rerr == nil {
			w.obs.rerr = err
		}
		w.mu.Unlock()
	}
	return n, err
}

func (w *watchConn) Write(p []byte) (int, error) {
	if w.h2 {
		// Scanned before writing: a PING counts as outstanding as soon as
		// it may be on the wire.
		w.wmu.Lock()
		w.wscan.scan(p)
		w.wmu.Unlock()
	}
	n, err := w.Conn.Write(p)
	if err != nil && !w.closed.Load() {
		w.mu.Lock()
		if w.obs.werr == nil {
			w.obs.werr = err
		}
		w.mu.Unlock()
	}
	return n, err
}

// Close closes the stream. For TLS, close_notify is attempted but the TCP
// conn is closed after 250 ms regardless (as net/http does), so an
// unresponsive peer cannot stall Close.
func (w *watchConn) Close() error {
	if w.closed.Swap(true) {
		return nil
	}
	w.mu.Lock()
	w.obs.closedAt = time.Now()
	w.obs.closedWhileReading = w.reading.Load()
	w.mu.Unlock()
	close(w.closedCh)
	if tc, ok := w.Conn.(*tls.Conn); ok {
		t := time.AfterFunc(250*time.Millisecond, func() { tc.NetConn().Close() })
		defer t.Stop()
	}
	return w.Conn.Close()
}

// ConnectionState lets net/http's HTTP/2 client fill Response.TLS.
func (w *watchConn) ConnectionState() tls.ConnectionState {
	if tc, ok := w.Conn.(*tls.Conn); ok {
		return tc.ConnectionState()
	}
	return tls.ConnectionState{}
}

func (w *watchConn) serverFrame(typ, flags byte, payload []byte) {
	switch {
	case typ == frameSettings:
		w.sawSettings.Store(true)
	case typ == frameGoAway && len(payload) >= 8:
		w.mu.Lock()
		ga := &GoAwayError{
			LastStreamID: binary.BigEndian.Uint32(payload) & 0x7fffffff,
			Code:         binary.BigEndian.Uint32(payload[4:]),
		}
		if prev := w.obs.goAway; prev != nil && prev.Code != 0 {
			ga.Code = prev.Code // keep the first error code, like net/http
		}
		w.obs.goAway = ga
		w.mu.Unlock()
		w.sawGA.Store(true)
	case typ == framePing && flags&flagAck != 0:
		w.mu.Lock()
		if w.obs.pingsOutstanding > 0 {
			w.obs.pingsOutstanding--
		}
		w.mu.Unlock()
	case typ == frameRSTStream && len(payload) >= 4 && binary.BigEndian.Uint32(payload) == errCodeProtocol:
		w.mu.Lock()
		w.obs.rstProtocol = true
		w.mu.Unlock()
	}
}

func (w *watchConn) clientFrame(typ, flags byte, _ []byte) {
	if typ == framePing && flags&flagAck == 0 {
		w.mu.Lock()
		if w.obs.pingsOutstanding == 0 {
			w.obs.pingSince = time.Now()
		}
		w.obs.pingsOutstanding++
		w.mu.Unlock()
	}
}

func (w *watchConn) observed() observation {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.obs
}

// frameScanner follows HTTP/2 frame boundaries in one direction of the
// byte stream and calls onFrame with each frame's type, flags and first
// (up to 8) payload bytes. Payloads are skipped, not copied.
type frameScanner struct {
	onFrame func(typ, flags byte, payload []byte)
	skip    int // bytes to ignore first (the client preface)

	hdr    [9]byte
	hn     int // header bytes collected; 9 while inside a payload
	remain int // payload bytes left in the current frame
	pre    [8]byte
	pn     int // payload prefix bytes collected
	want   int // payload prefix bytes wanted: min(8, length)
}

func (s *frameScanner) scan(p []byte) {
	if s.skip > 0 {
		n := min(s.skip, len(p))
		s.skip -= n
		p = p[n:]
	}
	for len(p) > 0 {
		if s.hn < len(s.hdr) {
			n := copy(s.hdr[s.hn:], p)
			s.hn += n
			p = p[n:]
			if s.hn < len(s.hdr) {
				return
			}
			s.remain = int(s.hdr[0])<<16 | int(s.hdr[1])<<8 | int(s.hdr[2])
			s.pn, s.want = 0, min(s.remain, len(s.pre))
			if s.want == 0 {
				s.onFrame(s.hdr[3], s.hdr[4], nil)
			}
			if s.remain == 0 {
				s.hn = 0
			}
			continue
		}
		n := min(s.remain, len(p))
		if s.pn < s.want {
			k := copy(s.pre[s.pn:s.want], p[:n])
			s.pn += k
			if s.pn == s.want {
				s.onFrame(s.hdr[3], s.hdr[4], s.pre[:s.pn])
			}
		}
		s.remain -= n
		p = p[n:]
		if s.remain == 0 {
			s.hn = 0
		}
	}
}
