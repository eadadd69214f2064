package supervision

import (
	"sync"
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
// in a sliding window. It is safe for concurrent use.
type Budget struct {
	window *ratelimit.SlidingWindow
	warnAt int

	mu     sync.Mutex
	warned bool
}

// NewBudget refuses requests once ceiling invalid answers fall within
// window, and warns once at warnAt (0: never).
func NewBudget(ceiling int, window time.Duration, warnAt int) *Budget {
	return &Budget{window: ratelimit.NewSlidingWindow(ceiling, window), warnAt: warnAt}
}

// Record counts one invalid answer received at now and returns the level
// the count is at.
func (b *Budget) Record(now time.Time) (count int, level Level) {
	if ok, _ := b.window.Reserve(now); ok {
		b.window.Settle(now) // an answer counts for one window from now
	}
	count = b.window.Count(now)
	if n, _ := b.window.Limit(); count >= n {
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
	n, per := b.window.Limit()
	return b.window.Wait(now), n, per
}

// Left returns how many more invalid answers the budget accepts at now
// before it refuses requests.
func (b *Budget) Left(now time.Time) int {
	n, _ := b.window.Limit()
	return max(0, n-b.window.Count(now))
}
