package ratelimit

import (
	"sort"
	"strconv"
	"sync"
	"time"
)

// Discord's documented global limit.
const (
	// DefaultGlobalLimit is the number of requests a bot may send per
	// DefaultGlobalPeriod across all routes.
	DefaultGlobalLimit = 50
	// DefaultGlobalPeriod is the period of DefaultGlobalLimit.
	DefaultGlobalPeriod = time.Second
	// MaxGlobalLimit bounds the n of NewSlidingWindow, and so its memory.
	MaxGlobalLimit = 1_000_000
)

// SlidingWindow is the proactive global limit: at most n requests in any
// period-long interval as the server sees them. Unlike a fixed window,
// which admits 2n requests around a window boundary, it never bursts above
// n; this is the safe reading of Discord's undocumented global window.
//
// A request holds a slot from Reserve until its answer arrives (Settle) and
// then for one more period: the server counted it at some moment between
// the two, and only this keeps every server-side window within n whatever
// the latency and its jitter. Settle may be given, instead of the answer's
// arrival, the earliest local send time whose request the server counts no
// earlier than this one ([ServerClock.Local] of the server's count time):
// that releases the slot up to a return trip sooner, and keeps the
// guarantee as long as no request travels faster than the clock's lead. A request that was never sent gives its slot back with Cancel.
// Every successful Reserve must be followed by exactly one Settle or Cancel.
//
// Invariant: for every instant t, the requests with reservedAt <= t <
// settledAt+period (in-flight ones included) number at most n.
//
// Settled slots live in a ring buffer of up to n times, so every method is
// O(1) amortized. The ring starts small and doubles as slots are held (up
// to n), so a window of a large n that is little used costs little memory:
// a proxy keeps one per token, and the invalid-request budget's is 9,000.
//
// The zero value is a window of DefaultGlobalLimit per DefaultGlobalPeriod.
// A SlidingWindow is safe for concurrent use; methods take the time as an
// argument and times must come from one monotonic clock. A time earlier than
// one already recorded is treated as that later time, which only makes the
// window more conservative.
type SlidingWindow struct {
	mu           sync.Mutex
	n            int
	per          time.Duration
	times        []time.Time // ring of settle times, oldest at head
	head, count  int         // count: settled slots still in the window
	inflight     int         // reserved, neither settled nor cancelled; count+inflight <= n
	blockedUntil time.Time
}

// NewSlidingWindow returns a window admitting n requests per period. It
// panics if n is not in [1, MaxGlobalLimit] or per is not positive: both are
// programming errors, not input.
func NewSlidingWindow(n int, per time.Duration) *SlidingWindow {
	if n < 1 || n > MaxGlobalLimit {
		panic("ratelimit: NewSlidingWindow: n out of range [1, " + strconv.Itoa(MaxGlobalLimit) + "]: " + strconv.Itoa(n))
	}
	if per <= 0 {
		panic("ratelimit: NewSlidingWindow: non-positive period " + per.String())
	}
	return &SlidingWindow{n: n, per: per, times: make([]time.Time, min(n, initialRing))}
}

// Limit returns the window's n and period.
func (w *SlidingWindow) Limit() (n int, per time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	return w.n, w.per
}

// Reserve takes a slot for one request at now if the window allows, and
// otherwise reports how long to wait. When only requests in flight fill the
// window, wait is one period, an upper bound: call Reserve again after each
// Settle or Cancel.
func (w *SlidingWindow) Reserve(now time.Time) (ok bool, wait time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	if wait := w.wait(now); wait > 0 {
		return false, wait
	}
	w.inflight++
	return true, 0
}

// ReserveKeeping is Reserve that succeeds only while keep slots stay free
// after it: a caller may take the first slots of a window on its own and
// leave the last ones to an arbiter that serves the most urgent callers
// first.
func (w *SlidingWindow) ReserveKeeping(now time.Time, keep int) (ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	if w.wait(now) > 0 {
		return false
	}
	if w.count+w.inflight+1+keep > w.n {
		return false
	}
	w.inflight++
	return true
}

// Settle records that a reserved request was answered at now (or counted
// by the server at now, as [ServerClock.Local] reckons it): its slot is
// held until now plus the period. Without a reservation in flight it does
// nothing.
func (w *SlidingWindow) Settle(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	if w.inflight == 0 {
		return
	}
	w.inflight--
	w.evict(now)
	// count + inflight <= n held before the decrement, so count < n: if
	// the ring is full it can grow.
	if w.count == len(w.times) {
		w.grow()
	}
	if w.count > 0 {
		now = later(now, w.times[(w.head+w.count-1)%len(w.times)])
	}
	w.times[(w.head+w.count)%len(w.times)] = now
	w.count++
}

// Cancel gives back the slot of a reserved request that was never sent.
// Without a reservation in flight it does nothing.
func (w *SlidingWindow) Cancel(time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inflight > 0 {
		w.inflight--
	}
}

// Blocked returns how long from now the window stays blocked by Block (0:
// not blocked). A slot reserved before the block must not be used during
// it either.
func (w *SlidingWindow) Blocked(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(0, w.blockedUntil.Sub(now))
}

// Block stops all reservations until until (a global 429's retry-after). An
// earlier until than the current block does nothing.
func (w *SlidingWindow) Block(until time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.blockedUntil = later(w.blockedUntil, until)
}

// blockEnd returns when the block ends (zero: never blocked).
func (w *SlidingWindow) blockEnd() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.blockedUntil
}

// Wait returns how long from now until Reserve would succeed, 0 if it would
// succeed now (see Reserve for the in-flight case). It reserves nothing.
func (w *SlidingWindow) Wait(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	return w.wait(now)
}

// Count returns the number of slots held at now, in-flight ones included.
func (w *SlidingWindow) Count(now time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	w.evict(now)
	return w.count + w.inflight
}

func (w *SlidingWindow) wait(now time.Time) time.Duration {
	if now.Before(w.blockedUntil) {
		return w.blockedUntil.Sub(now)
	}
	w.evict(now)
	if w.count+w.inflight < w.n {
		return 0
	}
	if w.count == 0 {
		return w.per
	}
	return w.times[w.head].Add(w.per).Sub(now)
}

// evict drops the settled slots whose period is over at now.
func (w *SlidingWindow) evict(now time.Time) {
	for w.count > 0 && !now.Before(w.times[w.head].Add(w.per)) {
		w.times[w.head] = time.Time{}
		w.head = (w.head + 1) % len(w.times)
		w.count--
	}
}

func (w *SlidingWindow) init() {
	if w.times != nil {
		return
	}
	if w.n == 0 {
		w.n, w.per = DefaultGlobalLimit, DefaultGlobalPeriod
	}
	w.times = make([]time.Time, min(w.n, initialRing))
}

// initialRing is the ring's first size; it doubles up to n.
const initialRing = 64

// grow doubles the full ring (at most to n), oldest slot first.
func (w *SlidingWindow) grow() {
	times := make([]time.Time, min(2*len(w.times), w.n))
	for i := range w.count {
		times[i] = w.times[(w.head+i)%len(w.times)]
	}
	w.times, w.head = times, 0
}

// FreeAt returns how many slots the window will have free at a time at
// (not before now) if nothing more is reserved: those free now, and the
// settled ones whose period is over by then. A slot in flight counts as
// held (its answer, and so the end of its period, is not known yet), and
// a block is not counted (whoever waits on the window waits for it
// first). O(log n).
func (w *SlidingWindow) FreeAt(now, at time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	w.evict(now)
	// settle times are in order, oldest at head
	freed := sort.Search(w.count, func(i int) bool {
		return at.Before(w.times[(w.head+i)%len(w.times)].Add(w.per))
	})
	return w.n - w.count - w.inflight + freed
}

// Forecast returns when the window could take the k-th next request (0:
// the next one), if requests kept coming in order, each was answered the
// moment it was sent, and nothing else reserved: the free slots go at
// now, then each held slot when it frees (a settled one one period after
// its answer, an in-flight one one period from now: its answer is not
// known yet), and every later request one period after the request n
// places before it. A block holds them all until it ends. It reserves
// nothing, and costs O(1).
func (w *SlidingWindow) Forecast(now time.Time, k int) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	w.evict(now)
	k = max(k, 0)
	cycles, i := k/w.n, k%w.n
	free := w.n - w.count - w.inflight
	var t time.Time
	switch {
	case i < free:
		t = now
	case i < free+w.count:
		t = w.times[(w.head+i-free)%len(w.times)].Add(w.per)
	default:
		t = now.Add(w.per)
	}
	return later(t, w.blockedUntil).Add(time.Duration(cycles) * w.per)
}
