package lanes

import (
	"slices"
	"time"

	"github.com/sluicehq/sluice/internal/admission"
)

// Rules is what a Queue reads of the requests it holds (T). Its methods
// are pure reads: a request's class and submission order never change
// while it is queued; Finished turns true once (a request answered or
// cancelled while it waited), and Place may be set or moved by its
// declared groups.
type Rules[T any] interface {
	// Class is the request's priority class.
	Class(T) admission.Class
	// Seq is the request's submission order: lower went first. Unique.
	Seq(T) uint64
	// Finished reports that the request has its outcome: the queue drops
	// it lazily (Head, Compact).
	Finished(T) bool
	// Place is the start of the window the request's declared groups
	// reserved for it, if it has one: such a request goes by that window
	// (Order), not by its class.
	Place(T) (time.Time, bool)
	// NotBefore is when a retrying request's backoff ends.
	NotBefore(T) time.Time
}

// Queue is a lane's line: its queued requests, in the order they go, and
// its retries. R is a type whose zero value implements Rules[T] (a
// struct{} whose methods read T). The zero Queue is empty and ready.
//
// Invariants:
//   - the queue is by class, highest first, then by submission (FIFO
//     within a class), except that: the request the share promoted
//     (promoted) holds the head until it is sent; a request back in line
//     (PushFront, DueRetries: it was in line before the others) goes to
//     the front, behind that one, whatever its class; a request with a
//     declared place goes by its window among its neighbours (Order);
//     finished requests may sit anywhere until Head or Compact drops them;
//   - a request is in at most one of the queue and the retries;
//   - lowest is at most the class of every request in both (the lowest
//     queued since both were last empty): while the head is of that
//     class, no lower class waits and the share needs no look at the
//     queue.
type Queue[T comparable, R Rules[T]] struct {
	items []T // by class, then FIFO; finished requests are skipped lazily
	// retries wait for their backoff after a 5xx or a lost connection:
	// nil while none does (most lanes never retry, and a lane is memory
	// per live bucket).
	retries *[]T
	// promoted is the request the share moved to the head, until it is
	// sent (the zero T: none).
	promoted T
	// share counts the requests sent ahead of a lower class waiting in
	// the queue (admission.Share).
	share  admission.Share
	lowest admission.Class // see the invariants
}

// Len is how many requests the queue holds, finished ones not yet dropped
// included (not the retries).
func (q *Queue[T, R]) Len() int { return len(q.items) }

// Items is the queue in order, finished requests included. The caller
// must not keep or change it.
func (q *Queue[T, R]) Items() []T { return q.items }

// Retries is the requests waiting for their backoff, in the order they
// failed, finished ones included. The caller must not keep or change it.
func (q *Queue[T, R]) Retries() []T {
	if q.retries == nil {
		return nil
	}
	return *q.retries
}

// setRetries makes s the retries.
func (q *Queue[T, R]) setRetries(s []T) {
	switch {
	case len(s) == 0:
		q.retries = nil
	case q.retries == nil:
		p := new([]T) // not &s: that would move s to the heap on every call
		*p = s
		q.retries = p
	default:
		*q.retries = s
	}
}

// Empty reports whether nothing is queued or retrying.
func (q *Queue[T, R]) Empty() bool { return len(q.items) == 0 && q.retries == nil }

// Head returns the first live request of the queue (the zero T if none),
// dropping finished ones before it (the request the share promoted too:
// forgotten, see dropStalePromotion).
func (q *Queue[T, R]) Head() T {
	var r R
	var zero T
	for len(q.items) > 0 {
		c := q.items[0]
		if !r.Finished(c) {
			return c
		}
		if c == q.promoted {
			q.promoted = zero
		}
		q.Pop()
	}
	return zero
}

// Pop drops the queue's first request. An emptied queue keeps its room: a
// lane that holds one request at a time allocates its queue once, not
// once a request.
func (q *Queue[T, R]) Pop() {
	var zero T
	q.items[0] = zero
	if len(q.items) == 1 {
		q.items = q.items[:0]
		return
	}
	q.items = q.items[1:]
}

// Compact drops the finished requests from the whole queue (cancelled by
// their callers while they waited: Head drops them only once they reach
// it).
func (q *Queue[T, R]) Compact() {
	var r R
	out := q.items[:0]
	for _, c := range q.items {
		if !r.Finished(c) {
			out = append(out, c)
		}
	}
	clear(q.items[len(out):])
	q.items = out
	q.dropStalePromotion()
}

// dropStalePromotion forgets the request the share promoted once it no
// longer holds the head (it finished and was dropped): the queue keeps no
// finished request alive, and front needs it at the head only.
func (q *Queue[T, R]) dropStalePromotion() {
	var zero T
	if q.promoted != zero && (len(q.items) == 0 || q.items[0] != q.promoted) {
		q.promoted = zero
	}
}

// PlaceOf is where c goes in the queue: behind every request of its class
// or a higher one, ahead of the lower classes' requests (a higher class
// goes first in its bucket, FIFO within a class), but never ahead of the
// request the share promoted to the head. A request with a declared place
// goes at the end, for Order to place it by its groups' window, and no
// request passes one such: their groups counted them in that order.
func (q *Queue[T, R]) PlaceOf(c T) int { return q.placeOf(c, false) }

// placeOf is PlaceOf; bySeq places c behind the requests of its class
// submitted before it only (Merge: c may have been submitted before
// requests already queued), not behind them all.
func (q *Queue[T, R]) placeOf(c T, bySeq bool) int {
	var r R
	i := len(q.items)
	if _, placed := r.Place(c); placed {
		return i
	}
	class, seq := r.Class(c), r.Seq(c)
	for stop := q.front(); i > stop; i-- { // the request the share promoted keeps the head
		p := q.items[i-1]
		if r.Finished(p) {
			continue
		}
		if _, placed := r.Place(p); placed || r.Class(p) > class || r.Class(p) == class && (!bySeq || r.Seq(p) < seq) {
			break
		}
	}
	return i
}

// NoteClass keeps lowest at most c's class, c joining the queue or the
// retries. Called before PlaceOf: it may drop finished requests from the
// head.
func (q *Queue[T, R]) NoteClass(c T) {
	var r R
	var zero T
	if q.retries == nil && q.Head() == zero {
		q.lowest = r.Class(c) // both empty: start again
		return
	}
	q.lowest = min(q.lowest, r.Class(c))
}

// Insert puts c at pos (from PlaceOf, after NoteClass), then moves it to
// its declared place (Order). It reports whether requests behind it moved:
// their expected times changed.
func (q *Queue[T, R]) Insert(pos int, c T) (shifted bool) {
	q.items = slices.Insert(q.items, pos, c)
	at := q.order(pos)
	return at != pos || at < len(q.items)-1
}

// PushFront puts c back at the head of the queue (it was in line first:
// a request an answer put back, or a refused one), behind the request the
// share promoted if it holds the head, then at its declared place. It
// returns where c went.
func (q *Queue[T, R]) PushFront(c T) (at int) {
	q.NoteClass(c)
	at = q.front()
	q.items = slices.Insert(q.items, at, c)
	return q.order(at)
}

// front is where requests back in line go: the head, or behind the
// request the share promoted to it (it holds the head until it is sent).
func (q *Queue[T, R]) front() int {
	var zero T
	if len(q.items) > 0 && q.promoted != zero && q.items[0] == q.promoted {
		return 1
	}
	return 0
}

// Order moves the request at position i to its place among its neighbours
// in the order of their declared groups' windows (Rules.Place): a request
// reserved in a later window never holds the lane before one reserved
// earlier, whatever order they reached the lane in (callers reserve
// concurrently in a shared store), a request whose window moved (it missed
// it) goes behind the ones now due first, and a newcomer given the place
// of a request cancelled while it waited goes in that place, not behind
// every request reserved after it (which would leave the place unused and
// its expected time wrong). Requests without a place keep their order: the
// scan stops at them. It reports whether the request moved.
func (q *Queue[T, R]) Order(i int) (moved bool) { return q.order(i) != i }

// order is Order, returning where the request went.
func (q *Queue[T, R]) order(i int) int {
	var r R
	start, ok := r.Place(q.items[i])
	if !ok {
		return i
	}
	s := q.items
	for i > 0 { // earlier than the one before it: move forward
		p, ok := r.Place(s[i-1])
		if !ok || !p.After(start) {
			break
		}
		s[i-1], s[i] = s[i], s[i-1]
		i--
	}
	for i < len(s)-1 { // later than the one after it: move back
		p, ok := r.Place(s[i+1])
		if !ok || !start.After(p) {
			break
		}
		s[i+1], s[i] = s[i], s[i+1]
		i++
	}
	return i
}

// Served counts c, just taken from the head of the queue (Pop) to be
// sent, toward the lower classes' share (admission.Share). When
// ShareEvery-1 requests in a row went ahead of a lower class, the oldest
// waiting request of a class below c's goes next: it is promoted to the
// head (or kept there), and Served reports whether it moved.
func (q *Queue[T, R]) Served(c T) (moved bool) {
	var r R
	var zero T
	lower := q.promoted != zero && c == q.promoted
	q.promoted = zero
	passed := false
	if class := r.Class(c); class > q.lowest {
		lowest := admission.Interactive
		for _, x := range q.items {
			if !r.Finished(x) {
				lowest = min(lowest, r.Class(x))
			}
		}
		for _, x := range q.Retries() {
			lowest = min(lowest, r.Class(x))
		}
		q.lowest, passed = lowest, lowest < class
	}
	q.share.Served(1, lower, passed)
	if !passed || !q.share.Due() || q.Head() == zero {
		return false
	}
	// The oldest request of a class c passed goes next (PlaceOf puts no
	// newcomer ahead of it): moved to the head, or kept there if it is
	// the head already.
	at := admission.SharePick(q.items, r.Class(c), func(x T) (admission.Class, bool) {
		_, placed := r.Place(x)
		return r.Class(x), !r.Finished(x) && !placed
	}, func(a, b T) bool { return r.Seq(a) < r.Seq(b) })
	if at < 0 {
		return false
	}
	x := q.items[at]
	copy(q.items[1:at+1], q.items[:at])
	q.items[0], q.promoted = x, x
	return at > 0
}

// TopClass is the highest class among the first n live requests of the
// queue (Bulk if none): the class an ask for them carries.
func (q *Queue[T, R]) TopClass(n int) admission.Class {
	var r R
	top := admission.Bulk
	for _, c := range q.items {
		if n == 0 {
			break
		}
		if !r.Finished(c) {
			top = max(top, r.Class(c))
			n--
		}
	}
	return top
}

// Retry puts c among the retries, until its backoff (Rules.NotBefore)
// ends.
func (q *Queue[T, R]) Retry(c T) {
	q.NoteClass(c)
	q.setRetries(append(q.Retries(), c))
}

// DueRetries moves the retries whose backoff is over at now to the front
// of the queue (behind the request the share promoted, if it holds the
// head), in the order they failed, each then at its declared place
// (Order, as PushFront), and drops the finished ones. It returns the ones
// it moved and the wait for the next one (0: none). While no backoff is
// over it allocates nothing: the retries waiting are kept in place.
func (q *Queue[T, R]) DueRetries(now time.Time) (due []T, next time.Duration) {
	if q.retries == nil {
		return nil, 0
	}
	var r R
	waiting := *q.retries
	keep := waiting[:0]
	var at time.Time
	for _, c := range waiting {
		switch nb := r.NotBefore(c); {
		case r.Finished(c):
		case !now.Before(nb):
			due = append(due, c)
		default:
			keep = append(keep, c)
			if at.IsZero() || nb.Before(at) {
				at = nb
			}
		}
	}
	clear(waiting[len(keep):])
	q.setRetries(keep)
	for i := len(due) - 1; i >= 0; i-- { // the first to fail ends up first
		q.PushFront(due[i])
	}
	if at.IsZero() {
		return due, 0
	}
	return due, max(time.Nanosecond, at.Sub(now))
}

// Filter keeps, in the queue and the retries, the requests keep returns
// true for and that are not finished afterwards (keep may finish the
// others: it is called once per request, in order). An emptied queue
// keeps its room, as Pop's.
func (q *Queue[T, R]) Filter(keep func(T) bool) {
	var r R
	filter := func(cs []T) []T {
		out := cs[:0]
		for _, c := range cs {
			if keep(c) && !r.Finished(c) {
				out = append(out, c)
			}
		}
		clear(cs[len(out):])
		return out
	}
	q.items = filter(q.items)
	q.setRetries(filter(q.Retries()))
	q.dropStalePromotion()
}

// Merge takes other's requests into q (two lanes found to share one
// bucket): each of other's live requests joins q's queue by class, then
// by submission among the requests of its class (a declared place by its
// window; never ahead of q's promoted head), in other's order, and
// other's retries join q's. other's promotion and share count are
// dropped, and other is left empty. O(len(q) × len(other)) at worst; the
// lane merged is usually the few requests of a route just learned.
func (q *Queue[T, R]) Merge(other *Queue[T, R]) {
	var r R
	for _, c := range other.items {
		if !r.Finished(c) {
			q.NoteClass(c)
			q.Insert(q.placeOf(c, true), c)
		}
	}
	q.lowest = min(q.lowest, other.lowest)
	q.setRetries(append(q.Retries(), other.Retries()...))
	*other = Queue[T, R]{}
}
