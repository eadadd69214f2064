package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
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
			for _, s := range c.Steps {
				if s.Release {
					r.release(s.ID)
				} else {
					r.reserve(s.ID, s.Class)
				}
			}
			for id, want := range c.Want {
				s, ok := r.estimate(id)
				require.True(t, ok, "request %d", id)
				assert.Equal(t, want, conformance.GroupPlace{Window: int(s.Start.Sub(start) / conformance.GroupWindow), Position: s.Position}, "request %d", id)
				assert.Equal(t, time.Duration(want.Window)*conformance.GroupWindow, s.Start.Sub(start), "request %d", id)
			}
		})
	}
}

// The Lua scripts and ratelimit.Group, side by side on random loads of
// reservations of random classes, releases and blocks, at one instant:
// every waiting request has the same window and position in both.
func TestGroupClassesRedisMatchesGroup(t *testing.T) {
	srv := redistest.Start(t)
	start := time.Unix(1_700_000_000, 0)
	const window = time.Second
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 39))
		n := 1 + rng.IntN(3)
		r := newGroupRig(t, srv, "classes-"+strconv.FormatUint(seed, 10), start, n, window)
		g := ratelimit.NewGroup(n, window)
		var live []int
		blocked := start
		for step, id := 0, 1; step < 80; step++ {
			switch k := rng.IntN(10); {
			case k < 2 && len(live) > 0:
				i := rng.IntN(len(live))
				g.Release(uint64(live[i]))
				r.release(live[i])
				live = append(live[:i], live[i+1:]...)
			case k == 2:
				blocked = blocked.Add(time.Duration(1+rng.IntN(3)) * window)
				g.Block(blocked)
				r.block(blocked)
			default:
				class := int8(rng.IntN(3)) - 1
				if rng.IntN(2) == 0 {
					class = -1
				}
				g.ReserveClass(start, uint64(id), class)
				r.reserve(id, class)
				live = append(live, id)
				id++
			}
			if step%4 != 3 {
				continue
			}
			for _, x := range live {
				want, ok := g.Estimate(start, uint64(x))
				require.True(t, ok)
				got, found := r.estimate(x)
				require.True(t, found, "seed %d: request %d", seed, x)
				require.Equal(t, want.Start.Sub(start), got.Start.Sub(start), "seed %d, step %d: request %d's window", seed, step, x)
				require.Equal(t, want.Position, got.Position, "seed %d, step %d: request %d's position", seed, step, x)
			}
		}
	}
}

// groupFillLua reserves ARGV[4] requests of class ARGV[5] ("f1", "f2"...)
// in a group (ARGV 1 its key, 2 count, 3 window ms), in one script: a
// benchmark's backlog.
var groupFillLua = redis.NewScript(fakeClockLua + groupLua + `
local D, n, per = gkey(KEYS[1], ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = clockNow()
for i = 1, tonumber(ARGV[4]) do greserve(D, n, per, 60000, 'f' .. i, now, tonumber(ARGV[5])) end
return 0
`)

// BenchmarkGroupPass measures a reservation in a group of 5 per window
// whose chain holds 500 waiting requests (100 windows): an interactive
// one over bulk work passes it in the first window, and the cascade moves
// one request back in each of the 100 windows; a normal one over normal
// work (no class to pass) goes at the end, as without priorities. One
// round trip each, on a real redis-server over a unix socket.
func BenchmarkGroupPass(b *testing.B) {
	srv := redistest.Start(b)
	start := time.Unix(1_700_000_000, 0)
	s, clock := newClockedStore(b, srv, Namespace("bench-pass"), start)
	ctx := context.Background()
	i := 0 // a fresh group each time, across runs
	run := func(b *testing.B, backlog, class int8) {
		for b.Loop() {
			b.StopTimer()
			i++
			g := []ratelimit.SharedGroup{{Key: "g" + strconv.Itoa(i), Count: 5, Window: time.Minute}}
			require.NoError(b, groupFillLua.Run(ctx, s.rdb, []string{s.ns}, g[0].Key, 5, 60000, 500, backlog).Err())
			b.StartTimer()
			if _, err := s.ReserveGroups(ctx, clock.now(), "x", class, g); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("interactive-over-bulk", func(b *testing.B) { run(b, -1, 1) })
	b.Run("normal-over-normal", func(b *testing.B) { run(b, 0, 0) })
}

// A bulk reservation whose records are gone but for D:b (evicted keys, or
// ended by a process that does not keep D:b) is never passed, so never
// moved: moving it would bring an ended reservation back.
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
	require.NoError(t, r.s.rdb.ZRem(ctx, D+":q", fmt.Sprintf("%012x|%s", seq, id)).Err())
	require.NoError(t, r.s.rdb.HDel(ctx, D+":r", id).Err())

	s := r.reserve(3, 1)
	assert.Equal(t, time.Second, s.Start.Sub(r.clock.now()), "the interaction passes 2 in the second window, not the gone 1 in the first")
	_, found := r.estimate(1)
	assert.False(t, found, "1 stays ended")
	n, err := r.s.rdb.ZCard(ctx, D+":b").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the stale member was dropped from D:b; 2 is there")
}
