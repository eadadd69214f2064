// Package admission is the rule that shares one global window among the
// buckets waiting for it: who goes first, how many slots each gets at once,
// what is kept back for a bucket about to reopen, and how fast slots are
// handed out. It is pure: time is an argument, nothing runs on its own,
// and a Queue is a value the supervisor actor owns (one per global window)
// and the global forecast can copy.
//
// # The rule
//
// A bucket actor asks (Ask) when requests of its queue are ready to go. Its
// place in line is its virtual deadline (Deadline): when the earliest of
// its ready requests was submitted, less PathWeight times how long its
// queue still needs at its own bucket's pace, and ahead of every known
// bucket for a pioneer (PioneerFirst); ties go to that request's id. Serve
// hands out slots earliest deadline first; a bucket gets a slot for each
// request it has ready, in one Grant, so a channel's window goes whole. A
// bucket served in part keeps its place for the rest (Grant.More).
//
// # Classes
//
// Every ask and keep carries its bucket's Class: the highest class of the
// requests it asks for. A higher class is ahead of every lower one in line
// (Place.Before); within a class the deadlines order. While a lower class
// waits, at least one slot in ShareEvery goes to it (Share): to the bucket
// of a lower class first in line by its deadline, whatever its class.
//
// Two things hold slots back from the line:
//
//   - keeps: a bucket whose queue waits for its own window, reopening within
//     the global period, says so (Soon); the slots it will want are kept
//     from the buckets behind it in line, until it asks, withdraws it (a
//     keep that wants nothing) or its keep lapses (SoonGrace after its
//     reopening). A slot handed to a colder bucket just
//     before a hot bucket reopens leaves that bucket's window waiting a
//     whole period. Only what it would find missing is kept: with a window
//     that tells its slots free at a later time (Freer), the slots free by
//     its reopening and its slack (Keep.Slack) count, less those the
//     keeps ahead wanting theirs by then want, and the rest goes now.
//   - the pacer: while a waiting bucket's backlog is longer than the
//     period, slots are handed out at the window's rate (a token bucket with
//     its burst), so a window filled in one burst does not free in one burst
//     a period later, just before a bucket that joins.
//
// Invariants (checked by the model test and the fuzz target): a Grant never
// holds more slots than its bucket asked for nor than the window reserved;
// a bucket is in line at most once, and never both in line and kept for; a
// keep is only honoured for buckets ahead of the one it holds back; of any
// ShareEvery slots handed out in a row while a lower class waits, one goes
// to a lower class, unless keeps held its pick back (ShareEvery).
package admission

import (
	"container/heap"
	"math"
	"slices"
	"time"
)

// PathWeight is how many times more a bucket's remaining backlog (its queue
// at its own pace) counts than the time it has waited, when the line orders
// buckets. The longest backlog bounds the whole load's completion; waiting
// time keeps short backlogs from starving when the global limit cannot
// serve everyone.
const PathWeight = 8

// PioneerFirst moves the virtual deadline of a bucket whose ready request
// is its pioneer (its limit not known yet) ahead of any known bucket's:
// pioneers are served first, among themselves by their deadlines. A pioneer
// is one request, and its answer starts its bucket's windows and lets the
// rest of its queue pipeline; weighed by its queue instead, a bucket whose
// pioneer met a 502 or a lost connection while the others became known
// waited behind their whole first windows under a binding global limit, and
// finished a window later (scenario 14 of docs/comparison.md).
const PioneerFirst = 1000 * time.Hour

// UnknownPace is the pace assumed for a bucket whose limit is not known
// yet, to weigh its backlog (Ask.Path, and the forecast's replay of it):
// about Discord's most common route limits.
const UnknownPace = 100 * time.Millisecond

// Backlog is how long a bucket needs for queued requests at its own pace,
// in whole windows: avail of them go in the current window and limit in
// each window after it, so the last one waits for 1+(queued-1-avail)/limit
// refills, each a window. Not the time to the last one's window: that
// counts when the current window happens to end, so two buckets of one
// shape, queues of one length, would tell apart by noise and be served in
// its order rather than in their requests' (Deadline). A bucket whose
// limit is not known yet (limit <= 0) needs UnknownPace per request. The
// live lanes (package lanes) and the forecast weigh a backlog (Ask.Path)
// with this rule.
func Backlog(queued, avail, limit int, window time.Duration) time.Duration {
	switch {
	case queued <= 0:
		return 0
	case limit <= 0:
		return time.Duration(queued) * UnknownPace
	case queued <= avail:
		return 0
	}
	return time.Duration(1+(queued-1-avail)/limit) * window
}

// FastShare is the share of a global window a bucket may reserve on its
// own, while nobody waits in line: not through the line, and not paced.
// The rest is handed out by the line, longest backlog first, so the last
// slots of a window go where they are most needed (a hot channel) rather
// than to whoever asked first.
const FastShare = 0.5

// SoonGrace is how long after its bucket's reopening a keep (Soon) lasts
// without the bucket asking: its timer's lag and its pump, which a starved
// machine stretches (50 ms lapsed before a hot bucket asked under the race
// detector beside two CPU-bound loops, and its window split). A keep that
// lapses (the queue was cancelled, the window reopened later than its
// bucket thought) gives its slots back to the line.
const SoonGrace = 200 * time.Millisecond

// Deadline is a bucket's place in line: when the earliest of its ready
// requests was submitted (since; now if zero or later), less PathWeight
// times how long its queue still needs at its own pace (path), and ahead
// of every known bucket for a pioneer. Among buckets with equal backlogs
// the window serves requests in the order they were submitted, not in the
// order their actors happened to ask; the bucket whose backlog is longest
// (a hot channel) goes first, so its windows are not wasted while cold
// channels, each with little to send, take the rest; a bucket that keeps
// waiting gains on later ones, so none starves.
func Deadline(now, since time.Time, path time.Duration, pioneer bool) time.Time {
	base := now
	if !since.IsZero() && since.Before(base) {
		base = since
	}
	deadline := base.Add(-PathWeight * path)
	if pioneer {
		deadline = deadline.Add(-PioneerFirst)
	}
	return deadline
}

// Ask is a bucket's request for slots: Want requests are ready to go.
type Ask struct {
	Want   int  // requests ready to go
	Global bool // they need slots of the window (false: exempt, as interaction callbacks)
	// Path is how long the bucket's longest queue still needs at its own
	// pace, in whole windows: the longer, the sooner it is served.
	Path time.Duration
	// Pioneer: a ready request is the pioneer of a bucket whose limit is
	// not known (PioneerFirst).
	Pioneer bool
	// Since is when the earliest ready request was submitted, and First its
	// id, which breaks ties (requests submitted in one batch).
	Since time.Time
	First uint64
	// Class is the highest class among the requests asked for.
	Class Class
}

// Keep is a bucket's notice that its queue waits for its own window,
// reopening At, within the global period: Want slots are kept for it from
// the buckets behind it in line. Path, Since and First are as Ask's, at
// the reopening. Slack is how long after At its slots may come: a bucket
// whose window is about the global period finds the slots its last
// window took free about a round trip after it reopens (it reopens by the
// server's count, they free a period after their answers), and waits for
// those anyway (0: none).
type Keep struct {
	At    time.Time
	Slack time.Duration
	Want  int
	Path  time.Duration
	Since time.Time
	First uint64
	Class Class
}

// Place is a bucket's place in line: its class, its virtual deadline and
// the id that breaks ties.
type Place struct {
	Class    Class
	Deadline time.Time
	First    uint64
}

// Before reports whether p goes ahead of q: a higher class, else an
// earlier deadline, else a lower id.
func (p Place) Before(q Place) bool {
	if p.Class != q.Class {
		return p.Class > q.Class
	}
	return p.sooner(q)
}

// sooner reports whether p goes ahead of q regardless of their classes.
func (p Place) sooner(q Place) bool {
	if !p.Deadline.Equal(q.Deadline) {
		return p.Deadline.Before(q.Deadline)
	}
	return p.First < q.First
}

// Grant is what Serve hands one bucket: Slots reserved in the window (0 for
// an exempt bucket). More: it was served in part and stays in line for the
// rest of its want (it does not ask again). A bucket gets one Grant per
// Serve, at the place of its first slot, with every slot it was served in
// that call: one of a higher class goes on after the lower class's share
// (ShareEvery), and its slots before and after are one grant.
type Grant[K comparable] struct {
	Key   K
	Slots int
	More  bool
}

// Window is what admission needs of a global window
// (ratelimit.SlidingWindow, or a limiter shared through Redis).
type Window interface {
	// Reserve takes a slot at now, or tells how long until one frees.
	Reserve(now time.Time) (ok bool, wait time.Duration)
	// Count is how many slots are taken at now (0 when it cannot tell).
	Count(now time.Time) int
}

// Freer is what a Window may also tell: how many slots it will have free
// at a time at (not before now) if nothing more is reserved, negative when
// it cannot tell (ratelimit.SlidingWindow.FreeAt). With it, a keep holds
// back only the slots its bucket would find missing at its reopening: the
// slots a hot bucket took a period before free again for it, and the
// window need not stand idle meanwhile. Without, every slot a keep wants
// is held back from now.
type Freer interface {
	FreeAt(now, at time.Time) int
}

// Queue is one global window's line. The zero value is not usable: New
// makes one. Not safe for concurrent use: one owner calls it.
type Queue[K comparable] struct {
	limit  int           // the window's count; 0: unknown (no keeps, no pacing)
	period time.Duration // the window's period
	ring   ring[K]       // Invariant: ring[i].index == i; byKey[k] in ring iff waiting
	byKey  map[K]*entry[K]
	keeps  map[K]keep
	pacer  pacer
	share  Share
	// classes counts the buckets in line (byKey) by class, Bulk first.
	classes [3]int
	// Serve's scratch space, reused from one call to the next.
	grants []Grant[K]
	ahead  []keep // spare's
	serves uint64 // Serve calls so far: an entry's grant index is valid in the one it names
	// onSlot, when set (tests: export_test.go), is told each slot Serve
	// hands out, in order.
	onSlot func(key K)
}

type entry[K comparable] struct {
	key    K
	place  Place
	want   int
	global bool
	index  int
	// serve and grant: the Serve call that last granted it (Queue.serves)
	// and its grant's index there.
	serve uint64
	grant int
}

type keep struct {
	at    time.Time
	by    time.Time // at and the keep's slack: when its slots count free
	want  int
	place Place
}

// count adds d to the buckets of class c in line.
func (q *Queue[K]) count(c Class, d int) { q.classes[c-Bulk] += d }

// lowest is the lowest class in line (Interactive+1 for an empty line).
func (q *Queue[K]) lowest() Class {
	for c := Bulk; c <= Interactive; c++ {
		if q.classes[c-Bulk] > 0 {
			return c
		}
	}
	return Interactive + 1
}

// forget takes e out of the ring and drops it from the line.
func (q *Queue[K]) forget(e *entry[K]) {
	heap.Remove(&q.ring, e.index)
	delete(q.byKey, e.key)
	q.count(e.place.Class, -1)
}

// New returns the line of a window of limit requests per period; limit 0
// (a limiter that does not tell its limit) neither keeps nor paces.
func New[K comparable](limit int, period time.Duration) *Queue[K] {
	q := &Queue[K]{limit: limit, period: period, byKey: map[K]*entry[K]{}, keeps: map[K]keep{}}
	if limit > 0 && period > 0 {
		q.pacer = pacer{burst: float64(limit), every: period / time.Duration(limit), tokens: float64(limit), period: period}
	}
	return q
}

// Want puts key in line at now, or updates its ask: the latest want wins,
// its place too (Deadline of its ask). Its keep, if any, is dropped: it
// is ready now; but a pioneer's ask leaves the keep of the queue behind
// it, which asks a round trip later.
func (q *Queue[K]) Want(now time.Time, key K, a Ask) {
	if !a.Pioneer {
		delete(q.keeps, key) // a pioneer's ask leaves the keep of the queue behind it
	}
	q.pacer.long(now, a.Path)
	p := Place{Class: clamp(a.Class), Deadline: Deadline(now, a.Since, a.Path, a.Pioneer), First: a.First}
	e := q.byKey[key]
	switch {
	case e == nil:
		e = &entry[K]{key: key, place: p}
		q.byKey[key] = e
		q.count(p.Class, 1)
		heap.Push(&q.ring, e)
	case p != e.place:
		// Its place is its latest ask's: its class, and its backlog as it
		// is now. A backlog that shrank while it waited (its bucket
		// refilled, requests were cancelled) moves it back behind the
		// buckets whose backlog is now longer; its earliest request's
		// submission still counts, so it gains on later ones all the same.
		q.count(e.place.Class, -1)
		q.count(p.Class, 1)
		e.place = p
		heap.Fix(&q.ring, e.index)
	}
	e.want, e.global = a.Want, a.Global
}

// clamp maps a class outside the classes to the nearest one.
func clamp(c Class) Class { return min(Interactive, max(Bulk, c)) }

// Soon keeps slots back for key (Keep), in place of its earlier keep. A
// keep that wants nothing withdraws key's keep at once, where it would
// otherwise hold its slots until it lapses: its queue was cancelled, or
// its pioneer's answer showed its bucket shut for longer. Ignored while
// key is in line (its want stands).
func (q *Queue[K]) Soon(now time.Time, key K, k Keep) {
	if q.byKey[key] != nil {
		return
	}
	if k.Want <= 0 {
		delete(q.keeps, key)
		return
	}
	q.keeps[key] = keep{at: k.At, by: k.At.Add(max(0, k.Slack)), want: k.Want, place: Place{Class: clamp(k.Class), Deadline: Deadline(now, k.Since, k.Path, false), First: k.First}}
}

// Remove takes key out of line and drops its keep.
func (q *Queue[K]) Remove(key K) {
	delete(q.keeps, key)
	if e := q.byKey[key]; e != nil {
		q.forget(e)
	}
}

// Clear empties the line and the keeps, returning the keys that were in
// line.
func (q *Queue[K]) Clear() []K {
	keys := make([]K, 0, len(q.ring))
	for _, e := range q.ring {
		keys = append(keys, e.key)
	}
	clear(q.keeps)
	clear(q.byKey)
	q.classes = [3]int{}
	q.ring = nil
	return keys
}

// Len is how many buckets are in line.
func (q *Queue[K]) Len() int { return len(q.ring) }

// Keeps is how many keeps stand (Soon; a lapsed one until the next Serve
// drops it).
func (q *Queue[K]) Keeps() int { return len(q.keeps) }

// Waiting reports whether key is in line.
func (q *Queue[K]) Waiting(key K) bool { return q.byKey[key] != nil }

// Pending is how many requests the buckets in line want.
func (q *Queue[K]) Pending() int {
	n := 0
	for _, e := range q.ring {
		n += e.want
	}
	return n
}

// Places is every waiting bucket's place (nil for an empty line), for the
// global forecast.
func (q *Queue[K]) Places() map[K]Place {
	if len(q.ring) == 0 {
		return nil
	}
	out := make(map[K]Place, len(q.ring))
	for _, e := range q.ring {
		out[e.key] = e.place
	}
	return out
}

// Share is the lower classes' share as it stands: the global forecast
// starts from it, as the line goes on from it.
func (q *Queue[K]) Share() Share { return q.share }

// Head is the bucket first in line and whether it needs a slot of the
// window (the ban breaker's probe takes it alone).
func (q *Queue[K]) Head() (key K, place Place, global, ok bool) {
	if len(q.ring) == 0 {
		return key, place, false, false
	}
	e := q.ring[0]
	return e.key, e.place, e.global, true
}

// Refund returns n slots to the pacer: reserved and cancelled unused, the
// server counted nothing for them.
func (q *Queue[K]) Refund(n int) { q.pacer.refund(n) }

// Serve hands out w's slots at now, earliest place first (but for the
// lower classes' share: while a lower class waits, a bucket of a higher
// class is served at most the slots left before the share is due, then
// the share's pick one slot, and so on), and returns the grants in that
// order. paused (the window is blocked by a global 429 or a
// ban's hold) serves only exempt buckets. When slots are left wanted and
// Serve stopped for the window, the pacer or a keep, again is set and retry
// is when to serve again. The grants are valid until the next Serve: the
// queue reuses their memory (the supervisor serves at every ask and every
// slot given back).
func (q *Queue[K]) Serve(now time.Time, w Window, paused bool) (grants []Grant[K], retry time.Duration, again bool) {
	clear(q.grants) // the last call's grants: no key kept alive by them
	grants = q.grants[:0]
	defer func() { q.grants = grants }()
	// shareHeld: the share's pick was held back by a keep (slots kept for
	// buckets ahead of it): the rest of this call serves in line, as the
	// slots the pick cannot use would otherwise go unused.
	shareHeld := false
	q.serves++
	for len(q.ring) > 0 {
		if paused {
			grants = q.serveExempt(grants)
			break
		}
		e, lower := q.next(shareHeld)
		if !e.global { // exempt: needs no global slot
			q.forget(e)
			grants = append(grants, Grant[K]{Key: e.key})
			continue
		}
		passed := !lower && q.lowest() < e.place.Class // e goes ahead of a lower class in line
		most := e.want
		switch {
		case lower:
			most = 1 // the share: one slot, then the line's order again
		case passed && !shareHeld:
			most = min(most, q.share.Left())
		}
		spare, kept := q.spare(now, w, e.place)
		slots := 0
		for !paused && slots < most {
			if spare >= 0 && slots >= spare || kept > 0 && q.limit-w.Count(now) <= kept {
				if lower {
					shareHeld = true // most is 1: nothing was served
					break
				}
				// The slots left are kept for buckets ahead of it in line
				// that reopen within the period: until they ask, or their
				// keep lapses.
				paused, retry, again = true, q.keepLapses(now), true
				break
			}
			if wait := q.pacer.take(now); wait > 0 {
				paused, retry, again = true, wait, true
				break
			}
			ok, wait := w.Reserve(now)
			if ok && q.onSlot != nil {
				q.onSlot(e.key)
			}
			if !ok {
				// The window is full: the pacer's token buys nothing. Kept
				// spent, every admission tried while the window is full
				// (each answer and each bucket's ask) took one, and the
				// window reopened with a fraction of its slots to hand out
				// at once.
				q.pacer.refund(1)
				paused, retry, again = true, wait, true
				break
			}
			slots++
		}
		q.share.Served(slots, lower, passed)
		switch {
		case slots == 0:
		case e.serve == q.serves:
			// Served again in this call (after the share): one grant, so
			// its bucket learns of all its slots at once.
			grants[e.grant].Slots += slots
			grants[e.grant].More = slots < e.want
		default:
			e.serve, e.grant = q.serves, len(grants)
			grants = append(grants, Grant[K]{Key: e.key, Slots: slots, More: slots < e.want})
		}
		if slots == e.want {
			q.forget(e)
			continue
		}
		// Served in part, or not at all: it keeps its place in line for
		// the rest, which goes as the window's next slots free (asking
		// again would put it behind every bucket ready since), or, when
		// the share stopped it (its slots, or its pick's, held back by a
		// keep), later in this call. Its place did not change: it stays
		// where it is in the ring.
		e.want -= slots
	}
	return grants, retry, again
}

// next is the next bucket to serve, left in the ring: the first in line,
// or, when the lower classes' share is due (Share) and not held, the first
// in line by deadline among the buckets of a lower class than its (lower
// set).
func (q *Queue[K]) next(shareHeld bool) (e *entry[K], lower bool) {
	head := q.ring[0]
	if !shareHeld && q.share.Due() && q.lowest() < head.place.Class {
		at := SharePick(q.ring, head.place.Class,
			func(x *entry[K]) (Class, bool) { return x.place.Class, true },
			func(a, b *entry[K]) bool { return a.place.sooner(b.place) })
		if at >= 0 { // always, but for a count out of step
			return q.ring[at], true
		}
	}
	return head, false
}

// serveExempt answers the buckets in line that need no slot (interaction
// callbacks) while the window is paused.
func (q *Queue[K]) serveExempt(grants []Grant[K]) []Grant[K] {
	var exempt []*entry[K]
	for _, e := range q.ring {
		if !e.global {
			exempt = append(exempt, e)
		}
	}
	for _, e := range exempt {
		q.Remove(e.key)
		grants = append(grants, Grant[K]{Key: e.key})
	}
	return grants
}

// spare is how many slots may be handed out at now to a bucket at place
// without leaving short, at their reopening, the buckets ahead of it that
// reopen within the period (keeps; those that lapsed are dropped), or -1
// when no keep is ahead. A slot handed out now is held past each such
// reopening. With a Freer window, a bucket reopening at t finds the slots
// free by t and its slack (free now, or freeing by then), less those the
// keeps ahead wanting theirs by then want. Without, spare is -1 and kept
// is what the keeps ahead want: every slot kept is held from now, while
// the window's count leaves no more than that free.
func (q *Queue[K]) spare(now time.Time, w Window, place Place) (spare, kept int) {
	if q.period <= 0 || len(q.keeps) == 0 {
		return -1, 0
	}
	ahead := q.ahead[:0]
	for key, k := range q.keeps {
		switch {
		case now.After(k.at.Add(SoonGrace)):
			delete(q.keeps, key)
		case !k.at.Before(now.Add(q.period)):
			// A slot handed out now is free again by then.
		case k.place.Before(place):
			ahead = append(ahead, k)
		}
	}
	q.ahead = ahead
	if len(ahead) == 0 {
		return -1, 0
	}
	countOnly := func() (int, int) {
		for _, k := range ahead {
			kept += k.want
		}
		return -1, kept
	}
	f, ok := w.(Freer)
	if !ok {
		return countOnly()
	}
	slices.SortFunc(ahead, func(a, b keep) int { return a.by.Compare(b.by) })
	spare, want := math.MaxInt, 0
	for i, k := range ahead {
		want += k.want
		if i+1 < len(ahead) && ahead[i+1].by.Equal(k.by) {
			continue // one time: its keeps together
		}
		at := k.by
		if at.Before(now) {
			at = now // late to ask, within its grace
		}
		free := f.FreeAt(now, at)
		if free < 0 {
			return countOnly() // it cannot tell
		}
		spare = min(spare, free-want)
	}
	return max(0, spare), 0
}

// keepLapses is how long from now until the first keep lapses.
func (q *Queue[K]) keepLapses(now time.Time) time.Duration {
	wait := time.Duration(-1)
	for _, k := range q.keeps {
		if d := k.at.Add(SoonGrace).Sub(now); wait < 0 || d < wait {
			wait = d
		}
	}
	return max(time.Millisecond, wait)
}

// ring is a min-heap of entries by place (container/heap).
type ring[K comparable] []*entry[K]

func (r ring[K]) Len() int           { return len(r) }
func (r ring[K]) Less(i, j int) bool { return r[i].place.Before(r[j].place) }
func (r ring[K]) Swap(i, j int) {
	r[i], r[j] = r[j], r[i]
	r[i].index, r[j].index = i, j
}
func (r *ring[K]) Push(x any) {
	e := x.(*entry[K])
	e.index = len(*r)
	*r = append(*r, e)
}
func (r *ring[K]) Pop() any {
	old := *r
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*r = old[:len(old)-1]
	e.index = -1
	return e
}
