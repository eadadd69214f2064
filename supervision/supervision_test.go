package supervision

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestIntensity(t *testing.T) {
	in := NewIntensity(2, time.Second)
	n, over := in.Crash(at(0))
	assert.Equal(t, 1, n)
	assert.False(t, over)
	_, over = in.Crash(at(500))
	assert.False(t, over)
	n, over = in.Crash(at(900))
	assert.Equal(t, 3, n)
	assert.True(t, over, "three crashes within a second")
	n, over = in.Crash(at(2500))
	assert.Equal(t, 1, n, "old crashes leave the window")
	assert.False(t, over)
}

func TestBreakerCycle(t *testing.T) {
	b := NewBreaker(time.Second, 4*time.Second)
	ok, probe, _ := b.Allow(at(0))
	assert.True(t, ok)
	assert.False(t, probe)
	assert.Equal(t, Closed, b.State(at(0)))

	assert.Equal(t, time.Second, b.Trip(at(0)))
	assert.Equal(t, Open, b.State(at(999)))
	ok, _, wait := b.Allow(at(400))
	assert.False(t, ok)
	assert.Equal(t, 600*time.Millisecond, wait)
	assert.Equal(t, 600*time.Millisecond, b.Trip(at(400)), "a late ban answer keeps it open, no doubling")

	assert.Equal(t, HalfOpen, b.State(at(1000)))
	ok, probe, _ = b.Allow(at(1000))
	assert.True(t, ok)
	assert.True(t, probe)
	ok, _, wait = b.Allow(at(1001))
	assert.False(t, ok, "one probe at a time")
	assert.Zero(t, wait)

	b.Probed(at(1100), true)
	assert.Equal(t, Open, b.State(at(1100)))
	_, _, wait = b.Allow(at(1100))
	assert.Equal(t, 2*time.Second, wait, "doubled")

	_, probe, _ = b.Allow(at(3100))
	assert.True(t, probe)
	b.Abandon()
	_, probe, _ = b.Allow(at(3200))
	assert.True(t, probe, "an abandoned probe is replaced")
	b.Probed(at(3300), true)
	_, _, wait = b.Allow(at(3300))
	assert.Equal(t, 4*time.Second, wait)
	b.Probed(at(3300), false) // not half-open: ignored
	_, probe, _ = b.Allow(at(7300))
	assert.True(t, probe)
	b.Probed(at(7400), true)
	_, _, wait = b.Allow(at(7400))
	assert.Equal(t, 4*time.Second, wait, "capped at Max")

	_, probe, _ = b.Allow(at(11400))
	assert.True(t, probe)
	b.Probed(at(11500), false)
	assert.Equal(t, Closed, b.State(at(11500)))
	assert.Equal(t, time.Second, b.Trip(at(12000)), "the backoff starts over once closed")
}

func TestBreakerStateString(t *testing.T) {
	assert.Equal(t, "closed", Closed.String())
	assert.Equal(t, "open", Open.String())
	assert.Equal(t, "half_open", HalfOpen.String())
	assert.Equal(t, "BreakerState(7)", BreakerState(7).String())
}

func TestBudget(t *testing.T) {
	b := NewBudget(3, 10*time.Second, 2)
	n, lvl := b.Record(at(0))
	assert.Equal(t, 1, n)
	assert.Equal(t, Fine, lvl)
	_, lvl = b.Record(at(100))
	assert.Equal(t, Warn, lvl)
	wait, _, _ := b.Refusing(at(100))
	assert.Zero(t, wait)
	n, lvl = b.Record(at(200))
	assert.Equal(t, 3, n)
	assert.Equal(t, Exhausted, lvl)
	wait, ceiling, window := b.Refusing(at(200))
	assert.Equal(t, 9800*time.Millisecond, wait)
	assert.Equal(t, 3, ceiling)
	assert.Equal(t, 10*time.Second, window)
	wait, _, _ = b.Refusing(at(10_000))
	assert.Zero(t, wait, "the oldest answer left the window")
	_, lvl = b.Record(at(10_000))
	assert.Equal(t, Exhausted, lvl)
	_, lvl = b.Record(at(20_300))
	assert.Equal(t, Fine, lvl, "the warning is given once")
}

// Refusing, lock-free while the budget was not exhausted lately, tells
// what the window does: on random answers at random times, it refuses
// exactly while the window is full, for as long as the window says.
func TestBudgetRefusingMatchesTheWindow(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 36))
	for round := range 200 {
		ceiling := 1 + rng.IntN(5)
		b := NewBudget(ceiling, time.Second, 0)
		ms := 0
		for step := range 60 {
			ms += rng.IntN(400)
			now := at(ms)
			if rng.IntN(3) == 0 {
				b.Record(now)
			}
			wait, n, per := b.Refusing(now)
			require.Equal(t, b.window.Wait(now), wait, "round %d, step %d", round, step)
			require.Equal(t, ceiling, n)
			require.Equal(t, time.Second, per)
		}
	}
}

// Refusing never says no while another goroutine's Record has just
// filled the window: the lock-free answer is moved on before the answer
// is counted.
func TestBudgetRefusingWhileRecording(t *testing.T) {
	for round := range 300 {
		b := NewBudget(1, time.Second, 0)
		now := at(round)
		done := make(chan struct{})
		go func() {
			defer close(done)
			b.Record(now)
		}()
		for b.window.Wait(now) == 0 {
			select {
			case <-done:
			default:
				continue
			}
			break
		}
		wait, _, _ := b.Refusing(now)
		require.Equal(t, time.Second, wait, "round %d: the window is full", round)
		<-done
	}
}
