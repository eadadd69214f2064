package actors

import (
	"sync/atomic"
	"time"
)

// authLatch remembers that the API rejected the configured token (a 401 to
// a request sent with it), so later requests fail fast with
// ErrUnauthorized instead of spending the invalid-request budget. Every
// probe interval one request is let through to check the token again; an
// answer other than 401 clears the latch.
//
// Only requests sent with the configured token latch it or are refused by
// it: a 401 on a webhook or interaction route, which carries its own token
// in its path, or on a request with its own Authorization header, is that
// request's answer and nothing more.
//
// Invariants: probeAt is meaningful only while latched; at most one probe
// is out at a time (probing), and it is released exactly once, when the
// probe's call gets its outcome (probeEnded).
type authLatch struct {
	latched atomic.Bool
	probeAt atomic.Int64 // limiter clock, Unix nanoseconds: when a probe may go
	probing atomic.Bool  // a probe request is out
}

// refuses reports whether c must fail with ErrUnauthorized. While latched,
// the first bot-authenticated call after probeAt is let through as the
// probe instead (c.authProbe is set).
func (a *authLatch) refuses(c *Call, now time.Time, bot bool) bool {
	if !bot || !a.latched.Load() {
		return false
	}
	if now.UnixNano() >= a.probeAt.Load() && a.probing.CompareAndSwap(false, true) {
		c.authProbe.Store(true)
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

// probeEnded releases the probe slot once the probe's call has its outcome.
func (a *authLatch) probeEnded() { a.probing.Store(false) }
