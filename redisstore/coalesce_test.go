package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// A process asks Redis once for what Redis refused it: the requests of a
// bucket refused until its window ends are refused here with the rest of
// that wait, and while the bucket is contended its reservations go one at
// a time, so that a burst costs one call per slot and one refusal. Before,
// every request of a burst asked Redis (about three calls per request for
// four processes on one bucket, bench/cmd/shared).
func TestRefusalsAreToldOncePerProcess(t *testing.T) {
	srv := redistest.Start(t)
	var now atomic.Int64 // the store's clock
	now.Store(time.Now().UnixNano())
	s := newStore(t, srv, Config{Namespace: Namespace(t.Name()), Heartbeat: time.Hour,
		Clock: func() time.Time { return time.Unix(0, now.Load()) }})
	ctx := context.Background()
	r, _ := learned(t, s, 5, 4)
	// burst sends 50 reservations at once, and reports the granted ones
	// answered (the window is full).
	var wait atomic.Int64 // the longest wait told
	burst := func() (granted int, calls int64) {
		before := s.Stats().Reserved
		var mu sync.Mutex
		var grants []ratelimit.SharedGrant
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				if g := s.Reserve(ctx, r); g.OK {
					mu.Lock()
					grants = append(grants, g)
					mu.Unlock()
				} else {
					assert.Equal(t, "bucket", g.Scope)
					assert.Positive(t, g.Wait, "a refusal tells how long")
					if w := int64(g.Wait); w > wait.Load() {
						wait.Store(w)
					}
				}
			})
		}
		wg.Wait()
		calls = s.Stats().Reserved - before
		for _, g := range grants {
			s.Report(ctx, g, answer(5, 0, time.Second, "h"))
		}
		return len(grants), calls
	}
	// The window has 4 slots left; the burst meets the first refusal of
	// the bucket.
	granted, calls := burst()
	assert.Equal(t, 4, granted)
	assert.GreaterOrEqual(t, calls, int64(5), "not contended yet: they ask at once (the last may know the first refusal by then)")

	// Refused until the window ends: asked of Redis no more.
	granted, calls = burst()
	assert.Zero(t, granted)
	assert.Zero(t, calls, "the refusal is known here")

	// The window ends (on Redis's record, and on the store's clock): the
	// contended bucket's reservations go one at a time, 5 slots then the
	// refusal that holds the others.
	record := s.ns + ":b:" + routes.BucketKey("h", r.Major)
	require.NoError(t, s.rdb.HSet(ctx, record, "r", 1).Err())
	now.Add(wait.Load() + int64(time.Millisecond))
	granted, calls = burst()
	assert.Equal(t, 5, granted)
	assert.EqualValues(t, 6, calls, "one call per slot, and one refusal")

	// A change of mode forgets what Redis told: the next one asks.
	s.refusals.forget()
	before := s.Stats().Reserved
	assert.False(t, s.Reserve(ctx, r).OK)
	assert.EqualValues(t, 1, s.Stats().Reserved-before)
}

// A refusal that waits for another process's answer (Notify: the pioneer
// of an unknown bucket is in flight) is not remembered: the wake-up may
// come at any time, and each asks Redis again.
func TestRefusalsWaitingForAnAnswerAreAskedAgain(t *testing.T) {
	srv := redistest.Start(t)
	cfg := Config{Namespace: Namespace(t.Name()), Heartbeat: time.Hour}
	a, b := newStore(t, srv, cfg), newStore(t, srv, cfg)
	ctx := context.Background()
	r := request()
	r.Global = false
	p := a.Reserve(ctx, r)
	require.True(t, p.OK && p.Pioneer)
	for range 3 {
		g := b.Reserve(ctx, r)
		require.False(t, g.OK)
		require.True(t, g.Notify, "b waits for a's pioneer")
	}
	assert.EqualValues(t, 3, b.Stats().Reserved, "each asked Redis")
	a.Report(ctx, p, answer(5, 4, time.Second, "h"))
	g := b.Reserve(ctx, r)
	assert.True(t, g.OK, "the answer came: b goes at once")
	b.Report(ctx, g, ratelimit.SharedAnswer{Now: time.Now(), Sent: true, Status: 200})
}
