package redisstore

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/conformance"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// groupRig drives one declared group of a store on a fake clock: the
// group scripts run synchronously (ReleaseGroups runs its script in the
// background; release here waits for it).
type groupRig struct {
	t     *testing.T
	s     *Store
	clock *fakeClock
	g     []ratelimit.SharedGroup
}

func newGroupRig(t *testing.T, srv *redistest.Server, ns string, start time.Time, count int, window time.Duration) *groupRig {
	s, clock := newClockedStore(t, srv, Namespace(ns), start)
	return &groupRig{t: t, s: s, clock: clock, g: []ratelimit.SharedGroup{{Key: "roles|guild_id=1", Count: count, Window: window}}}
}

func (r *groupRig) reserve(id int, class int8) ratelimit.Slot {
	slots, err := r.s.ReserveGroups(context.Background(), r.clock.now(), strconv.Itoa(id), class, r.g)
	require.NoError(r.t, err)
	return slots[0]
}

func (r *groupRig) release(id int) {
	args := groupArgs([]any{r.s.groupID(strconv.Itoa(id)), len(r.g)}, r.g, false)
	require.NoError(r.t, r.s.sc.groupRelease.Run(context.Background(), r.s.rdb, []string{r.s.ns}, args...).Err())
}

// recorded reports whether request id has a record (D:r) in the group.
func (r *groupRig) recorded(id int) bool {
	has, err := r.s.rdb.HExists(context.Background(), r.s.ns+":d:"+r.g[0].Key+":r", r.s.groupID(strconv.Itoa(id))).Result()
	require.NoError(r.t, err)
	return has
}

func (r *groupRig) estimate(id int) (ratelimit.Slot, bool) {
	slots, found, err := r.s.EstimateGroups(context.Background(), r.clock.now(), strconv.Itoa(id), r.g)
	require.NoError(r.t, err)
	return slots[0], found[0]
}

// groupBlockLua runs gblock on one group: ARGV 1 the group's key, 2 its
// count, 3 its window (ms), 4 until (Unix ms).
var groupBlockLua = redis.NewScript(fakeClockLua + groupLua + `
gblock(gkey(KEYS[1], ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))
return 0
`)

// groupTakeLua takes a request's slot in one group if it may go (the
// reserve script's groups: gready, gtake): ARGV 1 the group's key, 2 its
// count, 3 its window (ms), 4 the lease ttl (ms), 5 the request's id, 6
// the lease. Returns {1, 0} if it went, or {0, how long until it may go
// (ms)}.
var groupTakeLua = redis.NewScript(fakeClockLua + groupLua + `
local D, ttl, now = gkey(KEYS[1], ARGV[1]), tonumber(ARGV[4]), clockNow()
local g, w = gready(D, tonumber(ARGV[2]), tonumber(ARGV[3]), ttl, ARGV[5], now, 0)
if w > 0 then return {0, w} end
gtake(g, ARGV[5], ARGV[6], now, ttl)
return {1, 0}
`)

// groupAnswerLua answers a taken request in one group (the report
// script's groups: ganswer): ARGV 1 the group's key, 2 its window (ms), 3
// the lease ttl (ms), 4 the request's id, 5 the lease, 6 counted (0/1), 7
// the round trip (ms).
var groupAnswerLua = redis.NewScript(fakeClockLua + groupLua + `
ganswer(gkey(KEYS[1], ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5], clockNow(), ARGV[6] == '1', tonumber(ARGV[7]))
return 0
`)

// take takes request id's slot if it may go, and reports whether it
// went, or how long until it may.
func (r *groupRig) take(id int) (bool, time.Duration) {
	g := r.g[0]
	res, err := groupTakeLua.Run(context.Background(), r.s.rdb, []string{r.s.ns},
		g.Key, g.Count, ms(g.Window), ms(r.s.cfg.LeaseTTL), r.s.groupID(strconv.Itoa(id)), "lease-"+strconv.Itoa(id)).Int64Slice()
	require.NoError(r.t, err)
	return res[0] == 1, time.Duration(res[1]) * time.Millisecond
}

// answer answers request id, taken: counted (sent, its round trip rtt)
// or not (never sent).
func (r *groupRig) answer(id int, counted bool, rtt time.Duration) {
	g := r.g[0]
	require.NoError(r.t, groupAnswerLua.Run(context.Background(), r.s.rdb, []string{r.s.ns},
		g.Key, ms(g.Window), ms(r.s.cfg.LeaseTTL), r.s.groupID(strconv.Itoa(id)), "lease-"+strconv.Itoa(id), b2i(counted), ms(rtt)).Err())
}

func (r *groupRig) block(until time.Time) {
	g := r.g[0]
	require.NoError(r.t, groupBlockLua.Run(context.Background(), r.s.rdb, []string{r.s.ns},
		g.Key, g.Count, ms(g.Window), until.UnixMilli()).Err())
}

// TestGroupsRedis runs the group table (internal/conformance.Groups) on
// the shared store's group scripts, against a real redis-server.
func TestGroupsRedis(t *testing.T) {
	srv := redistest.Start(t)
	start := time.Unix(1_700_000_000, 0)
	for i, c := range conformance.Groups {
		t.Run(c.Name, func(t *testing.T) {
			r := newGroupRig(t, srv, "groups-"+strconv.Itoa(i), start, c.Count, conformance.GroupWindow)
			now := start
			taken := map[int]time.Time{}
			for j, s := range c.Steps {
				switch s.Op {
				case conformance.Reserve:
					r.reserve(s.ID, s.Class)
				case conformance.Release:
					r.release(s.ID)
				case conformance.Take:
					ok, wait := r.take(s.ID)
					require.Equal(t, s.OK, ok, "step %d: take %d", j, s.ID)
					require.Equal(t, s.Wait, wait, "step %d: take %d's wait", j, s.ID)
					taken[s.ID] = now
				case conformance.Cancel:
					r.answer(s.ID, false, 0)
				case conformance.Settle:
					r.answer(s.ID, true, now.Sub(taken[s.ID]))
				case conformance.Block:
					r.block(start.Add(s.At))
				case conformance.Move:
					now = start.Add(s.At)
					r.clock.set(now)
				}
			}
			for _, id := range c.IDs() {
				s, ok := r.estimate(id)
				require.True(t, ok, "request %d", id)
				assert.Equal(t, c.Want[id], conformance.PlaceAt(s.Start.Sub(start), s.Position), "request %d", id)
				assert.Equal(t, conformance.GroupWindow, s.End.Sub(s.Start), "request %d", id)
			}
			for _, id := range c.Gone() {
				_, ok := r.estimate(id)
				assert.False(t, ok, "request %d has no reservation", id)
			}
			states, err := r.s.GroupStates(context.Background(), r.g)
			require.NoError(t, err)
			assert.Equal(t, c.Waiting(), states[0].Waiting, "waiting requests")
		})
	}
}

// The Lua scripts and ratelimit.Group, side by side on random loads of
// reservations of random classes, releases, takes (which must go in both
// or in neither, or wait as long), cancels, answers after a round trip of
// up to two windows, blocks (some ending no later than the last, some
// now) and the clock moving on by up to two windows, in ms (windows end, and their requests,
// missed, are placed again when next asked about, ahead of the others
// meanwhile): every request with a reservation has the same window and
// position in both, and as many wait.
func TestGroupClassesRedisMatchesGroup(t *testing.T) {
	srv := redistest.Start(t)
	start := time.Unix(1_700_000_000, 0)
	const window = time.Second
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 39))
		n := 1 + rng.IntN(3)
		r := newGroupRig(t, srv, "classes-"+strconv.FormatUint(seed, 10), start, n, window)
		g := ratelimit.NewGroup(n, window)
		var live []int               // waiting
		taken := map[int]time.Time{} // on their way, since
		now := start
		for step, id := 0, 1; step < 80; step++ {
			switch k := rng.IntN(13); {
			case k == 3:
				// Any number of ms (round trips and window starts are not
				// whole windows), within a take's lease: past it, Redis
				// drops a take never answered, which Go keeps.
				now = now.Add(time.Duration(1+rng.IntN(2000)) * time.Millisecond)
				require.Less(t, now.Sub(start), r.s.cfg.LeaseTTL, "seed %d: the clock stays within a take's lease", seed)
				r.clock.set(now)
			case k < 2 && len(live) > 0:
				i := rng.IntN(len(live))
				g.Release(uint64(live[i]))
				r.release(live[i])
				live = append(live[:i], live[i+1:]...)
			case k == 2:
				until := now.Add(time.Duration(rng.IntN(4)) * window)
				g.Block(until)
				r.block(until)
			case k == 10 && len(live) > 0:
				i := rng.IntN(len(live))
				ok, wait := g.Take(now, uint64(live[i]))
				rok, rwait := r.take(live[i])
				require.Equal(t, ok, rok, "seed %d, step %d: take %d", seed, step, live[i])
				require.Equal(t, wait, rwait, "seed %d, step %d: take %d's wait", seed, step, live[i])
				if ok {
					taken[live[i]] = now
					live = append(live[:i], live[i+1:]...)
				}
			case k >= 11 && len(taken) > 0:
				x := slices.Sorted(maps.Keys(taken))[rng.IntN(len(taken))]
				if k == 11 {
					g.Cancel(now, uint64(x))
					r.answer(x, false, 0)
					live = append(live, x)
				} else {
					g.Settle(now, taken[x], uint64(x))
					r.answer(x, true, now.Sub(taken[x]))
				}
				delete(taken, x)
			default:
				class := int8(rng.IntN(3)) - 1
				if rng.IntN(2) == 0 {
					class = -1
				}
				g.ReserveClass(now, uint64(id), class)
				r.reserve(id, class)
				live = append(live, id)
				id++
			}
			if step%4 != 3 {
				continue
			}
			states, err := r.s.GroupStates(context.Background(), r.g)
			require.NoError(t, err)
			require.Equal(t, g.Waiting(), states[0].Waiting, "seed %d, step %d: waiting", seed, step)
			for _, x := range append(slices.Sorted(maps.Keys(taken)), live...) {
				want, ok := g.Estimate(now, uint64(x))
				require.True(t, ok)
				got, found := r.estimate(x)
				require.True(t, found, "seed %d: request %d", seed, x)
				require.Equal(t, want.Start.Sub(start), got.Start.Sub(start), "seed %d, step %d: request %d's window", seed, step, x)
				require.Equal(t, want.Position, got.Position, "seed %d, step %d: request %d's position", seed, step, x)
			}
		}
	}
}

// groupFillLua reserves ARGV[4] requests of class ARGV[5] (ids ARGV[6]
// .. "1", "2"...) in a group (ARGV 1 its key, 2 count, 3 window ms), in
// one script: a benchmark's backlog.
var groupFillLua = redis.NewScript(fakeClockLua + groupLua + `
local D, n, per = gkey(KEYS[1], ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now, c = clockNow(), tonumber(ARGV[5])
for i = 1, tonumber(ARGV[4]) do greserve(D, n, per, 60000, ARGV[6] .. i, now, c) end
return 0
`)

// BenchmarkGroupPass measures one reservation (or estimate) in a group
// whose chain holds a backlog, on a real redis-server over a unix socket:
// one round trip each, the backlog made afresh before each.
//
//   - interactive-over-bulk: 5 per window, 500 bulk requests (100
//     windows): the interaction passes in the first window, and the
//     cascade moves one request back in each of the 100 windows;
//   - normal-over-normal: the same chain of normal requests: no class to
//     pass, it goes at the end, as without priorities;
//   - interactive-over-interactive: 100 per window, 10,000 interactions
//     (100 windows): no lower class waits;
//   - interactive-over-interactive-then-bulk: the same, and one bulk
//     request in a window of its own at the end, which the newcomer passes;
//   - estimate-in-a-large-window: 10,000 per window, 10,000 normal
//     requests in one window: the last one's place (its position counts
//     the 9,999 ahead);
//   - interaction-behind-300-windows: 1,000 per window, 300,000
//     interactions (300 windows) and one bulk request: an interaction
//     (then released, so the backlog, made once, stays as it was).
func BenchmarkGroupPass(b *testing.B) {
	srv := redistest.Start(b)
	start := time.Unix(1_700_000_000, 0)
	s, clock := newClockedStore(b, srv, Namespace("bench-pass"), start)
	ctx := context.Background()
	type fill struct {
		n     int
		class int8
	}
	i := 0 // a fresh group each time, across runs
	run := func(b *testing.B, count int, fills []fill, class int8, estimate bool) {
		for b.Loop() {
			b.StopTimer()
			i++
			g := []ratelimit.SharedGroup{{Key: "g" + strconv.Itoa(i), Count: count, Window: time.Minute}}
			last := ""
			for j, f := range fills {
				prefix := "f" + strconv.Itoa(j) + "-"
				require.NoError(b, groupFillLua.Run(ctx, s.rdb, []string{s.ns}, g[0].Key, count, 60000, f.n, f.class, s.groupID(prefix)).Err())
				last = prefix + strconv.Itoa(f.n)
			}
			b.StartTimer()
			if estimate {
				if _, found, err := s.EstimateGroups(ctx, clock.now(), last, g); err != nil || !found[0] {
					b.Fatal(err, found)
				}
			} else if _, err := s.ReserveGroups(ctx, clock.now(), "x", class, g); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("interactive-over-bulk", func(b *testing.B) { run(b, 5, []fill{{500, -1}}, 1, false) })
	b.Run("normal-over-normal", func(b *testing.B) { run(b, 5, []fill{{500, 0}}, 0, false) })
	b.Run("interactive-over-interactive", func(b *testing.B) { run(b, 100, []fill{{10_000, 1}}, 1, false) })
	b.Run("interactive-over-interactive-then-bulk", func(b *testing.B) { run(b, 100, []fill{{10_000, 1}, {1, -1}}, 1, false) })
	b.Run("estimate-in-a-large-window", func(b *testing.B) { run(b, 10_000, []fill{{10_000, 0}}, 0, true) })
	b.Run("interaction-behind-300-windows", func(b *testing.B) {
		g := []ratelimit.SharedGroup{{Key: "large", Count: 1000, Window: time.Minute}}
		for j := range 30 {
			require.NoError(b, groupFillLua.Run(ctx, s.rdb, []string{s.ns}, g[0].Key, 1000, 60000, 10_000, 1, s.groupID("i"+strconv.Itoa(j)+"-")).Err())
		}
		require.NoError(b, groupFillLua.Run(ctx, s.rdb, []string{s.ns}, g[0].Key, 1000, 60000, 1, -1, s.groupID("b-")).Err())
		b.ResetTimer()
		for b.Loop() {
			i++
			id := "x" + strconv.Itoa(i)
			if _, err := s.ReserveGroups(ctx, clock.now(), id, 1, g); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			args := groupArgs([]any{s.groupID(id), len(g)}, g, false)
			require.NoError(b, s.sc.groupRelease.Run(ctx, s.rdb, []string{s.ns}, args...).Err())
			b.StartTimer()
		}
	})
}

// A bulk reservation whose record is gone but for its member of D:b
// (evicted keys) is never passed, so never moved: moving it would bring an
// ended reservation back.
func TestGroupPassNeverRevivesAnEndedReservation(t *testing.T) {
	srv := redistest.Start(t)
	r := newGroupRig(t, srv, "revive", time.Unix(1_700_000_000, 0), 1, time.Second)
	r.reserve(1, -1)
	r.reserve(2, -1)
	ctx := context.Background()
	D := r.s.ns + ":d:" + r.g[0].Key
	id := r.s.groupID("1")
	rec, err := r.s.rdb.HGet(ctx, D+":r", id).Result()
	require.NoError(t, err)
	seq, err := strconv.ParseUint(strings.Split(rec, "|")[1], 10, 64)
	require.NoError(t, err)
	require.NoError(t, r.s.rdb.HDel(ctx, D+":r", id).Err())
	member := fmt.Sprintf("%012x|%s", seq, id)
	require.NoError(t, r.s.rdb.ZScore(ctx, D+":b", member).Err(), "its member is still in D:b")

	s := r.reserve(3, 1)
	assert.Equal(t, time.Second, s.Start.Sub(r.clock.now()), "the interaction passes 2 in the second window, not the gone 1 in the first")
	_, found := r.estimate(1)
	assert.False(t, found, "1 stays ended")
	n, err := r.s.rdb.ZCard(ctx, D+":b").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the stale member was dropped from D:b; 2 is there")
}

// A bulk request moved back seven times keeps its window when the record
// of where such requests are (D:s's a-1) is lost: its record says how
// often it moved, and a pass that meets it moves it no more (the class
// rules never relax with lost state; the newcomer goes later instead).
func TestGroupAgedKeepsItsWindowWhenTheFloorIsLost(t *testing.T) {
	srv := redistest.Start(t)
	r := newGroupRig(t, srv, "aged-lost", time.Unix(1_700_000_000, 0), 1, time.Second)
	r.reserve(1, -1)
	for id := 2; id <= 8; id++ {
		r.reserve(id, 1)
	}
	s, _ := r.estimate(1)
	require.Equal(t, 7*time.Second, s.Start.Sub(r.clock.now()), "moved back seven windows")
	ctx := context.Background()
	D := r.s.ns + ":d:" + r.g[0].Key
	require.NoError(t, r.s.rdb.HDel(ctx, D+":s", "a-1").Err())

	s = r.reserve(9, 1)
	assert.Equal(t, 8*time.Second, s.Start.Sub(r.clock.now()), "the interaction goes behind it")
	s, _ = r.estimate(1)
	assert.Equal(t, 7*time.Second, s.Start.Sub(r.clock.now()), "1 keeps its window")
}

// A release in a group whose windows were all full makes the set of
// windows with room (D:o) again: it expires with the group's other keys
// (a key left without a TTL stays in Redis for good).
func TestGroupReleaseKeepsTheTTL(t *testing.T) {
	srv := redistest.Start(t)
	r := newGroupRig(t, srv, "release-ttl", time.Unix(1_700_000_000, 0), 2, time.Second)
	r.reserve(1, 0)
	r.reserve(2, 0)
	ctx := context.Background()
	D := r.s.ns + ":d:" + r.g[0].Key
	n, err := r.s.rdb.Exists(ctx, D+":o").Result()
	require.NoError(t, err)
	require.Zero(t, n, "the one window is full: no window has room")
	r.release(1)
	ttl, err := r.s.rdb.PTTL(ctx, D+":o").Result()
	require.NoError(t, err)
	assert.Positive(t, ttl, "D:o expires")
	s := r.reserve(3, 0)
	assert.Equal(t, time.Duration(0), s.Start.Sub(r.clock.now()), "the released place goes to the next")
}

// A window whose count is lost (D:c evicted) is taken as full, never as
// free: a release there decrements nothing (it would make the count again,
// below the truth and without a TTL), and the next requests go to a new
// window rather than over the lost one's count.
func TestGroupLostCountIsFull(t *testing.T) {
	srv := redistest.Start(t)
	r := newGroupRig(t, srv, "lost-count", time.Unix(1_700_000_000, 0), 2, time.Second)
	r.reserve(1, 0)
	r.reserve(2, 0)
	ctx := context.Background()
	D := r.s.ns + ":d:" + r.g[0].Key
	require.NoError(t, r.s.rdb.Del(ctx, D+":c").Err())
	r.release(1)
	n, err := r.s.rdb.Exists(ctx, D+":c").Result()
	require.NoError(t, err)
	if n > 0 {
		ttl, err := r.s.rdb.PTTL(ctx, D+":c").Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, "a count made again expires")
	}
	for id := 3; id <= 5; id++ {
		s := r.reserve(id, 0)
		assert.Positive(t, s.Start.Sub(r.clock.now()), "request %d goes to a later window than the one whose count is lost", id)
	}
}

// A reservation record that cannot be read (damaged) is forgotten, not a
// script error that sends the store to its fallback: the request reserves
// again, and a release drops the record.
func TestGroupDamagedRecordIsForgotten(t *testing.T) {
	srv := redistest.Start(t)
	r := newGroupRig(t, srv, "damaged", time.Unix(1_700_000_000, 0), 2, time.Second)
	r.reserve(1, 0)
	ctx := context.Background()
	D := r.s.ns + ":d:" + r.g[0].Key
	id := r.s.groupID("1")
	require.NoError(t, r.s.rdb.HSet(ctx, D+":r", id, "garbage").Err())
	r.reserve(1, 0) // no error: reserved again
	assert.Equal(t, Shared, r.s.Mode(), "the store stays on Redis")
	require.NoError(t, r.s.rdb.HSet(ctx, D+":r", id, "garbage").Err())
	r.release(1)
	assert.False(t, r.recorded(1), "the damaged record is dropped")
}

// A take whose process never answers (it crashed) leaves its record in
// the group only while its lease lives: the next script after that drops
// it, so a busy group does not keep every crashed request's record. A
// take answered in time leaves nothing behind.
func TestGroupUnansweredTakeIsForgotten(t *testing.T) {
	srv := redistest.Start(t)
	start := time.Unix(1_700_000_000, 0)
	r := newGroupRig(t, srv, "unanswered", start, 2, time.Second)
	ctx := context.Background()
	D := r.s.ns + ":d:" + r.g[0].Key
	r.reserve(1, 0)
	r.reserve(2, 0)
	ok, _ := r.take(1) // its process crashes: no answer
	require.True(t, ok)
	ok, _ = r.take(2)
	require.True(t, ok)
	r.answer(2, true, 10*time.Millisecond)
	taken, err := r.s.rdb.ZRange(ctx, D+":t", 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{r.s.groupID("1")}, taken, "only the unanswered take is tracked")
	ttl, err := r.s.rdb.PTTL(ctx, D+":t").Result()
	require.NoError(t, err)
	require.Positive(t, ttl, "D:t expires with the group's keys")

	r.clock.set(start.Add(r.s.cfg.LeaseTTL - time.Millisecond))
	r.reserve(3, 0)
	require.True(t, r.recorded(1), "kept while its lease lives")

	r.clock.set(start.Add(r.s.cfg.LeaseTTL))
	r.reserve(4, 0)
	ids, err := r.s.rdb.HKeys(ctx, D+":r").Result()
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{r.s.groupID("3"), r.s.groupID("4")}, ids, "the crashed take's record is dropped")
	n, err := r.s.rdb.ZCard(ctx, D+":t").Result()
	require.NoError(t, err)
	assert.Zero(t, n)
}

// An estimate tells a reservation and makes none: a take whose lease
// ended unanswered is forgotten before the estimate looks (it used to
// find the record, then reserve the request afresh, as normal, with a
// new place).
func TestGroupEstimateAfterAnUnansweredTakeReservesNothing(t *testing.T) {
	srv := redistest.Start(t)
	start := time.Unix(1_700_000_000, 0)
	r := newGroupRig(t, srv, "estimate-unanswered", start, 2, time.Second)
	r.reserve(1, -1)
	ok, _ := r.take(1)
	require.True(t, ok)
	r.clock.set(start.Add(r.s.cfg.LeaseTTL))
	_, found := r.estimate(1)
	assert.False(t, found, "its process is gone: no reservation")
	assert.False(t, r.recorded(1), "the estimate reserved nothing")
}

// A request taken, then taken again by a new attempt (its old record
// dropped, a waiting one made), keeps that waiting record when the first
// take's lease ends: only a record still taken then is dropped.
func TestGroupRetakenRequestOutlivesTheOldLease(t *testing.T) {
	srv := redistest.Start(t)
	start := time.Unix(1_700_000_000, 0)
	r := newGroupRig(t, srv, "retaken", start, 1, time.Second)
	r.reserve(1, 0)
	ok, _ := r.take(1) // the first attempt, never answered
	require.True(t, ok)
	r.clock.set(start.Add(10 * time.Millisecond))
	ok, _ = r.take(1) // a second attempt: reserved again, it waits
	require.False(t, ok)
	r.clock.set(start.Add(r.s.cfg.LeaseTTL))
	r.reserve(2, 0)
	assert.True(t, r.recorded(1), "the second attempt's reservation stays")
}
