package ratelimit

import (
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
// period-long interval, i.e. for every instant s, the half-open interval
// [s, s+period) holds at most n reservations. Unlike a fixed window, which
// admits 2n requests around a window boundary, it never bursts above n; this
// is the safe reading of Discord's undocumented global window.
//
// It keeps the times of the last n reservations in a ring buffer, so Reserve
// is O(1) amortized and does not allocate.
//
// The zero value is a window of DefaultGlobalLimit per DefaultGlobalPeriod.
// A SlidingWindow is safe for concurrent use; methods take the time as an
// argument and times must come from one monotonic clock. A time earlier
// than one already passed to Reserve is treated as that later time, which
// only makes the window more conservative.
type SlidingWindow struct {
	mu           sync.Mutex
	n            int
	per          time.Duration
	times        []time.Time // ring of reservation times, oldest at head
	head, count  int
	blockedUntil time.Time
}

// NewSlidingWindow returns a window admitting n requests per period. It
// panics if n < 1, n > MaxGlobalLimit or per <= 0, as these are programming
// errors that configuration validation should catch first.
func NewSlidingWindow(n int, per time.Duration) *SlidingWindow {
	if n < 1 || n > MaxGlobalLimit {
		panic("ratelimit: NewSlidingWindow: n out of range [1, " + strconv.Itoa(MaxGlobalLimit) + "]: " + strconv.Itoa(n))
	}
	if per <= 0 {
		panic("ratelimit: NewSlidingWindow: non-positive period " + per.String())
	}
	return &SlidingWindow{n: n, per: per, times: make([]time.Time, n)}
}

// Limit returns the window's n and period.
func (w *SlidingWindow) Limit() (n int, per time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	return w.n, w.per
}

// Reserve reserves one request at now. It returns ok=true if the request may
// be sent now; otherwise nothing is reserved and wait is how long until
// Reserve may succeed (if nothing else reserves meanwhile).
func (w *SlidingWindow) Reserve(now time.Time) (ok bool, wait time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	if wait := w.wait(now); wait > 0 {
		return false, wait
	}
	if w.count > 0 {
		now = later(now, w.times[(w.head+w.count-1)%w.n])
	}
	w.times[(w.head+w.count)%w.n] = now
	w.count++
	return true, 0
}

// Cancel gives back a reservation that was made at reservedAt (the time
// passed to Reserve) and never used. now is the current time.
//
// The window cannot tell reservations apart, so it frees the oldest
// reservation still in the window, provided it was made no later than
// reservedAt. Freeing an older slot than the cancelled one is always safe:
// every request actually sent is then accounted at a time no earlier than
// its own. If the cancelled reservation has already left the window there is
// nothing to give back.
func (w *SlidingWindow) Cancel(now, reservedAt time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	w.evict(now)
	if w.count == 0 || w.times[w.head].After(reservedAt) {
		return
	}
	w.times[w.head] = time.Time{}
	w.head = (w.head + 1) % w.n
	w.count--
}

// Settle records that the request reserved at reservedAt was answered at
// now: the server counted it at some moment in [reservedAt, now], so its slot
// is held until now plus the period, not reservedAt plus the period. Without
// this, requests reserved a period apart can arrive closer together than a
// period, because latency varies, and a strict server sees one too many.
//
// Like Cancel, it moves the oldest slot no later than reservedAt (which
// leaves the window at least as full as moving the exact one). If that slot
// has already expired and the window is full, the request cannot be placed
// and nothing changes; this needs a round trip longer than the period.
// Calls must come with non-decreasing now, as from one actor.
func (w *SlidingWindow) Settle(now, reservedAt time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	w.evict(now)
	if w.count > 0 && !w.times[w.head].After(reservedAt) {
		w.times[w.head] = time.Time{}
		w.head = (w.head + 1) % w.n
		w.count--
	}
	if w.count == w.n {
		return
	}
	if w.count > 0 {
		now = later(now, w.times[(w.head+w.count-1)%w.n])
	}
	w.times[(w.head+w.count)%w.n] = now
	w.count++
}

// Block stops all reservations until until, e.g. after a global 429. An
// earlier until than the current block does nothing.
func (w *SlidingWindow) Block(until time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.blockedUntil = later(w.blockedUntil, until)
}

// Wait returns how long from now until Reserve would succeed, 0 if it would
// succeed now. It reserves nothing.
func (w *SlidingWindow) Wait(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	return w.wait(now)
}

// Count returns the number of reservations in the window at now.
func (w *SlidingWindow) Count(now time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.init()
	w.evict(now)
	return w.count
}

// wait evicts expired reservations and returns the wait at now.
func (w *SlidingWindow) wait(now time.Time) time.Duration {
	if now.Before(w.blockedUntil) {
		return w.blockedUntil.Sub(now)
	}
	w.evict(now)
	if w.count < w.n {
		return 0
	}
	return w.times[w.head].Add(w.per).Sub(now)
}

// evict drops reservations that left the window: those at or before now-per.
func (w *SlidingWindow) evict(now time.Time) {
	for w.count > 0 && !now.Before(w.times[w.head].Add(w.per)) {
		w.times[w.head] = time.Time{}
		w.head = (w.head + 1) % w.n
		w.count--
	}
}

// init makes the zero value usable.
func (w *SlidingWindow) init() {
	if w.times != nil {
		return
	}
	if w.n == 0 {
		w.n, w.per = DefaultGlobalLimit, DefaultGlobalPeriod
	}
	w.times = make([]time.Time, w.n)
}
