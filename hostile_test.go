package sluice_test

// Tests of a hostile world (issue 10): faults, servers that hang or storm,
// bad input, big answers. Each drives the public API against a real server
// over loopback.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/routes"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestFaultsDeliverEveryMessageExactlyOnce is the fault scenario of issue
// 10: 300 message creations over 30 channels while 5% of requests meet a
// 502 and 2% a dropped connection (after the server counted, and created,
// the message). Every message is delivered, none twice: Sluice adds a
// nonce with enforce_nonce, so what may have been processed is resent and
// the simulator, deduplicating as Discord does, returns the message
// already created.
func TestFaultsDeliverEveryMessageExactlyOnce(t *testing.T) {
	h := newHarness(t, sluicetest.Options{Faults: sluicetest.Faults{ServerErrorRate: 0.05, DropRate: 0.02, Latency: 5 * time.Millisecond}},
		sluice.Options{}) // the default MaxErrorRetries
	reqs := make([]*http.Request, 300)
	for i := range reqs {
		reqs[i] = req("POST", fmt.Sprintf("/channels/%d/messages", 100+i%30), fmt.Sprintf(`{"content":"m%d"}`, i))
		reqs[i].Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	var o outcomes
	ids := map[string]bool{}
	for _, r := range h.lim.DoBatch(context.Background(), reqs) {
		o.add(classify(r.Response, r.Err))
		if r.Err == nil {
			var m struct{ ID string }
			require.NoError(t, json.NewDecoder(r.Response.Body).Decode(&m))
			ids[m.ID] = true
		}
	}
	st := h.srv.Stats()
	t.Logf("300 messages, 5%% 502s, 2%% drops: %v in %s; created %d, deduplicated %d, 502s %d, drops %d",
		o.counts, time.Since(start).Round(time.Millisecond), st.MessagesCreated, st.MessagesDeduplicated, st.ServerErrors, st.Dropped)
	assert.Equal(t, 300, o.counts["status 200"], "every message delivered")
	assert.Equal(t, 300, st.MessagesCreated, "each created once")
	assert.Len(t, ids, 300, "300 distinct messages came back")
	sluicetest.AssertNoDuplicateMessages(t, st)
	h.srv.AssertNoViolations(t)
}

// TestNonceKeepsTheCallersOwn: a body with its own nonce is left as it is;
// one without gets a nonce and enforce_nonce.
func TestNonceKeepsTheCallersOwn(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.Write([]byte(`{}`))
	}))
	lim := limiterFor(t, srv, sluice.Options{})
	for _, body := range []string{`{"content":"a"}`, `{"content":"b","nonce":"mine"}`, `{}`, `not json`} {
		_, err := lim.Do(context.Background(), req("POST", "/channels/1/messages", body))
		require.NoError(t, err)
	}
	require.Len(t, bodies, 4)
	assert.Regexp(t, `^\{"content":"a","nonce":"[0-9]{1,25}","enforce_nonce":true\}$`, bodies[0])
	assert.Equal(t, `{"content":"b","nonce":"mine"}`, bodies[1])
	assert.Regexp(t, `^\{"nonce":"[0-9]+","enforce_nonce":true\}$`, bodies[2])
	assert.Equal(t, `not json`, bodies[3])
}

// TestNilHeaderDoesNotCrash: net/http accepts a request without a Header
// map; so does the limiter.
func TestNilHeaderDoesNotCrash(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, sluice.Options{})
	u, err := http.NewRequest("GET", "/channels/1", nil)
	require.NoError(t, err)
	resp, err := h.lim.Do(context.Background(), &http.Request{Method: "GET", URL: u.URL})
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
}

// TestExpiredInteractionTokenFailsOnlyThatRequest: a 401 on a route that
// carries its own token (Discord's answer to an interaction token older
// than 15 minutes) is that request's answer; the bot token still works.
// A 401 to the bot token latches, and a later probe clears it.
func TestExpiredInteractionTokenFailsOnlyThatRequest(t *testing.T) {
	var botRejected atomic.Bool
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/api/v10/webhooks/"):
			w.WriteHeader(401)
			w.Write([]byte(`{"message": "Invalid Webhook Token", "code": 50027}`))
		case botRejected.Load():
			w.WriteHeader(401)
			w.Write([]byte(`{"message": "401: Unauthorized", "code": 0}`))
		default:
			w.Write([]byte(`{}`))
		}
	}))
	lim := limiterFor(t, srv, sluice.Options{UnauthorizedProbe: 50 * time.Millisecond})
	ctx := context.Background()
	resp, err := lim.Do(ctx, req("PATCH", "/webhooks/1/expired-token-abc/messages/@original", `{"content":"late"}`))
	require.NoError(t, err)
	assert.Equal(t, 401, resp.StatusCode, "the caller sees the 401")
	for i := range 3 {
		resp, err = lim.Do(ctx, req("GET", fmt.Sprintf("/channels/%d", i), ""))
		require.NoError(t, err, "the bot token was not blamed")
		assert.Equal(t, 200, resp.StatusCode)
	}

	botRejected.Store(true)
	resp, err = lim.Do(ctx, req("GET", "/channels/9", ""))
	require.NoError(t, err)
	assert.Equal(t, 401, resp.StatusCode)
	_, err = lim.Do(ctx, req("GET", "/channels/9", ""))
	assert.ErrorIs(t, err, sluice.ErrUnauthorized, "latched: fails fast")
	botRejected.Store(false)
	// Once the probe interval passed, one request checks the token again.
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err = lim.Do(ctx, req("GET", "/channels/9", ""))
		if err == nil || time.Now().After(deadline) {
			break
		}
		require.ErrorIs(t, err, sluice.ErrUnauthorized)
		<-time.After(10 * time.Millisecond) // the probe interval is real time
	}
	require.NoError(t, err, "the probe found the token accepted: the latch cleared")
	assert.Equal(t, 200, resp.StatusCode)
}

// TestServerThatNeverAnswers: no answer, or a body that never ends, is
// bounded by AttemptTimeout even with a context without deadline; a
// request that may have been processed is not resent.
func TestServerThatNeverAnswers(t *testing.T) {
	var hits atomic.Int32
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/api/v10/channels/2" {
			w.WriteHeader(200)
			w.Write([]byte(`{"partial":`))
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}))
	lim := limiterFor(t, srv, sluice.Options{AttemptTimeout: 100 * time.Millisecond, MaxErrorRetries: 1})
	_, err := lim.Do(context.Background(), req("POST", "/channels/1/invites", `{}`))
	assert.ErrorIs(t, err, sluice.ErrAttemptTimeout, "a POST that may have been processed is not resent")
	assert.Equal(t, int32(1), hits.Load())
	_, err = lim.Do(context.Background(), req("GET", "/channels/2", ""))
	assert.ErrorIs(t, err, sluice.ErrAttemptTimeout, "a body that never ends")
	assert.Equal(t, int32(3), hits.Load(), "the GET was sent again once (MaxErrorRetries 1)")
	require.NoError(t, lim.Close(context.Background()), "nothing is left hanging")
}

// TestDefaultDeadline: a context without deadline gets Options.Timeout.
func TestDefaultDeadline(t *testing.T) {
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	lim := limiterFor(t, srv, sluice.Options{Timeout: 150 * time.Millisecond, AttemptTimeout: -1})
	_, err := lim.Do(context.Background(), req("GET", "/channels/1", ""))
	var te *sluice.TimeoutError
	require.ErrorAs(t, err, &te)
	assert.ErrorIs(t, err, sluice.ErrTimeout)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	// The caller's own deadline wins, even a later one.
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = lim.Do(ctx, req("GET", "/channels/1", ""))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorAs(t, err, &te)
	assert.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond)
}

// TestDefaultDeadlineWhileQueued: Options.Timeout also ends a request
// that never left its queue (it waits behind its bucket's pioneer, which
// hangs on the wire under its own, later deadline) and one whose
// streaming body never ends, each with its *TimeoutError; the limiter then
// closes with nothing left.
func TestDefaultDeadlineWhileQueued(t *testing.T) {
	arrived := make(chan struct{}, 4)
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	lim := limiterFor(t, srv, sluice.Options{Timeout: 300 * time.Millisecond, AttemptTimeout: -1})
	// The pioneer has a deadline of its own (so no default), far off.
	pioneerCtx, stopPioneer := context.WithTimeout(context.Background(), time.Minute)
	defer stopPioneer()
	pioneer := lim.Send(pioneerCtx, req("GET", "/channels/1/messages", ""))
	<-arrived // the pioneer is on the wire: the bucket's limit is unknown
	queued := lim.Send(context.Background(), req("GET", "/channels/1/messages", ""))
	pr, pw := io.Pipe()
	defer pw.Close()
	streaming, err := http.NewRequest("POST", "/channels/2/messages", pr) // no GetBody
	require.NoError(t, err)
	body := lim.Send(context.Background(), streaming)
	for name, f := range map[string]*sluice.Future{"queued": queued, "body still read": body} {
		_, err := f.Await(context.Background())
		var te *sluice.TimeoutError
		assert.ErrorAs(t, err, &te, name)
		assert.ErrorIs(t, err, sluice.ErrTimeout, name)
	}
	select {
	case <-pioneer.Done():
		t.Error("the pioneer ended: its own deadline holds")
	default:
	}
	assert.Len(t, arrived, 0, "the queued request was never sent")
	stopPioneer()
	_, err = pioneer.Await(context.Background())
	assert.ErrorIs(t, err, context.Canceled)
	require.NoError(t, lim.Close(context.Background()))
}

// TestCloseAndSnapshotHonourTheirContext: a second Close waits for the
// first or for its own ctx; a request Close cancels fails with ErrClosed;
// Snapshot after Close returns ErrClosed at once.
func TestCloseAndSnapshotHonourTheirContext(t *testing.T) {
	arrived := make(chan struct{}, 1)
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	closing := make(chan struct{}, 1)
	lim := limiterFor(t, srv, sluice.Options{Timeout: -1, AttemptTimeout: -1, Trace: func(e sluice.TraceEvent) {
		if e.Kind == "receive" && e.Message == "close" {
			closing <- struct{}{}
		}
	}})
	f := lim.Send(context.Background(), req("POST", "/channels/1/invites", `{}`))
	<-arrived
	first, stopFirst := context.WithCancel(context.Background())
	firstDone := make(chan error, 1)
	go func() { firstDone <- lim.Close(first) }()
	<-closing // the first Close has begun
	second, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, lim.Close(second), context.DeadlineExceeded, "the second Close honours its ctx")
	select {
	case err := <-firstDone:
		t.Fatalf("the first Close returned while a request was on the wire: %v", err)
	default:
	}
	stopFirst()
	assert.ErrorIs(t, <-firstDone, context.Canceled)
	_, err := f.Await(context.Background())
	assert.ErrorIs(t, err, sluice.ErrClosed, "a request Close cancels reports ErrClosed")
	_, err = lim.Snapshot(context.Background())
	assert.ErrorIs(t, err, sluice.ErrClosed)
	assert.NoError(t, lim.Close(context.Background()))
}

// TestSendWithAStreamingBodyHonoursItsContext: Send buffers the body but
// never past its ctx.
func TestSendWithAStreamingBodyHonoursItsContext(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, sluice.Options{})
	pr, pw := io.Pipe()
	defer pw.Close()
	r, err := http.NewRequest("POST", "/channels/1/messages", pr)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	f := h.lim.Send(ctx, r)
	_, err = f.Await(context.Background())
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestBigAnswersAreRefusedBeforeReading: a Content-Length over
// MaxResponseBytes is refused at once; bodies without one stop at the
// limit, and the bytes buffered across requests are bounded.
func TestBigAnswersAreRefusedBeforeReading(t *testing.T) {
	var written atomic.Int64
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v10/channels/1" {
			w.Header().Set("Content-Length", fmt.Sprint(1<<30))
		}
		chunk := make([]byte, 32<<10)
		for r.Context().Err() == nil {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	lim := limiterFor(t, srv, sluice.Options{MaxResponseBytes: 1 << 20})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = lim.Do(context.Background(), req("GET", "/channels/1", "")) })
	}
	wg.Wait()
	for _, err := range errs {
		assert.ErrorIs(t, err, sluice.ErrResponseTooLarge)
	}
	_, err := lim.Do(context.Background(), req("GET", "/channels/2", ""))
	assert.ErrorIs(t, err, sluice.ErrResponseTooLarge, "no Content-Length: stopped at the limit")
	t.Logf("bytes the server managed to write: %d", written.Load())
}

// TestInvalidOptionsAreErrorsNotPanics: New checks every option.
func TestInvalidOptionsAreErrorsNotPanics(t *testing.T) {
	for _, o := range []sluice.Options{
		{GlobalLimit: 2_000_000}, {GlobalLimit: -1}, {GlobalWindow: -time.Second}, {GlobalWindow: 2 * time.Hour},
		{MaxWait: -1}, {MaxRetries: 1000}, {InvalidRequestWarn: 2}, {InvalidRequestWarn: -0.5},
		{MaxResponseBytes: -1}, {BanBackoff: -1}, {BaseURL: "ftp://x"}, {BaseURL: "https://u:p@x"},
		{Token: "abc\ndef"}, {UserAgent: "x\r\ny"}, {DialTimeout: -1}, {MaxBufferedBytes: -5}, {RedisTimeout: -time.Millisecond},
		{Clock: func() time.Time { return time.Time{}.Add(time.Hour) }}, {Clock: func() time.Time { return time.Time{} }},
		{Clock: func() time.Time { return time.Now().AddDate(300, 0, 0) }},
	} {
		lim, err := sluice.New(o)
		var oe *sluice.OptionError
		if assert.ErrorAs(t, err, &oe, "%+v", o) {
			assert.NotEmpty(t, oe.Option)
			assert.NotContains(t, err.Error(), "abc\ndef", "tokens never appear in errors")
		}
		assert.Nil(t, lim)
	}
}

// TestPathsKeepTheirEncodingAndBase: %3A stays encoded; a relative path
// that already carries the base path is not prefixed twice.
func TestPathsKeepTheirEncodingAndBase(t *testing.T) {
	paths := make(chan string, 4)
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths <- r.URL.EscapedPath()
		w.Write([]byte(`{}`))
	}))
	lim := limiterFor(t, srv, sluice.Options{})
	for _, p := range []string{"/channels/1/messages/2/reactions/name%3A123/@me", "/api/v10/channels/1", "/guilds/1/members/search"} {
		_, err := lim.Do(context.Background(), req("GET", p, ""))
		require.NoError(t, err)
	}
	assert.Equal(t, "/api/v10/channels/1/messages/2/reactions/name%3A123/@me", <-paths)
	assert.Equal(t, "/api/v10/channels/1", <-paths)
	assert.Equal(t, "/api/v10/guilds/1/members/search", <-paths)
}

// TestOffsiteRedirectGoesToItsHost: http.Client following a redirect to a
// CDN fetches it from the CDN, not from the API host.
func TestOffsiteRedirectGoesToItsHost(t *testing.T) {
	cdn := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("attachment bytes"))
	}))
	api := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, cdn.URL+"/attachments/1/2/file.txt", http.StatusFound)
	}))
	lim := limiterFor(t, api, sluice.Options{})
	client := &http.Client{Transport: lim}
	resp, err := client.Get(api.URL + "/api/v10/channels/1/attachment")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "attachment bytes", string(b))
}

// TestPlainText429WithHeadersIsNotABan: a 429 carrying rate-limit headers
// is Discord's, whatever its body: the bucket waits, nothing else does.
func TestPlainText429WithHeadersIsNotABan(t *testing.T) {
	var n atomic.Int32
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v10/channels/1" && n.Add(1) == 1 {
			w.Header().Set("X-RateLimit-Limit", "1")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset-After", "0.1")
			w.Header().Set("X-RateLimit-Scope", "user")
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(429)
			w.Write([]byte("You are being rate limited."))
			return
		}
		w.Write([]byte(`{}`))
	}))
	lim := limiterFor(t, srv, sluice.Options{})
	resp, err := lim.Do(context.Background(), req("GET", "/channels/1", ""))
	require.NoError(t, err, "retried after the bucket's wait")
	assert.Equal(t, 200, resp.StatusCode)
	snap, err := lim.Snapshot(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "closed", snap.Breaker, "no ban hold")
}

// TestReconnectStormsBackOff: a server that completes TLS and closes at
// once, or sends GOAWAY(ENHANCE_YOUR_CALM) on every connection, meets a
// growing backoff; waiting requests fail with an *UnavailableError, not
// forever; and nothing is dialled while nothing waits.
func TestReconnectStormsBackOff(t *testing.T) {
	for _, mode := range []string{"close", "goaway"} {
		t.Run(mode, func(t *testing.T) {
			var accepts atomic.Int32
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			var wg sync.WaitGroup
			defer wg.Wait()
			defer ln.Close()
			wg.Go(func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					accepts.Add(1)
					wg.Go(func() { hostileConn(c, mode) })
				}
			})
			lim, err := sluice.New(sluice.Options{BaseURL: "http://" + ln.Addr().String() + "/api/v10", H2C: true, Token: testToken})
			require.NoError(t, err)
			defer lim.Close(context.Background())
			start := time.Now()
			_, err = lim.Do(context.Background(), req("POST", "/channels/1/messages", `{"content":"x"}`))
			require.Error(t, err)
			assert.True(t, errors.Is(err, sluice.ErrUnavailable) || errors.Is(err, sluice.ErrConnectionDied),
				"a typed error, not a hang: %v", err)
			took, n := time.Since(start), accepts.Load()
			t.Logf("%s: failed after %s and %d connections: %v", mode, took.Round(time.Millisecond), n, err)
			assert.LessOrEqual(t, n, int32(6), "a growing backoff, not a storm")
			// Nothing waits now: the limiter does not dial.
			<-time.After(2 * time.Second)
			assert.LessOrEqual(t, accepts.Load()-n, int32(1), "idle while nothing waits")
		})
	}
}

// TestDroppedConnectionsAreNotUnreachable: a server that accepts HTTP/2
// connections and drops them before answering (a reset, a crash under
// load) is reachable. Its first three connections die that way before any
// answer, which once failed every waiting request with "API unreachable";
// the requests are resent within their own budgets and all succeed.
func TestDroppedConnectionsAreNotUnreachable(t *testing.T) {
	type connKey struct{}
	var conns atomic.Int32
	const drop = 3
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := r.Context().Value(connKey{}).(*droppable)
		if c.n <= drop {
			c.Close() // after the server's SETTINGS, before any answer
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "[]")
	}))
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey{}, &droppable{Conn: c, n: conns.Add(1)})
	}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	lim := limiterFor(t, srv, sluice.Options{})
	reqs := make([]*http.Request, 8)
	for i := range reqs {
		reqs[i] = req("GET", fmt.Sprintf("/channels/%d/messages", 10+i), "")
	}
	for i, r := range lim.DoBatch(context.Background(), reqs) {
		if assert.NoError(t, r.Err, "request %d", i) {
			assert.Equal(t, 200, r.Response.StatusCode)
		}
	}
	assert.Greater(t, conns.Load(), int32(drop), "the dropped connections were replaced")
}

// droppable is a server-side connection numbered in accept order.
type droppable struct {
	net.Conn
	n int32
}

// hostileConn serves one connection of TestReconnectStormsBackOff: it
// closes at once, or answers the HTTP/2 preface with SETTINGS and
// GOAWAY(last stream 0, ENHANCE_YOUR_CALM).
func hostileConn(c net.Conn, mode string) {
	defer c.Close()
	if mode == "close" {
		return
	}
	preface := make([]byte, 24)
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	frame := func(typ byte, payload []byte) []byte {
		n := len(payload)
		return append([]byte{byte(n >> 16), byte(n >> 8), byte(n), typ, 0, 0, 0, 0, 0}, payload...)
	}
	var out []byte
	out = append(out, frame(0x4, nil)...)                               // SETTINGS
	out = append(out, frame(0x7, []byte{0, 0, 0, 0, 0, 0, 0, 0x0b})...) // GOAWAY, ENHANCE_YOUR_CALM
	c.Write(out)
	c.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(io.Discard, c)
}

// tlsServer starts an HTTP/2 server over TLS on loopback.
func tlsServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// limiterFor returns a limiter on srv's /api/v10, closed at the end.
func limiterFor(t *testing.T, srv *httptest.Server, o sluice.Options) *sluice.Limiter {
	t.Helper()
	o.BaseURL = srv.URL + "/api/v10"
	o.Token = testToken
	o.TLSConfig = &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	lim, err := sluice.New(o)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := lim.Close(ctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Close: %v", err)
		}
	})
	return lim
}

// TestLimitThatChangesBetweenWindows: a bucket whose limit alternates (5,
// 2, 5, …) between windows draws no stream of 429s: the bucket opens each
// window with the smallest limit seen recently until an answer of that
// window shows its own.
func TestLimitThatChangesBetweenWindows(t *testing.T) {
	for _, cycle := range [][]int{{5, 2}, {1, 3}} {
		t.Run(fmt.Sprint(cycle), func(t *testing.T) {
			rs := sluicetest.RuleSet{Rules: []sluicetest.Rule{{Name: "v", Method: "GET", Route: "/channels/{channel_id}",
				Bucket: "v", LimitCycle: cycle, Window: sluicetest.Duration(200 * time.Millisecond)}}}
			h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{})
			reqs := make([]*http.Request, 60)
			for i := range reqs {
				reqs[i] = req("GET", "/channels/1", "")
			}
			var o outcomes
			for _, r := range h.lim.DoBatch(context.Background(), reqs) {
				o.add(classify(r.Response, r.Err))
			}
			st := h.srv.Stats()
			t.Logf("limits %v: %v; 429s %v", cycle, o.counts, st.RateLimited)
			assert.Equal(t, 60, o.counts["status 200"])
			assert.LessOrEqual(t, st.ClientUser429s(), 1, "at most the one decrease not seen yet")
		})
	}
}

// closeCounter is a request body that counts its Close calls.
type closeCounter struct {
	io.Reader
	closed atomic.Int32
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

// TestRoundTripClosesTheBodyOnEveryPath: an http.RoundTripper must close
// the request body, also when it refuses the request (a pipe's writer
// would block forever otherwise).
func TestRoundTripClosesTheBodyOnEveryPath(t *testing.T) {
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) }))
	lim := limiterFor(t, srv, sluice.Options{})
	refusing := limiterFor(t, srv, sluice.Options{RefuseOtherHosts: true})
	cases := []struct {
		name string
		lim  *sluice.Limiter
		url  string
		want error
	}{
		{"unparsable path", lim, srv.URL + "/api/v10/", routes.ErrInvalidPath},
		{"other host refused", refusing, "https://cdn.example.invalid/a.png", sluice.ErrOtherHost},
		{"sent", lim, srv.URL + "/api/v10/channels/1/messages", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := &closeCounter{Reader: strings.NewReader(`{"content":"x"}`)}
			r, err := http.NewRequest("POST", tc.url, body)
			require.NoError(t, err)
			resp, err := tc.lim.RoundTrip(r)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
			} else {
				require.NoError(t, err)
				resp.Body.Close()
			}
			assert.Equal(t, int32(1), body.closed.Load(), "closed once")
		})
	}
}

// TestOtherHostsGetNoBotToken: a library that puts the bot's
// Authorization header on a CDN download (discordgo does) sends it
// through the same client: the CDN gets the file request without the
// token, outside the limits; with RefuseOtherHosts it fails at once.
func TestOtherHostsGetNoBotToken(t *testing.T) {
	got := make(chan http.Header, 3)
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Write([]byte("png"))
	}))
	defer cdn.Close()
	api := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) }))
	lim := limiterFor(t, api, sluice.Options{})
	for _, auth := range []string{"Bot " + testToken, "bot other-token", "Bearer third-party"} {
		r, err := http.NewRequest("GET", cdn.URL+"/avatars/1/a.png", nil)
		require.NoError(t, err)
		r.Header.Set("Authorization", auth)
		resp, err := (&http.Client{Transport: lim}).Do(r)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, "png", string(b))
		h := <-got
		if strings.HasPrefix(auth, "Bearer") {
			assert.Equal(t, auth, h.Get("Authorization"), "a third party's own token is kept")
		} else {
			assert.Empty(t, h.Get("Authorization"), "no bot token leaves for another host")
		}
	}
	refusing := limiterFor(t, api, sluice.Options{RefuseOtherHosts: true})
	_, err := refusing.Do(context.Background(), req("GET", cdn.URL+"/avatars/1/a.png", ""))
	require.ErrorIs(t, err, sluice.ErrOtherHost)
	assert.Contains(t, err.Error(), strings.TrimPrefix(cdn.URL, "http://"))
	assert.Empty(t, got, "nothing was sent")
}

// TestAbsoluteURLsKeepTheBaseMountPoint: with the API behind a proxy under
// a path prefix, a library's absolute https://discord.com/api/v9/… URL
// goes to the prefix too, keeping its own version.
func TestAbsoluteURLsKeepTheBaseMountPoint(t *testing.T) {
	paths := make(chan string, 4)
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths <- r.URL.EscapedPath()
		w.Write([]byte(`{}`))
	}))
	lim := limiterFor(t, srv, sluice.Options{})
	prefixed, err := sluice.New(sluice.Options{
		BaseURL: srv.URL + "/discord/api/v10", Token: testToken,
		TLSConfig: &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs},
	})
	require.NoError(t, err)
	defer prefixed.Close(context.Background())
	for _, c := range []struct {
		lim       *sluice.Limiter
		url, want string
	}{
		{prefixed, "https://discord.com/api/v9/channels/1/messages", "/discord/api/v9/channels/1/messages"},
		{prefixed, "/channels/1/messages", "/discord/api/v10/channels/1/messages"},
		{prefixed, srv.URL + "/discord/api/v10/channels/2", "/discord/api/v10/channels/2"},
		{lim, "https://discord.com/api/v9/channels/1/messages", "/api/v9/channels/1/messages"},
	} {
		resp, err := c.lim.Do(context.Background(), req("GET", c.url, ""))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, c.want, <-paths, c.url)
	}
}

// TestAPIHostTellsWhatIsLimited: the hosts the limiter treats as the API's.
func TestAPIHostTellsWhatIsLimited(t *testing.T) {
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	lim := limiterFor(t, srv, sluice.Options{})
	for raw, want := range map[string]bool{
		"/channels/1/messages":                       true,
		srv.URL + "/api/v10/channels/1":              true,
		"https://discord.com/api/v9/channels/1":      true,
		"https://Canary.Discord.com/api/channels/1":  true,
		"https://discordapp.com/api/channels/1":      true,
		"https://cdn.discordapp.com/avatars/1/a.png": false,
		"https://media.discordapp.net/x.png":         false,
		"https://example.com/api/v10/channels/1":     false,
	} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		assert.Equal(t, want, lim.APIHost(u), raw)
	}
	assert.False(t, lim.APIHost(nil))
}

// TestTheLimitersCopyIsItsOwn: what the caller does with its request after
// Send, or with the request an answer carries, reaches no request the
// limiter sends: a direct request keeps the URL it was sent with, and the
// next API request keeps the token.
func TestTheLimitersCopyIsItsOwn(t *testing.T) {
	release := make(chan struct{})
	paths := make(chan string, 1)
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		paths <- r.URL.Path
		w.Write([]byte("png"))
	}))
	defer cdn.Close()
	auths := make(chan string, 2)
	api := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auths <- r.Header.Get("Authorization")
		w.Write([]byte(`{}`))
	}))
	lim := limiterFor(t, api, sluice.Options{})

	r, err := http.NewRequest("GET", cdn.URL+"/avatars/1/a.png", nil)
	require.NoError(t, err)
	f := lim.Send(context.Background(), r)
	r.URL.Path = "/second" // the caller's own, once Send returned
	close(release)
	resp, err := f.Await(context.Background())
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, "/avatars/1/a.png", <-paths)

	resp, err = lim.Do(context.Background(), req("GET", "/channels/1", ""))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "Bot "+testToken, <-auths)
	if resp.Request != nil {
		if v := resp.Request.Header["Authorization"]; len(v) > 0 {
			v[0] = "Bot mangled" // a logging middleware redacting in place
		}
	}
	resp, err = lim.Do(context.Background(), req("GET", "/channels/2", ""))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, "Bot "+testToken, <-auths, "the next request keeps the token")
}
