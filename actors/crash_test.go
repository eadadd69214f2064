package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/declared"
	"github.com/sluicehq/sluice/internal/failure"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
	"github.com/sluicehq/sluice/sluicetest"
	"github.com/sluicehq/sluice/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start runs a System against a fresh simulator, with hook as crashHook.
func start(t *testing.T, rules sluicetest.RuleSet, hook func(any), logger ...*slog.Logger) (*System, *sluicetest.Server) {
	t.Helper()
	return startWith(t, rules, func(c *Config) {
		c.Logger, c.crashHook = append(logger, nil)[0], hook
	})
}

// startWith runs a System against a fresh simulator, its Config changed
// by set; Close runs at the test's end.
func startWith(t *testing.T, rules sluicetest.RuleSet, set func(*Config)) (*System, *sluicetest.Server) {
	t.Helper()
	srv, err := sluicetest.NewServer(sluicetest.Options{Rules: rules})
	require.NoError(t, err)
	base, _ := url.Parse(srv.APIBase())
	cfg := Config{
		BaseURL: base, Authorization: "Bot test",
		Transport:  transport.Config{TLSConfig: srv.ClientTLSConfig()},
		Global:     ratelimit.NewSlidingWindow(1000, time.Second),
		Store:      ratelimit.NewMemoryStore(),
		Clock:      time.Now,
		MaxRetries: 3, MaxErrorRetries: 2,
	}
	set(&cfg)
	sys, err := Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, sys.Close(context.Background()))
		srv.Close()
	})
	return sys, srv
}

func submit(sys *System, method, path string) *Call {
	req, _ := http.NewRequest(method, path, nil)
	route, err := routes.Parse(method, path)
	if err != nil {
		panic(err)
	}
	c := NewCall(sys.NextID(), context.Background(), req, route, false, sys.Now())
	sys.Submit(c)
	return c
}

func channelRules() sluicetest.RuleSet {
	return sluicetest.RuleSet{GlobalLimit: 1000, Rules: []sluicetest.Rule{{
		Name: "get", Method: "GET", Route: "/channels/{channel_id}/messages/{message_id}",
		Bucket: "h", Limit: 10, Window: sluicetest.Duration(50 * time.Millisecond),
	}}}
}

// outcomes waits for every call's outcome and counts them: "crashed"
// (ErrActorCrashed), "ok" (a 200), "banned" (ErrBanned), or the error.
func outcomes(calls []*Call) map[string]int {
	counts := map[string]int{}
	for _, c := range calls {
		<-c.Done()
		resp, err := c.Result()
		switch {
		case errors.Is(err, failure.ErrActorCrashed):
			counts["crashed"]++
		case err == nil && resp.StatusCode == 200:
			counts["ok"]++
		case errors.Is(err, failure.ErrBanned):
			counts["banned"]++
		default:
			counts[fmt.Sprint(err)]++
		}
	}
	return counts
}

func TestCrashingBucketLosesNothingElse(t *testing.T) {
	var headers atomic.Int64
	var panics atomic.Int64
	hook := func(m any) {
		if _, ok := m.(*resultMsg); ok && headers.Add(1)%25 == 0 {
			panics.Add(1)
			panic("injected bug")
		}
	}
	sys, srv := start(t, channelRules(), hook)
	var calls []*Call
	for i := range 300 {
		calls = append(calls, submit(sys, "GET", fmt.Sprintf("/channels/%d/messages/%d", 1+i%3, i)))
	}
	counts := outcomes(calls)
	t.Logf("300 requests, a panic every 25th result message (%d panics): %v", panics.Load(), counts)
	assert.Equal(t, int(panics.Load()), counts["crashed"], "only the request in the failing message is lost")
	assert.Equal(t, 300-counts["crashed"], counts["ok"], "every other request completes")
	assert.Empty(t, srv.Stats().Violations(), "restarted actors keep their limits")
}

// A panic while a request is being put on the wire (popped from its queue,
// not yet with a worker: before and after its attempt is counted in its
// lane) answers that request with ErrActorCrashed, and its bucket goes on:
// no request waits for an answer no one will give, and no slot stays
// taken, in its lane, its global window or its declared group.
func TestCrashWhileDispatchingAnswersTheCall(t *testing.T) {
	for _, tc := range []struct {
		name             string
		placed, declared bool
	}{{"popped", false, false}, {"placed", true, false}, {"placed-declared", true, true}, {"popped-declared", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var on atomic.Bool
			on.Store(true)
			var dispatches, panics atomic.Int64
			var crashed sync.Map // IDs of the calls being dispatched at a panic
			hook := func(m any) {
				if p, ok := m.(dispatchPoint); ok && on.Load() && p.placed == tc.placed && dispatches.Add(1)%10 == 3 {
					panics.Add(1)
					crashed.Store(p.call.ID, true)
					panic("injected dispatch bug")
				}
			}
			global := ratelimit.NewSlidingWindow(1000, time.Second)
			sys, srv := startWith(t, channelRules(), func(c *Config) { c.crashHook, c.Global = hook, global })
			limit := &declared.Limit{Name: "all", Count: 400, Window: time.Second}
			send := func(i int) *Call {
				path := fmt.Sprintf("/channels/%d/messages/%d", 1+i%3, i)
				req, _ := http.NewRequest("GET", path, nil)
				route, err := routes.Parse("GET", path)
				require.NoError(t, err)
				// A lost call ends at its deadline, not in a Close that waits for it.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				t.Cleanup(cancel)
				c := NewCall(sys.NextID(), ctx, req, route, false, sys.Now())
				if tc.declared {
					c.Limits = []declared.Ref{{Limit: limit, Group: "bot"}}
				}
				sys.Submit(c)
				return c
			}
			wait := func(calls []*Call) map[string]int {
				t.Helper()
				counts := map[string]int{}
				for _, c := range calls {
					<-c.Done()
					resp, err := c.Result()
					_, wasCrashed := crashed.Load(c.ID)
					switch {
					case errors.Is(err, failure.ErrActorCrashed):
						counts["crashed"]++
					case err == nil && resp.StatusCode == 200:
						assert.False(t, wasCrashed, "call %d was being dispatched at a panic", c.ID)
						counts["ok"]++
					default:
						counts[fmt.Sprint(err)]++
					}
				}
				return counts
			}
			var calls []*Call
			for i := range 90 {
				calls = append(calls, send(i))
			}
			counts := wait(calls)
			t.Logf("90 requests, a panic at every 10th dispatch (%d panics): %v", panics.Load(), counts)
			require.NotZero(t, panics.Load())
			assert.Equal(t, int(panics.Load()), counts["crashed"], "the call being dispatched at a panic is answered, and no other")
			assert.Equal(t, 90, counts["crashed"]+counts["ok"], "every other request completes")

			on.Store(false)
			calls = calls[:0]
			for i := range 30 {
				calls = append(calls, send(100+i))
			}
			assert.Equal(t, map[string]int{"ok": 30}, wait(calls), "the buckets go on, none short of a slot")
			assert.Zero(t, sys.Load().Running, "no request counted on the wire")
			assert.Zero(t, global.Count(sys.Now().Add(2*time.Second)), "no global slot held once its window is over")
			assert.Empty(t, sys.groups.Snapshot(sys.Now().Add(2*time.Second)), "no declared place held once its window is over")
			assert.Empty(t, srv.Stats().Violations(), "restarted actors keep their limits")
		})
	}
}

// A panic late in a handler, after its new request went on the wire,
// leaves that request to its worker: it gets its real answer, never
// ErrActorCrashed for a request the API received (its caller might send
// it again). A request the panic caught before the wire is answered
// ErrActorCrashed, as before.
func TestCrashAfterTheWireKeepsTheAnswer(t *testing.T) {
	var armed atomic.Bool
	var pumps, panics atomic.Int64
	hook := func(m any) {
		if _, ok := m.(pumpedPoint); ok && armed.Load() && pumps.Add(1)%9 == 4 && panics.Load() < 6 { // fewer than maxCrashes per actor
			panics.Add(1)
			panic("injected bug after dispatch")
		}
	}
	sys, srv := start(t, channelRules(), hook)
	var warm []*Call // the buckets known: a new request goes on the wire as it is enqueued
	for i := range 3 {
		warm = append(warm, submit(sys, "GET", fmt.Sprintf("/channels/%d/messages/1000", 1+i)))
	}
	require.Equal(t, map[string]int{"ok": 3}, outcomes(warm))
	armed.Store(true)
	var calls []*Call
	for i := range 60 {
		calls = append(calls, submit(sys, "GET", fmt.Sprintf("/channels/%d/messages/%d", 1+i%3, i)))
	}
	counts := outcomes(calls)
	st := srv.Stats()
	t.Logf("60 requests, %d panics after dispatch: %v; the simulator received %d", panics.Load(), counts, st.Requests)
	require.NotZero(t, panics.Load())
	assert.Equal(t, 60, counts["crashed"]+counts["ok"], "every request has its outcome")
	assert.Equal(t, st.Requests-3, counts["ok"], "every request the API received has its answer")
	assert.Empty(t, st.Violations())
}

// The same when the handler is the request's answer: an answer that says
// the request never reached the server puts it back at the head of its
// queue, and the handler sends it again; a panic later in that handler
// leaves it to its new worker.
func TestCrashAfterTheWireAgainKeepsTheAnswer(t *testing.T) {
	var armed, rewritten, panicked atomic.Bool
	var target atomic.Pointer[Call]
	hook := func(m any) {
		switch m := m.(type) {
		case *resultMsg:
			if armed.Load() && rewritten.CompareAndSwap(false, true) {
				// Its answer says it was never sent: back to the head of
				// the queue, and on the wire again in this handler.
				m.Resp, m.Headers, m.Err = nil, ratelimit.Headers{}, &transport.ConnectionDiedError{Reason: errors.New("injected"), Sent: false}
				target.Store(m.call)
			}
		case pumpedPoint:
			if c := target.Load(); c != nil && c.sends.Load() == 2 && panicked.CompareAndSwap(false, true) {
				panic("injected bug after the second dispatch")
			}
		}
	}
	counts, srv := fiveOnOneActor(t, hook, &armed)
	require.True(t, panicked.Load(), "the handler that sent the request again panicked")
	assert.Equal(t, map[string]int{"ok": 5}, counts, "the request sent again has its answer")
	assert.Empty(t, srv.Stats().Violations())
}

// The same when the answer is the shared count's refusal (Config.Shared):
// the handler gives the request's send back and puts it at the head of its
// queue, and, the refusal's wait over, sends it again. Its send count is
// then where it was when the handler began; a panic later in that handler
// still leaves the request to its new worker.
func TestCrashAfterADeferredResendKeepsTheAnswer(t *testing.T) {
	var armed, rewritten, resent, panicked atomic.Bool
	var target atomic.Pointer[Call]
	var sendsAtPanic atomic.Int64
	hook := func(m any) {
		switch m := m.(type) {
		case *resultMsg:
			if armed.Load() && m.call.sends.Load() == 1 && rewritten.CompareAndSwap(false, true) {
				// The shared count refused it, for no time: back in line
				// and on the wire again in this handler.
				if m.Resp != nil {
					_ = m.Resp.Body.Close()
				}
				m.Resp, m.Headers, m.Err = nil, ratelimit.Headers{}, nil
				m.Deferred = &ratelimit.SharedGrant{Scope: "bucket"}
				target.Store(m.call)
			}
		case dispatchPoint:
			if m.placed && m.call == target.Load() {
				resent.Store(true)
			}
		case pumpedPoint:
			if c := target.Load(); c != nil && resent.Load() && panicked.CompareAndSwap(false, true) {
				sendsAtPanic.Store(c.sends.Load())
				panic("injected bug after the deferred request's second dispatch")
			}
		}
	}
	counts, srv := fiveOnOneActor(t, hook, &armed)
	require.True(t, panicked.Load(), "the handler that sent the deferred request again panicked")
	require.Equal(t, int64(1), sendsAtPanic.Load(), "the deferral took its send back: the count is where the handler found it")
	assert.Equal(t, map[string]int{"ok": 5}, counts, "the request sent again has its answer")
	assert.Empty(t, srv.Stats().Violations())
}

// fiveOnOneActor warms one bucket actor with a request, arms the hook and
// sends five more requests to the same actor (its handlers run one at a
// time), and returns their outcomes.
func fiveOnOneActor(t *testing.T, hook func(any), armed *atomic.Bool) (map[string]int, *sluicetest.Server) {
	t.Helper()
	sys, srv := start(t, channelRules(), hook)
	warm := submit(sys, "GET", "/channels/1/messages/1000")
	require.Equal(t, map[string]int{"ok": 1}, outcomes([]*Call{warm}))
	armed.Store(true)
	var calls []*Call
	for i := range 5 {
		calls = append(calls, submit(sys, "GET", fmt.Sprintf("/channels/1/messages/%d", i)))
	}
	counts := outcomes(calls)
	t.Logf("%v; the simulator received %d", counts, srv.Stats().Requests)
	return counts, srv
}

func TestRestartIntensityIsBounded(t *testing.T) {
	var crash atomic.Bool
	crash.Store(true)
	var crashes atomic.Int64
	hook := func(m any) {
		if h, ok := m.(*resultMsg); ok && crash.Load() && strings.Contains(h.call.Route.Major, "666") {
			crashes.Add(1)
			panic("always")
		}
	}
	terminated := make(chan struct{}, 16)
	sys, _ := start(t, channelRules(), hook, slog.New(&eventHandler{match: "terminated", ch: terminated}))
	var calls []*Call
	for i := range 40 {
		calls = append(calls, submit(sys, "GET", fmt.Sprintf("/channels/666/messages/%d", i)))
	}
	broken := 0
	for _, c := range calls {
		<-c.Done()
		_, err := c.Result()
		require.ErrorIs(t, err, failure.ErrActorCrashed)
		if strings.Contains(err.Error(), "crashes within") {
			broken++
		}
	}
	t.Logf("%d crashes; %d queued requests failed once the actor broke", crashes.Load(), broken)
	assert.Greater(t, broken, 0, "past the intensity the queue fails instead of crashing on")
	assert.Less(t, crashes.Load(), int64(40))
	// Other buckets are unaffected meanwhile.
	other := submit(sys, "GET", "/channels/7/messages/1")
	<-other.Done()
	_, err := other.Result()
	require.NoError(t, err)
	// The broken actor stops once its window is over; then the bug is
	// "fixed" and the next request gets a fresh actor and succeeds.
	<-terminated
	crash.Store(false)
	c := submit(sys, "GET", "/channels/666/messages/1")
	<-c.Done()
	resp, err := c.Result()
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
}

// eventHandler signals ch for each debug trace line whose "message"
// attribute is match (the type of a message an actor received).
type eventHandler struct {
	match string
	ch    chan struct{}
}

func (h *eventHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *eventHandler) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "message" && a.Value.String() == h.match {
			select {
			case h.ch <- struct{}{}:
			default:
			}
		}
		return true
	})
	return nil
}
func (h *eventHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *eventHandler) WithGroup(string) slog.Handler      { return h }

func TestCrashingSupervisorKeepsItsChildren(t *testing.T) {
	var submits atomic.Int64
	hook := func(m any) {
		if _, ok := m.(*submitMsg); ok && submits.Add(1) == 3 {
			panic("injected supervisor bug")
		}
	}
	started := make(chan struct{}, 16)
	sys, srv := start(t, channelRules(), hook, slog.New(&eventHandler{match: "started", ch: started}))
	var calls []*Call
	for i := range 20 {
		calls = append(calls, submit(sys, "GET", fmt.Sprintf("/channels/1/messages/%d", i)))
	}
	crashed := 0
	for _, c := range calls {
		<-c.Done()
		resp, err := c.Result()
		if errors.Is(err, failure.ErrActorCrashed) {
			crashed++
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, 200, resp.StatusCode)
	}
	assert.Equal(t, 1, crashed, "only the request in the failing message")
	snap, err := sys.Snapshot(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "connected", snap.State, "the supervisor went on with its connection")
	assert.Empty(t, srv.Stats().Violations())
	assert.Len(t, started, 2, "one supervisor and one bucket started, neither again: no restart took the children down")
}

// A panic while the ban breaker's probe is being put on the wire abandons
// the probe: the supervisor, which holds every request while a probe is
// out, probes again after its backoff instead of waiting for an answer
// that never comes, and the requests held go once the ban is lifted.
func TestCrashWhileDispatchingTheBanProbe(t *testing.T) {
	rules := channelRules()
	rules.InvalidLimit = 5
	rules.BanDuration = sluicetest.Duration(600 * time.Millisecond)
	srv, err := sluicetest.NewServer(sluicetest.Options{Rules: rules, Tokens: []string{"test"}})
	require.NoError(t, err)
	var armed, crashed atomic.Bool
	hook := func(m any) {
		// Once the ban is met, everything waits behind the breaker: the
		// next dispatch is its probe's.
		if p, ok := m.(dispatchPoint); ok && !p.placed && armed.Load() && crashed.CompareAndSwap(false, true) {
			panic("injected dispatch bug")
		}
	}
	base, _ := url.Parse(srv.APIBase())
	sys, err := Start(Config{
		BaseURL: base, Authorization: "Bot test",
		Transport: transport.Config{TLSConfig: srv.ClientTLSConfig()},
		Global:    ratelimit.NewSlidingWindow(1000, time.Second),
		Store:     ratelimit.NewMemoryStore(), Clock: time.Now,
		MaxRetries: 3, MaxErrorRetries: 2, BanBackoff: 100 * time.Millisecond,
		crashHook: hook,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, sys.Close(context.Background()))
		srv.Close()
	})
	send := func(path, auth string) *Call {
		req, _ := http.NewRequest("GET", path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		route, err := routes.Parse("GET", path)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a held request fails, not hangs
		t.Cleanup(cancel)
		c := NewCall(sys.NextID(), ctx, req, route, false, sys.Now())
		sys.Submit(c)
		return c
	}
	// Six requests with a token of the caller's own that the API refuses:
	// the simulator bans the IP after the sixth.
	for i := range 6 {
		c := send(fmt.Sprintf("/channels/%d/messages/1", i), "Bot wrong")
		<-c.Done()
		resp, err := c.Result()
		require.NoError(t, err)
		require.Equal(t, 401, resp.StatusCode)
	}
	require.Equal(t, 1, srv.Stats().Bans)
	first := send("/channels/100/messages/1", "")
	<-first.Done()
	_, err = first.Result()
	require.ErrorIs(t, err, failure.ErrBanned, "the first request meets the ban")
	armed.Store(true)

	var calls []*Call
	for i := range 10 {
		calls = append(calls, send(fmt.Sprintf("/channels/%d/messages/1", 200+i), ""))
	}
	counts := outcomes(calls)
	t.Logf("10 requests behind the breaker, the first probe's dispatch panicked: %v", counts)
	require.True(t, crashed.Load(), "the probe's dispatch panicked")
	assert.Equal(t, 1, counts["crashed"], "the probe's own request")
	assert.Equal(t, 10, counts["crashed"]+counts["ok"]+counts["banned"], "every other request has its answer: none waits for the lost probe")
	assert.Positive(t, counts["ok"], "the ban lifts and the rest go")
}
