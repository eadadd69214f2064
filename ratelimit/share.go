package ratelimit

import "time"

// Hold counts n requests that other routes may send into this bucket's
// current window before they learn they share it: routes whose hash is
// still unknown but whose major parameters are this bucket's. Remaining
// drops by n (never below 0), and refunds of requests already in flight
// no longer raise it. A bucket that is unknown or whose window is over is
// left alone: the next window starts from Discord's own count.
func (b *Bucket) Hold(now time.Time, n int) {
	if !b.Known || n <= 0 || !now.Before(b.ResetAt) {
		return
	}
	b.Remaining = max(0, b.Remaining-n)
	b.uncredited = b.inflight
	b.heldWindow = b.windowStart
}

// Unhold gives back n slots taken by Hold, for siblings whose request turns
// out to be counted already in the headers this bucket learned from (their
// request reached the server first: their headers show more remaining than
// this bucket's first ones did). It does nothing once the window of the
// Hold is over.
func (b *Bucket) Unhold(now time.Time, n int) {
	if !b.Known || n <= 0 || !now.Before(b.ResetAt) || !b.windowStart.Equal(b.heldWindow) {
		return
	}
	b.Remaining = min(b.Limit, b.Remaining+n)
}

// Lower applies headers that a request of another route saw for this
// bucket, received no later than now: a route that turned out to share the
// bucket's hash hands over what its pioneer learned. The request was not
// admitted by this Bucket, so nothing in flight is released. Remaining can
// only drop and ResetAt only move later. Headers without Remaining and
// Reset-After, or an unknown bucket, change nothing.
func (b *Bucket) Lower(now time.Time, h Headers) {
	if !b.Known || !h.Has.Remaining || !h.Has.ResetAfter {
		return
	}
	b.lower(max(0, min(h.Remaining, b.Limit)))
	b.ResetAt = later(b.ResetAt, now.Add(clampWait(h.ResetAfter)))
}
