package ratelimit

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reserveN reserves up to n slots at now for requests answered at once.
func reserveN(w *SlidingWindow, now time.Time, n int) int {
	got := 0
	for range n {
		if ok, _ := w.Reserve(now); ok {
			w.Settle(now)
			got++
		}
	}
	return got
}

func TestSlidingWindowExactlyN(t *testing.T) {
	w := NewSlidingWindow(50, time.Second)
	assert.Equal(t, 50, reserveN(w, at(0), 100))
	ok, wait := w.Reserve(at(999))
	assert.False(t, ok)
	assert.Equal(t, ms(1), wait)
	assert.Equal(t, ms(1), w.Wait(at(999)))
}

func TestSlidingWindowBoundaryAtExactlyPeriod(t *testing.T) {
	w := NewSlidingWindow(2, time.Second)
	require.Equal(t, 1, reserveN(w, at(0), 1))
	require.Equal(t, 1, reserveN(w, at(500), 1))
	ok, _ := w.Reserve(t0.Add(time.Second - 1))
	assert.False(t, ok, "[0, 1s) already holds 2")
	ok, _ = w.Reserve(at(1000))
	assert.True(t, ok, "the reservation at 0 leaves the window at exactly 1 s")
	ok, wait := w.Reserve(at(1000))
	assert.False(t, ok)
	assert.Equal(t, ms(500), wait)
}

func TestSlidingWindowNoBurstAcrossBoundary(t *testing.T) {
	// A fixed window would admit 50 at 0.999 s and 50 more at 1.000 s.
	w := NewSlidingWindow(50, time.Second)
	assert.Equal(t, 50, reserveN(w, at(999), 100))
	assert.Equal(t, 0, reserveN(w, at(1000), 100))
	assert.Equal(t, 50, reserveN(w, at(1999), 100))
}

func TestSlidingWindowCancel(t *testing.T) {
	w := NewSlidingWindow(2, time.Second)
	require.Equal(t, 1, reserveN(w, at(0), 1))
	ok, _ := w.Reserve(at(100)) // in flight
	require.True(t, ok)
	ok, wait := w.Reserve(at(200))
	require.False(t, ok)
	assert.Equal(t, ms(800), wait)
	w.Cancel(at(200)) // the request reserved at 100 was never sent
	ok, _ = w.Reserve(at(200))
	assert.True(t, ok)
}

func TestSlidingWindowInFlightSlotsDoNotExpire(t *testing.T) {
	w := NewSlidingWindow(1, time.Second)
	ok, _ := w.Reserve(at(0))
	require.True(t, ok)
	// Two periods later the request is still unanswered: the server may
	// count it at any moment, so its slot is still held.
	ok, wait := w.Reserve(at(2000))
	assert.False(t, ok)
	assert.Equal(t, time.Second, wait, "an upper bound: Settle or Cancel frees it")
	assert.Equal(t, 1, w.Count(at(2000)))
	w.Settle(at(2500))
	ok, wait = w.Reserve(at(3000))
	assert.False(t, ok, "held until the answer plus one period")
	assert.Equal(t, ms(500), wait)
	assert.Equal(t, 1, reserveN(w, at(3500), 1))
}

func TestSlidingWindowSettleAndCancelWithoutReservation(t *testing.T) {
	w := NewSlidingWindow(1, time.Second)
	w.Settle(at(0))
	w.Cancel(at(0))
	assert.Equal(t, 0, w.Count(at(0)))
	assert.Equal(t, 1, reserveN(w, at(0), 2))
}

func TestSlidingWindowBlock(t *testing.T) {
	w := NewSlidingWindow(50, time.Second)
	w.Block(at(3000))
	w.Block(at(2000)) // earlier: no effect
	ok, wait := w.Reserve(at(100))
	assert.False(t, ok)
	assert.Equal(t, ms(2900), wait)
	assert.Equal(t, ms(2900), w.Wait(at(100)))
	assert.Equal(t, 50, reserveN(w, at(3000), 100))
}

func TestSlidingWindowZeroValue(t *testing.T) {
	var w SlidingWindow
	n, per := w.Limit()
	assert.Equal(t, DefaultGlobalLimit, n)
	assert.Equal(t, DefaultGlobalPeriod, per)
	assert.Equal(t, DefaultGlobalLimit, reserveN(&w, at(0), 100))
}

func TestSlidingWindowTimeGoingBackwards(t *testing.T) {
	w := NewSlidingWindow(1, time.Second)
	require.Equal(t, 1, reserveN(w, at(500), 1))
	require.Equal(t, 0, reserveN(w, at(400), 1))
	assert.Equal(t, 0, reserveN(w, at(1400), 1), "the reservation at 500 is still held")
	assert.Equal(t, 1, reserveN(w, at(1500), 1))
}

func TestNewSlidingWindowPanics(t *testing.T) {
	assert.Panics(t, func() { NewSlidingWindow(0, time.Second) })
	assert.Panics(t, func() { NewSlidingWindow(MaxGlobalLimit+1, time.Second) })
	assert.Panics(t, func() { NewSlidingWindow(1, 0) })
}

// TestSlidingWindowInvariant checks with random traffic, latencies,
// cancellations and blocks that the intervals [reservedAt, settledAt+period)
// of requests that were sent never overlap more than n deep: then no server
// window of one period, wherever each request arrived within its round trip,
// holds more than n.
func TestSlidingWindowInvariant(t *testing.T) {
	// 7 fits the first ring; 200 makes it grow twice (64, 128, 200).
	for _, n := range []int{7, 200} {
		t.Run(strconv.Itoa(n), func(t *testing.T) { testSlidingWindowInvariant(t, n) })
	}
}

func testSlidingWindowInvariant(t *testing.T, n int) {
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	per := time.Duration(n) * 15 * time.Millisecond
	w := NewSlidingWindow(n, per)
	var spans []span
	var pending []time.Time // reserved, in flight
	now := t0
	for range 20000 {
		now = now.Add(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
		switch r := rng.IntN(10); {
		case r < 6:
			if ok, _ := w.Reserve(now); ok {
				pending = append(pending, now)
			}
		case r < 9 && len(pending) > 0:
			// Answer or cancel a random request in flight.
			i := rng.IntN(len(pending))
			if rng.IntN(4) == 0 {
				w.Cancel(now)
			} else {
				w.Settle(now)
				spans = append(spans, span{pending[i], now.Add(per)})
			}
			pending = append(pending[:i], pending[i+1:]...)
		case r == 9 && rng.IntN(50) == 0:
			w.Block(now.Add(time.Duration(rng.Int64N(int64(per)))))
		}
	}
	for _, p := range pending {
		spans = append(spans, span{p, now.Add(time.Hour)})
	}
	if depth, at := deepest(spans); depth > n {
		t.Fatalf("%d requests overlap at %v", depth, at.Sub(t0))
	}
}

// span is the time a request may count at the server: from its send until
// one period after its answer.
type span struct{ from, to time.Time }

// deepest returns the most spans that overlap, and where.
func deepest(spans []span) (int, time.Time) {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s.from, +1}, edge{s.to, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end at t frees before a start at t
	})
	depth, most, at := 0, 0, time.Time{}
	for _, e := range edges {
		depth += e.delta
		if depth > most {
			most, at = depth, e.at
		}
	}
	return most, at
}

// The ring grows while slots are held and keeps their order: the oldest
// expire first.
func TestSlidingWindowRingGrowsInOrder(t *testing.T) {
	const n = 300
	w := NewSlidingWindow(n, time.Second)
	for i := range n {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		ok, _ := w.Reserve(at)
		require.True(t, ok, i)
		w.Settle(at)
	}
	assert.Equal(t, n, len(w.times))
	ok, _ := w.Reserve(t0.Add(500 * time.Millisecond))
	assert.False(t, ok, "full")
	assert.Equal(t, time.Millisecond, w.Wait(t0.Add(999*time.Millisecond)), "the first settled frees first")
	assert.Equal(t, n-100, w.Count(t0.Add(1099*time.Millisecond)))
}

func TestSlidingWindowConcurrent(t *testing.T) {
	w := NewSlidingWindow(50, time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := reserveN(w, at(0), 20)
			mu.Lock()
			admitted += got
			mu.Unlock()
		}()
	}
	wg.Wait()
	assert.Equal(t, 50, admitted)
}

func TestReserveKeepingLeavesSlotsFree(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := NewSlidingWindow(4, time.Second)
	assert.True(t, w.ReserveKeeping(t0, 2))
	assert.True(t, w.ReserveKeeping(t0, 2))
	assert.False(t, w.ReserveKeeping(t0, 2), "two slots stay free for the arbiter")
	ok, _ := w.Reserve(t0)
	assert.True(t, ok, "plain Reserve still takes them")
	w.Block(t0.Add(time.Second))
	assert.False(t, w.ReserveKeeping(t0, 0), "blocked")
	assert.Equal(t, time.Second, w.Blocked(t0))
	assert.Zero(t, w.Blocked(t0.Add(2*time.Second)))
}

// TestSlidingWindowForecast checks Forecast against the window itself: in
// random states (settled slots at random times, some in flight, a block),
// the requests that follow, each reserved at the time Forecast gave for it
// and answered at once, are each admitted then and not a moment before.
func TestSlidingWindowForecast(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	for round := range 300 {
		n := 1 + rng.IntN(6)
		per := time.Duration(50+rng.IntN(100)) * time.Millisecond
		build := func() *SlidingWindow {
			r := rand.New(rand.NewPCG(uint64(round), 1))
			w := NewSlidingWindow(n, per)
			for i := range r.IntN(n + 1) {
				now := at(i * r.IntN(40))
				if ok, _ := w.Reserve(now); ok {
					w.Settle(now)
				}
			}
			if r.IntN(3) == 0 {
				w.Block(at(r.IntN(300)))
			}
			return w
		}
		now := at(200)
		w := build()
		inflight := 0
		for w.Count(now) < n && w.Blocked(now) == 0 && rng.IntN(2) == 0 {
			ok, _ := w.Reserve(now)
			require.True(t, ok)
			inflight++
		}
		want := make([]time.Time, 3*n+1)
		for k := range want {
			want[k] = w.Forecast(now, k)
		}
		for range inflight {
			w.Settle(now) // answered at once: held one period from now
		}
		prev := now
		for k, tk := range want {
			require.False(t, tk.Before(prev), "round %d: forecast %d goes back in time", round, k)
			if tk.After(prev) {
				ok, _ := w.Reserve(tk.Add(-time.Nanosecond))
				require.False(t, ok, "round %d: request %d could go before its forecast %v", round, k, tk.Sub(t0))
			}
			ok, _ := w.Reserve(tk)
			require.True(t, ok, "round %d: request %d refused at its forecast %v", round, k, tk.Sub(t0))
			w.Settle(tk)
			prev = tk
		}
	}
}

// FreeAt counts the slots free at a later time if nothing more is
// reserved: those free now and the settled ones whose period is over by
// then; a slot in flight stays held. Checked against reserving: at any at
// within a period, exactly FreeAt(now, at) more reservations succeed at
// at, on a copy of the window with its in-flight slots never settled.
func TestSlidingWindowFreeAt(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for round := range 500 {
		n := 1 + rng.IntN(8)
		per := time.Duration(50+rng.IntN(100)) * time.Millisecond
		seed := rng.Uint64()
		build := func() (*SlidingWindow, time.Time) {
			r := rand.New(rand.NewPCG(seed, 3))
			w := NewSlidingWindow(n, per)
			now := t0
			for range r.IntN(3 * n) {
				now = now.Add(time.Duration(r.IntN(40)) * time.Millisecond)
				if ok, _ := w.Reserve(now); ok {
					if r.IntN(4) == 0 {
						continue // in flight
					}
					w.Settle(now.Add(time.Duration(r.IntN(10)) * time.Millisecond))
				}
			}
			return w, now
		}
		w, now := build()
		at := now.Add(time.Duration(rng.Int64N(int64(2 * per))))
		got := w.FreeAt(now, at)
		c, _ := build()
		free := 0
		for {
			if ok, _ := c.Reserve(at); !ok {
				break
			}
			free++
		}
		require.Equal(t, free, got, "round %d: n=%d per=%v at now+%v", round, n, per, at.Sub(now))
		require.Equal(t, got, w.FreeAt(now, at), "round %d: FreeAt reserves nothing", round)
		require.Equal(t, n-w.Count(now), w.FreeAt(now, now), "round %d: free now", round)
	}
}
