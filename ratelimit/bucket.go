package ratelimit

import "time"

// Tunables of [Bucket].
const (
	// PioneerTimeout bounds how long a bucket waits for the response to a
	// request before it stops trusting that the response will come: an
	// unknown bucket admits another pioneer, and a refilled window whose
	// length is still a guess is refilled again. Callers are expected to
	// report every admitted request with Observe or Refund long before
	// this.
	PioneerTimeout = 10 * time.Second

	// WindowTolerance is added to a response's round-trip time when Observe
	// decides whether the response shows a newer window than the bucket's.
	WindowTolerance = 50 * time.Millisecond

	// minPeriod is the shortest window Take assumes after a refill, so that
	// a Reset-After of 0 cannot make it refill on every call.
	minPeriod = 50 * time.Millisecond
)

// Bucket is the state of one Discord rate-limit bucket, as seen by the one
// goroutine (actor) that owns it. Every method takes the current time as an
// argument and nothing reads a clock, so a bucket is deterministic and tested
// without sleeping. Times must come from one monotonic clock (time.Now values
// of one process).
//
// The zero value is an unknown bucket: it admits one "pioneer" request at a
// time until a response carrying X-RateLimit-Limit, -Remaining and
// -Reset-After makes it Known. A Known bucket pipelines: it admits up to
// Remaining requests at once, without waiting for responses.
//
// The golden rule is that Remaining never rises within a window: responses
// that arrive out of order can only lower it. It rises when a window ends
// (Take refills it to Limit minus the requests still in flight, which may be
// counted in the new window), when a response proves that Discord has started
// a newer window, and by Refund of a request that was never sent.
//
// Every request admitted by Take must be reported exactly once, with Observe
// when a response (or a transport error, with zero Headers) came back, or
// with Refund when it was never sent.
//
// A Bucket is not safe for concurrent use.
type Bucket struct {
	// Limit is the number of requests per window (X-RateLimit-Limit).
	// Invariant: Limit >= 1 when Known.
	Limit int
	// Remaining is how many more requests may be sent before ResetAt.
	// Invariant: 0 <= Remaining <= Limit.
	Remaining int
	// ResetAt is when the current window ends: the receive time of a
	// response plus its X-RateLimit-Reset-After, which is never earlier than
	// Discord's own reset. After a refill it is a guess (now plus the longest
	// Reset-After seen) until a response confirms it.
	ResetAt time.Time
	// PausedUntil is set by Pause; Take admits nothing before it.
	PausedUntil time.Time
	// Known reports whether a response has revealed the bucket's limit.
	Known bool
	// Hash is the last X-RateLimit-Bucket seen, or "".
	Hash string

	inflight    int           // admitted, neither observed nor refunded
	ghosts      int           // observed without headers: handled in an unknown window
	ghostsUntil time.Time     // when every ghost's window has surely ended
	uncredited  int           // in-flight requests whose Refund must not raise Remaining; <= inflight
	pioneerAt   time.Time     // when the last pioneer was admitted (unknown bucket)
	windowStart time.Time     // requests sent at or after it count in the current window
	period      time.Duration // longest Reset-After seen: the length of a guessed window
	provisional bool          // ResetAt was guessed at a refill and no response has confirmed it
	heldWindow  time.Time     // windowStart when Hold last applied
}

// Take reserves one request at time now. It returns ok=true if the request
// may be sent now; otherwise wait is how long until Take may succeed. When
// the bucket is waiting for a response (an unknown bucket with its pioneer
// in flight, or a refilled window not yet confirmed after its guessed end)
// wait is the PioneerTimeout deadline; call Take again after each Observe or
// Refund too.
func (b *Bucket) Take(now time.Time) (ok bool, wait time.Duration) {
	if now.Before(b.PausedUntil) {
		return false, b.PausedUntil.Sub(now)
	}
	if !b.Known {
		if b.inflight > 0 {
			if deadline := b.pioneerAt.Add(PioneerTimeout); now.Before(deadline) {
				return false, deadline.Sub(now)
			}
		}
		b.pioneerAt = now
		b.inflight++
		return true, 0
	}
	if !now.Before(b.ResetAt) {
		if b.provisional && b.inflight > 0 {
			// The guessed window has passed and no response confirmed
			// it: the guess may be too short, so wait for a response
			// rather than refill twice in one real window.
			if deadline := b.ResetAt.Add(PioneerTimeout); now.Before(deadline) {
				return false, deadline.Sub(now)
			}
		}
		b.refill(now)
	}
	if b.Remaining > 0 {
		b.Remaining--
		b.inflight++
		return true, 0
	}
	return false, b.ResetAt.Sub(now)
}

// refill starts a new window at now. Requests still in flight may be counted
// by Discord in the new window, so they are charged to it.
func (b *Bucket) refill(now time.Time) {
	b.Remaining = max(0, b.Limit-b.charged(now))
	b.uncredited = 0
	b.ResetAt = now.Add(max(b.period, minPeriod))
	b.windowStart = now
	b.provisional = true
}

// Refund gives back a request admitted by Take that was never sent. Within
// the same window its slot becomes available again, unless a response has
// since lowered Remaining below what the bucket counted (the response's count
// did not include the refunded request, so crediting it would over-admit).
// Refund without a matching Take does nothing.
func (b *Bucket) Refund(now time.Time) {
	if b.inflight == 0 {
		return
	}
	b.inflight--
	if !b.Known {
		if b.inflight == 0 {
			b.pioneerAt = time.Time{}
		}
		return
	}
	if b.uncredited > 0 {
		b.uncredited--
		return
	}
	if now.Before(b.ResetAt) && b.Remaining < b.Limit {
		b.Remaining++
	}
	// Otherwise the window is over and the next refill, which charges
	// in-flight requests, no longer counts this one.
}

// Observe updates the bucket from the response to a request admitted by
// Take. now is when the response arrived and sentAt when the request was sent
// (use the time passed to Take or later; the zero Time means unknown, and the
// response is then only allowed to make the bucket more conservative).
//
// Headers without all of Limit, Remaining and ResetAfter (a transport error,
// an emoji route, a 5xx) release the request's slot in an unknown bucket. In
// a Known bucket the request was probably counted by Discord in a window
// that is not known, so it stays charged to any window starting within a
// period (the longest Reset-After seen, plus WindowTolerance) of now, and
// ResetAt is pushed to at least that time. This relies on the period being
// known: until the bucket has seen the Reset-After of a request that opened
// a window, it may be short.
//
// With full headers, writing hr for now + ResetAfter:
//
//   - An unknown bucket becomes Known with the response's limit and window.
//   - A request sent before the current window began may belong to an
//     older window: it can only push ResetAt later.
//   - The first response sent in a refilled window confirms it: ResetAt
//     becomes hr.
//   - If hr is later than ResetAt by more than the request's round trip plus
//     WindowTolerance, Discord has started a newer window: it is adopted
//     with Remaining = min(header, Limit - 1 - requests in flight).
//   - Otherwise the response belongs to the current window: Remaining
//     becomes min(Remaining, header) and ResetAt the later of the two.
func (b *Bucket) Observe(now, sentAt time.Time, h Headers) {
	if b.inflight > 0 {
		b.inflight--
	}
	b.uncredited = min(b.uncredited, b.inflight)
	if !b.Known && b.inflight == 0 {
		b.pioneerAt = time.Time{}
	}
	if h.Has.Bucket {
		b.Hash = h.Bucket
	}
	if !h.Has.Limit || !h.Has.Remaining || !h.Has.ResetAfter || h.Limit < 1 {
		if b.Known {
			// The request was (probably) handled, in a window that ends
			// at most a full period from now: keep charging it until then.
			end := now.Add(max(b.period, minPeriod) + WindowTolerance)
			b.ResetAt = later(b.ResetAt, end)
			b.ghosts++
			b.ghostsUntil = later(b.ghostsUntil, end)
		}
		return
	}
	limit := min(h.Limit, MaxLimit)
	rem := max(0, min(h.Remaining, limit))
	ra := clampWait(h.ResetAfter)
	hr := now.Add(ra)
	b.period = max(b.period, ra)

	if !b.Known {
		b.Known = true
		b.Limit = limit
		b.startWindow(now, hr, rem)
		return
	}
	if limit != b.Limit {
		b.Limit = limit
		b.Remaining = min(b.Remaining, limit)
	}
	switch {
	case sentAt.IsZero() || sentAt.After(now):
		b.lower(rem)
		b.ResetAt = later(b.ResetAt, hr)
	case sentAt.Before(b.windowStart):
		b.ResetAt = later(b.ResetAt, hr)
	case b.provisional:
		b.lower(rem)
		b.ResetAt = hr
		b.provisional = false
	case hr.After(b.ResetAt.Add(now.Sub(sentAt) + WindowTolerance)):
		b.startWindow(now, hr, rem)
	default:
		b.lower(rem)
		b.ResetAt = later(b.ResetAt, hr)
	}
}

// startWindow adopts the window reported by the response just observed. That
// response's request counts in it, and so may every request still in flight.
func (b *Bucket) startWindow(now, resetAt time.Time, remaining int) {
	b.Remaining = max(0, b.Limit-1-b.charged(now))
	b.uncredited = 0
	b.lower(remaining)
	b.ResetAt = resetAt
	b.windowStart = now
	b.provisional = false
}

// charged returns how many requests sent earlier may still be counted in a
// window that starts at now: those in flight, and those answered without
// headers less than a period ago.
func (b *Bucket) charged(now time.Time) int {
	if b.ghosts > 0 && !now.Before(b.ghostsUntil) {
		b.ghosts = 0
	}
	return b.inflight + b.ghosts
}

// lower applies a remaining count reported by Discord. If it binds, the
// requests in flight were possibly not counted by it, so refunding one of
// them must not raise Remaining.
func (b *Bucket) lower(remaining int) {
	if remaining < b.Remaining {
		b.Remaining = remaining
		b.uncredited = b.inflight
	}
}

// Pause makes Take admit nothing before until (a 429's wait). An earlier
// until than the current pause does nothing.
func (b *Bucket) Pause(until time.Time) {
	b.PausedUntil = later(b.PausedUntil, until)
}

// InFlight returns the number of requests admitted by Take and not yet
// reported with Observe or Refund.
func (b *Bucket) InFlight() int { return b.inflight }

// Idle reports whether the bucket holds nothing worth keeping at now: no
// request in flight, no pause, and its window (if Known) over. An idle bucket
// can be dropped and recreated as unknown, at the cost of one pioneer.
func (b *Bucket) Idle(now time.Time) bool {
	return b.inflight == 0 && !now.Before(b.PausedUntil) && !now.Before(b.ResetAt)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
