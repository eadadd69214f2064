package forecast

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestStageString(t *testing.T) {
	for s, want := range map[Stage]string{StagePending: "pending", StageQueued: "queued", StageRetrying: "retrying",
		StageSent: "sent", StageDone: "done", Stage(9): "Stage(9)"} {
		assert.Equal(t, want, s.String())
	}
	for s, want := range map[Stage]bool{StagePending: true, StageQueued: true, StageRetrying: true, StageSent: false, StageDone: false} {
		assert.Equal(t, want, s.Waiting(), s.String())
	}
}

// etaNow is the tests' now; the window's round trip is etaRTT.
var etaNow = time.Unix(1000, 0)

const etaRTT = 10 * time.Millisecond

func at(d time.Duration) time.Time { return etaNow.Add(d) }

// stamped is a request of actor's bucket (a known one: 5 per second) as
// its actor stamps it, submitted at sub (from now), due at due.
func stamped(id uint64, actor string, sub, due time.Duration) Waiter {
	return Waiter{ID: id, Submitted: at(sub).UnixNano(), Due: at(due).UnixNano(), Pace: int64(time.Second), Limit: 5,
		Actor: actor, Route: "POST /m", Target: -1}
}

// queued is an asked request in its bucket's queue, its bucket letting
// it go at start (from now), known.
func queued(id uint64, actor string, start time.Duration) Asked {
	w := stamped(id, actor, -time.Second+time.Duration(id)*time.Millisecond, 0)
	return Asked{Part: Part{Stage: StageQueued, Start: at(start), End: at(start + time.Second), Known: true}, Waiter: w}
}

// live is another request, waiting in window 0.
func live(w Waiter) Live { return Live{Waiter: w} }

// oneSlot is a global window of one slot per second, with what waits for it.
func oneSlot(lives ...Live) Global {
	return Global{Live: slices.Values(lives), Windows: []Window{{Limiter: fixedLimiter{fixedSlots{n: 1, per: time.Second}}}}, RTT: etaRTT}
}

// fixedLimiter is a replayed global window (a Source) that is a Limiter
// too.
type fixedLimiter struct{ fixedSlots }

func (fixedLimiter) Wait(time.Time) time.Duration { panic("a Source is replayed, not asked its wait") }

// waitOnly is a custom global limiter: it tells only its wait.
type waitOnly time.Duration

func (w waitOnly) Wait(time.Time) time.Duration { return time.Duration(w) }

// The bucket's part by stage: done says nothing more, sent says when, a
// pending request may go now, a queued one not before now nor before its
// bucket lets it, a retry's backoff bounds it.
func TestAssembleStages(t *testing.T) {
	none := Global{Live: func(func(Live) bool) {
		t.Fatal("the live requests are read with no asked one waiting for a global slot")
	}}
	done := queued(1, "a", time.Second)
	done.Stage, done.Known, done.Pos = StageDone, true, 3
	sent := Asked{Part: Part{Stage: StageSent, Start: at(-time.Second), End: at(-time.Second), Known: true}}
	exempt := queued(2, "a", 2*time.Second)
	exempt.Exempt = true
	got := Assemble([]Asked{done, sent, exempt}, none, etaNow)
	assert.Equal(t, []ETA{
		{Stage: StageDone},
		{Stage: StageSent, Start: at(-time.Second), End: at(-time.Second), Limit: BoundBucket, Known: true},
		{Stage: StageQueued, Start: at(2 * time.Second), End: at(3 * time.Second), Limit: BoundBucket, Known: true},
	}, got)

	pending := Asked{Part: Part{Stage: StagePending, Start: at(5 * time.Second), End: at(6 * time.Second)}, Exempt: true}
	late := queued(3, "a", -2*time.Second) // its window began before now
	late.End, late.Pos, late.Exempt = at(-time.Second), 4, true
	retry := queued(4, "a", time.Second)
	retry.Stage, retry.Retry, retry.End, retry.Known, retry.Exempt = StageRetrying, true, at(time.Second), false, true
	granted := queued(5, "a", time.Second)
	granted.Granted = true
	got = Assemble([]Asked{pending, late, retry, granted}, none, etaNow)
	assert.Equal(t, []ETA{
		{Stage: StagePending, Start: etaNow, End: etaNow, Limit: BoundBucket},
		{Stage: StageQueued, Position: 4, Start: etaNow, End: etaNow, Limit: BoundBucket, Known: true},
		{Stage: StageRetrying, Start: at(time.Second), End: at(time.Second), Limit: BoundRetry},
		{Stage: StageQueued, Start: at(time.Second), End: at(2 * time.Second), Limit: BoundBucket, Known: true},
	}, got)
}

// A declared window sets the ETA when it is later than the bucket's, or
// when the bucket's limit is unknown and the window has not ended; the
// earliest a bucket may reopen moves only an ETA its bucket sets.
func TestAssembleDeclaredAndEarly(t *testing.T) {
	none := Global{}
	declared := func(a Asked, start, end time.Duration) Asked {
		a.Exempt, a.Declared = true, Declared{Start: at(start), End: at(end), Name: "dms", OK: true}
		return a
	}
	unknown := func(a Asked) Asked {
		a.Known, a.Start, a.End = false, etaNow, etaNow
		return a
	}
	got := Assemble([]Asked{
		declared(queued(1, "a", time.Second), 2*time.Second, 3*time.Second),        // later: it sets the ETA
		declared(queued(2, "a", time.Second), 500*time.Millisecond, 3*time.Second), // earlier, bucket known: not
		declared(unknown(queued(3, "a", 0)), -time.Second, 3*time.Second),          // unknown bucket: its window
		declared(unknown(queued(4, "a", 0)), -2*time.Second, -time.Second),         // unknown, but ended: not
		func() Asked {
			a := declared(queued(5, "a", 0), 2*time.Second, 3*time.Second)
			a.Declared.OK = false
			return a
		}(), // none
	}, none, etaNow)
	assert.Equal(t, []ETA{
		{Stage: StageQueued, Start: at(2 * time.Second), End: at(3 * time.Second), Limit: BoundDeclared, Declared: "dms", Known: true},
		{Stage: StageQueued, Start: at(time.Second), End: at(2 * time.Second), Limit: BoundBucket, Known: true},
		{Stage: StageQueued, Start: etaNow, End: at(3 * time.Second), Limit: BoundDeclared, Declared: "dms"},
		{Stage: StageQueued, Start: etaNow, End: etaNow, Limit: BoundBucket},
		{Stage: StageQueued, Start: etaNow, End: at(time.Second), Limit: BoundBucket, Known: true},
	}, got)

	early := func(a Asked, e time.Duration) Asked {
		a.Exempt, a.Early = true, at(e)
		return a
	}
	retry := early(queued(4, "a", 2*time.Second), time.Second)
	retry.Retry = true
	got = Assemble([]Asked{
		early(queued(1, "a", 2*time.Second), time.Second),  // from the earliest its bucket may reopen
		early(queued(2, "a", 2*time.Second), -time.Second), // not before now
		declared(early(queued(3, "a", 2*time.Second), time.Second), 3*time.Second, 4*time.Second),
		retry,
		func() Asked { a := queued(5, "a", 2*time.Second); a.Exempt = true; return a }(), // zero: Start
	}, none, etaNow)
	assert.Equal(t, []time.Time{at(time.Second), etaNow, at(3 * time.Second), at(2 * time.Second), at(2 * time.Second)},
		[]time.Time{got[0].Start, got[1].Start, got[2].Start, got[3].Start, got[4].Start})
	assert.Equal(t, at(3*time.Second), got[0].End, "the end stays")
}

// The global window raises an ETA only when it held the request past the
// time its other limits let it go: from the earliest it may go to one
// period after the forecast. A declared limit it raises is no longer named.
func TestAssembleGlobalRaise(t *testing.T) {
	// x, submitted first, takes the one slot now; a the next, a round
	// trip and a period later.
	x := live(stamped(9, "x", -2*time.Second, 0))
	got := Assemble([]Asked{queued(1, "a", 0)}, oneSlot(x), etaNow)
	assert.Equal(t, ETA{Stage: StageQueued, Start: etaNow, End: at(etaRTT + 2*time.Second), Limit: BoundGlobal, Known: true}, got[0])

	// y, submitted after a, is still ready when a takes the burst's last
	// slot: a may slip to the next burst, a round trip and a period on.
	y := live(stamped(10, "y", 0, 0))
	got = Assemble([]Asked{queued(1, "a", 0)}, oneSlot(x, y), etaNow)
	assert.Equal(t, ETA{Stage: StageQueued, Start: etaNow, End: at(2*etaRTT + 3*time.Second), Limit: BoundGlobal, Known: true}, got[0])

	// Alone, it takes the slot when its bucket lets it: its bucket's ETA.
	got = Assemble([]Asked{queued(1, "a", 0)}, oneSlot(), etaNow)
	assert.Equal(t, ETA{Stage: StageQueued, Start: etaNow, End: at(time.Second), Limit: BoundBucket, Known: true}, got[0])

	// Its declared window lets it go at 0.5 s; the window, at 1.01 s.
	a := queued(1, "a", 0)
	a.Declared = Declared{Start: at(500 * time.Millisecond), End: at(1500 * time.Millisecond), Name: "dms", OK: true}
	got = Assemble([]Asked{a}, oneSlot(x), etaNow)
	assert.Equal(t, ETA{Stage: StageQueued, Start: at(etaRTT/2 + time.Second), End: at(etaRTT + 2*time.Second), Limit: BoundGlobal, Known: true}, got[0])

	// Its bucket (one a second) lets it go two windows after b, its
	// bucket's first call: the replay opens b2's window at its stamp,
	// but c's a pace and a round trip after b2's slot, later than the
	// bucket's stamp; the window did not hold it: its bucket's ETA
	// stands.
	one := func(w Waiter) Waiter { w.Limit = 1; return w }
	b := live(one(stamped(2, "a", -3*time.Second, 0)))
	b2 := live(one(stamped(3, "a", -2*time.Second, time.Second)))
	c := queued(4, "a", 2*time.Second)
	c.Waiter.Limit = 1
	g := oneSlot(b, b2)
	g.Windows[0].Limiter = fixedLimiter{fixedSlots{n: 5, per: time.Second}}
	got = Assemble([]Asked{c}, g, etaNow)
	assert.Equal(t, ETA{Stage: StageQueued, Start: at(2 * time.Second), End: at(3 * time.Second), Limit: BoundBucket, Known: true}, got[0])

	// Its bucket holds it to 5 s (a pause), when a slot is free: the
	// window held its lane before, but not it.
	late := c
	late.Start, late.End = at(5*time.Second), at(6*time.Second)
	got = Assemble([]Asked{late}, oneSlot(b, b2), etaNow)
	assert.Equal(t, ETA{Stage: StageQueued, Start: at(5 * time.Second), End: at(6 * time.Second), Limit: BoundBucket, Known: true}, got[0])

	// With one slot a second, the window holds b2 to 1.01 s, and c to
	// 2.02 s; it may go from when its window opens: a pace after b2's
	// slot, and a round trip more until the server's clock is known.
	g = oneSlot(b, b2)
	got = Assemble([]Asked{c}, g, etaNow)
	assert.Equal(t, ETA{Stage: StageQueued, Start: at(2*etaRTT + 2*time.Second), End: at(2*etaRTT + 3*time.Second), Limit: BoundGlobal, Known: true}, got[0])
	g = oneSlot(b, b2)
	g.ClockKnown = true
	got = Assemble([]Asked{c}, g, etaNow)
	assert.Equal(t, ETA{Stage: StageQueued, Start: at(etaRTT + 2*time.Second), End: at(2*etaRTT + 3*time.Second), Limit: BoundGlobal, Known: true}, got[0])
}

// Which requests the replay counts: the asked ones once, the live ones
// as they published it, each in its own window; the granted slots that
// no request holds are served first.
func TestAssembleGlobalWaiters(t *testing.T) {
	x := live(stamped(9, "x", -2*time.Second, 0))
	raised := func(g Global, asked ...Asked) bool {
		return Assemble(asked, g, etaNow)[len(asked)-1].Limit == BoundGlobal
	}

	// A granted slot no request holds goes to x, the slot to a.
	g := oneSlot(x)
	g.Windows[0].Granted = 1
	assert.False(t, raised(g, queued(1, "a", 0)))
	// Held by a live request, or by an asked one: x takes the slot.
	holder := live(stamped(8, "h", -3*time.Second, 0))
	holder.Holding = true
	g.Live = slices.Values([]Live{x, holder})
	assert.True(t, raised(g, queued(1, "a", 0)))
	h := queued(8, "h", 0)
	h.Granted = true
	g.Live = slices.Values([]Live{x})
	assert.True(t, raised(g, h, queued(1, "a", 0)))
	// An asked request is counted once, not again as a live one.
	a := queued(1, "a", 0)
	self := live(a.Waiter)
	self.Holding = true
	g.Live = slices.Values([]Live{x, self})
	assert.False(t, raised(g, a))
	// A request on the wire waits for no slot.
	wire := live(stamped(7, "w", -3*time.Second, 0))
	wire.Due = DueNever
	assert.False(t, raised(oneSlot(wire), queued(1, "a", 0)))
	// Not yet queued, it may go at once.
	unset := live(stamped(7, "w", -3*time.Second, 0))
	unset.Due = DueUnset
	assert.True(t, raised(oneSlot(unset), queued(1, "a", 0)))
	// An exempt request needs no slot.
	ex := queued(1, "a", 0)
	ex.Exempt = true
	assert.False(t, raised(oneSlot(x), ex))
	assert.Equal(t, []string{BoundBucket, BoundGlobal}, limits(Assemble([]Asked{ex, queued(2, "b", 0)}, oneSlot(x), etaNow)))

	// x waits in the other window.
	g = oneSlot()
	g.Windows = append(g.Windows, g.Windows[0])
	other := x
	other.Window = 1
	g.Live = slices.Values([]Live{other})
	assert.False(t, raised(g, queued(1, "a", 0)))
	a1 := queued(1, "a", 0)
	a1.Window = 1
	assert.True(t, raised(g, a1))

	// An unknown bucket's pioneer goes before x unless it is out already:
	// then a goes when its bucket lets it, behind x.
	u := queued(1, "u", 0)
	u.Known, u.Waiter.Pace, u.Waiter.Limit = false, 0, 0
	assert.False(t, raised(oneSlot(x), u))
	pioneer := live(u.Waiter)
	pioneer.ID, pioneer.Due = 0, DueNever
	assert.True(t, raised(oneSlot(x, pioneer), u))
	// Under a declared window, its ETA is no mere lower bound: it is no
	// pioneer's.
	u.Declared = Declared{Start: at(-time.Second), End: at(3 * time.Second), Name: "dms", OK: true}
	assert.True(t, raised(oneSlot(x), u))
}

func limits(es []ETA) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Limit)
	}
	return out
}

// A custom limiter, which cannot be replayed, tells only its wait for
// the next slot: it raises the ETAs it holds later.
func TestAssembleCustomLimiter(t *testing.T) {
	g := Global{Windows: []Window{{Limiter: waitOnly(3 * time.Second)}}}
	got := Assemble([]Asked{queued(1, "a", time.Second), queued(2, "a", 4*time.Second)}, g, etaNow)
	assert.Equal(t, []ETA{
		{Stage: StageQueued, Start: at(3 * time.Second), End: at(3 * time.Second), Limit: BoundGlobal, Known: true},
		{Stage: StageQueued, Start: at(4 * time.Second), End: at(5 * time.Second), Limit: BoundBucket, Known: true},
	}, got)
}

func TestObserveRTT(t *testing.T) {
	ms := time.Millisecond
	assert.Equal(t, 40*ms, ObserveRTT(0, 40*ms), "the first answer")
	assert.Equal(t, 40*ms, ObserveRTT(40*ms, 0), "no round trip")
	assert.Equal(t, 40*ms, ObserveRTT(40*ms, -ms))
	assert.Equal(t, 20*ms, ObserveRTT(40*ms, 20*ms), "a shorter one at once")
	assert.Equal(t, 41*ms, ObserveRTT(40*ms, 72*ms), "a longer one by 1/32")
}
