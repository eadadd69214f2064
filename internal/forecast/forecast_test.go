package forecast

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admission"
)

// fixedSlots is a global window with n free slots per period from now.
type fixedSlots struct {
	n   int
	per time.Duration
}

func (f fixedSlots) Limit() (int, time.Duration) { return f.n, f.per }
func (f fixedSlots) Forecast(now time.Time, k int) time.Time {
	return now.Add(time.Duration(k/f.n) * f.per)
}

// forecastAt is Replay's forecast times.
func forecastAt(ws []Waiter, src Source, now time.Time, rtt time.Duration, held int, onWire map[Lane]bool) []int64 {
	var out []int64
	for _, s := range Replay(ws, src, now, rtt, rtt/2, held, onWire, Line{}) {
		out = append(out, s.At)
	}
	return out
}

// The replay serves actors, not calls: a channel's ready calls go
// together, ahead of other channels' calls submitted between them; a long
// backlog goes first; an unknown lane's queue waits for its pioneer.
func TestAdmissionForecast(t *testing.T) {
	now := time.Unix(1000, 0)
	ns := func(d time.Duration) int64 { return now.Add(d).UnixNano() }
	w := func(id uint64, actor string, due time.Duration, guess bool) Waiter {
		pace := int64(2 * time.Second) // each bucket: windows 2 s apart
		if guess {
			pace = 0
		}
		return Waiter{ID: id, Submitted: ns(time.Duration(id) * time.Microsecond), Due: ns(due), Guess: guess, Pace: pace, Actor: actor, Route: "POST /m", Target: int(id)}
	}
	src := fixedSlots{n: 2, per: time.Second}
	rtt := 10 * time.Millisecond

	t.Run("one grant per channel", func(t *testing.T) {
		// Submitted a1 b1 c1 a2 b2 c2: each channel's two go together.
		ws := []Waiter{w(0, "a", 0, false), w(1, "b", 0, false), w(2, "c", 0, false), w(3, "a", 0, false), w(4, "b", 0, false), w(5, "c", 0, false)}
		at := forecastAt(ws, src, now, rtt, 0, nil)
		step := rtt + time.Second
		assert.Equal(t, []int64{ns(0), ns(step), ns(2 * step), ns(0), ns(step), ns(2 * step)}, at)
	})
	t.Run("the longest backlog first", func(t *testing.T) {
		// h was submitted last, but its bucket holds its queue for a window.
		ws := []Waiter{w(0, "a", 0, false), w(1, "b", 0, false), w(2, "h", 0, false), w(3, "h", 2*time.Second, false)}
		at := forecastAt(ws, src, now, rtt, 0, nil)
		assert.Equal(t, ns(0), at[2], "the hot channel's ready call goes first")
		assert.Equal(t, ns(0), at[0])
		assert.Equal(t, ns(rtt+time.Second), at[1], "then the cold one behind it")
		assert.Equal(t, ns(2*time.Second), at[3], "not before its bucket lets it")
	})
	t.Run("an unknown bucket's queue waits for its pioneer", func(t *testing.T) {
		ws := []Waiter{w(0, "u", 0, true), w(1, "u", 0, true), w(2, "b", 0, false), w(3, "c", 0, false)}
		at := forecastAt(ws, src, now, rtt, 0, nil)
		assert.Equal(t, ns(0), at[0], "the pioneer")
		assert.Equal(t, ns(0), at[2], "b takes the other free slot")
		assert.Equal(t, ns(rtt+time.Second), at[3])
		assert.Equal(t, ns(rtt+time.Second), at[1], "after its pioneer's answer, behind c (submitted first)")
		at = forecastAt(ws, src, now, rtt, 0, map[Lane]bool{{"u", "POST /m"}: true})
		assert.Equal(t, ns(0), at[0], "with its pioneer out, the queue goes as it may")
	})
	t.Run("a pioneer goes before a longer known backlog", func(t *testing.T) {
		// h and k hold a queue for a window each; u, submitted last, is a
		// pioneer; two slots a second.
		ws := []Waiter{w(0, "h", 0, false), w(1, "h", 2*time.Second, false), w(2, "k", 0, false), w(3, "k", 2*time.Second, false), w(4, "u", 0, true)}
		at := forecastAt(ws, src, now, rtt, 0, nil)
		assert.Equal(t, ns(0), at[4], "the pioneer first (admission.PioneerFirst)")
		assert.Equal(t, ns(0), at[0], "then the longest backlog submitted first")
		assert.Equal(t, ns(rtt+time.Second), at[2], "the other backlog a second later")
	})
	// One bulk channel submitted first, then 10 interactive ones.
	bulkBehindInteractions := func() []Waiter {
		ws := []Waiter{w(0, "bulk", 0, false)}
		ws[0].Class = admission.Bulk
		for id := uint64(1); id <= 10; id++ {
			x := w(id, "i"+string(rune('a'+id)), 0, false)
			x.Class = admission.Interactive
			ws = append(ws, x)
		}
		return ws
	}
	t.Run("a higher class first, a lower one keeps its share", func(t *testing.T) {
		// One bulk channel submitted first, then 10 interactive ones; one
		// slot per period: seven interactive calls, then the bulk one
		// (admission.Share), then the rest.
		one := fixedSlots{n: 1, per: time.Second}
		ws := bulkBehindInteractions()
		at := forecastAt(ws, one, now, rtt, 0, nil)
		step := rtt + time.Second
		assert.Equal(t, ns(time.Duration(admission.ShareEvery-1)*step), at[0], "the bulk call takes the eighth slot")
		for id := 1; id <= 10; id++ {
			k := id - 1
			if id >= admission.ShareEvery {
				k++ // behind the bulk call's slot
			}
			assert.Equal(t, ns(time.Duration(k)*step), at[id], "interactive %d", id)
		}
	})
	t.Run("the share goes on from the line's count", func(t *testing.T) {
		// The same, but the line has handed six slots in a row to a higher
		// class while a lower one waited: the bulk call takes the second
		// slot, not the eighth.
		one := fixedSlots{n: 1, per: time.Second}
		ws := bulkBehindInteractions()
		var line Line
		for range admission.ShareEvery - 2 {
			line.Share.Served(1, false, true)
		}
		var at []int64
		for _, s := range Replay(ws, one, now, rtt, rtt/2, 0, nil, line) {
			at = append(at, s.At)
		}
		step := rtt + time.Second
		assert.Equal(t, ns(step), at[0], "the bulk call takes the second slot")
		assert.Equal(t, ns(0), at[1])
		assert.Equal(t, ns(2*step), at[2])
	})
	t.Run("held slots go first", func(t *testing.T) {
		ws := []Waiter{w(0, "a", 0, false), w(1, "b", 0, false), w(2, "c", 0, false)}
		at := forecastAt(ws, src, now, rtt, 1, nil)
		assert.Equal(t, []int64{ns(0), ns(0), ns(0)}, at, "one granted slot and two free ones")
	})
}

// A bucket's calls become ready window by window: a window whose calls
// the global limit holds past the bucket's reset opens only when its
// first call goes, a window that holds for a probe lets one call go and
// the rest a round trip after it, and an actor served in part keeps its
// place in the admission queue.
func TestAdmissionForecastFollowsTheBucket(t *testing.T) {
	now := time.Unix(1000, 0)
	ns := func(d time.Duration) int64 { return now.Add(d).UnixNano() }
	const pace = 500 * time.Millisecond
	// A bucket of 2 per 500 ms with a fresh window: its calls due by
	// window, as its actor stamps them.
	lane := func(actor string, first uint64, count int, probe bool) []Waiter {
		var ws []Waiter
		for k := range count {
			id := first + uint64(k)
			ws = append(ws, Waiter{ID: id, Submitted: ns(time.Duration(id) * time.Microsecond),
				Due: ns(time.Duration(k/2) * pace), Pace: int64(pace), Limit: 2, Probe: probe,
				Actor: actor, Route: "POST /m", Target: int(id)})
		}
		return ws
	}
	rtt := 10 * time.Millisecond

	t.Run("a window held past its reset opens late", func(t *testing.T) {
		// One global slot per second: b's first window's calls go at 0
		// and 1.01 s, so its second window opens at 1.01 s + pace, not at
		// 500 ms as stamped; its third a window after that.
		ws := lane("b", 0, 5, false)
		at := forecastAt(ws, fixedSlots{n: 1, per: time.Second}, now, rtt, 0, nil)
		step := rtt + time.Second
		assert.Equal(t, ns(0), at[0])
		assert.Equal(t, ns(step), at[1], "held by the global limit past the reset")
		assert.Equal(t, ns(2*step), at[2], "the next window: the next free slot")
		assert.Equal(t, ns(3*step), at[3])
		assert.Equal(t, ns(4*step), at[4])

		// With room in the global window, the second window opens one
		// pace (and half a round trip) after its first call went.
		at = forecastAt(lane("b", 0, 5, false), fixedSlots{n: 10, per: 100 * time.Millisecond}, now, rtt, 0, nil)
		assert.Equal(t, []int64{ns(0), ns(0), ns(pace), ns(pace), ns(2*pace + rtt/2)}, at,
			"the third window starts from the second's first call, pace + rtt/2 after it")
	})
	t.Run("a window that holds for a probe", func(t *testing.T) {
		at := forecastAt(lane("b", 0, 4, true), fixedSlots{n: 10, per: 100 * time.Millisecond}, now, rtt, 0, nil)
		assert.Equal(t, []int64{ns(0), ns(0), ns(pace), ns(pace + rtt)}, at,
			"the second window's probe goes alone, the rest after its answer")
	})
	t.Run("a call released in a later window than its due", func(t *testing.T) {
		// Its actor stamped the first call for the next window (500 ms)
		// and the asked one, behind it, for now: the lane's calls go in
		// order, so the replay releases both at 500 ms. The caller
		// compares the slot with the due it gave: the input stands, or a
		// call the replay held a window went out with its bucket's ETA
		// (bench/cmd/eta's global-bound backlogs: a third of the ETAs, 99%
		// of them late).
		ws := lane("b", 0, 2, false)
		ws[0].Due, ws[1].Due = ns(pace), ns(0)
		in := slices.Clone(ws)
		got := Replay(ws, fixedSlots{n: 10, per: time.Second}, now, rtt, rtt/2, 0, nil, Line{})
		assert.Equal(t, in, ws, "the input stands")
		assert.Equal(t, ns(pace), got[1].At)
		assert.Greater(t, got[1].At, ws[1].Due, "later than the due it was given")
		assert.False(t, got[1].Waited, "by its lane, not by the window: its bucket's ETA stands")

		// The same with a window of one slot a second: its lane's first
		// call waits for it, and every later window of the lane opens late.
		got = Replay(ws, fixedSlots{n: 1, per: time.Second}, now, rtt, rtt/2, 0, nil, Line{})
		assert.Equal(t, ns(pace), got[0].At)
		assert.Equal(t, ns(pace+rtt+time.Second), got[1].At)
		assert.True(t, got[1].Waited, "the window held it: its ETA is raised")
	})
	t.Run("a place in the queue stands", func(t *testing.T) {
		// a was submitted after b, but waits in the queue with an
		// earlier deadline (served in part before): it goes first.
		ws := append(lane("b", 0, 1, false), lane("a", 5, 1, false)...)
		src := fixedSlots{n: 1, per: time.Second}
		at := forecastAt(ws, src, now, rtt, 0, nil)
		assert.Equal(t, []int64{ns(0), ns(rtt + time.Second)}, at, "in submission order")
		got := Replay(ws, src, now, rtt, rtt/2, 0, nil, Line{Places: map[string]admission.Place{"a": {Deadline: time.Unix(0, ns(-time.Second)), First: 1}}})
		assert.Equal(t, ns(0), got[1].At, "a keeps its place")
		assert.Equal(t, ns(rtt+time.Second), got[0].At)
	})
}

// Whatever the calls, the replay keeps its window: no more than n calls
// start in any period (a slot is held a round trip and a period), none
// before it is due, every asked call gets a time.
func TestAdmissionForecastKeepsTheWindow(t *testing.T) {
	now := time.Unix(1000, 0)
	rng := rand.New(rand.NewPCG(3, 9))
	for round := range 300 {
		n := 1 + rng.IntN(5)
		src := fixedSlots{n: n, per: 100 * time.Millisecond}
		rtt := time.Duration(rng.IntN(20)) * time.Millisecond
		count := rng.IntN(40)
		ws := make([]Waiter, count)
		for i := range ws {
			ws[i] = Waiter{
				ID: uint64(i), Submitted: now.Add(-time.Duration(rng.IntN(1000)) * time.Millisecond).UnixNano(),
				Due: now.Add(time.Duration(rng.IntN(8)*50) * time.Millisecond).UnixNano(), Guess: rng.IntN(4) == 0,
				Actor: string(rune('a' + rng.IntN(5))), Target: -1, Pace: int64(rng.IntN(3)) * int64(50*time.Millisecond),
				Limit: rng.IntN(3), Probe: rng.IntN(3) == 0,
			}
			ws[i].Route = "POST /m"
			if rng.IntN(2) == 0 {
				ws[i].Target = i
			}
		}
		in := slices.Clone(ws)
		var places map[string]admission.Place
		if rng.IntN(2) == 0 {
			places = map[string]admission.Place{string(rune('a' + rng.IntN(5))): {Deadline: now.Add(-time.Duration(rng.IntN(2000)) * time.Millisecond), First: uint64(rng.IntN(40))}}
		}
		got := Replay(ws, src, now, rtt, rtt/2, 0, nil, Line{Places: places})
		at := make([]int64, len(got))
		for i, g := range got {
			at[i] = g.At
			if g.At != 0 {
				require.LessOrEqual(t, g.Early, g.At, "round %d: call %d: earliest first", round, i)
				require.GreaterOrEqual(t, g.Early, in[i].Due, "round %d: call %d: not before it is due, even at the earliest", round, i)
				require.GreaterOrEqual(t, g.Late, g.At, "round %d: call %d: latest last", round, i)
				require.LessOrEqual(t, g.Late, g.At+int64(rtt+src.per), "round %d: call %d: at the latest in the next burst", round, i)
			}
		}
		var starts []int64
		for i, a := range at {
			if in[i].Target >= 0 {
				require.NotZero(t, a, "round %d: call %d has a time", round, i)
			}
			if a != 0 {
				require.GreaterOrEqual(t, a, in[i].Due, "round %d: call %d not before it is due", round, i)
				starts = append(starts, a)
			}
		}
		slices.Sort(starts)
		hold := int64(rtt + src.per)
		for i := range starts {
			if i+n < len(starts) {
				require.GreaterOrEqual(t, starts[i+n], starts[i]+hold, "round %d: %d calls within one hold", round, n+1)
			}
		}
	}
}

// The replay keeps slots as the live keeps do (lanes.Keep,
// admission.Queue.Soon): a lane reopening within the global period, ahead
// in line, with a window of backlog after the reopening one, gets the
// slots it would find missing then, and a colder call waits for the next;
// a lane whose queue fits its reopening window keeps none.
func TestAdmissionForecastKeepsSlotsForAReopening(t *testing.T) {
	now := time.Unix(1000, 0)
	ns := func(d time.Duration) int64 { return now.Add(d).UnixNano() }
	src := fixedSlots{n: 2, per: 100 * time.Millisecond} // two slots, free now
	rtt := 10 * time.Millisecond
	w := func(id uint64, actor string, due time.Duration, limit int, pace time.Duration) Waiter {
		return Waiter{ID: id, Submitted: ns(time.Duration(id) * time.Microsecond), Due: ns(due), Limit: limit, Pace: int64(pace),
			Actor: actor, Route: "POST /m", Target: int(id)}
	}
	hot := func(calls int) []Waiter { // its window reopens at 60 ms: 2 a window, windows 500 ms apart
		var ws []Waiter
		for i := range calls {
			ws = append(ws, w(uint64(10+i), "h", 60*time.Millisecond+time.Duration(i/2)*500*time.Millisecond, 2, 500*time.Millisecond))
		}
		return ws
	}
	cold := []Waiter{w(0, "c", 0, 0, 0), w(1, "c", 0, 0, 0)}

	at := forecastAt(append(slices.Clone(cold), hot(4)...), src, now, rtt, 0, nil)
	assert.Equal(t, ns(60*time.Millisecond), at[2], "the hot lane takes the slots kept for its reopening")
	assert.Equal(t, ns(60*time.Millisecond), at[3])
	assert.Equal(t, ns(170*time.Millisecond), at[0], "the cold calls wait for those slots to free, a round trip and a period later")
	assert.Equal(t, ns(170*time.Millisecond), at[1])

	short := hot(2)
	for i := range short {
		short[i].Submitted = ns(-time.Second) // ahead of the cold calls in line
	}
	at = forecastAt(append(slices.Clone(cold), short...), src, now, rtt, 0, nil)
	assert.Equal(t, []int64{ns(0), ns(0), ns(110 * time.Millisecond), ns(110 * time.Millisecond)}, at,
		"its queue fits its reopening window: no keep, the cold calls go now")

	bulk := hot(4)
	for i := range bulk {
		bulk[i].Class = admission.Bulk
	}
	at = forecastAt(append(slices.Clone(cold), bulk...), src, now, rtt, 0, nil)
	assert.Equal(t, []int64{ns(0), ns(0)}, at[:2], "a lane behind the cold calls in line (a lower class) keeps nothing from them")
}

// The calls served at a burst's cut get both bursts: the last of a burst
// with calls still ready behind it may slip to the next one, and the first
// of a burst that was passed over by the previous one may have gone in it.
// The others keep one burst.
func TestAdmissionForecastCut(t *testing.T) {
	now := time.Unix(1000, 0)
	ns := func(d time.Duration) int64 { return now.Add(d).UnixNano() }
	rtt, per := 10*time.Millisecond, time.Second
	next := rtt + per
	src := fixedSlots{n: 2, per: per} // edge: one call on each side
	w := func(id uint64, actor string) Waiter {
		return Waiter{ID: id, Submitted: ns(time.Duration(id) * time.Microsecond), Due: ns(0), Actor: actor, Route: "POST /m", Target: int(id)}
	}
	got := Replay([]Waiter{w(0, "a"), w(1, "b"), w(2, "c"), w(3, "d")}, src, now, rtt, rtt/2, 0, nil, Line{})
	want := []Slot{
		{At: ns(0), Early: ns(0), Late: ns(0)},                               // first of the burst, two slots left
		{At: ns(0), Early: ns(0), Late: ns(next)},                            // last of the burst, c and d behind it
		{At: ns(next), Early: ns(0), Late: ns(next), Waited: true},           // first of the next one, passed over
		{At: ns(next), Early: ns(rtt/2 + per), Late: ns(next), Waited: true}, // last of it, nothing behind it
	}
	assert.Equal(t, want, got)

	// Alone, a call is at no cut.
	got = Replay([]Waiter{w(0, "a")}, src, now, rtt, rtt/2, 0, nil, Line{})
	assert.Equal(t, []Slot{{At: ns(0), Early: ns(0), Late: ns(0)}}, got)
}

// spreadSlots is a global window of n slots per period whose slots free
// one by one over the period from now.
type spreadSlots struct {
	n   int
	per time.Duration
}

func (f spreadSlots) Limit() (int, time.Duration) { return f.n, f.per }
func (f spreadSlots) Forecast(now time.Time, k int) time.Time {
	return now.Add(time.Duration(k) * f.per / time.Duration(f.n))
}

// BenchmarkReplay is one ETA's replay of a global-bound backlog: 1,000
// calls over 100 channels of 5 per second (two windows each), a window of
// 250 per second whose slots free one by one, 60 actors in line, one asked
// call near the end.
func BenchmarkReplay(b *testing.B) {
	now := time.Unix(1000, 0)
	var ws []Waiter
	for ch := range 100 {
		actor := "channel_id=" + strconv.Itoa(ch)
		for k := range 10 {
			id := uint64(ch*10 + k)
			ws = append(ws, Waiter{ID: id, Submitted: now.Add(-time.Second).UnixNano() + int64(id), Due: now.Add(time.Duration(k/5) * time.Second).UnixNano(),
				Pace: int64(time.Second), Limit: 5, Actor: actor, Route: "POST /m", Target: -1})
		}
	}
	ws[995].Target = 0
	line := Line{Places: map[string]admission.Place{}}
	for ch := range 60 {
		line.Places["channel_id="+strconv.Itoa(ch)] = admission.Place{Deadline: admission.Deadline(now, now.Add(-time.Second), time.Second, false), First: uint64(ch * 10)}
	}
	src := spreadSlots{n: 250, per: time.Second}
	b.ReportAllocs()
	for b.Loop() {
		Replay(ws, src, now, 20*time.Millisecond, 0, 0, nil, line)
	}
}
