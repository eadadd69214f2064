package timers

import (
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fired records a firing: the value it was armed with and its
// generation.
type fired struct {
	arg string
	gen uint64
}

// send is a Firing that reports on ch.
type send struct {
	ch  chan fired
	arg string
}

func (s send) Fire(gen uint64) { s.ch <- fired{s.arg, gen} }

// Each arming is a new generation: only the latest is current, and the
// timer it replaced is stopped (it can no longer fire), without waiting
// for either.
func TestArmReplacesEarlierTimer(t *testing.T) {
	var s Slot
	assert.True(t, s.Current(0), "the zero Slot is generation 0")
	ch := make(chan fired, 2)

	Arm(&s, time.Hour, send{ch, "first"})
	first := s.t
	require.NotNil(t, first)
	assert.True(t, s.Current(1))
	assert.False(t, s.Current(0), "arming makes earlier generations stale")

	Arm(&s, 0, send{ch, "second"})
	assert.False(t, first.Stop(), "the replaced timer was stopped")
	assert.NotSame(t, first, s.t)
	assert.True(t, s.Current(2))
	assert.False(t, s.Current(1))
	assert.Equal(t, fired{"second", 2}, <-ch, "fires with its argument and generation")
	assert.Empty(t, ch)
}

// A negative delay fires at once, as zero does.
func TestArmNegativeFiresAtOnce(t *testing.T) {
	var s Slot
	ch := make(chan fired, 1)
	Arm(&s, -time.Hour, send{ch, "late"})
	select {
	case f := <-ch:
		assert.Equal(t, fired{"late", 1}, f)
	case <-time.After(10 * time.Second):
		t.Fatal("a negative delay did not fire")
	}
}

// Stop stops the timer and makes every arming stale; StopAll stops each
// slot; a slot armed again afterwards starts a newer generation.
func TestStop(t *testing.T) {
	slots := make([]Slot, 3)
	ch := make(chan fired, 3)
	Arm(&slots[0], time.Hour, send{ch, "a"})
	Arm(&slots[2], time.Hour, send{ch, "c"})
	a, c := slots[0].t, slots[2].t
	before := []uint64{slots[0].gen, slots[1].gen, slots[2].gen}

	StopAll(slots)
	assert.False(t, a.Stop(), "stopped")
	assert.False(t, c.Stop(), "stopped")
	for i := range slots {
		assert.Nil(t, slots[i].t, "slot %d", i)
		assert.False(t, slots[i].Current(before[i]), "slot %d: no arming current", i)
	}
	assert.Equal(t, []uint64{2, 1, 2}, []uint64{slots[0].gen, slots[1].gen, slots[2].gen})

	slots[1].Stop() // twice: nothing to stop
	assert.Equal(t, uint64(2), slots[1].gen)
	Arm(&slots[1], 0, send{ch, "b"})
	assert.Equal(t, fired{"b", 3}, <-ch)
}

// target is a Firing the size of the actors' (a system, an actor's
// address and the message's maker).
type target struct {
	p  *int
	q  *string
	mk func(uint64) any
}

func (t target) Fire(gen uint64) { t.mk(gen) }

// perRun returns what f allocates per run over n runs: allocations and
// bytes (testing.AllocsPerRun's way, with the bytes too).
func perRun(n int, f func()) (allocs, bytes uint64) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f() // warm up
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.Mallocs - before.Mallocs) / uint64(n), (after.TotalAlloc - before.TotalAlloc) / uint64(n)
}

// Arming costs what arming by hand does: the runtime's timer and one
// closure of the same size (the Firing and the generation).
func TestArmAllocations(t *testing.T) {
	x, y := 1, "y"
	f := target{&x, &y, func(uint64) any { return nil }}
	var s Slot
	allocs, bytes := perRun(1000, func() { Arm(&s, time.Hour, f) })
	s.Stop()
	var tm *time.Timer
	var gen uint64
	handAllocs, handBytes := perRun(1000, func() {
		gen++
		g, p, q, mk := gen, f.p, f.q, f.mk
		if tm != nil {
			tm.Stop()
		}
		tm = time.AfterFunc(time.Hour, func() { _, _ = p, q; mk(g) })
	})
	tm.Stop()
	assert.Equal(t, handAllocs, allocs, "allocations")
	assert.Equal(t, handBytes, bytes, "bytes")
}

// Within keeps a pending arming that fires no later than asked, and arms
// anew when asked for an earlier firing, when nothing is pending, after
// the pending one fired (Fired), after Arm (its firing time is not
// known) and after Stop. In a synctest bubble, time moves only when the
// test sleeps.
func TestWithin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ch := make(chan fired, 8)
		var s Slot

		Within(&s, time.Hour, send{ch, "first"})
		assert.True(t, s.Current(1), "nothing pending: armed")
		first := s.t

		time.Sleep(time.Minute)
		Within(&s, time.Hour, send{ch, "later"})
		assert.True(t, s.Current(1), "the pending one fires earlier than asked: kept")
		assert.Same(t, first, s.t)
		Within(&s, 59*time.Minute, send{ch, "same"})
		assert.True(t, s.Current(1), "the pending one fires when asked: kept")

		Within(&s, time.Minute, send{ch, "sooner"})
		assert.True(t, s.Current(2), "asked for an earlier firing: armed anew")
		assert.False(t, first.Stop(), "the replaced timer was stopped")

		Within(&s, -time.Hour, send{ch, "now"})
		assert.True(t, s.Current(3), "asked to fire at once, earlier than pending: armed anew")
		assert.Equal(t, fired{"now", 3}, <-ch)
		assert.False(t, s.Fired(2), "a stale generation")
		assert.True(t, s.Fired(3), "the latest arming's firing")
		assert.Nil(t, s.t)
		assert.True(t, s.Current(3), "Fired leaves the generation current")

		Within(&s, time.Hour, send{ch, "after firing"})
		assert.True(t, s.Current(4), "nothing pending once fired: armed anew")

		Arm(&s, time.Minute, send{ch, "armed"})
		Within(&s, time.Hour, send{ch, "after Arm"})
		assert.True(t, s.Current(6), "Arm's firing time is not known: armed anew, though it would fire sooner")

		s.Stop()
		Within(&s, time.Hour, send{ch, "after Stop"})
		assert.True(t, s.Current(8), "stopped: armed anew")
		s.Stop()
		assert.Empty(t, ch, "only the one at once fired")
	})
}
