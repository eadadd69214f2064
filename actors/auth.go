package actors

import (
	"sync/atomic"
	"time"
)

// authLatch remembers that the API rejected the configured token (a 401 to
// a request sent with it), so later requests fail fast with
// failure.ErrUnauthorized instead of spending the invalid-request budget. Every
// probe interval one request is let through to check the token again; an
// answer other than 401 clears the latch.
//
// Only requests sent with the configured token latch it or are refused by
// it: a 401 on a webhook or interaction route, which carries its own token
// in its path, or on a request with its own Authorization header, is that
// request's answer and nothing more.
//
// Invariants: probeAt is meaningful only while latched; at most one probe
// is out at a time (probing), and it is released exactly once (release),
// when the probe's call gets its outcome or, if that came before the call
// became the probe (its context ended as it was submitted), at once: the
// call's authSlot hands the release over to whichever comes second.
type authLatch struct {
	latched atomic.Bool
	probeAt atomic.Int64 // limiter clock, Unix nanoseconds: when a probe may go
	probing atomic.Bool  // a probe request is out
}

// refuses reports whether c must fail with failure.ErrUnauthorized. While latched,
// the first bot-authenticated call after probeAt is let through as the
// probe instead (c.authProbe is set).
func (a *authLatch) refuses(c *Call, now time.Time, bot bool) bool {
	if !bot || !a.latched.Load() {
		return false
	}
	if now.UnixNano() >= a.probeAt.Load() && a.probing.CompareAndSwap(false, true) {
		c.authSlot.Store(true)
		c.authProbe.Store(true)
		if c.Finished() {
			a.release(c) // its outcome's release may have come first, and missed it
		}
		return false
	}
	return !c.authProbe.Load()
}

// active reports whether the latch refuses bot-authenticated calls.
func (a *authLatch) active() bool { return a.latched.Load() }

// rejected records a 401 to the configured token; it reports whether the
// latch was open before (to log once).
func (a *authLatch) rejected(now time.Time, probe time.Duration) bool {
	a.probeAt.Store(now.Add(probe).UnixNano())
	return a.latched.CompareAndSwap(false, true)
}

// accepted records an answer other than 401 to the probe: the token works.
func (a *authLatch) accepted() bool { return a.latched.CompareAndSwap(true, false) }

// release gives the probe slot back if c holds it, once.
func (a *authLatch) release(c *Call) {
	if c.authSlot.CompareAndSwap(true, false) {
		a.probing.Store(false)
	}
}
