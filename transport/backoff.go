package transport

import (
	"math"
	"time"
)

// Backoff computes reconnect delays: exponential growth from Min by Factor
// per attempt, capped at Max, then jitter. It is a pure function of its
// fields and arguments: it never sleeps and keeps no state.
//
// Zero fields take defaults: Min 250 ms, Max 30 s, Factor 2. A Max below
// Min is raised to Min. A Factor in (0, 1) is treated as 1 (constant delay).
// Jitter is clamped to [0, 1]; zero means no jitter.
type Backoff struct {
	// Min is the delay before the first retry (attempt 0).
	Min time.Duration
	// Max caps the un-jittered delay.
	Max time.Duration
	// Factor multiplies the delay per attempt.
	Factor float64
	// Jitter is the fraction of the delay that is randomized:
	// delay = base - Jitter*base*r with r from rnd in [0, 1).
	// 1 is "full jitter" (uniform in (0, base]), 0.5 is "equal jitter"
	// (uniform in (base/2, base]), 0 is deterministic.
	Jitter float64
}

// Backoff defaults for zero fields.
const (
	DefaultBackoffMin    = 250 * time.Millisecond
	DefaultBackoffMax    = 30 * time.Second
	DefaultBackoffFactor = 2.0
)

// Delay returns the delay before retry number attempt (0-based; negative is
// treated as 0): base = min(Max, Min*Factor^attempt), then jitter as
// documented on Backoff using r = rnd(). A nil rnd means r = 0 (no jitter,
// the full base delay); values of r outside [0, 1) are clamped. The result
// is never negative and never exceeds the capped base.
func (b Backoff) Delay(attempt int, rnd func() float64) time.Duration {
	lo, hi, f := b.Min, b.Max, b.Factor
	if lo <= 0 {
		lo = DefaultBackoffMin
	}
	if hi <= 0 {
		hi = DefaultBackoffMax
	}
	if hi < lo {
		hi = lo
	}
	switch {
	case f == 0 || math.IsNaN(f):
		f = DefaultBackoffFactor
	case f < 1:
		f = 1
	}
	if attempt < 0 {
		attempt = 0
	}
	base := float64(lo) * math.Pow(f, float64(attempt))
	if math.IsInf(base, 0) || math.IsNaN(base) || base > float64(hi) {
		base = float64(hi)
	}

	j := b.Jitter
	if math.IsNaN(j) || j < 0 {
		j = 0
	}
	if j > 1 {
		j = 1
	}
	var r float64
	if rnd != nil && j > 0 {
		r = rnd()
		if math.IsNaN(r) || r < 0 {
			r = 0
		}
		if r >= 1 {
			r = math.Nextafter(1, 0)
		}
	}
	d := time.Duration(base - j*base*r)
	if d < 0 {
		d = 0
	}
	return d
}
