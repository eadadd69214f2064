package sluice_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// outcomes counts how requests ended.
type outcomes struct {
	mu     sync.Mutex
	counts map[string]int
}

func (o *outcomes) add(kind string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts == nil {
		o.counts = map[string]int{}
	}
	o.counts[kind]++
}

func classify(resp *http.Response, err error) string {
	switch {
	case err == nil:
		return fmt.Sprintf("status %d", resp.StatusCode)
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline (hang)"
	case errors.Is(err, sluice.ErrConnectionDied):
		return "connection died"
	case errors.Is(err, sluice.ErrRateLimited):
		return "rate limited"
	case errors.Is(err, sluice.ErrBanned):
		return "banned"
	case errors.Is(err, sluice.ErrInvalidRequestBudget):
		return "budget"
	case errors.Is(err, sluice.ErrUnauthorized):
		return "unauthorized"
	case errors.Is(err, sluice.ErrQueueFull):
		return "queue full"
	default:
		return "other: " + err.Error()
	}
}

func TestChaosEveryRequestEndsAndNoUnsafeResend(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run")
	}
	rs := sluicetest.RuleSet{GlobalLimit: 5000, Rules: []sluicetest.Rule{
		{Name: "get", Method: "GET", Route: "/channels/{channel_id}/messages/{message_id}", Bucket: "g", Limit: 50, Window: sluicetest.Duration(100 * time.Millisecond)},
		{Name: "post", Method: "POST", Route: "/channels/{channel_id}/messages", Bucket: "p", Limit: 50, Window: sluicetest.Duration(100 * time.Millisecond)},
	}}
	h := newHarness(t, sluicetest.Options{Rules: rs, TrackDuplicates: true,
		Faults: sluicetest.Faults{DropRate: 0.02, ServerErrorRate: 0.05, Latency: time.Millisecond, Jitter: 2 * time.Millisecond}},
		sluice.Options{GlobalLimit: 5000})
	const n = 10_000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	futures := make([]*sluice.Future, n)
	for i := range n {
		ch := 1000 + i%50 // 50 channels × 2 routes = 100 buckets
		var r *http.Request
		if i%2 == 0 {
			r = req("GET", fmt.Sprintf("/channels/%d/messages/%d", ch, i), "")
		} else {
			r = req("POST", fmt.Sprintf("/channels/%d/messages", ch), fmt.Sprintf(`{"content":"m%d"}`, i))
		}
		futures[i] = h.lim.Send(ctx, r)
	}
	var o outcomes
	for _, f := range futures {
		resp, err := f.Await(context.Background())
		o.add(classify(resp, err))
	}
	st := h.srv.Stats()
	t.Logf("10,000 requests, 100 buckets, 2%% drops, 5%% 5xx: outcomes %v", o.counts)
	t.Logf("simulator: %s; duplicates by method %v", st.Summary(), st.Duplicates)
	assert.Zero(t, o.counts["deadline (hang)"], "no request hangs")
	for kind := range o.counts {
		assert.NotContains(t, kind, "other:", "every error is typed")
	}
	assert.Zero(t, st.DuplicateMessages, "a message that may have been created is resent only with its nonce: never created twice")
	assert.Greater(t, st.Dropped, 0)
	assert.Greater(t, st.ServerErrors, 0)
	// User 429s by the simulator's arrival judge: on a busy machine its
	// handlers can be held up and handle requests out of their arrival
	// order (Stats.ReorderedExcused).
	if !assert.Zero(t, st.ClientUser429s()+st.ClientGlobal429s(), "no 429s even under faults") {
		logAround429s(t, st)
	}
}

// logAround429s logs, for each bucket that answered a 429, the simulator's
// timeline from a window before its first 429 to a few answers after.
func logAround429s(t *testing.T, st sluicetest.Stats) {
	t.Helper()
	t.Log(st.Around429s())
}

func TestCloudflareBanStopsProbesAndResumes(t *testing.T) {
	rs := sluicetest.DefaultRules()
	rs.InvalidLimit = 5
	rs.BanDuration = sluicetest.Duration(1200 * time.Millisecond)
	h := newHarness(t, sluicetest.Options{Rules: rs, Tokens: []string{testToken}},
		sluice.Options{InvalidRequestLimit: -1, BanBackoff: 300 * time.Millisecond})
	// Six requests with a wrong token of the caller's own: the simulator
	// bans the IP after the sixth.
	for i := range 6 {
		r := req("GET", fmt.Sprintf("/channels/%d", i), "")
		r.Header.Set("Authorization", "Bot wrong")
		resp, err := h.lim.Do(context.Background(), r)
		require.NoError(t, err)
		require.Equal(t, 401, resp.StatusCode)
	}
	require.Equal(t, 1, h.srv.Stats().Bans)
	// The first request meets the ban and fails without a retry.
	_, err := h.lim.Do(context.Background(), req("GET", "/channels/100", ""))
	require.ErrorIs(t, err, sluice.ErrBanned)
	// Twenty more wait behind the breaker; single probes find the ban
	// lifted and the rest follow.
	var reqs []*http.Request
	for i := range 20 {
		reqs = append(reqs, req("GET", fmt.Sprintf("/channels/%d", 200+i), ""))
	}
	var o outcomes
	for _, r := range h.lim.DoBatch(context.Background(), reqs) {
		o.add(classify(r.Response, r.Err))
	}
	st := h.srv.Stats()
	t.Logf("after the ban: %v; simulator answered %d requests with the ban page", o.counts, st.Banned)
	assert.LessOrEqual(t, st.Banned, 4, "one request, then single probes: no burst")
	assert.GreaterOrEqual(t, o.counts["status 200"], 17)
	assert.Equal(t, 20, o.counts["status 200"]+o.counts["banned"])
}

// TestBanProbeMetByDiscordsOwn429EndsTheBan: the probe after a ban that
// meets a 429 of Discord's own — no X-RateLimit-* header, but JSON with a
// retry_after, which ratelimit.Classify reads as a user limit, not a ban —
// ends the hold: the breaker reads the probe's answer by the one rule every
// answer is read by. (It used to read "429 without a rate-limit header" as
// the ban still on and hold everything for another backoff.)
func TestBanProbeMetByDiscordsOwn429EndsTheBan(t *testing.T) {
	var n atomic.Int32
	var logs lockedLog
	var passedFirst atomic.Bool
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1: // Cloudflare's ban page: HTML, no rate-limit header
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte("<html><body>You are being rate limited.</body></html>"))
		case 2: // the probe: a 429 of Discord's, headers lost on the way
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"message":"You are being rate limited.","retry_after":0.05,"global":false}`))
		default:
			passedFirst.CompareAndSwap(false, strings.Contains(logs.String(), "ban probe passed"))
			w.Write([]byte(`{}`))
		}
	}))
	lim := limiterFor(t, srv, sluice.Options{BanBackoff: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	_, err := lim.Do(context.Background(), req("GET", "/channels/1", ""))
	require.ErrorIs(t, err, sluice.ErrBanned)
	resp, err := lim.Do(context.Background(), req("GET", "/channels/2", ""))
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode, "the probe's 429 is retried after its retry_after")
	assert.EqualValues(t, 3, n.Load())
	assert.True(t, passedFirst.Load(), "the ban ended with the probe's answer, before its retry was sent: %s", logs.String())
}

// TestResendPolicyDecidesRetriesAfter5xx: a 5xx without rate-limit headers
// may come after the API processed the request; whether it goes again is
// the route's resend policy alone (routes.Route.Resend: Discord's PUT,
// PATCH and DELETE set or remove a resource; a message create carries its
// nonce; other POSTs never), or the caller's WithRetrySafe.
func TestResendPolicyDecidesRetriesAfter5xx(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		key := r.Method + " " + r.URL.Path
		hits[key]++
		first := hits[key] == 1
		mu.Unlock()
		if first {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Write([]byte(`{}`))
	}))
	lim := limiterFor(t, srv, sluice.Options{})
	bg := context.Background()
	for _, tc := range []struct {
		method, path, body string
		ctx                context.Context
		want               int
	}{
		{"GET", "/channels/1", "", bg, 200},
		{"PATCH", "/channels/2", `{"name":"x"}`, bg, 200},
		{"PUT", "/channels/3/pins/4", "", bg, 200},
		{"DELETE", "/channels/4/messages/5", "", bg, 200},
		{"POST", "/channels/5/messages", `{"content":"x"}`, bg, 200}, // Sluice adds nonce and enforce_nonce
		{"POST", "/channels/6/typing", "", bg, 200},
		{"POST", "/channels/7/invites", `{}`, bg, 502},
		{"POST", "/channels/8/invites", `{}`, sluice.WithRetrySafe(bg), 200},
	} {
		r := req(tc.method, tc.path, tc.body)
		if tc.body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		resp, err := lim.Do(tc.ctx, r)
		require.NoError(t, err, "%s %s", tc.method, tc.path)
		assert.Equal(t, tc.want, resp.StatusCode, "%s %s", tc.method, tc.path)
		mu.Lock()
		sent := hits[tc.method+" /api/v10"+tc.path]
		mu.Unlock()
		assert.Equal(t, map[int]int{200: 2, 502: 1}[tc.want], sent, "%s %s: times sent", tc.method, tc.path)
	}
}

// lockedLog is a log sink safe for concurrent writes.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestInvalidRequestCeilingRefusesBeforeTheBan(t *testing.T) {
	rs := sluicetest.DefaultRules()
	rs.InvalidLimit = 20
	h := newHarness(t, sluicetest.Options{Rules: rs, Tokens: []string{testToken}},
		sluice.Options{InvalidRequestLimit: 10})
	var o outcomes
	for i := range 30 {
		r := req("GET", fmt.Sprintf("/channels/%d", i), "")
		r.Header.Set("Authorization", "Bot wrong") // the caller's own bad token
		resp, err := h.lim.Do(context.Background(), r)
		o.add(classify(resp, err))
		if err != nil {
			var be *sluice.BudgetError
			require.ErrorAs(t, err, &be)
			assert.Equal(t, 10, be.Count)
			assert.Equal(t, 10*time.Minute, be.Window)
		}
	}
	st := h.srv.Stats()
	t.Logf("outcomes %v; simulator: invalid=%d bans=%d", o.counts, st.Invalid, st.Bans)
	assert.Equal(t, map[string]int{"status 401": 10, "budget": 20}, o.counts)
	assert.Zero(t, st.Bans, "refused locally before the simulator would ban")
	assert.Equal(t, 10, st.Invalid)
}

func TestRejectedTokenFailsFast(t *testing.T) {
	srv, err := sluicetest.NewServer(sluicetest.Options{Tokens: []string{"the-real-token"}})
	require.NoError(t, err)
	defer srv.Close()
	lim, err := sluice.New(sluice.Options{BaseURL: srv.APIBase(), Token: "a-revoked-token", TLSConfig: srv.ClientTLSConfig()})
	require.NoError(t, err)
	defer lim.Close(context.Background())
	resp, err := lim.Do(context.Background(), req("GET", "/users/@me", ""))
	require.NoError(t, err)
	assert.Equal(t, 401, resp.StatusCode)
	for range 5 {
		_, err = lim.Do(context.Background(), req("GET", "/channels/1", ""))
		assert.ErrorIs(t, err, sluice.ErrUnauthorized)
	}
	assert.Equal(t, 1, srv.Stats().Requests)
	assert.NotContains(t, err.Error(), "a-revoked-token")
}

func TestBoundedQueue(t *testing.T) {
	rs := rules(1, time.Hour, [2]string{"GET", "/channels/{channel_id}"})
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{MaxQueue: 3, Timeout: -1})
	_, err := h.lim.Do(context.Background(), req("GET", "/channels/1", ""))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var fs []*sluice.Future
	for range 3 {
		fs = append(fs, h.lim.Send(ctx, req("GET", "/channels/1", "")))
	}
	_, err = h.lim.Do(context.Background(), req("GET", "/channels/1", ""))
	assert.ErrorIs(t, err, sluice.ErrQueueFull)
	cancel()
	for _, f := range fs {
		_, err := f.Await(context.Background())
		assert.ErrorIs(t, err, context.Canceled)
	}
}

// hostileServer answers with the header or body a test names in the path.
func hostileServer(t *testing.T) (*httptest.Server, *sluice.Limiter) {
	t.Helper()
	var retries atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		switch r.URL.Path {
		case "/api/v10/channels/1": // malformed numbers
			h.Set("X-RateLimit-Limit", "abc")
			h.Set("X-RateLimit-Remaining", "-5")
			h.Set("X-RateLimit-Reset-After", "NaN")
			h.Set("X-RateLimit-Bucket", "x")
		case "/api/v10/channels/2": // contradictory: remaining above limit, huge reset
			h.Set("X-RateLimit-Limit", "5")
			h.Set("X-RateLimit-Remaining", "500")
			h.Set("X-RateLimit-Reset-After", "86400000.5") // 1,000 days
			h.Set("X-RateLimit-Bucket", "y")
		case "/api/v10/channels/3": // a 429 whose Retry-After is an HTTP date, then success
			if retries.Add(1) == 1 {
				h.Set("Retry-After", time.Now().Add(time.Second).UTC().Format(http.TimeFormat))
				h.Set("X-RateLimit-Scope", "user")
				h.Set("X-RateLimit-Limit", "1")
				h.Set("X-RateLimit-Remaining", "0")
				h.Set("X-RateLimit-Reset-After", "0.2")
				h.Set("Content-Type", "application/json")
				w.WriteHeader(429)
				w.Write([]byte(`{"message":"You are being rate limited.","retry_after":0.2,"global":false}`))
				return
			}
		case "/api/v10/channels/4": // a response that never ends
			w.WriteHeader(200)
			w.Write([]byte(`{"partial":`))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		w.Write([]byte(`{}`))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	lim, err := sluice.New(sluice.Options{BaseURL: srv.URL + "/api/v10", Token: testToken,
		TLSConfig: &tls.Config{RootCAs: pool}, MaxWait: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close(context.Background()) })
	return srv, lim
}

func TestHostileHeadersAndBodies(t *testing.T) {
	_, lim := hostileServer(t)
	ctx := context.Background()
	for range 3 {
		resp, err := lim.Do(ctx, req("GET", "/channels/1", ""))
		require.NoError(t, err, "malformed headers are ignored, the answer delivered")
		assert.Equal(t, 200, resp.StatusCode)
	}
	resp, err := lim.Do(ctx, req("GET", "/channels/2", ""))
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	// Remaining is capped at Limit and the absurd reset at an hour: the
	// bucket allows 4 more, then predicts an hour's wait, beyond MaxWait.
	for range 4 {
		_, err = lim.Do(ctx, req("GET", "/channels/2", ""))
		require.NoError(t, err)
	}
	_, err = lim.Do(ctx, req("GET", "/channels/2", ""))
	var we *sluice.WaitError
	require.ErrorAs(t, err, &we)
	assert.LessOrEqual(t, we.Wait, time.Hour)

	resp, err = lim.Do(ctx, req("GET", "/channels/3", ""))
	require.NoError(t, err, "the 429 is retried after its wait")
	assert.Equal(t, 200, resp.StatusCode)

	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = lim.Do(tctx, req("GET", "/channels/4", ""))
	assert.ErrorIs(t, err, context.DeadlineExceeded, "a body that never ends is bounded by the context")
}

func TestGoAwayLosesNothingAndResendsNothing(t *testing.T) {
	rs := rules(50, 100*time.Millisecond, [2]string{"POST", "/channels/{channel_id}/messages"})
	rs.GlobalLimit = 1000
	h := newHarness(t, sluicetest.Options{Rules: rs, TrackDuplicates: true,
		Faults: sluicetest.Faults{GoAwayRate: 0.05}}, sluice.Options{GlobalLimit: 1000})
	var reqs []*http.Request
	for i := range 300 {
		reqs = append(reqs, req("POST", fmt.Sprintf("/channels/%d/messages", i%5), fmt.Sprintf(`{"content":"g%d"}`, i)))
	}
	var o outcomes
	for _, r := range h.lim.DoBatch(context.Background(), reqs) {
		o.add(classify(r.Response, r.Err))
	}
	st := h.srv.Stats()
	t.Logf("300 POSTs with a GOAWAY after 5%% of answers (%d GOAWAYs): %v; duplicates %v", st.GoAways, o.counts, st.Duplicates)
	assert.Equal(t, 300, o.counts["status 200"], "streams a GOAWAY left unprocessed are resent; none is lost")
	assert.Zero(t, st.Duplicates["POST"], "only streams the server never processed were sent again")
	assert.Greater(t, st.GoAways, 0)
	h.srv.AssertNoViolations(t)
}

// TestLostAnswerStaysInItsWindow: a request lost with a connection the
// server closed, early in a window whose end the bucket knows, is charged
// to that window only: the server cannot count it later. The window's end
// stays where it was and the next window opens on time with its full
// limit. Before, it was charged until a full window after the loss (the
// window's end pushed by a window and 50 ms), which cost the fault
// scenario's channels a window each time a drop killed their requests.
func TestLostAnswerStaysInItsWindow(t *testing.T) {
	rs := rules(5, 2*time.Second, [2]string{"GET", "/channels/{channel_id}"})
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{MaxErrorRetries: -1})
	ctx := context.Background()
	do := func() error {
		resp, err := h.lim.Do(ctx, req("GET", "/channels/1", ""))
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	bucket := func() (sluice.BucketSnapshot, time.Time) {
		s, err := h.lim.Snapshot(ctx)
		require.NoError(t, err)
		require.Len(t, s.Buckets, 1)
		return s.Buckets[0], s.Time
	}
	require.NoError(t, do()) // the pioneer: the bucket is known, its window ends in 2 s
	before, at := bucket()
	require.True(t, before.Known)
	end := at.Add(before.ResetIn)

	h.srv.SetFaults(sluicetest.Faults{DropRate: 1}) // counted, then the server closes the connection
	err := do()
	require.ErrorIs(t, err, sluice.ErrConnectionDied)
	h.srv.SetFaults(sluicetest.Faults{})

	after, at := bucket()
	assert.WithinDuration(t, end, at.Add(after.ResetIn), time.Microsecond, "the window's end stays (ResetIn is taken at the snapshot's Time)")
	assert.Equal(t, before.Remaining-1, after.Remaining, "its slot stays spent in this window")

	// The rest of the window (3), then a full next one.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { assert.NoError(t, do()) })
	}
	wg.Wait()
	st := h.srv.Stats()
	require.Len(t, st.Buckets, 1)
	assert.Equal(t, 2, st.Buckets[0].Windows, "1 + 1 lost + 3 in the first window, 5 in the second")
	h.srv.AssertNoViolations(t)
}
