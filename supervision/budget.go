package supervision

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// Level is what Budget.Record reports about the count.
type Level uint8

const (
	// Fine: below the warning threshold.
	Fine Level = iota
	// Warn: the count just reached the warning threshold (reported once
	// per Budget).
	Warn
	// Exhausted: the count reached the ceiling; requests are refused.
	Exhausted
)

// Budget counts invalid answers (401, 403 and 429 except shared-scope ones)
// in a sliding window. It is safe for concurrent use. Refusing, which
// every request asks, takes no lock unless an invalid answer came within
// the last window: only Record fills the window.
type Budget struct {
	window  *ratelimit.SlidingWindow
	ceiling int           // the window's count (immutable)
	per     time.Duration // the window's period (immutable)
	warnAt  int
	// fullUntil (Unix ns) is at or after the end of every answer's hold in
	// the window (its time plus the period): before it Refusing asks the
	// window, from it on the window is empty. Record moves it on before
	// it counts the answer, so no Refusing can see the window filled and
	// fullUntil not yet moved. It only grows.
	fullUntil atomic.Int64

	mu     sync.Mutex
	warned bool
}

// NewBudget refuses requests once ceiling invalid answers fall within
// window, and warns once at warnAt (0: never).
func NewBudget(ceiling int, window time.Duration, warnAt int) *Budget {
	w := ratelimit.NewSlidingWindow(ceiling, window)
	n, per := w.Limit()
	return &Budget{window: w, ceiling: n, per: per, warnAt: warnAt}
}

// Record counts one invalid answer received at now and returns the level
// the count is at.
func (b *Budget) Record(now time.Time) (count int, level Level) {
	// The window holds this answer until now+per at the latest (or, after
	// an answer recorded at a later time, until that one's end, which
	// its Record set already).
	until := now.Add(b.per).UnixNano()
	for old := b.fullUntil.Load(); until > old && !b.fullUntil.CompareAndSwap(old, until); old = b.fullUntil.Load() {
	}
	if ok, _ := b.window.Reserve(now); ok {
		b.window.Settle(now) // an answer counts for one window from now
	}
	count = b.window.Count(now)
	if count >= b.ceiling {
		return count, Exhausted
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.warnAt > 0 && count >= b.warnAt && !b.warned {
		b.warned = true
		return count, Warn
	}
	return count, Fine
}

// Refusing reports whether requests are refused at now, and for how long.
func (b *Budget) Refusing(now time.Time) (wait time.Duration, count int, window time.Duration) {
	if now.UnixNano() >= b.fullUntil.Load() {
		return 0, b.ceiling, b.per
	}
	return b.window.Wait(now), b.ceiling, b.per
}

// Left returns how many more invalid answers the budget accepts at now
// before it refuses requests.
func (b *Budget) Left(now time.Time) int {
	return max(0, b.ceiling-b.window.Count(now))
}
