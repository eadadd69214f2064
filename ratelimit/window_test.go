package ratelimit

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func reserveN(w *SlidingWindow, now time.Time, n int) int {
	got := 0
	for range n {
		if ok, _ := w.Reserve(now); ok {
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
	require.Equal(t, 1, reserveN(w, at(100), 1))
	require.Equal(t, 0, reserveN(w, at(200), 1))

	w.Cancel(at(200), at(100)) // the request reserved at 100 was never sent
	assert.Equal(t, 1, reserveN(w, at(200), 5), "the slot is free again")

	// What is left is accounted no earlier than it really happened: the
	// reservation at 0 was freed in place of the one at 100, so the one that
	// remains is counted until 1.1 s, not 1.0 s.
	assert.Equal(t, 0, reserveN(w, at(1000), 1))
	assert.Equal(t, 1, reserveN(w, at(1100), 1))
}

func TestSlidingWindowCancelExpired(t *testing.T) {
	w := NewSlidingWindow(2, time.Second)
	require.Equal(t, 1, reserveN(w, at(0), 1))
	require.Equal(t, 2, reserveN(w, at(1500), 2))
	w.Cancel(at(1600), at(0)) // long gone from the window: nothing to give back
	assert.Equal(t, 0, reserveN(w, at(1600), 1))
	w.Cancel(at(1600), at(1400)) // no reservation that early is still held
	assert.Equal(t, 0, reserveN(w, at(1600), 1))
}

func TestSlidingWindowCancelEmpty(t *testing.T) {
	w := NewSlidingWindow(1, time.Second)
	w.Cancel(at(0), at(0))
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

// TestSlidingWindowInvariant checks with random traffic, cancellations and
// blocks that no interval of one period ever holds more than n reservations
// that were not cancelled.
func TestSlidingWindowInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 7
	per := 100 * time.Millisecond
	w := NewSlidingWindow(n, per)
	var sent []time.Time // reservations actually used, in order
	var pending []time.Time
	now := t0
	for range 20000 {
		now = now.Add(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
		switch r := rng.IntN(10); {
		case r < 6:
			if ok, _ := w.Reserve(now); ok {
				pending = append(pending, now)
			}
		case r < 9 && len(pending) > 0:
			// Use or cancel a random pending reservation.
			i := rng.IntN(len(pending))
			if rng.IntN(4) == 0 {
				w.Cancel(now, pending[i])
			} else {
				sent = append(sent, pending[i])
			}
			pending = append(pending[:i], pending[i+1:]...)
		case r == 9 && rng.IntN(50) == 0:
			w.Block(now.Add(time.Duration(rng.Int64N(int64(per)))))
		}
	}
	sent = append(sent, pending...) // unused reservations still count
	slices.SortFunc(sent, time.Time.Compare)
	for i := range sent {
		j := i
		for j < len(sent) && sent[j].Sub(sent[i]) < per {
			j++
		}
		if j-i > n {
			t.Fatalf("%d requests within %v starting at %v", j-i, per, sent[i].Sub(t0))
		}
	}
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
