package sluice_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

func sendAll(t *testing.T, lim *sluice.Limiter, reqs []*http.Request) {
	t.Helper()
	for i, r := range lim.DoBatch(context.Background(), reqs) {
		require.NoError(t, r.Err, "request %d", i)
		require.Less(t, r.Response.StatusCode, 300, "request %d", i)
	}
}

func TestBurstOntoANeverSeenRoute(t *testing.T) {
	rs := rules(5, 300*time.Millisecond, [2]string{"PATCH", "/channels/{channel_id}/messages/{message_id}"})
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{})
	var reqs []*http.Request
	for i := 0; i < 25; i++ {
		reqs = append(reqs, req("PATCH", fmt.Sprintf("/channels/3/messages/%d", 100+i), `{"content":"e"}`))
	}
	sendAll(t, h.lim, reqs)
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	require.Len(t, st.Buckets, 1, "message ids are not major: one bucket")
	assert.Equal(t, 25, st.Buckets[0].Admitted)
	assert.Equal(t, "r0", st.Buckets[0].Timeline[0].Rule)
}

func TestTwoRoutesSharingAHash(t *testing.T) {
	rs := sluicetest.RuleSet{Rules: []sluicetest.Rule{
		{Name: "add", Method: "PUT", Route: "/guilds/{guild_id}/members/{user_id}/roles/{role_id}", Bucket: "roles", Limit: 4, Window: sluicetest.Duration(250 * time.Millisecond)},
		{Name: "remove", Method: "DELETE", Route: "/guilds/{guild_id}/members/{user_id}/roles/{role_id}", Bucket: "roles", Limit: 4, Window: sluicetest.Duration(250 * time.Millisecond)},
	}}
	// The simulator's windows are not Discord's: no declared role limit.
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{NoDefaultLimits: true})
	var reqs []*http.Request
	for i := 0; i < 20; i++ {
		reqs = append(reqs, req("PUT", fmt.Sprintf("/guilds/1/members/%d/roles/9", i), ""))
		reqs = append(reqs, req("DELETE", fmt.Sprintf("/guilds/1/members/%d/roles/9", i), ""))
	}
	sendAll(t, h.lim, reqs)
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	require.Len(t, st.Buckets, 1)
	assert.ElementsMatch(t, []string{"add", "remove"}, st.Buckets[0].Rules)
	assert.Equal(t, 40, st.Buckets[0].Admitted)
	assert.LessOrEqual(t, st.Buckets[0].MaxAdmitted, 4)
}

func TestInjectedExternalGlobal429(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, sluice.Options{})
	// Warm up: learn the bucket, then let an external consumer eat the
	// global limit for 300 ms.
	sendAll(t, h.lim, []*http.Request{req("GET", "/channels/1", "")})
	h.srv.InjectGlobalLimit(300 * time.Millisecond)
	var reqs []*http.Request
	for i := 0; i < 30; i++ {
		reqs = append(reqs, req("GET", fmt.Sprintf("/channels/%d", 10+i), ""))
	}
	sendAll(t, h.lim, reqs)
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	assert.GreaterOrEqual(t, st.InjectedGlobal, 1)
	// Requests already on the wire when the first 429 came back may be
	// answered 429 too; nothing is sent after it until the pause ends.
	assert.LessOrEqual(t, st.InjectedGlobal, 30)
	assert.Equal(t, st.InjectedGlobal, st.RateLimited["global"], "only the injected ones")
	t.Logf("injected global 429s seen: %d (of 30 requests sent at once)", st.InjectedGlobal)
}

func TestHiddenSublimitAtMostOne429PerWindow(t *testing.T) {
	rs := sluicetest.DefaultRules().Scaled(0.0005) // rename sublimit: 2 per 300 ms
	// Undeclared: Sluice meets the limit and learns it (TestDeclared… for
	// the declared one).
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{NoDefaultLimits: true})
	var reqs []*http.Request
	for i := 0; i < 6; i++ {
		reqs = append(reqs, req("PATCH", "/channels/77", fmt.Sprintf(`{"name":"room-%d"}`, i)))
	}
	sendAll(t, h.lim, reqs)
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t) // fails on a second shared 429 in one window
	require.Len(t, st.Sublimits, 1)
	assert.Equal(t, 6, st.Sublimits[0].Admitted)
	t.Logf("shared 429s: %d over %d sublimit windows", st.RateLimited["shared"], st.Sublimits[0].Windows)
}

func TestPipeliningOneBucketWithLatency(t *testing.T) {
	// 200 requests onto one bucket of 50 per second with 50 ms latency:
	// with pipelining they need 4 windows (about 3 s); one request in
	// flight at a time would need 10 s.
	rs := rules(50, time.Second, [2]string{"POST", "/channels/{channel_id}/messages"})
	rs.GlobalLimit = 1000
	h := newHarness(t, sluicetest.Options{Rules: rs, Faults: sluicetest.Faults{Latency: 50 * time.Millisecond}}, sluice.Options{GlobalLimit: 1000})
	var reqs []*http.Request
	for i := 0; i < 200; i++ {
		reqs = append(reqs, req("POST", "/channels/1/messages", `{"content":"p"}`))
	}
	began := time.Now()
	sendAll(t, h.lim, reqs)
	elapsed := time.Since(began)
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	require.Len(t, st.Buckets, 1)
	// Ideal: 4 windows. One request in flight at a time would need at least
	// 10 (200 × 50 ms); allow one spare window for a slow machine.
	assert.LessOrEqual(t, st.Buckets[0].Windows, 5, "pipelining fills each window")
	assert.Equal(t, 50, st.Buckets[0].MaxAdmitted, "a full window is used")
	t.Logf("200 requests, 50/s bucket, 50 ms latency: %s (ideal ≈ 3.05 s)", elapsed.Round(time.Millisecond))
}

func TestCancelWhileQueuedFreesTheSlot(t *testing.T) {
	rs := rules(1, 400*time.Millisecond, [2]string{"GET", "/channels/{channel_id}"})
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{})
	first := h.lim.Send(context.Background(), req("GET", "/channels/1", ""))
	ctx, cancel := context.WithCancel(context.Background())
	queued := h.lim.Send(ctx, req("GET", "/channels/1", ""))
	third := h.lim.Send(context.Background(), req("GET", "/channels/1", ""))
	cancel()
	_, err := queued.Await(context.Background())
	assert.ErrorIs(t, err, context.Canceled)
	for _, f := range []*sluice.Future{first, third} {
		resp, err := f.Await(context.Background())
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
	}
	st := h.srv.Stats()
	assert.Equal(t, 2, st.Requests, "the cancelled request was never sent")
	h.srv.AssertNoViolations(t)
}

func TestPredictedWaitBeyondDeadlineFailsAtOnce(t *testing.T) {
	rs := rules(1, time.Hour, [2]string{"GET", "/channels/{channel_id}"})
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{MaxWait: time.Minute})
	_, err := h.lim.Do(context.Background(), req("GET", "/channels/1", ""))
	require.NoError(t, err)
	_, err = h.lim.Do(context.Background(), req("GET", "/channels/1", ""))
	var we *sluice.WaitError
	require.ErrorAs(t, err, &we)
	assert.ErrorIs(t, err, sluice.ErrWaitTooLong)
	assert.Greater(t, we.Wait, 59*time.Minute)
	assert.Equal(t, time.Minute, we.Limit)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = h.lim.Do(ctx, req("GET", "/channels/1", ""))
	require.ErrorAs(t, err, &we)
	assert.LessOrEqual(t, we.Limit, 30*time.Second, "the context's deadline is the tighter limit")
	assert.Equal(t, 1, h.srv.Stats().Requests)
}

func TestWithMaxWaitFailsOneRequestAtOnce(t *testing.T) {
	rs := rules(1, time.Hour, [2]string{"GET", "/channels/{channel_id}"})
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{})
	_, err := h.lim.Do(sluice.WithMaxWait(context.Background(), time.Second), req("GET", "/channels/1", ""))
	require.NoError(t, err, "nothing to wait for: the limit does not apply")
	_, err = h.lim.Do(sluice.WithMaxWait(context.Background(), time.Second), req("GET", "/channels/1", ""))
	var we *sluice.WaitError
	require.ErrorAs(t, err, &we)
	assert.Greater(t, we.Wait, 59*time.Minute, "the predicted wait is reported")
	assert.Equal(t, time.Second, we.Limit)
	assert.Equal(t, 1, h.srv.Stats().Requests)
}

func TestFutureAwaitedByManyGoroutines(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, sluice.Options{})
	f := h.lim.Send(context.Background(), req("GET", "/users/@me", ""))
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := f.Await(context.Background())
			if assert.NoError(t, err) {
				assert.Equal(t, 200, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	<-f.Done()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow := h.lim.Send(context.Background(), req("GET", "/users/@me", ""))
	_, _ = slow.Await(ctx) // an ended Await context does not cancel the request
	_, err := slow.Await(context.Background())
	assert.NoError(t, err)
}

func TestRoundTripperWithHTTPClient(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, sluice.Options{})
	client := &http.Client{Transport: h.lim}
	// An absolute URL on another host keeps its path and goes to BaseURL's host.
	resp, err := client.Get("https://discord.com/api/v10/channels/5/messages/6")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	b, _ := io.ReadAll(resp.Body)
	assert.Contains(t, string(b), `"channel_id":"5"`)
}

func TestCloseFailsQueuedAndRefusesNew(t *testing.T) {
	srv, err := sluicetest.NewServer(sluicetest.Options{Rules: rules(1, time.Hour, [2]string{"GET", "/channels/{channel_id}"})})
	require.NoError(t, err)
	defer srv.Close()
	lim, err := sluice.New(sluice.Options{BaseURL: srv.APIBase(), Token: testToken, TLSConfig: srv.ClientTLSConfig(), Timeout: -1})
	require.NoError(t, err)
	_, err = lim.Do(context.Background(), req("GET", "/channels/1", ""))
	require.NoError(t, err)
	queued := lim.Send(context.Background(), req("GET", "/channels/1", "")) // waits an hour
	require.NoError(t, lim.Close(context.Background()))
	_, err = queued.Await(context.Background())
	assert.ErrorIs(t, err, sluice.ErrClosed)
	_, err = lim.Do(context.Background(), req("GET", "/channels/2", ""))
	assert.ErrorIs(t, err, sluice.ErrClosed)
	assert.NoError(t, lim.Close(context.Background()), "Close twice")
}

func TestCloseCancelsRequestsOnTheWireWhenItsContextEnds(t *testing.T) {
	srv, err := sluicetest.NewServer(sluicetest.Options{Faults: sluicetest.Faults{Latency: time.Hour}})
	require.NoError(t, err)
	defer srv.Close()
	lim, err := sluice.New(sluice.Options{BaseURL: srv.APIBase(), Token: testToken, TLSConfig: srv.ClientTLSConfig()})
	require.NoError(t, err)
	f := lim.Send(context.Background(), req("GET", "/users/@me", ""))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = lim.Close(ctx)
	assert.ErrorIs(t, err, context.Canceled)
	_, err = f.Await(context.Background())
	assert.Error(t, err)
}

func TestInvalidInputGetsTypedErrors(t *testing.T) {
	_, err := sluice.New(sluice.Options{BaseURL: "not a url"})
	assert.Error(t, err)
	_, err = sluice.New(sluice.Options{BaseURL: "https://user:pw@discord.com/api"})
	assert.Error(t, err)
	assert.NotContains(t, fmt.Sprint(err), "pw")
	h := newHarness(t, sluicetest.Options{}, sluice.Options{})
	_, err = h.lim.Do(context.Background(), req("GET", "/"+strings.Repeat("a", 3000), ""))
	assert.Error(t, err)
}

// traceHandler turns the limiter's debug trace into events a test can wait on.
type traceHandler struct {
	mu   sync.Mutex
	subs []chan slog.Record
}

func (h *traceHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *traceHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.subs {
		select {
		case s <- r:
		default:
		}
	}
	return nil
}
func (h *traceHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *traceHandler) WithGroup(string) slog.Handler      { return h }
func (h *traceHandler) subscribe() chan slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := make(chan slog.Record, 1024)
	h.subs = append(h.subs, c)
	return c
}

func TestIdleBucketsStop(t *testing.T) {
	trace := &traceHandler{}
	events := trace.subscribe()
	rs := rules(5, 50*time.Millisecond, [2]string{"GET", "/channels/{channel_id}"})
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{Logger: slog.New(trace)})
	var reqs []*http.Request
	for i := 0; i < 20; i++ {
		reqs = append(reqs, req("GET", fmt.Sprintf("/channels/%d", i), ""))
	}
	sendAll(t, h.lim, reqs)
	quiet := 0
	for quiet < 20 {
		r := <-events
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "event" && a.Value.String() == "quiet" {
				quiet++
			}
			return true
		})
	}
	snap, err := h.lim.Snapshot(context.Background())
	require.NoError(t, err)
	assert.Empty(t, snap.Buckets, "every bucket actor stopped once its window ended")
	assert.Equal(t, "connected", snap.State)
	_ = errors.New
}

func TestSendDuringCloseAlwaysGetsAnOutcome(t *testing.T) {
	srv, err := sluicetest.NewServer(sluicetest.Options{})
	require.NoError(t, err)
	defer srv.Close()
	lim, err := sluice.New(sluice.Options{BaseURL: srv.APIBase(), Token: testToken, TLSConfig: srv.ClientTLSConfig()})
	require.NoError(t, err)
	var wg sync.WaitGroup
	futures := make(chan *sluice.Future, 800)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				futures <- lim.Send(context.Background(), req("GET", fmt.Sprintf("/channels/%d/messages/%d", g, i), ""))
			}
		}()
	}
	require.NoError(t, lim.Close(context.Background()))
	wg.Wait()
	close(futures)
	n := 0
	for f := range futures {
		<-f.Done() // every request ends, sent or refused
		if _, err := f.Await(context.Background()); err != nil {
			assert.ErrorIs(t, err, sluice.ErrClosed)
		}
		n++
	}
	assert.Equal(t, 800, n)
}

// MaxWait weighs the requests still waiting ahead, not those their callers
// cancelled while they waited (which the queue drops only when they reach
// its head): a request whose true wait is within the bound is not refused.
func TestMaxWaitDoesNotCountCancelledRequests(t *testing.T) {
	rs := rules(1, time.Second, [2]string{"GET", "/channels/{channel_id}"})
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{})
	_, err := h.lim.Do(context.Background(), req("GET", "/channels/1", ""))
	require.NoError(t, err, "the bucket is learned: 1 per second, spent")
	ctx, cancel := context.WithCancel(context.Background())
	var queued []*sluice.Future
	for range 5 {
		queued = append(queued, h.lim.Send(ctx, req("GET", "/channels/1", "")))
	}
	cancel()
	for _, f := range queued {
		_, err := f.Await(context.Background())
		require.ErrorIs(t, err, context.Canceled)
	}
	// Five cancelled requests are still in the queue: counted, the wait
	// would be about 6 s; alone, this one waits for the next window.
	_, err = h.lim.Do(sluice.WithMaxWait(context.Background(), 1500*time.Millisecond), req("GET", "/channels/1", ""))
	require.NoError(t, err, "its true wait is within MaxWait")
	assert.Equal(t, 2, h.srv.Stats().Requests)
}

// A request on the wire when Close gives up waiting ends at once with
// ErrClosed, however long the server would take: Close cancels every
// attempt it holds, and no goroutine outlives it.
func TestCloseEndsTheAttemptOnTheWireWithErrClosed(t *testing.T) {
	arrived := make(chan struct{}, 1)
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-r.Context().Done() // never answers: the client must give up
	}))
	o := sluice.Options{BaseURL: srv.URL + "/api/v10", Token: testToken, AttemptTimeout: time.Hour,
		TLSConfig: &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}}
	lim, err := sluice.New(o)
	require.NoError(t, err)
	f := lim.Send(context.Background(), req("GET", "/users/@me", ""))
	<-arrived // on the wire
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- lim.Close(ctx) }()
	select {
	case err := <-closed:
		assert.ErrorIs(t, err, context.Canceled, "Close gave up waiting")
	case <-time.After(30 * time.Second): // (the attempt would last an hour)
		t.Fatal("Close waited for the attempt on the wire")
	}
	_, err = f.Await(context.Background())
	assert.ErrorIs(t, err, sluice.ErrClosed)
}
