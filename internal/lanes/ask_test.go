package lanes

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/ratelimit"
)

// readiness is a bucket actor's ready rule as the tests give it: the
// lane's own count (Peek) unless set says otherwise; each call recorded.
type readiness struct {
	set   map[*lane]verdict
	asked []*lane
}

type verdict struct {
	ok   bool
	wait time.Duration
}

func (r *readiness) ready(l *lane, now time.Time) (bool, time.Duration) {
	r.asked = append(r.asked, l)
	if v, ok := r.set[l]; ok {
		return v.ok, v.wait
	}
	return Peek(l.State, now)
}

// queued makes a lane of count st at now with the requests given, in that
// order (not by class: a lane's order may differ after a share or a
// retry).
func queued(st ratelimit.Bucket, window time.Duration, cs ...*item) *lane {
	l := newLane("k", "GET /x", st, t0, nil)
	l.Window = window
	for _, c := range cs {
		l.Line.NoteClass(c)
		l.Line.Insert(l.Line.Len(), c)
	}
	return l
}

// bulk is n Bulk requests with ids from first, submitted at sub.
func bulk(first uint64, n int, sub time.Time) []*item {
	out := make([]*item, n)
	for i := range out {
		out[i] = &item{id: first + uint64(i), class: admission.Bulk, submitted: sub}
	}
	return out
}

func known(limit, remaining int, reset time.Duration) ratelimit.Bucket {
	return ratelimit.Bucket{Known: true, Limit: limit, Remaining: remaining, ResetAt: t0.Add(reset)}
}

// An ask counts the lanes whose head is ready only (each asked in order,
// a lane without a live head not asked): a known lane's requests its
// window has room for (at least one), a serial lane's head, an unknown
// lane's pioneer; the class of the requests asked for, not of the queue
// behind them; the earliest ready head (the lower id on a tie).
func TestAskCountsTheReadyLanes(t *testing.T) {
	now := t0
	sub := t0.Add(-3 * time.Second)
	a := queued(known(5, 3, 500*time.Millisecond), time.Second,
		append(bulk(10, 3, sub), &item{id: 13, class: admission.Interactive, submitted: sub})...)
	a.Line.Items()[0].exempt = true
	b := queued(known(5, 3, 500*time.Millisecond), time.Second,
		&item{id: 7, class: admission.Bulk, submitted: sub, exempt: true}, &item{id: 8, class: admission.Interactive, submitted: sub})
	b.Serial = true
	c := queued(ratelimit.Bucket{}, 0, &item{id: 20, class: admission.Normal, submitted: t0.Add(-time.Second)})
	d := queued(known(5, 3, 500*time.Millisecond), time.Second,
		append([]*item{{id: 1, class: admission.Interactive, submitted: t0.Add(-10 * time.Second)}}, bulk(2, 19, sub)...)...)
	empty := queued(ratelimit.Bucket{}, 0)
	finished := queued(ratelimit.Bucket{}, 0, &item{id: 30, done: true, submitted: t0.Add(-time.Hour)})

	r := &readiness{set: map[*lane]verdict{d: {false, time.Second}}}
	ask := Ask([]*lane{empty, a, b, finished, c, d}, now, r.ready)
	assert.Equal(t, []*lane{a, b, c, d}, r.asked, "lanes with a head only, in order")
	require.Equal(t, 3, a.Room(now))
	assert.Equal(t, 3+1+1, ask.Want, "a: its room; b: serial, its head; c: its pioneer; d: not ready")
	assert.Equal(t, admission.Normal, ask.Class, "a's first 3, b's head, c's head")
	assert.True(t, ask.Global, "c's head needs a global slot")
	assert.True(t, ask.Pioneer, "c is unknown")
	assert.Equal(t, sub, ask.Since)
	assert.Equal(t, uint64(7), ask.First, "a tie goes to the lower id")
	assert.Equal(t, a.Backlog(now, 4), ask.Path)
	assert.Positive(t, ask.Path)
	assert.Less(t, ask.Path, d.Backlog(now, 20), "d's backlog is not asked for")

	// Known lanes only, their heads exempt.
	r = &readiness{}
	ask = Ask([]*lane{a, b}, now, r.ready)
	assert.Equal(t, 4, ask.Want)
	assert.False(t, ask.Global)
	assert.False(t, ask.Pioneer)
	assert.Equal(t, admission.Bulk, ask.Class)

	// A lane whose window has room for more than its queue asks for its
	// queue.
	g := queued(known(5, 5, time.Second), time.Second, bulk(50, 2, sub)...)
	assert.Equal(t, 2, Ask([]*lane{g}, now, (&readiness{}).ready).Want)

	// A lane said ready whose count has no room asks for its head.
	e := queued(known(5, 0, time.Second), time.Second, bulk(40, 3, sub)...)
	r = &readiness{set: map[*lane]verdict{e: {true, 0}}}
	assert.Equal(t, 1, Ask([]*lane{e}, now, r.ready).Want)

	// None ready: nothing to ask.
	r = &readiness{set: map[*lane]verdict{a: {}, b: {}, c: {}}}
	ask = Ask([]*lane{a, b, c}, now, r.ready)
	assert.Zero(t, ask.Want)
	assert.Equal(t, admission.Ask{Since: now, First: ^uint64(0), Class: admission.Bulk}, ask)
}

const per, rtt = time.Second, 50 * time.Millisecond

// keepLanes is a known lane reopening in 300 ms with 6 queued (a window's
// Limit, 5, is told; its backlog then is one window: needed) and a queue
// of 12 behind its pioneer (10 told: a period at admission.UnknownPace;
// 1.2 s of backlog: needed), the known one first.
func keepLanes() (k, p *lane) {
	sub := t0.Add(-2 * time.Second)
	k = queued(known(5, 0, 300*time.Millisecond), time.Second,
		append(bulk(200, 5, sub), &item{id: 205, class: admission.Interactive, submitted: sub})...)
	p = queued(ratelimit.Bucket{}, 0, append(append(bulk(100, 10, sub),
		&item{id: 110, class: admission.Interactive, submitted: sub}), &item{id: 111, submitted: sub})...)
	p.Running = 1
	return k, p
}

// A keep is told for a queue behind its pioneer once a period (Behind),
// for a known lane reopening within the period only when others wait
// (Others, with Slack a round trip); each counts as needed when its
// backlog then is a period or longer, told or not.
func TestKeepTellsWhatWaitsForItsWindow(t *testing.T) {
	now := t0
	k, p := keepLanes()
	ls := []*lane{k, p}
	kAt, pAt := now.Add(300*time.Millisecond), now.Add(rtt)
	path := max(k.Backlog(kAt, 6), p.Backlog(pAt, 12))
	require.GreaterOrEqual(t, k.Backlog(kAt, 6), per)
	require.Equal(t, 1200*time.Millisecond, p.Backlog(pAt, 12))

	r := &readiness{}
	keep, needed := Keep(ls, now, Soon{Per: per, RTT: rtt, Others: true, Behind: true}, r.ready)
	assert.True(t, needed)
	assert.Equal(t, []*lane{k}, r.asked, "a pioneer's queue needs no readiness: it waits for the answer")
	assert.Equal(t, admission.Keep{At: pAt, Slack: rtt, Want: 5 + 10, Path: path,
		Since: t0.Add(-2 * time.Second), First: 100, Class: admission.Bulk}, keep,
		"the earliest reopening; the lower id on a tie; the class of the requests told")

	keep, needed = Keep(ls, now, Soon{Per: per, RTT: rtt, Others: true}, (&readiness{}).ready)
	assert.True(t, needed)
	assert.Equal(t, admission.Keep{At: kAt, Slack: rtt, Want: 5, Path: k.Backlog(kAt, 6),
		Since: t0.Add(-2 * time.Second), First: 200, Class: admission.Bulk}, keep, "the known lane alone")

	keep, needed = Keep(ls, now, Soon{Per: per, RTT: rtt, Behind: true}, (&readiness{}).ready)
	assert.True(t, needed)
	assert.Equal(t, admission.Keep{At: pAt, Want: 10, Path: 1200 * time.Millisecond,
		Since: t0.Add(-2 * time.Second), First: 100, Class: admission.Bulk}, keep,
		"the pioneer's queue alone, whether others wait or not; no known lane: no slack")

	keep, needed = Keep(ls, now, Soon{Per: per, RTT: rtt}, (&readiness{}).ready)
	assert.True(t, needed, "needed, though nothing is told")
	assert.Zero(t, keep.Want)
	assert.True(t, keep.At.IsZero())
}

// A keep is needed only for a backlog of a period or longer at the
// reopening.
func TestKeepNeededForAPeriodOfBacklog(t *testing.T) {
	now := t0
	sub := t0.Add(-time.Second)
	short := queued(ratelimit.Bucket{}, 0, bulk(1, 9, sub)...) // 900 ms behind its pioneer
	short.Running = 1
	window := queued(known(5, 0, 300*time.Millisecond), time.Second, bulk(20, 5, sub)...) // one window's worth
	all := Soon{Per: per, RTT: rtt, Others: true, Behind: true}

	keep, needed := Keep([]*lane{short, window}, now, all, (&readiness{}).ready)
	assert.False(t, needed)
	assert.Equal(t, 9+5, keep.Want, "told, but its backlog is short: the actor tells nothing")
	assert.Less(t, keep.Path, per)

	exact := queued(ratelimit.Bucket{}, 0, bulk(1, 10, sub)...) // a period exactly
	exact.Running = 1
	_, needed = Keep([]*lane{exact}, now, Soon{Per: per, RTT: rtt}, (&readiness{}).ready)
	assert.True(t, needed)

	// A period shorter than the pace assumed for an unknown bucket: its
	// pioneer's queue tells one.
	small := queued(ratelimit.Bucket{}, 0, bulk(1, 3, sub)...)
	small.Running = 1
	keep, _ = Keep([]*lane{small}, now, Soon{Per: rtt, RTT: rtt, Behind: true}, (&readiness{}).ready)
	assert.Equal(t, 1, keep.Want)
}

// No keep for a serial lane, an exempt head, an unknown lane with no
// pioneer out, a lane whose machine is still initial, a lane ready now, or
// one reopening a period or more from now; none of them needs one.
func TestKeepSkips(t *testing.T) {
	now := t0
	sub := t0.Add(-time.Second)
	long := func(st ratelimit.Bucket) *lane { return queued(st, time.Second, bulk(1, 20, sub)...) }
	serial := long(known(5, 0, 300*time.Millisecond))
	serial.Serial = true
	exempt := long(known(5, 0, 300*time.Millisecond))
	exempt.Line.Items()[0].exempt = true
	unknown := long(ratelimit.Bucket{})
	unknown.First = false // behind another lane's first pioneer of the actor: it asks at that one's answer
	initial := &lane{Machine: fsm.NewBucket(nil), Pace: Pace{State: known(5, 0, 300*time.Millisecond), Window: time.Second}}
	for _, c := range bulk(1, 20, sub) {
		join(&initial.Line, c)
	}
	open := long(known(5, 5, 300*time.Millisecond))
	far := long(known(5, 0, 2*time.Second))
	atPer := long(known(5, 0, per))
	zero := long(known(5, 0, 300*time.Millisecond))
	readyLater := long(known(5, 0, 300*time.Millisecond))

	r := &readiness{set: map[*lane]verdict{zero: {false, 0}, readyLater: {true, 300 * time.Millisecond}}}
	keep, needed := Keep([]*lane{serial, exempt, unknown, initial, open, far, atPer, zero, readyLater}, now,
		Soon{Per: per, RTT: rtt, Others: true, Behind: true}, r.ready)
	assert.Equal(t, []*lane{open, far, atPer, zero, readyLater}, r.asked)
	assert.Zero(t, keep.Want)
	assert.False(t, needed)
}

// A known lane whose reopening probe is on the wire needs its keep (its
// queue asks at the probe's answer), and keeps the actor's grants
// (ProbeAwaited) while it has a queue.
func TestKeepProbeOnTheWire(t *testing.T) {
	now := t0
	l := queued(known(5, 0, 0), time.Second, bulk(1, 2, t0)...)
	ok, _ := l.State.Take(now) // the probe
	require.True(t, ok)
	require.True(t, l.ProbeOut())
	r := &readiness{set: map[*lane]verdict{l: {false, 2 * per}}}
	all := Soon{Per: per, RTT: rtt, Others: true, Behind: true}
	keep, needed := Keep([]*lane{l}, now, all, r.ready)
	assert.True(t, needed)
	assert.Zero(t, keep.Want, "its reopening is not told: the probe's answer tells")
	assert.True(t, ProbeAwaited([]*lane{l}))

	l.State.Refund(now)
	_, needed = Keep([]*lane{l}, now, all, r.ready)
	assert.False(t, needed, "no probe on the wire")
	assert.False(t, ProbeAwaited([]*lane{l}))

	ok, _ = l.State.Take(now)
	require.True(t, ok)
	for l.Line.Head() != nil {
		l.Line.Pop()
	}
	assert.False(t, ProbeAwaited([]*lane{l}), "no queue waits for it")
}

// HeadClasses spans the classes of the live heads.
func TestHeadClasses(t *testing.T) {
	hi, lo := HeadClasses([]*lane{queued(ratelimit.Bucket{}, 0)})
	assert.Less(t, hi, lo, "no head")
	ls := []*lane{
		queued(ratelimit.Bucket{}, 0, &item{id: 1, class: admission.Normal}),
		queued(ratelimit.Bucket{}, 0, &item{id: 2, class: admission.Interactive, done: true}, &item{id: 3, class: admission.Bulk}),
		queued(ratelimit.Bucket{}, 0),
	}
	hi, lo = HeadClasses(ls)
	assert.Equal(t, admission.Normal, hi, "a finished head is dropped")
	assert.Equal(t, admission.Bulk, lo)
	ls = append(ls, queued(ratelimit.Bucket{}, 0, &item{id: 4, class: admission.Interactive}))
	hi, lo = HeadClasses(ls)
	assert.Equal(t, admission.Interactive, hi)
	assert.Equal(t, admission.Bulk, lo)
}

// The granted slots are for the first live requests needing one, lanes
// from the next the actor visits, round the slice.
func TestHolders(t *testing.T) {
	a1, a2 := &item{id: 1}, &item{id: 2}
	b1, b2, b3, b4 := &item{id: 3, done: true}, &item{id: 4, exempt: true}, &item{id: 5}, &item{id: 6}
	c1 := &item{id: 7}
	a := queued(ratelimit.Bucket{}, 0, a1, a2)
	b := queued(ratelimit.Bucket{}, 0, b3, b1, b2, b4)
	c := queued(ratelimit.Bucket{}, 0, c1)
	ls := []*lane{a, b, c}

	buf := make([]*item, 0, 8)
	out := Holders(ls, 1, 3, buf)
	assert.Equal(t, []*item{b3, b4, c1}, out)
	assert.Same(t, &buf[:1][0], &out[0], "appended to out")
	assert.Equal(t, []*item{b3, b4, c1, a1, a2}, Holders(ls, 4, 5, nil), "from next, round the slice")
	assert.Equal(t, []*item{b3, b4, c1, a1, a2}, Holders(ls, 1, 10, nil), "more slots than requests")
	assert.Equal(t, []*item{a1}, Holders(ls, 0, 1, nil))
	assert.Empty(t, Holders(ls, 0, 0, nil))
	assert.Empty(t, Holders[*item, itemRules](nil, 0, 3, nil))
}
