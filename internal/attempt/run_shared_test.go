package attempt

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/declared"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/transport"
)

// The tests here run Run against the real shared store (redisstore on a
// real redis-server, internal/redistest): what the store does with the
// reservation and the answer is its own, and a recording wrapper only
// notes what Run asked of it and told it.

// newStore returns a redisstore.Store on rdb with cfg (its namespace the
// test's unless set; its Timeout 5 s unless set, so a loaded machine does
// not pass for an outage), closed when the test ends.
func newStore(t *testing.T, rdb redis.UniversalClient, cfg redisstore.Config) *redisstore.Store {
	t.Helper()
	if cfg.Namespace == "" {
		cfg.Namespace = redisstore.Namespace(t.Name())
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	s, err := redisstore.New(rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// recordingShared is a real shared store recording the grants it gave
// Run and the answers Run reported to it, and, with rec, the order of
// Reserve ("reserve") and Report ("report") among Run's other steps.
// during, when set, runs as each Reserve is under way: after the store
// decided, before Run has the grant. panicOn names a method that panics
// once the store has done its part (no real store panics on demand).
type recordingShared struct {
	ratelimit.Shared
	rec     *recorder
	panicOn string
	during  func()
	mu      sync.Mutex
	grants  []ratelimit.SharedGrant
	answers []ratelimit.SharedAnswer
}

func (r *recordingShared) Reserve(ctx context.Context, sr ratelimit.SharedRequest) ratelimit.SharedGrant {
	g := r.Shared.Reserve(ctx, sr)
	if r.during != nil {
		r.during()
	}
	r.mu.Lock()
	r.grants = append(r.grants, g)
	r.mu.Unlock()
	if r.rec != nil {
		r.rec.add("reserve")
	}
	if r.panicOn == "Reserve" {
		panic("reserve bug")
	}
	return g
}

func (r *recordingShared) Report(ctx context.Context, g ratelimit.SharedGrant, a ratelimit.SharedAnswer) {
	r.mu.Lock()
	r.answers = append(r.answers, a)
	r.mu.Unlock()
	if r.rec != nil {
		r.rec.add("report")
	}
	r.Shared.Report(ctx, g, a)
	if r.panicOn == "Report" {
		panic("report bug")
	}
}

// granted returns the grants so far, answered the answers.
func (r *recordingShared) granted() []ratelimit.SharedGrant {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ratelimit.SharedGrant(nil), r.grants...)
}

func (r *recordingShared) answered() []ratelimit.SharedAnswer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ratelimit.SharedAnswer(nil), r.answers...)
}

// releasing is a real store's declared groups recording the requests
// whose places were released (ReleaseGroups).
type releasing struct {
	ratelimit.SharedGroups
	mu  sync.Mutex
	ids []string
}

func (r *releasing) ReleaseGroups(id string, gs []ratelimit.SharedGroup) {
	r.mu.Lock()
	r.ids = append(r.ids, id)
	r.mu.Unlock()
	r.SharedGroups.ReleaseGroups(id, gs)
}

func (r *releasing) released() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

// pending is a request that has no outcome yet (declared.Finisher).
type pending struct{}

func (pending) Finished() bool { return false }

// testClock is time.Now moved forward by the test (advance): the
// limiter's clock (Options.Clock), which the store, the exchange and the
// reservations share.
type testClock struct{ ahead atomic.Int64 }

func (c *testClock) Now() time.Time { return time.Now().Add(time.Duration(c.ahead.Load())) }

func (c *testClock) advance(d time.Duration) { c.ahead.Add(int64(d)) }

// sharedRequest is the reservation of a GET of path with a global slot,
// at now.
func sharedRequest(path string, now time.Time) *ratelimit.SharedRequest {
	return &ratelimit.SharedRequest{Now: now, Route: "GET " + path, Template: "GET " + path, Global: true}
}

// TestRunSharedPlaceTaken: a request's place in the store's declared
// groups is told whether its attempt's reservation took a slot there
// (Send.Place): granted by Redis, it did, and the attempt's report ends
// the place (its release after the answer leaves it alone); granted from
// the fallback's local share (Redis went away), it did not, and the
// release after the answer ends it, even after an earlier attempt that
// took its slot in Redis.
func TestRunSharedPlaceTaken(t *testing.T) {
	var bs atomic.Int32
	srv, conn := h2Conn(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/b" && bs.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // b's first attempt: it is tried again
		}
		io.WriteString(w, `{}`)
	})
	server := redistest.Start(t)
	clk := &testClock{}
	// A client that neither retries nor dials again: the call that meets
	// the dead Redis fails at once, not at the store's timeout. (With
	// ContextTimeoutEnabled, the store uses it as it is, not a copy.)
	opt, err := redis.ParseURL(server.URL)
	require.NoError(t, err)
	opt.MaxRetries, opt.DialerRetries, opt.ContextTimeoutEnabled = -1, 1, true
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	store := newStore(t, rdb, redisstore.Config{Clock: clk.Now})
	rel := &releasing{SharedGroups: store}
	dms := []declared.Ref{{Limit: &declared.Limit{Name: "dms", Count: 5, Window: 10 * time.Second}}}
	var groups declared.Groups[string]
	// submit makes request id's place in the store, as System.Submit does.
	submit := func(id uint64) declared.Request {
		place := declared.NewPlace(id, dms, rel)
		r := declared.Request{Refs: dms, ID: id, Class: admission.Normal, Req: pending{}, Place: &place}
		groups.ReserveShared(context.Background(), r, "bot", clk.Now)
		_, scheduled := place.Start()
		require.True(t, scheduled, "its place is in the store")
		return r
	}
	h := newHarness(t, time.Minute, nil)
	h.Exchange.Clock = clk.Now
	rec := &recordingShared{Shared: store}
	h.win.Shared = rec
	// attempt runs an attempt of r, a GET of path, and returns its grant.
	attempt := func(r declared.Request, path string) ratelimit.SharedGrant {
		t.Helper()
		sr := sharedRequest(path, clk.Now())
		r.Place.FillShared(sr, r.Class)
		s := h.send(t, context.Background(), srv, conn, path, sr)
		s.Place, s.SentAt = r.Place.Shared(), clk.Now()
		got := h.run(t, s)
		require.NoError(t, got.r.Err)
		grants := rec.granted()
		return grants[len(grants)-1]
	}

	a := submit(1)
	g := attempt(a, "/a")
	require.True(t, g.OK)
	require.False(t, g.Local, "granted in Redis")
	groups.Release(a, "bot", true, clk.Now())
	assert.Empty(t, rel.released(), "its slot taken in the store: the report ends its place, not a release")

	b := submit(2)
	g = attempt(b, "/b")
	require.True(t, g.OK)
	require.False(t, g.Local, "granted in Redis")
	// Redis goes away before b is tried again; a request meets it and the
	// store falls back, at the clock's now; b's next attempt comes after
	// the fallback's hold (no grant for a while after the switch).
	server.Kill()
	switched := store.Reserve(context.Background(), *sharedRequest("/other", clk.Now()))
	require.Equal(t, redisstore.Fallback, store.Mode())
	require.False(t, switched.OK, "nothing is granted for the hold after the switch")
	clk.advance(time.Minute)
	g = attempt(b, "/b")
	require.True(t, g.OK)
	require.True(t, g.Local, "granted from the fallback's share")
	groups.Release(b, "bot", true, clk.Now())
	assert.Equal(t, []string{"2"}, rel.released(), "no slot taken in the store: its place is released there")
}

// TestRunWakeSeqBeforeReserve: a refused reservation carries the wake
// count as it was before it was asked (Result.WakeSeq), so a wake-up
// that arrives while the store decides is not lost: the bucket actor,
// having seen a wake-up after that count, does not wait for the answer
// the refusal names (it may be the one that came). Here another
// process's pioneer is in flight on the bucket, and a wake-up (of some
// other answer) arrives during the reservation.
func TestRunWakeSeqBeforeReserve(t *testing.T) {
	srv, conn := h2Conn(t, func(w http.ResponseWriter, r *http.Request) {
		t.Error("a refused request reached the server")
	})
	server := redistest.Start(t)
	ns := redisstore.Namespace(t.Name())
	other := newStore(t, server.Client(t), redisstore.Config{Namespace: ns})
	mine := newStore(t, server.Client(t), redisstore.Config{Namespace: ns})
	pioneer := other.Reserve(context.Background(), *sharedRequest("/w", time.Now()))
	require.True(t, pioneer.OK && pioneer.Pioneer, "the other process's request is the bucket's pioneer")

	h := newHarness(t, time.Minute, nil)
	rec := &recordingShared{Shared: mine, during: func() { h.Wakes.Add(1) }}
	h.win.Shared = rec
	h.Wakes.Store(7)
	got := h.run(t, h.send(t, context.Background(), srv, conn, "/w", sharedRequest("/w", time.Now())))
	require.NotNil(t, got.r.Deferred, "refused: the pioneer is in flight")
	assert.True(t, got.r.Deferred.Notify, "until the pioneer's answer")
	assert.Equal(t, "bucket", got.r.Deferred.Scope)
	assert.EqualValues(t, 8, h.Wakes.Load(), "a wake-up came during the reservation")
	assert.EqualValues(t, 7, got.r.WakeSeq, "the count before the reservation")
	assert.Empty(t, rec.answered(), "a refusal is not reported")
}

// TestRunNotSentReportedUnsent: an attempt that never reached the wire
// (its connection died before it was sent: transport.NotSent) reports to
// the shared store that it was not sent, and the store gives its slots
// back: with a global limit of 1, the next request gets the global slot.
func TestRunNotSentReportedUnsent(t *testing.T) {
	srv, conn := h2Conn(t, func(w http.ResponseWriter, r *http.Request) {
		t.Error("a request on a closed connection reached the server")
	})
	require.NoError(t, conn.Close())
	server := redistest.Start(t)
	store := newStore(t, server.Client(t), redisstore.Config{GlobalLimit: 1, GlobalPeriod: time.Minute})
	h := newHarness(t, time.Minute, nil)
	rec := &recordingShared{Shared: store}
	h.win.Shared = rec
	got := h.run(t, h.send(t, context.Background(), srv, conn, "/n", sharedRequest("/n", time.Now())))
	var cde *transport.ConnectionDiedError
	require.ErrorAs(t, got.r.Err, &cde)
	assert.False(t, cde.Sent)
	assert.Equal(t, transport.NotSent, transport.Classify(got.r.Err))
	require.Len(t, rec.granted(), 1)
	require.True(t, rec.granted()[0].OK)
	require.Len(t, rec.answered(), 1, "reported once")
	a := rec.answered()[0]
	assert.False(t, a.Sent, "not sent")
	assert.Zero(t, a.Status)
	assert.Equal(t, got.r.At, a.Now)
	next := store.Reserve(context.Background(), *sharedRequest("/next", time.Now()))
	assert.True(t, next.OK, "the global slot was given back: %+v", next)
}

// TestRunAnnotatesServerClock: the answer reported to the shared store
// carries its window's end by the server's clock (Headers.Reopen,
// ServerClock.Annotate), once the server clock has its first samples:
// the bucket actor observes each answer, as here.
func TestRunAnnotatesServerClock(t *testing.T) {
	srv, conn := h2Conn(t, func(w http.ResponseWriter, r *http.Request) {
		reset := time.Now().Add(time.Second) // the server's clock is ours
		w.Header().Set("X-RateLimit-Bucket", "clock")
		w.Header().Set("X-RateLimit-Limit", "50")
		w.Header().Set("X-RateLimit-Remaining", "49")
		w.Header().Set("X-RateLimit-Reset", strconv.FormatFloat(float64(reset.UnixMilli())/1000, 'f', 3, 64))
		w.Header().Set("X-RateLimit-Reset-After", "1.000")
		io.WriteString(w, `{}`)
	})
	server := redistest.Start(t)
	store := newStore(t, server.Client(t), redisstore.Config{})
	h := newHarness(t, time.Minute, nil)
	rec := &recordingShared{Shared: store}
	h.win.Shared = rec
	for i := range ratelimit.ClockFirst + 1 {
		got := h.run(t, h.send(t, context.Background(), srv, conn, "/c", sharedRequest("/c", time.Now())))
		require.NoError(t, got.r.Err)
		answers := rec.answered()
		require.Len(t, answers, i+1)
		a := answers[i]
		require.True(t, a.Headers.Has.Reset)
		if i < ratelimit.ClockFirst {
			assert.True(t, a.Headers.Reopen.IsZero(), "answer %d: too few samples to tell the server's clock", i)
		} else {
			want, ok := h.ServerClock.Local(a.Headers.Reset)
			require.True(t, ok)
			assert.False(t, a.Headers.Reopen.IsZero(), "the window's end by the server's clock")
			assert.True(t, a.Headers.Reopen.Equal(want), "Reopen %v, the server clock's %v", a.Headers.Reopen, want)
		}
		h.ServerClock.Observe(got.r.Wired, got.r.At, got.r.Headers) // as the bucket actor does
	}
}
