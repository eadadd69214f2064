package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// Processes waiting on one bucket take turns: the one whose reservations
// reach Redis first in every window does not take the window whole. Four
// processes each ask for the whole window (5 slots), always in the same
// order; from the first window in which they waited, each takes a quarter
// of the slots, give or take one.
func TestProcessesTakeTurnsOnABusyBucket(t *testing.T) {
	srv := redistest.Start(t)
	cfg := Config{Namespace: Namespace(t.Name()), Heartbeat: time.Hour}
	stores := make([]*Store, 4)
	for i := range stores {
		stores[i] = newStore(t, srv, cfg)
	}
	ctx := context.Background()
	r, _ := learned(t, stores[0], 5, 4)
	record := stores[0].ns + ":b:" + routes.BucketKey("h", r.Major)

	const windows = 9
	taken := make([]int, len(stores))
	for w := range windows {
		type grant struct {
			s *Store
			g ratelimit.SharedGrant
		}
		var grants []grant
		for more := true; more; { // each asks until refused, in turn, until none gets a slot
			more = false
			forgetRefusals(stores...) // each comes back when told, at once here
			for i, s := range stores {
				for {
					g := s.Reserve(ctx, r)
					if !g.OK {
						break
					}
					more = true
					grants = append(grants, grant{s, g})
					if w > 0 {
						taken[i]++
					}
				}
			}
		}
		if w > 0 {
			require.Len(t, grants, 5, "window %d: the window is used whole", w)
		}
		for _, g := range grants {
			g.s.Report(ctx, g.g, ratelimit.SharedAnswer{Now: time.Now(), Sent: true, Status: 200})
		}
		// The window ends (the record's end moved to the past: Redis's
		// clock cannot be driven).
		require.NoError(t, stores[0].rdb.HSet(ctx, record, "r", 1).Err())
		forgetRefusals(stores...)
	}
	t.Logf("slots taken per process in %d windows of 5: %v", windows-1, taken)
	least, most := taken[0], taken[0]
	for _, n := range taken {
		least, most = min(least, n), max(most, n)
	}
	assert.LessOrEqual(t, most-least, 1, "turns: %v", taken)
}

// A process that stops asking leaves the line once it is overdue: its turn
// goes to the others, and a process refused for its turn is told to come
// back when the one ahead is due.
func TestTurnsOfAProcessThatLeft(t *testing.T) {
	srv := redistest.Start(t)
	cfg := Config{Namespace: Namespace(t.Name()), Heartbeat: time.Hour}
	a, b := newStore(t, srv, cfg), newStore(t, srv, cfg)
	ctx := context.Background()
	r, _ := learned(t, a, 2, 1)
	record := a.ns + ":b:" + routes.BucketKey("h", r.Major)
	held := a.Reserve(ctx, r)
	require.True(t, held.OK)
	refused := b.Reserve(ctx, r)
	require.False(t, refused.OK, "full: b waits its turn")

	a.Report(ctx, held, ratelimit.SharedAnswer{Now: time.Now(), Sent: true, Status: 200})
	require.NoError(t, a.rdb.HSet(ctx, record, "r", 1).Err()) // the next window
	forgetRefusals(a, b)
	g := a.Reserve(ctx, r)
	require.True(t, g.OK, "a turn: b is owed one slot of two: %+v %v", g, a.rdb.HGetAll(ctx, record).Val())
	turn := a.Reserve(ctx, r)
	require.False(t, turn.OK, "b's turn")
	assert.Equal(t, "bucket", turn.Scope)
	assert.LessOrEqual(t, turn.Wait, refused.Wait+10*time.Millisecond, "told to come back when b is due (the end of its wait)")

	// b never comes back: past its grace it leaves the line.
	q := a.ns + ":q:" + routes.BucketKey("h", r.Major)
	require.NoError(t, a.rdb.HSet(ctx, q, b.procID, "0|0|1|1").Err())
	forgetRefusals(a)
	assert.True(t, a.Reserve(ctx, r).OK, "b left: its slot goes to a")
}
