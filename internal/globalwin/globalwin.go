// Package globalwin is one of Discord's global limits as the actors share
// it (Window): its limiter, the fast path a bucket actor reserves from on
// its own, and the counters that tell the bucket actors and the forecast
// what the admission line holds.
//
// A request takes a global slot one of two ways. While nobody waits in
// the window's admission line, its bucket actor reserves one itself
// (ReserveFast), as long as more than the window's keep stays free: the
// keep is the share admission.FastShare leaves to the line, so the last
// slots of a window go where they are most needed. Otherwise the bucket
// asks the supervisor, whose admission.Queue serves the line from this
// Window (it is an admission.Window and an admission.Freer) and grants
// slots to the bucket actors.
//
// Which way a bucket actor's request goes, if any, is Admit's rule: not
// during a global 429's pause, then a granted slot, then the fast path
// while the actor is not in line and nobody waits.
//
// Who touches it: every bucket actor (Admit, Waiting, Granted, the
// limiter's Settle and Cancel), the workers (the limiter's Block on a
// global 429, the shared store), the supervisor (the line's Serve, its
// pause, Waiting) and the ETA's forecast (the limiter and Granted). Its
// fields are set once by New; the counters are atomic; the limiter and
// the shared store are safe for concurrent use.
//
// Which of the two windows a request counts on (the token's or the IP's),
// and whether it is sent with the configured token, is Classify
// (classify.go: a pure function of plain facts about the request, called
// by the actors' System.classify once per request, at submission).
//
// It cannot live in internal/admission, which it serves: package ratelimit
// imports admission (for its classes), and a Window holds ratelimit's
// limiter and shared store.
package globalwin

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/ratelimit"
)

// Window is one global limit as the bucket actors and workers see it: its
// limiter, its fast path and the processes it is shared with. Only the
// supervisor stores Waiting (the length of its admission queue for the
// window, see the actors' supervisor.windows). New makes one.
type Window struct {
	// Limiter is the window's count of slots (ratelimit.SlidingWindow, or
	// the caller's): every Reserve is ended by Settle or Cancel.
	Limiter ratelimit.GlobalLimiter
	// keeper and keep: the fast path (ReserveFast); nil keeper when the
	// limiter cannot keep slots free. keep is the limit's share
	// 1-admission.FastShare, fixed by New.
	keeper keeper
	keep   int
	// Shared counts this window's requests with other processes (nil:
	// this process's alone).
	Shared ratelimit.Shared
	// Waiting is how many buckets wait in the window's admission line.
	// Invariant: the supervisor's queue's length, stored by the supervisor
	// alone each time the line changes.
	Waiting atomic.Int32
	// Kept is how many keeps stand in the window's admission line (slots
	// kept back for buckets about to reopen, or behind a pioneer: the
	// line hands out the rest; admission.Queue.Keeps). Stored by the
	// supervisor alone, with Waiting.
	Kept atomic.Int32
	// Granted counts the slots reserved for bucket actors (grantMsg) and
	// not spent yet: held in the limiter for calls still queued (the
	// global forecast must not count those twice, see forecast.Assemble).
	Granted atomic.Int32
}

// keeper is a GlobalLimiter that can keep slots free (ratelimit.SlidingWindow).
type keeper interface {
	ReserveKeeping(now time.Time, keep int) bool
	Limit() (int, time.Duration)
}

var (
	_ admission.Window = (*Window)(nil)
	_ admission.Freer  = (*Window)(nil)
	_ keeper           = (*ratelimit.SlidingWindow)(nil)
)

// New returns the window of limiter l, shared through shared (nil: not
// shared).
func New(l ratelimit.GlobalLimiter, shared ratelimit.Shared) *Window {
	w := &Window{Limiter: l, Shared: shared}
	if k, ok := l.(keeper); ok {
		n, _ := k.Limit()
		w.keeper, w.keep = k, int(float64(n)*(1-admission.FastShare))
	}
	return w
}

// ReserveFast reserves a slot for a bucket actor on its own, if the window
// has more than its share free. A GlobalLimiter that cannot tell is
// reserved from freely. The caller goes this way only while nobody waits
// in line (Waiting is 0).
func (w *Window) ReserveFast(now time.Time) bool {
	if w.keeper != nil {
		return w.keeper.ReserveKeeping(now, w.keep)
	}
	ok, _ := w.Limiter.Reserve(now)
	return ok
}

// Admit reports whether a bucket actor's request that needs a global slot
// may go at now as far as the window is concerned, and takes its slot
// (ok): never during a global 429's pause (the limiter's Blocked), when
// even slots in hand wait; else one of the slots granted to the actor,
// grants of them left (spent: the actor counts it off; Granted is counted
// off here); else from the fast path (ReserveFast), only while the actor
// is not in line itself (inLine: it asked for slots and waits for the
// answer, or holds the ban breaker's probe), nobody waits in the
// window's line (Waiting) and no keep stands there (Kept): others waiting
// for the window take their turn first, and while slots are kept for a
// bucket about to reopen, or for a queue behind a pioneer, the line
// hands out the rest (it knows what each keep leaves spare). The actor
// checks the connection and the ban breaker's hold before, and sends a
// request that needs no global slot without asking.
func (w *Window) Admit(now time.Time, grants int, inLine bool) (ok, spent bool) {
	if w.Limiter.Blocked(now) > 0 {
		return false, false
	}
	if grants > 0 {
		w.Granted.Add(-1)
		return true, true
	}
	if inLine || w.Waiting.Load() > 0 || w.Kept.Load() > 0 {
		return false, false
	}
	return w.ReserveFast(now), false
}

// Limit returns the window's limit and period when its limiter tells them.
func (w *Window) Limit() (int, time.Duration, bool) {
	if l, ok := w.Limiter.(interface{ Limit() (int, time.Duration) }); ok {
		n, per := l.Limit()
		return n, per, true
	}
	return 0, 0, false
}

// Reserve reserves a slot at now (admission.Window).
func (w *Window) Reserve(now time.Time) (bool, time.Duration) { return w.Limiter.Reserve(now) }

// Count returns the slots held now, when the limiter can count them (0
// when it cannot; admission.Window).
func (w *Window) Count(now time.Time) int {
	if c, ok := w.Limiter.(interface{ Count(time.Time) int }); ok {
		return c.Count(now)
	}
	return 0
}

// FreeAt returns how many slots the limiter will have free at at if
// nothing more is reserved, -1 when it cannot tell (admission.Freer).
func (w *Window) FreeAt(now, at time.Time) int {
	if f, ok := w.Limiter.(admission.Freer); ok {
		return f.FreeAt(now, at)
	}
	return -1
}
