package declared

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/ratelimit"
)

type req struct{ done atomic.Bool }

func (r *req) Finished() bool { return r.done.Load() }

// One Group per (limit, group), made on first use; a request whose outcome
// came while it reserved leaves no place behind; idle groups are swept and
// left out of the snapshot.
func TestSet(t *testing.T) {
	now := time.Unix(1000, 0)
	roles := &Limit{Name: "roles", Count: 2, Window: time.Second}
	dms := &Limit{Name: "dms", Count: 1, Window: time.Minute}
	refs := []Ref{{Limit: roles, Group: "guild_id=9"}, {Limit: dms}}
	var s Set
	var a, b req
	reserve := func(id uint64, r *req) (n int) {
		s.Each(now, refs, id, r, func(g *ratelimit.Group) bool {
			g.ReserveClass(now, id, 0)
			n++
			return true
		})
		return n
	}
	require.Equal(t, 2, reserve(1, &a), "each group of the request's limits")
	assert.ElementsMatch(t, []Snapshot{
		{Limit: "roles", Group: "guild_id=9", Count: 2, Window: time.Second, Waiting: 1},
		{Limit: "dms", Count: 1, Window: time.Minute, Waiting: 1},
	}, s.Snapshot(now))

	// b's outcome came while it reserved: its places are released.
	s.Each(now, refs, 2, &b, func(g *ratelimit.Group) bool {
		g.ReserveClass(now, 2, 0)
		b.done.Store(true)
		return true
	})
	require.Len(t, s.Snapshot(now), 2)
	for _, g := range s.Snapshot(now) {
		assert.Equal(t, 1, g.Waiting, "%s: only a's place", g.Limit)
	}
	s.Each(now, refs, 9, &req{}, func(g *ratelimit.Group) bool {
		_, kept := g.Estimate(now, 1)
		_, left := g.Estimate(now, 2)
		assert.True(t, kept, "a keeps its place")
		assert.False(t, left, "b's place is released")
		return true
	})

	// Stopping early: f saw the first group only.
	n := 0
	s.Each(now, refs, 3, &req{}, func(*ratelimit.Group) bool { n++; return false })
	assert.Equal(t, 1, n)

	// a gone: the groups are idle, out of the snapshot, and swept after
	// sweepEvery operations.
	s.Each(now, refs, 1, &a, func(g *ratelimit.Group) bool { g.Release(1); return true })
	s.Each(now, refs, 3, &req{}, func(g *ratelimit.Group) bool { g.Release(3); return true })
	assert.Empty(t, s.Snapshot(now))
	for range sweepEvery {
		s.Each(now, nil, 4, &req{}, func(*ratelimit.Group) bool { return true })
	}
	assert.Empty(t, s.m, "idle groups swept")
}

// Sum merges one group counted in several places and sorts by limit and
// group.
func TestSum(t *testing.T) {
	got := Sum([]Snapshot{
		{Limit: "roles", Group: "b", Waiting: 1, Held: 1},
		{Limit: "dms", Waiting: 2},
		{Limit: "roles", Group: "a", Waiting: 1},
		{Limit: "roles", Group: "b", Waiting: 3, Held: 2},
	})
	assert.Equal(t, []Snapshot{
		{Limit: "dms", Waiting: 2},
		{Limit: "roles", Group: "a", Waiting: 1},
		{Limit: "roles", Group: "b", Waiting: 4, Held: 3},
	}, got)
}
