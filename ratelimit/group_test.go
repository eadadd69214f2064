package ratelimit

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The schedule is the job queue's estimate made exact: n requests per
// window, the next window one window plus the round trip later, each
// request's position its place in line.
func TestGroupSchedulesWindowsInOrder(t *testing.T) {
	g := NewGroup(3, time.Second)
	for id := uint64(1); id <= 7; id++ {
		s := g.Reserve(at(0), id)
		assert.Equal(t, int(id-1), s.Position, "id %d", id)
		want := at(0).Add(time.Duration((id-1)/3) * time.Second)
		assert.Equal(t, want, s.Start, "id %d", id)
		assert.Equal(t, want.Add(time.Second), s.End)
	}
	// The first three go at once; the fourth waits for its window.
	for id := uint64(1); id <= 3; id++ {
		ok, _ := g.Take(at(0), id)
		require.True(t, ok)
	}
	ok, wait := g.Take(at(0), 4)
	assert.False(t, ok)
	assert.Equal(t, time.Second, wait)
	// Answered after 100 ms: the guard holds each slot until 1.1 s, and
	// windows reserved from now on are spaced by the round trip too.
	for id := uint64(1); id <= 3; id++ {
		g.Settle(at(100), at(0), id)
	}
	ok, wait = g.Take(at(1000), 4)
	assert.False(t, ok, "the guard still holds the first window's slots")
	assert.Equal(t, 100*time.Millisecond, wait)
	ok, _ = g.Take(at(1100), 4)
	assert.True(t, ok)
	s := g.Reserve(at(1100), 8)
	assert.Equal(t, at(2000), s.Start, "8th: the third window has room")
	assert.Equal(t, 3, s.Position, "5, 6 and 7 are ahead of it")
	g.Reserve(at(1100), 9)
	s = g.Reserve(at(1100), 10)
	assert.Equal(t, at(3100), s.Start, "a new window is spaced by the round trip")
}

// A request its own bucket held past its window reserves again, ahead of
// those that joined after it.
func TestGroupMissedWindowKeepsItsPlace(t *testing.T) {
	g := NewGroup(2, time.Second)
	g.Reserve(at(0), 1)
	g.Reserve(at(0), 2)
	g.Reserve(at(0), 3) // second window
	ok, _ := g.Take(at(0), 2)
	require.True(t, ok)
	g.Settle(at(0), at(0), 2)
	// 1 is held elsewhere until its window is over.
	s, ok := g.Estimate(at(1500), 1)
	require.True(t, ok)
	assert.Equal(t, at(1000), s.Start, "it moved to the second window, which has room")
	assert.Equal(t, 0, s.Position, "still first in line")
	ok, wait := g.Take(at(1500), 1)
	assert.True(t, ok, "the guard freed 2's slot at 1 s: wait %v", wait)
}

// A released reservation's slot goes to the next request that reserves.
func TestGroupReleaseGivesTheSlotToTheNext(t *testing.T) {
	g := NewGroup(1, time.Second)
	g.Reserve(at(0), 1)
	assert.Equal(t, at(1000), g.Reserve(at(0), 2).Start)
	g.Release(1)
	assert.Equal(t, at(0), g.Reserve(at(0), 3).Start, "1's slot")
	s, _ := g.Estimate(at(0), 2)
	assert.Equal(t, 1, s.Position, "3 is scheduled ahead of 2 now")
	g.Release(99) // unknown: nothing happens
	assert.Equal(t, 2, g.Waiting())
}

// A 429 the group still met blocks it and reschedules the waiting requests
// in their order from the end of the block.
func TestGroupBlockReschedulesInOrder(t *testing.T) {
	g := NewGroup(2, time.Second)
	for id := uint64(1); id <= 3; id++ {
		g.Reserve(at(0), id)
	}
	g.Block(at(5000))
	for id := uint64(1); id <= 3; id++ {
		s, ok := g.Estimate(at(10), id)
		require.True(t, ok)
		assert.Equal(t, int(id-1), s.Position)
		if id <= 2 {
			assert.Equal(t, at(5000), s.Start)
		} else {
			assert.Equal(t, at(6000), s.Start)
		}
	}
	ok, wait := g.Take(at(10), 1)
	assert.False(t, ok)
	assert.Equal(t, 4990*time.Millisecond, wait)
	ok, _ = g.Take(at(5000), 1)
	assert.True(t, ok)
	g.Cancel(at(5000), 1)
	g.Release(1)
	g.Release(2)
	g.Release(3)
	assert.False(t, g.Idle(at(4999)), "blocked")
	assert.True(t, g.Idle(at(5000)))
}

func TestNewGroupPanics(t *testing.T) {
	assert.Panics(t, func() { NewGroup(0, time.Second) })
	assert.Panics(t, func() { NewGroup(1, 0) })
	assert.Panics(t, func() { NewGroup(1, MaxWait+1) })
	n, w := NewGroup(4, time.Minute).Limit()
	assert.Equal(t, 4, n)
	assert.Equal(t, time.Minute, w)
}

// The model: random joins, sends (at random later times: buckets and the
// global limit hold requests too), answers, cancellations and releases.
// Whatever happens, no interval of one window, as the server may count
// (anywhere between send and answer), holds more than n sends; every
// window of the schedule holds at most n; and a request that goes when it
// first may goes inside its predicted window.
func TestGroupInvariant(t *testing.T) {
	for seed := range uint64(20) {
		testGroupInvariant(t, seed)
	}
}

func testGroupInvariant(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	n := 1 + rng.IntN(6)
	per := time.Duration(100+rng.IntN(900)) * time.Millisecond
	g := NewGroup(n, per)
	var spans []span
	type flight struct {
		id           uint64
		sent, answer time.Time
	}
	var flying []flight
	waiting := map[uint64]time.Time{} // id -> when it may try (its bucket's hold)
	var ids []uint64                  // waiting
	drop := func(id uint64) {
		delete(waiting, id)
		ids = slices.DeleteFunc(ids, func(x uint64) bool { return x == id })
	}
	now, next := t0, uint64(1)
	inWindow, prompt := 0, 0
	for range 5000 {
		now = now.Add(time.Duration(rng.Int64N(int64(per / 5))))
		// Answers due.
		keep := flying[:0]
		for _, f := range flying {
			if !f.answer.After(now) {
				g.Settle(f.answer, f.sent, f.id)
				spans = append(spans, span{f.sent, f.answer.Add(per)})
			} else {
				keep = append(keep, f)
			}
		}
		flying = keep
		switch r := rng.IntN(10); {
		case r < 4 && len(ids) < 4*n:
			id := next
			next++
			g.Reserve(now, id)
			hold := time.Duration(0)
			if rng.IntN(4) == 0 {
				hold = time.Duration(rng.Int64N(int64(2 * per)))
			}
			waiting[id] = now.Add(hold)
			ids = append(ids, id)
		case r < 9:
			for _, id := range slices.Clone(ids) {
				from := waiting[id]
				if now.Before(from) {
					continue
				}
				s, _ := g.Estimate(now, id)
				ok, _ := g.Take(now, id)
				if !ok {
					continue
				}
				drop(id)
				if from.Before(s.Start) || from.Equal(s.Start) {
					prompt++
					if !now.Before(s.Start) && now.Before(s.End) {
						inWindow++
					}
				}
				if rng.IntN(8) == 0 {
					g.Cancel(now, id) // not sent: it keeps its reservation, and gives up
					g.Release(id)
					continue
				}
				rtt := time.Duration(rng.Int64N(int64(per / 2)))
				flying = append(flying, flight{id, now, now.Add(rtt)})
			}
		default:
			if len(ids) > 0 {
				id := ids[rng.IntN(len(ids))]
				g.Release(id)
				drop(id)
			}
		}
		g.mu.Lock()
		for _, w := range g.wins {
			require.LessOrEqual(t, w.n, n, "seed %d: a window holds more than n", seed)
		}
		g.drop(now)
		checkGroupIndex(t, g, fmt.Sprintf("seed %d", seed))
		g.mu.Unlock()
	}
	for _, f := range flying {
		spans = append(spans, span{f.sent, now.Add(time.Hour)})
	}
	depth, at := deepest(spans)
	require.LessOrEqual(t, depth, n, "seed %d: over the limit at %v", seed, at.Sub(t0))
	require.Positive(t, prompt)
	assert.GreaterOrEqual(t, float64(inWindow)/float64(prompt), 0.95,
		"seed %d: %d of %d requests free to go went in their predicted window", seed, inWindow, prompt)
}

// A request taken and then not sent (its global slot or its connection
// was not there) gives the guard's slot back and keeps its place; one that
// ended while on the wire keeps its slot until its answer.
func TestGroupCancelKeepsThePlace(t *testing.T) {
	g := NewGroup(1, time.Second)
	g.Reserve(at(0), 1)
	g.Reserve(at(0), 2)
	ok, _ := g.Take(at(0), 1)
	require.True(t, ok)
	ok, _ = g.Take(at(0), 1)
	assert.True(t, ok, "taking twice is one take")
	assert.Equal(t, 1, g.Waiting(), "a taken request no longer waits")
	s, _ := g.Estimate(at(0), 2)
	assert.Equal(t, 0, s.Position, "a taken request is not in line")
	g.Cancel(at(0), 1)
	s, ok = g.Estimate(at(0), 1)
	require.True(t, ok)
	assert.Equal(t, Slot{Start: at(0), End: at(1000), Position: 0}, s)
	s, _ = g.Estimate(at(0), 2)
	assert.Equal(t, 1, s.Position, "back in line, ahead of 2")
	g.mu.Lock()
	checkGroupIndex(t, g, "after Cancel")
	g.mu.Unlock()
	ok, _ = g.Ready(at(0), 1)
	assert.True(t, ok, "the guard's slot is free again")

	ok, _ = g.Take(at(0), 1)
	require.True(t, ok)
	g.Release(1) // the caller gave up while it was on the wire
	ok, wait := g.Ready(at(1000), 2)
	assert.False(t, ok, "its slot is held until its answer")
	assert.Equal(t, time.Second, wait)
	g.Settle(at(1200), at(0), 1)
	ok, wait = g.Ready(at(1200), 2)
	assert.False(t, ok)
	assert.Equal(t, time.Second, wait, "held one window from the answer")
	assert.False(t, g.Idle(at(2199)))
	g.Release(2)
	assert.True(t, g.Idle(at(2200)))
}

// A request of a higher class takes the place of the last waiting request
// of a lower class in the earliest full window; that one moves back one
// window, pushing the last of its class there back in turn: each class
// stays in order, and the window counts hold.
func TestGroupClassesPass(t *testing.T) {
	g := NewGroup(2, time.Second)
	for id := uint64(1); id <= 6; id++ {
		g.ReserveClass(at(0), id, -1) // bulk: windows 0, 0, 1, 1, 2, 2
	}
	s := g.ReserveClass(at(0), 7, 1)
	assert.Equal(t, at(0), s.Start, "the interaction goes in the first window")
	assert.Equal(t, 0, s.Position, "first in line")
	want := []time.Time{at(0), at(1000), at(1000), at(2000), at(2000), at(3000)}
	for id := uint64(1); id <= 6; id++ {
		s, ok := g.Estimate(at(0), id)
		require.True(t, ok)
		assert.Equal(t, want[id-1], s.Start, "bulk %d", id)
		assert.Equal(t, int(id), s.Position, "bulk %d", id)
	}
	// A normal request passes bulk too, but not the interaction.
	s = g.ReserveClass(at(0), 8, 0)
	assert.Equal(t, at(0), s.Start)
	assert.Equal(t, 1, s.Position, "behind the interaction")
	s, _ = g.Estimate(at(0), 1)
	assert.Equal(t, at(1000), s.Start, "bulk 1 moved back")
	// Bulk passes no one.
	s = g.ReserveClass(at(0), 9, -1)
	assert.Equal(t, at(4000), s.Start)
	assert.Equal(t, 8, s.Position)
}

// A request moved back MaxGroupMoves times keeps its window: nothing that
// reserves after it passes it.
func TestGroupClassesMoveAtMostMaxGroupMoves(t *testing.T) {
	g := NewGroup(1, time.Second)
	g.ReserveClass(at(0), 1, -1)
	for id := uint64(2); id <= 20; id++ {
		g.ReserveClass(at(0), id, 1)
	}
	s, _ := g.Estimate(at(0), 1)
	assert.Equal(t, at(MaxGroupMoves*1000), s.Start, "moved back %d windows, then kept", MaxGroupMoves)
	assert.Equal(t, MaxGroupMoves, s.Position)
	s, _ = g.Estimate(at(0), 20)
	assert.Equal(t, at(19000), s.Start, "the interactions after the seventh go behind it")
	// Blocked, the group schedules again in line: the bulk request keeps
	// its place among the interactions.
	g.Block(at(100000))
	s, _ = g.Estimate(at(0), 1)
	assert.Equal(t, MaxGroupMoves, s.Position)
}

// Random reservations of random classes, and releases, at one instant (no
// window is missed): every window holds at most n; each class stays in
// order of arrival (without releases: a released place goes to the next
// to reserve, whatever its order); no reservation moved more than MaxGroupMoves times; a
// newcomer is never behind a waiting request of a lower class that could
// still move (outside the windows an aged one closes).
func TestGroupClassesModel(t *testing.T) {
	for seed := range uint64(100) {
		rng := rand.New(rand.NewPCG(seed, 39))
		n := 1 + rng.IntN(4)
		g := NewGroup(n, time.Second)
		var live []uint64
		moved := map[uint64]int{} // times each reservation went to a later window
		releases := seed%2 == 0
		for id := uint64(1); id <= 120; id++ {
			if releases && len(live) > 0 && rng.IntN(4) == 0 {
				i := rng.IntN(len(live))
				g.Release(live[i])
				live = slices.Delete(live, i, i+1)
			}
			class := int8(rng.IntN(3)) - 1
			if rng.IntN(3) > 0 {
				class = -1 // mostly bulk, as a backlog is
			}
			g.mu.Lock()
			floor := g.floor(class)
			before := map[uint64]reservation{}
			for k, r := range g.out {
				before[k] = *r
			}
			g.mu.Unlock()
			s := g.ReserveClass(at(0), id, class)
			live = append(live, id)
			g.mu.Lock()
			counts := map[time.Time]int{}
			for _, r := range g.out {
				counts[r.start]++
				if r.moves > MaxGroupMoves {
					t.Fatalf("seed %d: moved %d times", seed, r.moves)
				}
			}
			for _, w := range g.wins {
				require.LessOrEqual(t, w.n, n, "seed %d", seed)
				require.Equal(t, w.n, counts[w.start], "seed %d: window %v", seed, w.start)
			}
			checkGroupIndex(t, g, fmt.Sprintf("seed %d, request %d", seed, id))
			if !releases {
				// Each class in order: sorted by seq, the starts never go back.
				last := map[int8]*reservation{}
				rs := slices.Collect(maps.Values(g.out))
				slices.SortFunc(rs, func(a, b *reservation) int { return cmp.Compare(a.seq, b.seq) })
				for _, r := range rs {
					if p := last[r.class]; p != nil && r.start.Before(p.start) {
						t.Fatalf("seed %d: class %d out of order", seed, r.class)
					}
					last[r.class] = r
				}
			}
			for k, o := range before {
				if r := g.out[k]; r != nil && r.start.After(o.start) {
					if moved[k]++; moved[k] > MaxGroupMoves {
						t.Fatalf("seed %d: %d moved back %d times", seed, k, moved[k])
					}
				}
				if o.class < class && o.moves < MaxGroupMoves && o.start.After(floor) && o.start.Before(s.Start) {
					t.Fatalf("seed %d: %d (class %d) stayed ahead of %d (class %d)", seed, k, o.class, id, class)
				}
			}
			g.mu.Unlock()
		}
	}
}

// checkGroupIndex checks, under g's lock, what the windows' lines must
// hold: every waiting reservation is in the line of the window it names,
// in order of seq within its class, or, that window over, counted in
// strays; and each waiting one's slot position is the count of waiting
// ones ahead of it (in an earlier window or a stray, or ahead in its
// own), counted one by one.
func checkGroupIndex(t *testing.T, g *Group, what string) {
	t.Helper()
	inLine := map[*reservation]bool{}
	for _, w := range g.wins {
		for c, ws := range w.wait {
			for j, r := range ws {
				require.False(t, r.taken, "%s: a taken reservation in line", what)
				require.Equal(t, int8(c)+classLowest, r.class, "%s: in another class's line", what)
				require.True(t, r.start.Equal(w.start), "%s: in another window's line", what)
				if j > 0 {
					require.Less(t, ws[j-1].seq, r.seq, "%s: a line out of order", what)
				}
				require.False(t, inLine[r], "%s: in line twice", what)
				inLine[r] = true
			}
		}
	}
	strays := 0
	for _, r := range g.out {
		if !r.taken && !inLine[r] {
			require.Equal(t, -1, g.window(r.start), "%s: a waiting reservation out of its window's line", what)
			strays++
		}
	}
	require.Equal(t, strays, g.strays, "%s: strays", what)
	require.Len(t, inLine, len(g.out)-countTaken(g)-strays, "%s: a reservation in line is not in out", what)
	require.Equal(t, len(g.out)-countTaken(g), g.waiting(), "%s: Waiting", what)
	for _, r := range g.out {
		if r.taken || !inLine[r] {
			continue
		}
		pos := 0
		for _, o := range g.out {
			if !o.taken && (o.start.Before(r.start) || o.start.Equal(r.start) && ahead(o, r)) {
				pos++
			}
		}
		require.Equal(t, pos, g.slot(r).Position, "%s: position", what)
		if r.moves >= MaxGroupMoves {
			require.False(t, g.aged[r.class-classLowest].Before(r.start), "%s: a reservation that moves no more, after its class's floor", what)
		}
	}
}

func countTaken(g *Group) int {
	n := 0
	for _, r := range g.out {
		if r.taken {
			n++
		}
	}
	return n
}

// A request taken before a Block and cancelled after it (its attempt was
// refused without being counted) waits again with a window the Block
// discarded: it is ahead of the requests the Block placed, and not ahead
// of itself.
func TestGroupCancelAfterBlock(t *testing.T) {
	g := NewGroup(1, time.Second)
	g.Reserve(at(0), 1)
	ok, _ := g.Take(at(0), 1)
	require.True(t, ok)
	g.Reserve(at(0), 2)
	g.Block(at(10))
	g.Cancel(at(1), 1)
	s, ok := g.Estimate(at(2), 1)
	require.True(t, ok)
	assert.Equal(t, 0, s.Position, "first in line")
	s, _ = g.Estimate(at(2), 2)
	assert.Equal(t, 1, s.Position, "behind 1")
	g.mu.Lock()
	checkGroupIndex(t, g, "after Cancel")
	g.mu.Unlock()
}

// ReadyClass reserves a request without a reservation with its class,
// and when the request may not go tells its place as Estimate does.
func TestGroupReadyClass(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	g := NewGroup(1, time.Second)
	g.ReserveClass(at(0), 1, -1)
	g.ReserveClass(at(0), 2, -1)
	ok, wait, slot := g.ReadyClass(at(0), 3, 1) // a retry of an interaction: it passes the bulk requests
	assert.True(t, ok, "it takes 1's place in the first window")
	assert.Zero(t, wait)
	assert.Zero(t, slot)
	ok, wait, slot = g.ReadyClass(at(0), 4, 1)
	assert.False(t, ok)
	assert.Equal(t, time.Second, wait, "behind 3, in 1's place in the second window")
	assert.Equal(t, Slot{Start: at(1000), End: at(2000), Position: 1}, slot)
	est, found := g.Estimate(at(0), 4)
	require.True(t, found)
	assert.Equal(t, est, slot, "its place, as Estimate tells it")
	ok, _, slot = g.ReadyClass(at(0), 5, 0)
	assert.False(t, ok)
	assert.Equal(t, Slot{Start: at(2000), End: at(3000), Position: 2}, slot, "normal: ahead of 1 and 2, behind 3 and 4")
	g.mu.Lock()
	checkGroupIndex(t, g, "after ReadyClass")
	g.mu.Unlock()
}
