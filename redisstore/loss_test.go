package redisstore

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// State that Redis may have lost is unknown, and unknown is full: a wipe
// (FLUSHALL, a restart without persistence, a failover to an empty
// replica) or an eviction is found by the scripts, and what was lost is
// held full for a window instead of read as empty. Before, an empty log
// admitted a whole new global window on top of the one just sent, and a
// bucket another process had just filled got a new pioneer and a window of
// its own.

// granted is how many of 10 global slots s grants at once, each on a
// route of its own (named by prefix).
func granted(s *Store, prefix string) int {
	n := 0
	for i := range 10 {
		r := request()
		r.Route, r.Major = "GET /x/{id} id="+prefix+strconv.Itoa(i), "id="+prefix+strconv.Itoa(i)
		if s.Reserve(context.Background(), r).OK {
			n++
		}
	}
	return n
}

// fill takes n global slots in s, answered at once.
func fill(t *testing.T, s *Store, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		r := request()
		r.Route, r.Major = "GET /x/{id} id="+strconv.Itoa(i), "id="+strconv.Itoa(i)
		g := s.Reserve(ctx, r)
		require.True(t, g.OK, "slot %d", i)
		s.Report(ctx, g, ratelimit.SharedAnswer{Now: time.Now(), Sent: true, Status: 404})
	}
}

func TestWipedGlobalLogIsFullForAPeriod(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, srv *redistest.Server, s *Store)
	}{
		{"flushall", func(t *testing.T, srv *redistest.Server, s *Store) {
			require.NoError(t, s.rdb.FlushAll(context.Background()).Err())
		}},
		{"evicted log", func(t *testing.T, srv *redistest.Server, s *Store) {
			require.NoError(t, s.rdb.Del(context.Background(), s.ns+":g").Err())
		}},
		{"evicted marker", func(t *testing.T, srv *redistest.Server, s *Store) {
			require.NoError(t, s.rdb.Del(context.Background(), s.ns+":gen").Err())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			const period = 2 * time.Second
			s := newStore(t, srv, Config{GlobalLimit: 5, GlobalPeriod: period, Heartbeat: time.Hour})
			fill(t, s, 5)
			g := s.Reserve(context.Background(), request())
			require.False(t, g.OK, "the window is full")
			tc.lose(t, srv, s)
			forgetRefusals(s)
			g = s.Reserve(context.Background(), request())
			assert.False(t, g.OK, "the lost log counts as full")
			assert.Equal(t, "global", g.Scope)
			assert.Greater(t, g.Wait, period/2, "for a period from the loss")
			assert.LessOrEqual(t, g.Wait, period)
			assert.EqualValues(t, 1, s.Stats().Lost)
		})
	}
}

// A process that knows no generation (it just started) and meets the
// wiped Redis first makes a new generation without knowing of the loss;
// the first process that knew the old one finds it and holds the window.
func TestNewProcessAfterAWipeDoesNotHideIt(t *testing.T) {
	srv := redistest.Start(t)
	const period = 2 * time.Second
	cfg := Config{Namespace: Namespace(t.Name()), GlobalLimit: 5, GlobalPeriod: period, Heartbeat: time.Hour}
	a := newStore(t, srv, cfg)
	fill(t, a, 5)
	require.NoError(t, a.rdb.FlushAll(context.Background()).Err())
	b := newStore(t, srv, cfg) // its first heartbeat makes the new generation
	assert.Zero(t, b.Stats().Lost)
	g := a.Reserve(context.Background(), request())
	assert.False(t, g.OK, "a knew the old generation: the loss is found")
	assert.Equal(t, "global", g.Scope)
	assert.Greater(t, g.Wait, period/2)
	g = b.Reserve(context.Background(), request())
	assert.False(t, g.OK, "and held for every process")
}

// A bucket the caller knows, whose record Redis no longer has while the
// caller's window is under way (or ended less than the record's keep ago),
// was lost: it counts as full for one window, not as a fresh bucket.
func TestLostBucketRecordCountsAsFull(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, Config{Heartbeat: time.Hour})
	ctx := context.Background()
	now := time.Now()
	known := func(resetAt time.Time) ratelimit.SharedRequest {
		r := request()
		r.Global, r.Hash = false, "h1"
		r.Local = ratelimit.Bucket{Known: true, Limit: 5, Remaining: 4, ResetAt: resetAt}
		r.Window = time.Second
		return r
	}
	g := s.Reserve(ctx, known(now.Add(500*time.Millisecond)))
	assert.False(t, g.OK, "a window under way, its record gone: full")
	assert.Equal(t, "bucket", g.Scope)
	assert.Greater(t, g.Wait, 900*time.Millisecond, "for one window")
	assert.EqualValues(t, 1, s.Stats().Lost)

	r := known(now.Add(-20 * time.Minute))
	r.Route, r.Major, r.Hash = "GET /y/{id} id=1", "id=1", "h2"
	assert.True(t, s.Reserve(ctx, r).OK, "a window that ended longer ago than records are kept: a fresh one")
	assert.EqualValues(t, 1, s.Stats().Lost)
}

// The shares of processes that may be counting on their fallback (silent
// for longer than Store.silence, or back with grants made on their share
// that may still count at Discord) are kept out of what Redis hands to the
// others: a process cut off from Redis and the ones still on it never add
// up to more than the limit. A process back without such grants, or that
// leaves (Close) once they ended, is not kept out.
func TestSilentProcessShareIsKeptOut(t *testing.T) {
	srv := redistest.Start(t)
	cfg := Config{Namespace: Namespace(t.Name()), GlobalLimit: 8, GlobalPeriod: 10 * time.Second, Heartbeat: time.Hour}
	a := newStore(t, srv, cfg)
	var bNow atomic.Int64 // b's clock
	bNow.Store(time.Now().UnixNano())
	bcfg := cfg
	bcfg.Clock = func() time.Time { return time.Unix(0, bNow.Load()) }
	b, err := New(srv.Client(t), bcfg)
	require.NoError(t, err)
	ctx := context.Background()
	count := granted
	empty := func() { // (not a loss: the test empties the log, at once: b's heartbeat may run)
		_, err := a.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, a.ns+":g")
			p.HSet(ctx, a.ns+":gen", "g", 0)
			return nil
		})
		require.NoError(t, err)
		forgetRefusals(a)
	}
	// b goes silent: its last heartbeat is older than the silence allowed
	// (two heartbeats of an hour here).
	redisNow, err := a.rdb.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, a.rdb.ZAdd(ctx, a.ns+":seen", redisZ(redisNow.Add(-3*time.Hour), b.procID)).Err())
	assert.Equal(t, 4, count(a, "a"), "half of 8: b's share, 1/2, is kept out")

	// b is heard from again, and granted nothing on its share: nothing
	// of it can count at Discord, nothing is kept out.
	require.NoError(t, b.beat())
	empty()
	assert.Equal(t, 8, count(a, "b"), "b came back without grants made on its share")

	// b falls back and sends on its share past the hold at the switch;
	// heard from again, its share stays out until what it sent on it is
	// out of the window (a period after its answer).
	// b's heartbeat fails while down: the switch's nudge would end the
	// fallback at once, or beat later with what b knew then.
	var down atomic.Bool
	rejected := make(chan struct{}, 1)
	b.rdb.AddHook(heartbeatDown{&down, rejected})
	onShare := func() {
		t.Helper()
		down.Store(true)
		b.failed(errors.New("test: Redis unreachable"), bcfg.Clock())
		<-rejected // the nudged heartbeat ran, and failed: the next is 15 min away
		require.Equal(t, Fallback, b.Mode())
		bNow.Add(int64(b.silence() + cfg.GlobalPeriod))
		r := request()
		r.Now = bcfg.Clock()
		g := b.Reserve(ctx, r)
		require.True(t, g.OK && g.Local, "a grant on b's share")
		b.Report(ctx, g, ratelimit.SharedAnswer{Now: r.Now, Sent: true, Status: 200})
		down.Store(false)
		require.NoError(t, b.beat())
	}
	onShare()
	assert.Equal(t, Recovering, b.Mode(), "b's grant on its share may still count: it counts there too")
	empty()
	assert.Equal(t, 4, count(a, "c"), "b's share stays out while its grant may count")

	// A period after the answer, b's next beat says nothing of its share
	// counts any more: b counts in Redis alone, and is not kept out.
	bNow.Add(int64(cfg.GlobalPeriod))
	require.NoError(t, b.beat())
	assert.Equal(t, Shared, b.Mode())
	empty()
	assert.Equal(t, 8, count(a, "d"), "b's grant is out of the window")

	// A process that leaves while a grant on its share may count keeps
	// its share out until then.
	onShare()
	require.NoError(t, b.Close())
	empty()
	assert.Equal(t, 4, count(a, "e"), "b left, but its grant may still count")
}

// Who was silent is state Redis can lose too. A process cut off before a
// wipe (counting on its fallback share) has no record in P:seen after it:
// each process writes back the records it last read (its next heartbeat
// after it finds the loss), and the silent one is kept out again, also
// beside a process that joins after the wipe. Before, once the loss's
// hold ended, Redis handed the others the whole limit while the cut-off
// process still sent on its share (4 user 429s in
// TestSharedLimitsSurviveRedisDying on a busy machine).
func TestWipeKeepsOutTheSharesOfProcessesNotHeardSince(t *testing.T) {
	srv := redistest.Start(t)
	const period = 10 * time.Second
	cfg := Config{Namespace: Namespace(t.Name()), GlobalLimit: 8, GlobalPeriod: period, Heartbeat: time.Minute}
	a := newStore(t, srv, cfg)
	b := newStore(t, srv, cfg)
	ctx := context.Background()
	count := func(prefix string) int { return granted(a, prefix) }
	// past the loss's hold: the loss is dated a period back, the log
	// emptied (not a loss of its own)
	holdOver := func() {
		now, err := a.rdb.Time(ctx).Result()
		require.NoError(t, err)
		_, err = a.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, a.ns+":gen", "l", now.Add(-period-time.Second).UnixMilli(), "g", 0)
			p.Del(ctx, a.ns+":g")
			return nil
		})
		require.NoError(t, err)
		forgetRefusals(a)
	}

	// b is cut off (its heartbeat fails) and silent for longer than the
	// silence allowed (two heartbeats of a minute here), within the keep
	// of its record; a reads P:seen with it
	var down atomic.Bool
	down.Store(true)
	b.rdb.AddHook(heartbeatDown{&down, make(chan struct{}, 1)})
	redisNow, err := a.rdb.Time(ctx).Result()
	require.NoError(t, err)
	require.NoError(t, a.rdb.ZAdd(ctx, a.ns+":seen", redisZ(redisNow.Add(-5*time.Minute), b.procID)).Err())
	require.NoError(t, a.beat())
	require.EqualValues(t, 2, a.Stats().Processes, "a has seen b")
	holdOver()
	require.Equal(t, 4, count("before"), "b's share is kept out")

	require.NoError(t, a.rdb.FlushAll(ctx).Err())
	forgetRefusals(a)
	g := a.Reserve(ctx, request())
	require.False(t, g.OK, "the loss is found and held")
	require.Equal(t, "global", g.Scope)
	require.EqualValues(t, 1, a.Stats().Lost)
	require.NoError(t, a.beat()) // (nudged already: written back at most twice)
	seen, err := a.rdb.ZScore(ctx, a.ns+":seen", b.procID).Result()
	require.NoError(t, err, "b's record is written back")
	assert.InDelta(t, float64(redisNow.Add(-5*time.Minute).UnixMilli()), seen, 1, "with its last heartbeat")
	holdOver()
	assert.Equal(t, 4, count("a"), "b, silent before the wipe, is kept out after it")

	c := newStore(t, srv, cfg) // joins after the wipe
	require.NoError(t, c.beat())
	holdOver()
	assert.Less(t, count("c"), 8, "b is still kept out beside a process that joined since")

	down.Store(false)
	require.NoError(t, b.beat())
	holdOver()
	assert.Equal(t, 8, count("b"), "b is heard from, with nothing granted on its share")
}

// New warns when Redis may evict the store's keys, and refuses with
// RefuseEviction.
func TestNewWarnsOfAnEvictingRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client(t)
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "64mb").Err())
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err())
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &buf}, nil))
	s := newStore(t, srv, Config{Logger: log})
	require.NoError(t, s.Close())
	mu.Lock()
	assert.Contains(t, buf.String(), "maxmemory_policy=volatile-lru")
	mu.Unlock()
	_, err := New(srv.Client(t), Config{Namespace: Namespace(t.Name()), RefuseEviction: true})
	require.ErrorIs(t, err, ErrEviction)

	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())
	s2, err := New(srv.Client(t), Config{Namespace: Namespace(t.Name()), RefuseEviction: true})
	require.NoError(t, err)
	require.NoError(t, s2.Close())
}

// lockedWriter serialises writes to w (the store logs from its goroutines).
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// redisZ is a sorted-set member scored with t in Unix ms.
func redisZ(t time.Time, member string) redis.Z {
	return redis.Z{Score: float64(t.UnixMilli()), Member: member}
}

// A known bucket's in-flight set, gone before its expiry (evicted) while
// its record stays: how many of its requests are in flight, and in which
// window Discord counts them, is unknown: full for one window.
func TestEvictedInflightSetCountsAsFull(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, Config{Heartbeat: time.Hour})
	ctx := context.Background()
	r, _ := learned(t, s, 5, 4)
	g := s.Reserve(ctx, r)
	require.True(t, g.OK, "the bucket is known: 3 left")
	require.NoError(t, s.rdb.Del(ctx, s.ns+":f:"+g.Key).Err())
	refused := s.Reserve(ctx, r)
	assert.False(t, refused.OK, "the in-flight set was lost: full")
	assert.Equal(t, "bucket", refused.Scope)
	assert.Greater(t, refused.Wait, 900*time.Millisecond, "for a window from the loss")
	assert.EqualValues(t, 1, s.Stats().Lost)
	forgetRefusals(s) // (ask Redis again, not what it told this process)
	again := s.Reserve(ctx, r)
	assert.False(t, again.OK)
	assert.LessOrEqual(t, again.Wait, refused.Wait, "found once: the window is not pushed on by every call")
	assert.EqualValues(t, 1, s.Stats().Lost)
}

// A known bucket's record, evicted while its in-flight set lives (it never
// outlives the record otherwise), with every answer in: a process that has
// not learned the bucket itself must not send a new pioneer into a window
// the others may have filled. The bucket counts as full for the window the
// set recorded, then takes one request until an answer tells the limit.
func TestEvictedRecordOfAKnownBucketCountsAsFull(t *testing.T) {
	srv := redistest.Start(t)
	cfg := Config{Namespace: Namespace(t.Name()), Heartbeat: time.Hour}
	a := newStore(t, srv, cfg)
	b := newStore(t, srv, cfg)
	ctx := context.Background()
	known, p := learned(t, a, 5, 4)
	known.Local = ratelimit.Bucket{Known: true, Limit: 5, Remaining: 3, ResetAt: time.Now().Add(time.Second)}
	for i := range 4 {
		g := a.Reserve(ctx, known)
		require.True(t, g.OK, "the window has 4 left")
		a.Report(ctx, g, answer(5, 3-i, time.Second, "h"))
	}
	require.NoError(t, a.rdb.Del(ctx, a.ns+":b:"+p.Key).Err(), "evicted")
	require.NoError(t, a.rdb.Del(ctx, a.ns+":b:"+routes.BucketKey("h", known.Major)).Err(), "evicted")

	r := request()
	r.Global = false
	g := b.Reserve(ctx, r) // b knows neither the hash nor the limit
	assert.False(t, g.OK, "the record was lost with the window full: no new pioneer")
	assert.Equal(t, "bucket", g.Scope)
	assert.Greater(t, g.Wait, 900*time.Millisecond, "for the window the set recorded")
	assert.EqualValues(t, 1, b.Stats().Lost)
	forgetRefusals(b) // (ask Redis again, not what it told this process)
	again := b.Reserve(ctx, r)
	assert.False(t, again.OK)
	assert.LessOrEqual(t, again.Wait, g.Wait, "found once: not pushed on by every call")
	assert.EqualValues(t, 1, b.Stats().Lost)
}

// A pioneer answered without telling its bucket (a lost answer, a 5xx)
// leaves no in-flight set behind, so the next one is a pioneer again, not
// a loss.
func TestPioneerWithoutAnswerIsNotALoss(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, Config{Heartbeat: time.Hour})
	ctx := context.Background()
	r := request()
	r.Global, r.Hash = false, "h"
	p := s.Reserve(ctx, r)
	require.True(t, p.OK && p.Pioneer)
	s.Report(ctx, p, ratelimit.SharedAnswer{Now: time.Now(), Sent: true})
	again := s.Reserve(ctx, r)
	assert.True(t, again.OK && again.Pioneer, "a pioneer again")
	assert.Zero(t, s.Stats().Lost)
}

// Requests in flight when the global log is wiped are counted again when
// their answers are reported: the window held full after the loss ends
// with them still in it, as the API counts them from their arrival.
func TestInflightGlobalSlotsSurviveAWipe(t *testing.T) {
	srv := redistest.Start(t)
	const period = time.Second
	s := newStore(t, srv, Config{GlobalLimit: 5, GlobalPeriod: period, Heartbeat: time.Hour})
	ctx := context.Background()
	var inflight []ratelimit.SharedGrant
	for i := range 2 {
		r := request()
		r.Route, r.Major = "GET /x/{id} id="+strconv.Itoa(i), "id="+strconv.Itoa(i)
		g := s.Reserve(ctx, r)
		require.True(t, g.OK)
		inflight = append(inflight, g)
	}
	require.NoError(t, s.rdb.FlushAll(ctx).Err())
	held := s.Reserve(ctx, request())
	require.False(t, held.OK, "the loss is found: full for a period")
	for _, g := range inflight {
		s.Report(ctx, g, ratelimit.SharedAnswer{Now: time.Now(), Sent: true, Status: 200})
	}
	redisNow, err := s.rdb.Time(ctx).Result()
	require.NoError(t, err)
	for _, g := range inflight {
		score, err := s.rdb.ZScore(ctx, s.ns+":g", splitLease(g.Lease)).Result()
		require.NoError(t, err, "the answered request is in the new log")
		assert.Greater(t, score, float64(redisNow.Add(period/2).UnixMilli()), "for a period from its answer")
	}
}

// learned has s's pioneer learn a bucket ("h") of limit per second, with
// remaining left in its window: it returns the request, which now knows the
// hash and the window, and the pioneer's grant.
// forgetRefusals drops what the stores remember of Redis's refusals
// (coalesce.go), for a test that changes Redis's state behind their back
// (a window moved to its end, a log emptied): as if the waits told had
// passed.
func forgetRefusals(stores ...*Store) {
	for _, s := range stores {
		s.refusals.forget()
	}
}

func learned(t *testing.T, s *Store, limit, remaining int) (ratelimit.SharedRequest, ratelimit.SharedGrant) {
	t.Helper()
	ctx := context.Background()
	r := request()
	r.Global = false
	p := s.Reserve(ctx, r)
	require.True(t, p.OK && p.Pioneer)
	s.Report(ctx, p, answer(limit, remaining, time.Second, "h"))
	r.Hash, r.Window = "h", time.Second
	return r, p
}

// evictSome makes srv evict (a maxmemory just above what it uses, the
// volatile-ttl policy, keys of a few ms written until some are evicted),
// then raises its maxmemory so that nothing else is: Redis counts as
// evicting for the stores made next (evicting.go), and keeps every key
// of theirs.
func evictSome(t *testing.T, srv *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	admin := srv.Client(t)
	info, err := admin.Info(ctx, "memory").Result()
	require.NoError(t, err)
	var mem int64
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == "used_memory" {
			mem, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	require.Positive(t, mem)
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err())
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(mem+(4<<20), 10)).Err())
	junk := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		require.Less(t, i, 10000, "Redis never evicted")
		require.NoError(t, admin.Set(ctx, "junk:"+strconv.Itoa(i), junk, time.Minute).Err())
		_, evicted, ok := readMemory(ctx, admin)
		require.True(t, ok)
		if evicted > 0 {
			break
		}
	}
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "1gb").Err())
}

// While Redis evicts, its keys can go several at once: a bucket's record
// and its in-flight set, which otherwise tell each other's loss, in the
// same batch. A process that has not learned the bucket then finds nothing
// of it, and must not read it as new: a bucket Redis holds nothing of
// waits one window (the route's, as its buckets' first answers told)
// before its pioneer, so a window the others filled is never met by one.
func TestEvictingRedisHoldsABucketItHoldsNothingOf(t *testing.T) {
	srv := redistest.Start(t)
	evictSome(t, srv)
	cfg := Config{Namespace: Namespace(t.Name()), Heartbeat: time.Hour}
	a := newStore(t, srv, cfg)
	b := newStore(t, srv, cfg)
	require.True(t, a.mayEvict(), "Redis evicted before the store started")
	ctx := context.Background()

	r := request()
	r.Global, r.Window = false, 200*time.Millisecond
	first := a.Reserve(ctx, r)
	assert.False(t, first.OK, "a bucket Redis holds nothing of, while it evicts: held before its pioneer")
	assert.Equal(t, "bucket", first.Scope)
	assert.Greater(t, first.Wait, 150*time.Millisecond, "for the window the caller knows")
	assert.LessOrEqual(t, first.Wait, 300*time.Millisecond)
	var p ratelimit.SharedGrant
	require.Eventually(t, func() bool {
		forgetRefusals(a)
		p = a.Reserve(ctx, r)
		return p.OK
	}, 5*time.Second, 10*time.Millisecond, "then its pioneer goes")
	require.True(t, p.Pioneer)
	a.Report(ctx, p, answer(5, 4, time.Second, "h"))
	known := r
	known.Hash, known.Window = "h", time.Second
	known.Local = ratelimit.Bucket{Known: true, Limit: 5, Remaining: 4, ResetAt: time.Now().Add(time.Second)}
	for i := range 4 {
		g := a.Reserve(ctx, known)
		require.True(t, g.OK, "the window has 4 left")
		a.Report(ctx, g, answer(5, 3-i, time.Second, "h"))
	}
	// The window is full; the bucket's record and in-flight set are
	// evicted in one batch (and the pioneer's route record).
	real := routes.BucketKey("h", r.Major)
	require.NoError(t, a.rdb.Del(ctx, a.ns+":b:"+real, a.ns+":f:"+real, a.ns+":b:"+p.Key).Err())

	unknown := request()
	unknown.Global = false
	g := b.Reserve(ctx, unknown) // b knows neither the hash nor the limit
	assert.False(t, g.OK, "nothing of the bucket is left: no pioneer into the window a filled")
	assert.Equal(t, "bucket", g.Scope)
	assert.Greater(t, g.Wait, 900*time.Millisecond, "for the route's window, as the pioneer's answer told it")
	forgetRefusals(b)
	again := b.Reserve(ctx, unknown)
	assert.False(t, again.OK)
	assert.LessOrEqual(t, again.Wait, g.Wait, "held once: not pushed on by every call")
}

// While Redis evicts, the generation marker and the global log can go
// together: a process that knew no generation (it just started) cannot
// tell a new namespace from one evicted, and holds the global window for
// a period, as a wipe.
func TestEvictingRedisHoldsTheGlobalWindowWhenTheMarkerIsGone(t *testing.T) {
	srv := redistest.Start(t)
	const period = 2 * time.Second
	cfg := Config{Namespace: Namespace(t.Name()), GlobalLimit: 5, GlobalPeriod: period, Heartbeat: time.Hour}
	a := newStore(t, srv, cfg)
	fill(t, a, 5)
	evictSome(t, srv)
	ctx := context.Background()
	require.NoError(t, a.rdb.Del(ctx, a.ns+":gen", a.ns+":g").Err(), "evicted in one batch")
	b := newStore(t, srv, cfg) // knows no generation
	require.True(t, b.mayEvict())
	g := b.Reserve(ctx, request())
	assert.False(t, g.OK, "the marker may have been evicted with the log: full for a period")
	assert.Equal(t, "global", g.Scope)
	assert.Greater(t, g.Wait, period/2)
	assert.Positive(t, b.Stats().Lost)
}

// A Redis whose policy evicts but that has not evicted is not held: a new
// bucket's pioneer goes at once.
func TestRedisThatMayEvictButDoesNotIsNotHeld(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client(t)
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory", "1gb").Err())
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	s := newStore(t, srv, Config{Heartbeat: time.Hour})
	assert.False(t, s.mayEvict())
	assert.Equal(t, "allkeys-lru", s.evictingPolicy())
	r := request()
	r.Global = false
	p := s.Reserve(ctx, r)
	assert.True(t, p.OK && p.Pioneer, "no eviction seen: a new bucket is new")
	assert.Zero(t, s.Stats().Lost)
}

// A value in P:w that is not a number (written by something else) does
// not stop the pioneer's report halfway: the bucket is learned.
func TestMalformedRouteWindowDoesNotBreakTheReport(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, Config{Heartbeat: time.Hour})
	ctx := context.Background()
	r := request()
	r.Global = false
	require.NoError(t, s.rdb.HSet(ctx, s.ns+":w", r.Template, "not a number").Err())
	p := s.Reserve(ctx, r)
	require.True(t, p.OK && p.Pioneer)
	s.Report(ctx, p, answer(5, 4, time.Second, "h"))
	assert.Zero(t, s.Stats().Errors, "the report ran to its end")
	limit, err := s.rdb.HGet(ctx, s.ns+":b:"+routes.BucketKey("h", r.Major), "l").Result()
	require.NoError(t, err)
	assert.Equal(t, "5", limit)
}

// What a heartbeat reads back of P:seen is Redis's, not trusted: an id
// too long, a score that is no time, or more than maxPeers entries are
// left out of what is written back after a loss.
func TestReadPeersBoundsWhatRedisReturns(t *testing.T) {
	flat := []any{"a1", "1795992674169", strings.Repeat("x", maxPeerID+1), "1795992674169",
		"b2", "not a time", "c3", "1.795992674170e+12", "d4", "-5", 7, "1"}
	for i := range maxPeers + 10 {
		flat = append(flat, "p"+strconv.Itoa(i), "1795992674169")
	}
	pl := readPeers("g", flat)
	require.Len(t, pl.ids, maxPeers)
	assert.Equal(t, []string{"a1", "c3"}, pl.ids[:2])
	assert.Equal(t, []int64{1795992674169, 1795992674170}, pl.last[:2])
	assert.Equal(t, "g", pl.gen)
}
