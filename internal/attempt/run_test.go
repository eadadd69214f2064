package attempt

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/failure"
	"github.com/sluicehq/sluice/internal/globalwin"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/transport"
)

// waitTimeout bounds every wait on a channel: the tests never sleep.
const waitTimeout = 10 * time.Second

type netConnKey struct{}

// h2Conn starts a real HTTP/2 TLS server on loopback running h and dials
// one transport.Conn to it. A handler finds its net.Conn under
// netConnKey (to kill the connection abruptly).
func h2Conn(t *testing.T, h http.HandlerFunc) (*httptest.Server, *transport.Conn) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, netConnKey{}, c)
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	conn, err := transport.Dial(ctx, u, transport.Config{TLSConfig: srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() }) // before the server's Close
	return srv, conn
}

// recorder is the order in which a Run's steps happen: "reserve" and
// "report" (the shared store), "global" (GlobalHit), "hand" (Hand).
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// handed is one Hand: the result, and what the test saw at that moment.
type handed struct {
	to      string
	r       Result
	ended   bool          // the attempt's context had ended (Bounds.Slot)
	blocked time.Duration // the window's pause
}

// harness is a Runner[string] whose Hand and GlobalHit record into rec,
// on one window, with one call's slot.
type harness struct {
	*Runner[string]
	rec    *recorder
	win    *globalwin.Window
	slot   atomic.Value
	hands  chan handed
	hits   chan time.Time
	hard   context.CancelFunc
	logged *bytes.Buffer
}

func newHarness(t *testing.T, timeout time.Duration, shared ratelimit.Shared) *harness {
	t.Helper()
	hard, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h := &harness{rec: &recorder{}, hands: make(chan handed, 4), hits: make(chan time.Time, 4), hard: cancel, logged: &bytes.Buffer{}}
	h.win = globalwin.New(ratelimit.NewSlidingWindow(50, time.Second), shared)
	var mu sync.Mutex
	h.Runner = &Runner[string]{
		Scope:       Scope{Timeout: timeout, Hard: hard},
		Exchange:    &Exchange{Clock: time.Now, Body: &Reader{}},
		ServerClock: &ratelimit.ServerClock{},
		LastAnswer:  &atomic.Int64{},
		Wakes:       &atomic.Uint64{},
		Log:         slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: h.logged}, nil)),
		Hand: func(to string, r Result) {
			h.rec.add("hand")
			h.hands <- handed{to: to, r: r, ended: h.ended(), blocked: h.win.Limiter.Blocked(time.Now())}
		},
		GlobalHit: func(to string, until time.Time) {
			h.rec.add("global")
			h.hits <- until
		},
	}
	return h
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// ended reports whether the slot holds the no-op of an ended attempt.
func (h *harness) ended() bool {
	f, ok := h.slot.Load().(context.CancelFunc)
	return ok && reflect.ValueOf(f).Pointer() == reflect.ValueOf(noAttempt).Pointer()
}

// send is an attempt of a GET of path on conn, with the caller's ctx.
func (h *harness) send(t *testing.T, ctx context.Context, srv *httptest.Server, conn *transport.Conn, path string, sr *ratelimit.SharedRequest) Send {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	conn.Claim() // as the actors' gate.pick does
	return Send{Conn: conn, Req: req, Bounds: Bounds{Ctx: ctx, Slot: &h.slot}, Window: h.win, Shared: sr, SentAt: time.Now(), Route: "GET " + path}
}

// run runs s and returns its one result: Run has returned by then, and
// no second result came.
func (h *harness) run(t *testing.T, s Send) handed {
	t.Helper()
	h.Run("call", s)
	var got handed
	select {
	case got = <-h.hands:
	default:
		t.Fatal("Run returned without handing a result")
	}
	select {
	case again := <-h.hands:
		t.Fatalf("a second result: %+v", again.r)
	default:
	}
	assert.Equal(t, "call", got.to)
	assert.True(t, got.ended, "the attempt's context ended before the result was handed over")
	assert.Equal(t, 0, claims(s.Conn), "the connection's claim ended, once")
	return got
}

// claims is the number of claims on conn not ended (Claim less Unclaim;
// negative if one was ended twice). Load is InFlight plus the claims:
// read between two equal readings of InFlight, which only falls while
// nothing new is sent on conn (a stream ends meanwhile), Load less
// InFlight is exactly the claims.
func claims(conn *transport.Conn) int {
	for {
		inFlight := conn.InFlight()
		load := conn.Load()
		if conn.InFlight() == inFlight {
			return load - inFlight
		}
	}
}

// TestRunAnswer: an ordinary answer is handed over once, parsed and
// classified, with its wire time, and its time is the last answer's.
func TestRunAnswer(t *testing.T) {
	srv, conn := h2Conn(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Bucket", "abc")
		w.Header().Set("X-RateLimit-Limit", "5")
		io.WriteString(w, `{"ok":true}`)
	})
	h := newHarness(t, time.Minute, nil)
	got := h.run(t, h.send(t, context.Background(), srv, conn, "/ok", nil))
	require.NoError(t, got.r.Err)
	assert.Equal(t, http.StatusOK, got.r.Resp.StatusCode)
	assert.Equal(t, "abc", got.r.Headers.Bucket)
	assert.Equal(t, ratelimit.OK, got.r.Verdict.Kind)
	assert.False(t, got.r.Wired.IsZero())
	assert.False(t, got.r.At.Before(got.r.Wired))
	assert.Equal(t, got.r.At.UnixNano(), h.LastAnswer.Load())
	assert.Equal(t, []string{"hand"}, h.rec.list())
}

// TestRunEndsTyped: an attempt that ends before its answer is typed by
// what ended it: the attempt timeout, the call's Timeout, or Close giving
// up (the limiter cancels the attempt on record, or the attempt starts
// after Close gave up); the caller's context speaks for itself (its cause
// is Bounds.Ended's).
func TestRunEndsTyped(t *testing.T) {
	var holds sync.Map // path -> chan struct{}: told when its request reaches the server
	srv, conn := h2Conn(t, func(w http.ResponseWriter, r *http.Request) {
		if ch, ok := holds.Load(r.URL.Path); ok {
			ch.(chan struct{}) <- struct{}{}
			<-r.Context().Done()
		}
	})
	// hold makes path's requests wait at the server until they are
	// cancelled; the function returned waits until one is there.
	hold := func(path string) func() bool {
		ch := make(chan struct{}, 1)
		holds.Store(path, ch)
		return func() bool {
			select {
			case <-ch:
				return true
			case <-time.After(waitTimeout):
				t.Error("the request never reached the server")
				return false
			}
		}
	}
	errCallTimeout := errors.New("call timeout")
	errCaller := errors.New("caller gave up")
	t.Run("attempt timeout", func(t *testing.T) {
		hold("/timeout")
		h := newHarness(t, 20*time.Millisecond, nil)
		got := h.run(t, h.send(t, context.Background(), srv, conn, "/timeout", nil))
		assert.ErrorIs(t, got.r.Err, failure.ErrAttemptTimeout)
	})
	t.Run("the call's Timeout, before the attempt timeout", func(t *testing.T) {
		hold("/call-timeout")
		h := newHarness(t, time.Hour, nil)
		s := h.send(t, context.Background(), srv, conn, "/call-timeout", nil)
		s.Bounds.Timeout, s.Bounds.TimeoutAt, s.Bounds.TimeoutErr = 20*time.Millisecond, time.Now().Add(20*time.Millisecond), errCallTimeout
		got := h.run(t, s)
		assert.Same(t, errCallTimeout, got.r.Err)
	})
	t.Run("the caller's context", func(t *testing.T) {
		held := hold("/caller")
		h := newHarness(t, time.Hour, nil)
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		go func() {
			if held() {
				cancel(errCaller)
			}
		}()
		s := h.send(t, ctx, srv, conn, "/caller", nil)
		got := h.run(t, s)
		// The caller's context speaks for itself: the result carries the
		// round trip's error, and the call's Ended its cause.
		assert.ErrorIs(t, got.r.Err, context.Canceled)
		assert.Same(t, errCaller, s.Bounds.Ended())
	})
	t.Run("Close gives up on the wire", func(t *testing.T) {
		held := hold("/close")
		h := newHarness(t, time.Hour, nil)
		go func() {
			if held() {
				h.hard()
				h.slot.Load().(context.CancelFunc)() // the limiter's stopAttempts
			}
		}()
		got := h.run(t, h.send(t, context.Background(), srv, conn, "/close", nil))
		assert.Same(t, failure.ErrClosed, got.r.Err)
	})
	t.Run("Close gave up before", func(t *testing.T) {
		h := newHarness(t, time.Hour, nil)
		h.hard()
		got := h.run(t, h.send(t, context.Background(), srv, conn, "/ok", nil))
		assert.Same(t, failure.ErrClosed, got.r.Err)
	})
}

// TestScopeContext: the attempt's context ends at the earlier of the
// attempt timeout and the call's Timeout, with its cause; Ended types
// each, and a call's own end speaks for itself.
func TestScopeContext(t *testing.T) {
	var slot atomic.Value
	errCallTimeout := errors.New("call timeout")
	s := &Scope{Timeout: time.Millisecond, Hard: context.Background()}
	b := &Bounds{Ctx: context.Background(), Timeout: time.Hour, TimeoutAt: time.Now().Add(time.Hour), TimeoutErr: errCallTimeout, Slot: &slot}
	ctx, cancel := s.Context(b)
	_, ok := slot.Load().(context.CancelFunc)
	assert.True(t, ok, "the attempt is on record")
	<-ctx.Done()
	assert.Same(t, failure.ErrAttemptTimeout, s.Ended(ctx, b))
	End(b, cancel)
	assert.Equal(t, reflect.ValueOf(noAttempt).Pointer(), reflect.ValueOf(slot.Load()).Pointer())

	s.Timeout = time.Hour
	b.Timeout, b.TimeoutAt = time.Millisecond, time.Now().Add(time.Millisecond)
	ctx, cancel = s.Context(b)
	<-ctx.Done()
	assert.Same(t, errCallTimeout, s.Ended(ctx, b))
	assert.Same(t, errCallTimeout, b.Ended(), "the call's own Timeout has passed")
	End(b, cancel)

	caller, stop := context.WithCancel(context.Background())
	stop()
	b = &Bounds{Ctx: caller, Slot: &slot}
	assert.ErrorIs(t, b.Ended(), context.Canceled)
	ctx, cancel = s.Context(b)
	defer End(b, cancel)
	assert.ErrorIs(t, s.Ended(ctx, b), context.Canceled)
	assert.ErrorIs(t, s.Error(ctx, b, io.ErrUnexpectedEOF), io.ErrUnexpectedEOF, "the caller's end is not the connection's")
}

// TestConnectionError: an error of a dead connection that net/http
// reports raw becomes a *transport.ConnectionDiedError (sent); others,
// typed ones, and those of an ended context pass unchanged.
func TestConnectionError(t *testing.T) {
	live := context.Background()
	err := ConnectionError(live, io.ErrUnexpectedEOF)
	var cde *transport.ConnectionDiedError
	require.ErrorAs(t, err, &cde)
	assert.True(t, cde.Sent)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)

	typed := &transport.ConnectionDiedError{Reason: io.EOF}
	assert.Same(t, typed, ConnectionError(live, typed))
	other := errors.New("other")
	assert.Same(t, other, ConnectionError(live, other))
	ended, cancel := context.WithCancel(live)
	cancel()
	assert.Same(t, io.ErrUnexpectedEOF, ConnectionError(ended, io.ErrUnexpectedEOF))
	assert.NoError(t, ConnectionError(live, nil))
}

// TestRunConnectionDied: a connection that dies while the answer's body
// streams (net/http reports it raw) is a sent *ConnectionDiedError, its
// headers answered.
func TestRunConnectionDied(t *testing.T) {
	srv, conn := h2Conn(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Bucket", "abc")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"partial":`)
		w.(http.Flusher).Flush()
		nc := r.Context().Value(netConnKey{}).(net.Conn)
		if tc, ok := nc.(*tls.Conn); ok {
			nc = tc.NetConn() // no close_notify: abrupt
		}
		nc.Close()
	})
	h := newHarness(t, time.Minute, nil)
	got := h.run(t, h.send(t, context.Background(), srv, conn, "/die", nil))
	t.Logf("error: %v", got.r.Err)
	var cde *transport.ConnectionDiedError
	require.ErrorAs(t, got.r.Err, &cde)
	assert.True(t, cde.Sent)
	assert.ErrorIs(t, got.r.Err, transport.ErrConnectionDied)
	assert.Equal(t, "abc", got.r.Headers.Bucket)
	assert.False(t, got.r.Wired.IsZero(), "answered: the wire time is kept")
	assert.Nil(t, got.r.Resp)
}

// TestRunSharedReportOrder: a pioneer's answer reaches the shared store
// before the result is handed over, any other's after; a refused
// reservation hands the refusal over (with the wake count read before it)
// and reports nothing; the answer reported is what the attempt met. The
// store is the real one (redisstore): the first request of a bucket is its
// pioneer, the next one, once the pioneer's answer told the bucket, is
// not; another process's pioneer in flight refuses the request.
func TestRunSharedReportOrder(t *testing.T) {
	srv, conn := h2Conn(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Bucket", "abc")
		w.Header().Set("X-RateLimit-Limit", "5")
		w.Header().Set("X-RateLimit-Remaining", "4")
		w.Header().Set("X-RateLimit-Reset-After", "1")
		io.WriteString(w, `{}`)
	})
	server := redistest.Start(t)
	ns := redisstore.Namespace(t.Name())
	store := newStore(t, server.Client(t), redisstore.Config{Namespace: ns})
	for _, c := range []struct {
		name    string
		pioneer bool
		refused bool
		want    []string
	}{
		{name: "pioneer", pioneer: true, want: []string{"reserve", "report", "hand"}},
		{name: "other", want: []string{"reserve", "hand", "report"}},
		{name: "refused", refused: true, want: []string{"reserve", "hand"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, time.Minute, nil)
			rec := &recordingShared{Shared: store, rec: h.rec}
			path := "/t"
			if c.refused {
				// Another process's pioneer of a bucket not known yet is
				// in flight.
				path = "/r"
				other := newStore(t, server.Client(t), redisstore.Config{Namespace: ns})
				g := other.Reserve(context.Background(), *sharedRequest(path, time.Now()))
				require.True(t, g.OK && g.Pioneer)
			}
			h.win.Shared = rec
			h.Wakes.Store(7)
			sr := sharedRequest(path, time.Now())
			sr.Major = "m"
			before := time.Now()
			got := h.run(t, h.send(t, context.Background(), srv, conn, path, sr))
			assert.Equal(t, c.want, h.rec.list())
			grants := rec.granted()
			require.Len(t, grants, 1)
			if c.refused {
				require.NotNil(t, got.r.Deferred)
				assert.Equal(t, grants[0], *got.r.Deferred)
				assert.False(t, got.r.Deferred.OK)
				assert.EqualValues(t, 7, got.r.WakeSeq)
				assert.Nil(t, got.r.Resp)
				assert.Empty(t, rec.answered())
				return
			}
			assert.Equal(t, c.pioneer, grants[0].Pioneer)
			require.NoError(t, got.r.Err)
			assert.Nil(t, got.r.Deferred)
			answers := rec.answered()
			require.Len(t, answers, 1)
			a := answers[0]
			assert.True(t, a.Sent)
			assert.Equal(t, http.StatusOK, a.Status)
			assert.Equal(t, "abc", a.Headers.Bucket)
			assert.Equal(t, "GET "+path, a.Template)
			assert.Equal(t, "m", a.Major)
			assert.Equal(t, got.r.At, a.Now)
			assert.False(t, a.Now.Before(before))
			assert.Positive(t, a.RoundTrip)
		})
	}
}

// TestRunGlobal429: a global 429 blocks the window, and reaches the shared
// store, before GlobalHit is told, and GlobalHit before the result is
// handed over; the pause ends where the answer says.
func TestRunGlobal429(t *testing.T) {
	srv, conn := h2Conn(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Global", "true")
		w.Header().Set("X-RateLimit-Scope", "global")
		w.Header().Set("Retry-After", "3")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"message":"You are being rate limited.","retry_after":3,"global":true}`)
	})
	h := newHarness(t, time.Minute, nil)
	store := &recordingShared{Shared: newStore(t, redistest.Start(t).Client(t), redisstore.Config{}), rec: h.rec}
	h.win.Shared = store
	var blockedAtHit time.Duration
	hit := h.GlobalHit
	h.GlobalHit = func(to string, until time.Time) {
		blockedAtHit = h.win.Limiter.Blocked(time.Now())
		hit(to, until)
	}
	got := h.run(t, h.send(t, context.Background(), srv, conn, "/g", sharedRequest("/g", time.Now())))
	assert.Equal(t, []string{"reserve", "report", "global", "hand"}, h.rec.list())
	require.NoError(t, got.r.Err)
	assert.Equal(t, ratelimit.GlobalLimit, got.r.Verdict.Kind)
	until := <-h.hits
	assert.True(t, until.Equal(got.r.At.Add(3*time.Second)), "paused until %v", until)
	assert.Positive(t, blockedAtHit, "the window was blocked before GlobalHit")
	assert.Positive(t, got.blocked, "and before the result was handed over")
	answers := store.answered()
	require.Len(t, answers, 1, "reported once")
	assert.Equal(t, ratelimit.GlobalLimit, answers[0].Verdict.Kind)
}

// TestRunPanicOneResult: a panic in Run hands over exactly one result:
// failure.ErrInternal when nothing was handed over yet, nothing more
// once the result was; it is logged, and the connection's claim ends. The
// store is the real one, made to panic in the method named (no real store
// panics on demand): a bucket's first request is its pioneer, a later one
// (once the first's answer told the bucket) is not.
func TestRunPanicOneResult(t *testing.T) {
	srv, conn := h2Conn(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Bucket", "p")
		w.Header().Set("X-RateLimit-Limit", "50")
		w.Header().Set("X-RateLimit-Remaining", "49")
		w.Header().Set("X-RateLimit-Reset-After", "60")
		io.WriteString(w, `{}`)
	})
	for _, c := range []struct {
		name     string
		panicOn  string
		known    bool // the bucket was learned before: not a pioneer
		internal bool
		want     []string
	}{
		{"before the send", "Reserve", false, true, []string{"reserve", "hand"}},
		{"a pioneer's report, before the hand-over", "Report", false, true, []string{"reserve", "report", "hand"}},
		{"after the hand-over", "Report", true, false, []string{"reserve", "hand", "report"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := newStore(t, redistest.Start(t).Client(t), redisstore.Config{})
			if c.known {
				first := newHarness(t, time.Minute, nil)
				first.win.Shared = store
				require.NoError(t, first.run(t, first.send(t, context.Background(), srv, conn, "/p", sharedRequest("/p", time.Now()))).r.Err)
			}
			h := newHarness(t, time.Minute, nil)
			h.win.Shared = &recordingShared{Shared: store, rec: h.rec, panicOn: c.panicOn}
			got := h.run(t, h.send(t, context.Background(), srv, conn, "/p", sharedRequest("/p", time.Now())))
			assert.Equal(t, c.want, h.rec.list())
			if c.internal {
				assert.ErrorIs(t, got.r.Err, failure.ErrInternal)
				assert.Contains(t, got.r.Err.Error(), strings.ToLower(c.panicOn)+" bug")
			} else {
				assert.NoError(t, got.r.Err)
				assert.Equal(t, http.StatusOK, got.r.Resp.StatusCode)
			}
			assert.Contains(t, h.logged.String(), "panic while sending a request")
			assert.Contains(t, h.logged.String(), "route=")
		})
	}
}

// TestDirect: a request outside the limits completes once, with its
// answer, or typed as Ended types it, a body over its bound staying
// failure.ErrResponseTooLarge, a panic failure.ErrInternal; its context
// ends after.
func TestDirect(t *testing.T) {
	srv, conn := h2Conn(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hold":
			<-r.Context().Done()
		case "/big":
			io.WriteString(w, strings.Repeat("x", 100))
		default:
			io.WriteString(w, "ok")
		}
	})
	type outcome struct {
		resp *http.Response
		err  error
	}
	direct := func(h *harness, b Bounds, rt http.RoundTripper, path string) outcome {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		var got []outcome
		h.Direct(b, rt, req, func(resp *http.Response, err error) bool {
			got = append(got, outcome{resp, err})
			return true
		})
		require.Len(t, got, 1, "completed once")
		assert.True(t, h.ended(), "the attempt's context ended")
		return got[0]
	}
	h := newHarness(t, time.Minute, nil)
	got := direct(h, Bounds{Ctx: context.Background(), Slot: &h.slot}, conn, "/ok")
	require.NoError(t, got.err)
	b, err := io.ReadAll(got.resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "ok", string(b))

	h.Exchange = &Exchange{Clock: time.Now, Body: &Reader{MaxBytes: 10}}
	got = direct(h, Bounds{Ctx: context.Background(), Slot: &h.slot}, conn, "/big")
	assert.ErrorIs(t, got.err, failure.ErrResponseTooLarge)

	h = newHarness(t, 20*time.Millisecond, nil)
	got = direct(h, Bounds{Ctx: context.Background(), Slot: &h.slot}, conn, "/hold")
	assert.ErrorIs(t, got.err, failure.ErrAttemptTimeout)

	h = newHarness(t, time.Minute, nil)
	h.hard()
	got = direct(h, Bounds{Ctx: context.Background(), Slot: &h.slot}, conn, "/ok")
	assert.Same(t, failure.ErrClosed, got.err)

	h = newHarness(t, time.Minute, nil)
	got = direct(h, Bounds{Ctx: context.Background(), Slot: &h.slot}, panicking{}, "/ok")
	assert.ErrorIs(t, got.err, failure.ErrInternal)
}

// panicking is a RoundTripper with a bug.
type panicking struct{}

func (panicking) RoundTrip(*http.Request) (*http.Response, error) { panic("round trip bug") }
