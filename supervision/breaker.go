package supervision

import (
	"strconv"
	"time"
)

// BreakerState is the state of a Breaker.
type BreakerState uint8

const (
	// Closed lets every request through.
	Closed BreakerState = iota
	// Open holds every request until the backoff ends.
	Open
	// HalfOpen lets one probe through and holds the rest until its answer.
	HalfOpen
)

// String returns "closed", "open" or "half_open".
func (s BreakerState) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return "BreakerState(" + strconv.Itoa(int(s)) + ")"
}

// Breaker is the Cloudflare-ban circuit breaker. Create it with
// NewBreaker; it is driven by one actor.
type Breaker struct {
	// Initial is the first backoff; Max caps the doubling.
	Initial, Max time.Duration

	state   BreakerState
	until   time.Time     // Open: when the backoff ends
	backoff time.Duration // the current backoff; doubles per failed probe
	probing bool          // HalfOpen: a probe is out
}

// NewBreaker returns a closed breaker whose backoff starts at initial and
// doubles up to max.
func NewBreaker(initial, max time.Duration) *Breaker {
	return &Breaker{Initial: initial, Max: max}
}

// State reports the state at now (an Open breaker whose backoff ended is
// HalfOpen).
func (b *Breaker) State(now time.Time) BreakerState {
	if b.state == Open && !now.Before(b.until) {
		return HalfOpen
	}
	return b.state
}

// Trip records a ban answer at now: the breaker opens for its backoff,
// which doubles if the breaker was already tripped (a failed probe). A ban
// answer while Open, from a request sent before the breaker opened, only
// keeps it open. It returns how long requests are held.
func (b *Breaker) Trip(now time.Time) time.Duration {
	if b.state == Open && now.Before(b.until) {
		return b.until.Sub(now)
	}
	switch {
	case b.backoff == 0:
		b.backoff = b.Initial
	default:
		b.backoff = min(2*b.backoff, b.Max)
	}
	b.state, b.until, b.probing = Open, now.Add(b.backoff), false
	return b.backoff
}

// Allow reports whether a request may be sent at now. In HalfOpen it
// admits exactly one (probe is then true) until Probed is called. When it
// refuses, wait is how long until asking again makes sense (0 while a
// probe is out: ask again after Probed).
func (b *Breaker) Allow(now time.Time) (ok, probe bool, wait time.Duration) {
	switch b.State(now) {
	case Closed:
		return true, false, 0
	case Open:
		return false, false, b.until.Sub(now)
	}
	b.state = HalfOpen
	if b.probing {
		return false, false, 0
	}
	b.probing = true
	return true, true, 0
}

// Probed records the answer to the probe: banned trips the breaker again
// with a doubled backoff; any other answer closes it and resets the
// backoff. A transport failure that says nothing about the ban should call
// Abandon instead.
func (b *Breaker) Probed(now time.Time, banned bool) {
	if b.state != HalfOpen || !b.probing {
		return
	}
	if banned {
		b.Trip(now)
		return
	}
	b.state, b.backoff, b.probing = Closed, 0, false
}

// Abandon forgets the probe in flight (it failed without an answer), so
// the next Allow sends another.
func (b *Breaker) Abandon() {
	if b.state == HalfOpen {
		b.probing = false
	}
}
