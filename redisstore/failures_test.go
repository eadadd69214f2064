package redisstore

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// The failures a shared Redis really has, one store at a time: a Redis that
// freezes (every command queued until it resumes: CLIENT PAUSE here, a
// fork or a VM stall in production), a lost answer, a switch to the
// fallback while a call is under way, a Redis that refuses the store.
// The multi-process versions are in the root package (shared_test.go).

// modeWatch returns a ModeChanged that sends every switch to the channel.
func modeWatch() (func(from, to Mode), chan Mode) {
	ch := make(chan Mode, 16)
	return func(_, to Mode) { ch <- to }, ch
}

// waitMode waits for the store's switch to want.
func waitMode(t *testing.T, ch chan Mode, want Mode) {
	t.Helper()
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	for {
		select {
		case m := <-ch:
			if m == want {
				return
			}
		case <-timer.C:
			t.Fatalf("the store never switched to %v", want)
		}
	}
}

// freeze holds every command of every client for d: they are queued and
// run when it ends, as a frozen Redis runs them when it resumes.
func freeze(t *testing.T, srv *redistest.Server, d time.Duration) {
	t.Helper()
	require.NoError(t, srv.Client(t).Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err())
}

// heldGlobal is the number of slots of the global log held now.
func heldGlobal(t *testing.T, s *Store) int64 {
	t.Helper()
	n, err := s.rdb.ZCount(context.Background(), s.ns+":g", "-inf", "(+inf").Result()
	require.NoError(t, err)
	return n
}

// A reservation whose call times out while Redis is frozen runs when Redis
// resumes, after its caller gave up: it must take nothing. Before, it took
// its slots and held them until its lease expired (40 s: the whole global
// window of a limit of 1 stayed full).
func TestLateReservationTakesNothing(t *testing.T) {
	srv := redistest.Start(t)
	watch, modes := modeWatch()
	s := newStore(t, srv, Config{GlobalLimit: 1, GlobalPeriod: 100 * time.Millisecond, Timeout: 100 * time.Millisecond,
		Heartbeat: 200 * time.Millisecond, ModeChanged: watch})
	ctx := context.Background()
	freeze(t, srv, 700*time.Millisecond)
	g := s.Reserve(ctx, request())
	assert.True(t, !g.OK || g.Local, "Redis did not answer in time: the grant, if any, is the local share's")
	waitMode(t, modes, Fallback)
	waitMode(t, modes, Recovering)
	assert.Zero(t, s.Stats().Owed, "what was owed to Redis was settled before the recovery")
	assert.Zero(t, heldGlobal(t, s), "no global slot held for a reservation whose caller gave up")
}

// A reservation that ran but whose answer was lost (the call timed out on
// its way back, the caller's context ended) is given back once Redis
// answers, and if it runs later still, it takes nothing.
func TestLostReservationIsGivenBack(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, Config{GlobalLimit: 1, GlobalPeriod: time.Minute})
	ctx := context.Background()
	r := request()
	g, err := s.reserve(ctx, "lost-1", r)
	require.NoError(t, err)
	require.True(t, g.OK, "the first reservation ran")
	other := r
	assert.False(t, s.Reserve(ctx, other).OK, "its slots are held: the global window, and the unknown bucket's pioneer")

	require.NoError(t, s.cancelLease(ctx, "lost-1", r))
	forgetRefusals(s) // (given back behind the store's back)
	g2 := s.Reserve(ctx, other)
	assert.True(t, g2.OK, "given back: the global slot and the bucket's are free again")
	s.Report(ctx, g2, ratelimit.SharedAnswer{Now: time.Now(), Template: r.Template, Major: r.Major}) // never sent

	// The same reservation arriving late (queued in Redis behind the
	// cancellation) takes nothing.
	late, err := s.reserve(ctx, "lost-1", r)
	require.NoError(t, err)
	assert.False(t, late.OK, "a reservation given back takes nothing when it runs")
	assert.True(t, s.Reserve(ctx, other).OK, "and the slots are still free")
}

// A report made while Redis is unreachable is owed, not dropped: once
// Redis answers, the lease is settled (the global slot held one period
// from then, the bucket's slot counted), not held until it expires.
func TestReportOwedWhileRedisIsOut(t *testing.T) {
	srv := redistest.Start(t)
	watch, modes := modeWatch()
	s := newStore(t, srv, Config{GlobalLimit: 5, GlobalPeriod: 100 * time.Millisecond, Timeout: 100 * time.Millisecond,
		Heartbeat: 200 * time.Millisecond, LeaseTTL: time.Minute, ModeChanged: watch})
	ctx := context.Background()
	g := s.Reserve(ctx, request())
	require.True(t, g.OK)
	require.False(t, g.Local)

	freeze(t, srv, 700*time.Millisecond)
	s.Reserve(ctx, request()) // meets the frozen Redis: the store falls back
	waitMode(t, modes, Fallback)
	s.Report(ctx, g, answer(5, 4, time.Second, "h"))
	assert.Positive(t, s.Stats().Owed, "the report waits for Redis")
	waitMode(t, modes, Recovering)
	assert.Zero(t, s.Stats().Owed)

	// Settled: the lease is out of the bucket's in-flight set, and its
	// global slot is held one period from the report, not a lease TTL.
	inflight, err := s.rdb.ZCount(ctx, s.ns+":f:"+g.Key, "-inf", "(+inf").Result()
	require.NoError(t, err)
	assert.Zero(t, inflight, "the lease is released")
	now, err := s.rdb.Time(ctx).Result()
	require.NoError(t, err)
	slots, err := s.rdb.ZRangeWithScores(ctx, s.ns+":g", 0, -1).Result()
	require.NoError(t, err)
	for _, z := range slots {
		if z.Member == "~" {
			continue // the log's own member (lossLua)
		}
		assert.LessOrEqual(t, int64(z.Score), now.Add(time.Second).UnixMilli(), "%v: held until the lease's expiry", z.Member)
	}
}

// failOnReserve is a hook that switches its store to the fallback while a
// reservation is under way: the call began in shared mode and its grant
// comes back after the switch. It sets down first (see heartbeatDown), so
// the store is still in its fallback when the grant comes back.
type failOnReserve struct {
	s    *Store
	down *atomic.Bool
}

func (h failOnReserve) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h failOnReserve) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd, liveScripts.reserve) {
			h.down.Store(true)
			h.s.failed(errors.New("another call failed meanwhile"), time.Now())
		}
		return next(ctx, cmd)
	}
}
func (h failOnReserve) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// heartbeatDown is a hook that fails the heartbeat's calls while down is
// set. A switch to the fallback nudges the heartbeat, which ends the
// fallback at once when Redis answers it: a test that needs the store to
// stay in its fallback for a while holds the heartbeat down meanwhile.
// Each call refused is told on rejected, when set (without blocking).
type heartbeatDown struct {
	down     *atomic.Bool
	rejected chan struct{}
}

func (h heartbeatDown) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h heartbeatDown) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.down.Load() && isScript(cmd, liveScripts.heartbeat) {
			select {
			case h.rejected <- struct{}{}:
			default:
			}
			return errors.New("test: Redis unreachable for the heartbeat")
		}
		return next(ctx, cmd)
	}
}
func (h heartbeatDown) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// isScript reports whether cmd runs script (EVALSHA or EVAL).
func isScript(cmd redis.Cmder, script *redis.Script) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	name, _ := args[0].(string)
	arg, _ := args[1].(string)
	return (name == "evalsha" || name == "EVALSHA") && arg == script.Hash()
}

// A grant whose call began in shared mode but came back after the store
// fell back is spent only if the local share counts it too (at the switch
// the fallback holds the global window for a period, so here it does
// not); otherwise it is given back in Redis. Before, it was sent, counted
// in neither place: a burst over the limit after Redis resumed.
func TestGrantAfterTheSwitchCountsLocally(t *testing.T) {
	srv := redistest.Start(t)
	watch, modes := modeWatch()
	s := newStore(t, srv, Config{GlobalLimit: 5, GlobalPeriod: time.Second, Heartbeat: 100 * time.Millisecond,
		LeaseTTL: time.Minute, ModeChanged: watch})
	var down atomic.Bool
	s.rdb.AddHook(heartbeatDown{down: &down})
	s.rdb.AddHook(failOnReserve{s, &down})
	ctx := context.Background()
	g := s.Reserve(ctx, request())
	assert.False(t, g.OK, "the local share holds the global window at the switch")
	assert.True(t, g.Local)
	down.Store(false) // Redis answers the heartbeat again
	waitMode(t, modes, Recovering)
	// The heartbeat that recovered may have run before Reserve owed the
	// grant back (the switch nudged it); the next one makes what is owed.
	require.NoError(t, s.beat())
	assert.Zero(t, s.Stats().Owed)
	assert.Zero(t, heldGlobal(t, s), "the grant Redis made was given back")
}

// Every call ends by its deadline on a silent connection, whatever the
// client's settings: with go-redis's defaults a command already sent
// waits for ReadTimeout (3 s) whatever its context says.
func TestCallsEndByTheirDeadlineOnADefaultClient(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t) // go-redis's defaults: ContextTimeoutEnabled off
	require.False(t, rdb.Options().ContextTimeoutEnabled)
	s, err := New(rdb, Config{Namespace: Namespace(t.Name()), Timeout: 100 * time.Millisecond, Heartbeat: 50 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	freeze(t, srv, 3*time.Second)
	start := time.Now()
	g := s.Reserve(ctx, request())
	took := time.Since(start)
	assert.True(t, !g.OK || g.Local, "not granted by Redis")
	assert.Less(t, took, 2*time.Second, "the call ends by its deadline (100 ms), not go-redis's ReadTimeout (3 s)")
	start = time.Now()
	require.NoError(t, s.Close())
	assert.Less(t, time.Since(start), 2*time.Second, "Close waits for calls that end by their deadline")
	assert.NoError(t, rdb.Ping(ctx).Err(), "the caller's client is not closed (it answers once Redis resumes)")
}

// A Redis that refuses the store (a password it lacks, a wrong one) fails
// New with ErrRefused, rather than leaving it on its fallback share for
// good; FallbackOnRefusal starts it in the fallback instead.
func TestNewRefusedByRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client(t)
	require.NoError(t, admin.ConfigSet(ctx, "requirepass", "right").Err())
	t.Cleanup(func() { admin.ConfigSet(context.Background(), "requirepass", "") })
	for _, pw := range []string{"", "wrong"} {
		opt, err := redis.ParseURL(srv.URL)
		require.NoError(t, err)
		opt.Password = pw
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		_, err = New(rdb, Config{Namespace: Namespace(t.Name())})
		require.ErrorIs(t, err, ErrRefused, "password %q", pw)
		assert.NotContains(t, err.Error(), "right")

		watch, modes := modeWatch()
		s, err := New(rdb, Config{Namespace: Namespace(t.Name()), FallbackOnRefusal: true, ModeChanged: watch})
		require.NoError(t, err)
		waitMode(t, modes, Fallback)
		assert.Equal(t, Fallback, s.Mode())
		require.NoError(t, s.Close())
	}
	opt, err := redis.ParseURL(srv.URL)
	require.NoError(t, err)
	opt.Password = "right"
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	s, err := New(rdb, Config{Namespace: Namespace(t.Name())})
	require.NoError(t, err)
	assert.Equal(t, Shared, s.Mode())
	require.NoError(t, s.Close())
}

// A reservation script that runs after its caller's deadline (by Redis's
// clock, measured by the heartbeat) takes nothing. Here the measure is
// moved an hour back, so that every deadline has passed when the script
// runs.
func TestReservationAfterItsDeadlineTakesNothing(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, Config{GlobalLimit: 1, GlobalPeriod: time.Minute, Heartbeat: time.Hour})
	ctx := context.Background()
	k := s.skew.Load()
	require.NotNil(t, k, "New measured Redis's clock")
	s.skew.Store(&skew{offset: k.offset - time.Hour.Milliseconds(), err: k.err})
	g, err := s.reserve(ctx, "late-1", request())
	require.NoError(t, err)
	assert.False(t, g.OK, "past its deadline")
	s.skew.Store(k)
	assert.True(t, s.Reserve(ctx, request()).OK, "it took nothing: the global slot is free")
}

// A key of the wrong type (another application's, in Sluice's namespace)
// refuses the reservations that touch it, which wait and try again; it
// puts neither the other buckets nor the process in the fallback.
func TestWrongTypedKeyDegradesOnlyItsBucket(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, Config{Heartbeat: time.Hour})
	ctx := context.Background()
	bad := request()
	bad.Global = false
	require.NoError(t, s.rdb.Set(ctx, s.ns+":b:"+bad.Route, "not a hash", time.Minute).Err())
	for range 3 {
		g := s.Reserve(ctx, bad)
		assert.False(t, g.OK)
		assert.Equal(t, "bucket", g.Scope)
		assert.Equal(t, callRefusedWait, g.Wait)
		other := request()
		other.Route, other.Major = "GET /channels/{channel_id}/messages channel_id=2", "channel_id=2"
		og := s.Reserve(ctx, other)
		assert.True(t, og.OK, "the other buckets are counted in Redis as before")
		s.Report(ctx, og, ratelimit.SharedAnswer{Now: time.Now(), Template: other.Template, Major: other.Major}) // never sent
	}
	assert.Equal(t, Shared, s.Mode())
	assert.Zero(t, s.Stats().Outages)
	assert.Positive(t, s.Stats().Errors)
}

// A request whose answer was lost (its connection dropped after it was
// sent: Sent, no headers) is settled as soon as its process reports it,
// as the in-process limiter settles it (ratelimit.Bucket.ObserveLost): its
// in-flight lease is released at once, and its slot counts in a window
// that ends within one window (+50 ms) of the report, never until the
// lease expires (a minute here).
func TestLostAnswerIsSettledAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, Config{Namespace: Namespace(t.Name()), LeaseTTL: time.Minute})
	ctx := context.Background()
	r, _ := learned(t, s, 5, 4)
	g := s.Reserve(ctx, r)
	require.True(t, g.OK && !g.Pioneer)
	s.Report(ctx, g, ratelimit.SharedAnswer{Now: time.Now(), Sent: true, Major: r.Major, Template: r.Template})
	after, err := s.rdb.Time(ctx).Result()
	require.NoError(t, err)

	inflight, err := s.rdb.ZCount(ctx, s.ns+":f:"+g.Key, "-inf", "(+inf").Result()
	require.NoError(t, err)
	assert.Zero(t, inflight, "the lease of the lost answer is released")
	reset, err := s.rdb.HGet(ctx, s.ns+":b:"+g.Key, "r").Int64()
	require.NoError(t, err)
	assert.LessOrEqual(t, reset, after.UnixMilli()+time.Second.Milliseconds()+50+clockSlack.Milliseconds(),
		"the bucket's window ends within a window of the report")
	used, err := s.rdb.HGet(ctx, s.ns+":b:"+g.Key, "u").Int()
	require.NoError(t, err)
	assert.Equal(t, 2, used, "the lost answer's slot counts (Discord may have counted it)")
}
