package sluicetest

import (
	"slices"
	"time"
)

// fixedWindow is one bucket's (or sublimit's) counter. A window opens with
// the first request into an empty bucket and admits limit requests until
// start+length+late; the next request after that opens a new window. Its
// headers announce the reset at start+length: late (Faults.LateReset, zero
// for sublimits) is how long after that announced reset the window really
// ends. Between the two the window is in its late interval: still open,
// with the count it had.
type fixedWindow struct {
	limit  int
	length time.Duration
	late   time.Duration // set before roll; never negative
	open   bool
	start  time.Time
	count  int // requests admitted in the open window; 0 <= count <= limit

	// The arrival judge (bucket windows only; see Stats.ReorderedExcused).
	// early counts the requests admitted into the open window although
	// their arrival stamp is before its start: a request stamped first
	// was handled after a later-stamped one had opened the window, as on
	// a starved machine. By arrival they belong to the window before
	// (prevStart..prevEnd), which had prevCount requests by arrival, of a
	// limit of prevLimit.
	early              int
	prevStart, prevEnd time.Time
	prevCount          int
	prevLimit          int
}

// announced is the reset the open window's headers announce.
func (w *fixedWindow) announced() time.Time { return w.start.Add(w.length) }

// roll closes the window if it has really ended (late after its announced
// reset) and reports whether it did.
func (w *fixedWindow) roll(now time.Time) (closed bool) {
	if w.open && !now.Before(w.announced().Add(w.late)) {
		w.prevStart, w.prevEnd, w.prevCount, w.prevLimit = w.start, w.announced().Add(w.late), w.count-w.early, w.limit
		w.open, w.count, w.early, closed = false, 0, 0, true
	}
	return closed
}

// stampedEarly reports whether a request stamped now, handled while the
// window is open (after roll), arrived before the window opened.
func (w *fixedWindow) stampedEarly(now time.Time) bool { return w.open && now.Before(w.start) }

// arrive counts an early-stamped request in the window its stamp falls in
// and reports whether it fitted there: the window before, if the stamp is
// within it; a stamp between two windows or before the previous one would
// have opened a window of its own, so it fits.
func (w *fixedWindow) arrive(now time.Time) bool {
	if now.Before(w.prevStart) || !now.Before(w.prevEnd) {
		return true
	}
	w.prevCount++
	return w.prevCount <= w.prevLimit
}

// inOrderFull reports whether the open window is full with requests
// stamped in it alone, not counting early-stamped ones.
func (w *fixedWindow) inOrderFull() bool { return w.count-w.early >= w.limit }

// inLate reports whether now, at or after the last roll, falls in the open
// window's late interval: its announced reset has passed, its real end not.
func (w *fixedWindow) inLate(now time.Time) bool {
	return w.open && !now.Before(w.announced())
}

// take admits one request if the window has room, opening it if empty.
// It reports whether it opened a new window.
func (w *fixedWindow) take(now time.Time) (admitted, opened bool) {
	if !w.open {
		w.open, w.start, w.count, opened = true, now, 0, true
	}
	if w.count >= w.limit {
		return false, opened
	}
	w.count++
	return true, opened
}

func (w *fixedWindow) remaining() int { return w.limit - w.count }

// resetAfter is the time until the open window's announced reset (the full
// length when no window is open). In the late interval, when the announced
// reset has passed, it is the time left until the real end.
func (w *fixedWindow) resetAfter(now time.Time) time.Duration {
	if !w.open {
		return w.length
	}
	if w.inLate(now) {
		return w.announced().Add(w.late).Sub(now)
	}
	return w.announced().Sub(now)
}

// slidingLog admits at most limit events in any interval of length window:
// an event at t occupies the log until t+window. It is exact, which makes it
// the strictest reading of "N per period": a client that passes it passes a
// fixed-window server too.
type slidingLog struct {
	window time.Duration
	times  []time.Time // ascending
	head   int         // times[:head] have expired
	// times[:old] expired a window before the cut: nothing needs them
	// (fitsByArrival may judge an event stamped up to a window before the
	// latest, so the window before the cut stays).
	old int
}

// prune moves head past the events expired at now, and drops the old
// ones once they are half the log: amortized O(1) per event. (It used to
// look for the old ones back from head at every call once half the log
// had expired, which a steady load keeps true: a window's events each
// time, a fifth of the CPU of a benchmark at 20,000 requests a second.)
func (l *slidingLog) prune(now time.Time) {
	cut := now.Add(-l.window)
	for l.head < len(l.times) && !l.times[l.head].After(cut) {
		l.head++
	}
	before := cut.Add(-l.window)
	for l.old < l.head && !l.times[l.old].After(before) {
		l.old++
	}
	if l.old > 64 && l.old*2 > len(l.times) {
		l.times = append(l.times[:0], l.times[l.old:]...)
		l.head -= l.old
		l.old = 0
	}
}

func (l *slidingLog) count(now time.Time) int {
	l.prune(now)
	return len(l.times) - l.head
}

func (l *slidingLog) add(now time.Time) { l.times = append(l.times, now) }

// fitsByArrival reports whether one more event at t keeps every interval
// of length window that contains t within limit events, counting the
// events by their times, not the order they were added in. The log is in
// ascending order while events come in order; one handled after a
// later-stamped one (a starved handler) makes count, which counts every
// event after now-window, see events of a later interval too. Used only
// to judge a refusal, so it may take its time.
func (l *slidingLog) fitsByArrival(t time.Time, limit int) bool {
	var near []time.Time        // events in (t-window, t+window), and t
	for _, e := range l.times { // pruned ones too: t may be older than the cut
		if e.After(t.Add(-l.window)) && e.Before(t.Add(l.window)) {
			near = append(near, e)
		}
	}
	near = append(near, t)
	slices.SortFunc(near, func(a, b time.Time) int { return a.Compare(b) })
	// The fullest interval (x-window, x] containing t ends at an event
	// x in [t, t+window).
	lo := 0
	for hi, x := range near {
		if x.Before(t) {
			continue
		}
		for !near[lo].After(x.Add(-l.window)) {
			lo++
		}
		if hi-lo+1 > limit {
			return false
		}
	}
	return true
}

// freeAt is when the oldest event leaves the window; valid when count > 0.
func (l *slidingLog) freeAt() time.Time { return l.times[l.head].Add(l.window) }
