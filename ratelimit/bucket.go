package ratelimit

import "time"

// Tunables of [Bucket].
const (
	// PioneerTimeout bounds how long a bucket waits for the response to a
	// request before it stops trusting that the response will come: an
	// unknown bucket admits another pioneer, a refilled window whose
	// length is still a guess is refilled again, and a reopening probe
	// lets the rest of its window go. Callers are expected to report every
	// admitted request with Observe or Refund long before this.
	PioneerTimeout = 10 * time.Second

	// WindowTolerance is added to a response's round-trip time when Observe
	// decides whether the response shows a newer window than the bucket's.
	WindowTolerance = 50 * time.Millisecond

	// ReopenMargin is how long after the reopening time read from the
	// server's clock (Headers.Reopen) a bucket reopens while Discord keeps
	// the time it announces. It covers a request that reaches Discord
	// faster than every one of the last 64 by more than their range
	// (ServerClock's lead is a minimum over those, less their range) and the rounding of
	// X-RateLimit-Reset beyond ResetPrecision; 10 ms is about 1% of a
	// one-second window. An
	// estimate from the receive time alone is late by the whole return
	// trip already and gets no base margin.
	ReopenMargin = 10 * time.Millisecond

	// MarginHalfLife paces how a margin learned by LateReopen decays: it
	// is kept in full for MarginHalfLife after it was last raised, then
	// halves at the end of each further MarginHalfLife, in steps, so that
	// each lowering is tried once by a probe (see Bucket) before the
	// bucket pipelines at it. A server that keeps reopening late costs one
	// 429 per bucket about every MarginHalfLife.
	MarginHalfLife = 10 * time.Minute

	// MaxLateMargin caps the margin LateReopen learns. Discord is reported
	// to reopen some buckets 250-400 ms late; a 429 that would teach more
	// than this is more likely another client using the bucket.
	MaxLateMargin = time.Second

	// minPeriod is the shortest window Take assumes after a refill, so that
	// a Reset-After of 0 cannot make it refill on every call.
	minPeriod = 50 * time.Millisecond

	// probeSlack is how much earlier than the shortest reopening delay a
	// probe found on time a window may reopen without a new probe: the lag
	// of the caller's timers.
	probeSlack = 5 * time.Millisecond

	// limitMemory is how many windows a limit seen is remembered for at
	// least (at most twice as many): a refilled window admits no more than
	// the smallest limit seen over them until a response of the window
	// shows its own. A cycle of limits no longer than this costs no 429
	// once each of its limits has been seen.
	limitMemory = 16

	// sameWindowTolerance is how far apart the X-RateLimit-Reset of two
	// responses may be for Observe to take them as one window (Discord's
	// Reset has millisecond precision; windows are hundreds apart).
	sameWindowTolerance = 5 * time.Millisecond
)

// Bucket is the state of one Discord rate-limit bucket, as seen by the one
// goroutine (actor) that owns it. Every method takes the current time as an
// argument and nothing reads a clock, so a bucket is deterministic and tested
// without sleeping. Times must come from one monotonic clock (time.Now values
// of one process), and lie within 292 years of the process's start: a Bucket
// keeps its own times as offsets from it (a fake clock's too).
//
// The zero value is an unknown bucket: it admits one "pioneer" request at a
// time until a response carrying X-RateLimit-Limit, -Remaining and
// -Reset-After makes it Known. A Known bucket pipelines: it admits up to
// Remaining requests at once, without waiting for responses.
//
// # Windows
//
// Each response gives an estimate of when the window that counted its
// request reopens: the receive time of its headers plus Reset-After, or, if
// earlier, Headers.Reopen (set by [ServerClock.Annotate] from the server's
// clock) plus ReopenMargin. Every estimate is safe: a request sent at or
// after it is counted in a later window. ResetAt is the earliest estimate of
// the responses of the current window (told apart from a neighbouring
// window's by their X-RateLimit-Reset; responses without one can only move
// ResetAt later), plus the learned margin (see below).
//
// The golden rule is that Remaining never rises within a window: responses
// that arrive out of order can only lower it. It rises when a window ends
// (Take refills it to Limit minus the requests still in flight, which may be
// counted in the new window), when a response proves that Discord has started
// a newer window, by Refund of a request that was never sent, and when a
// response of the current window shows a higher limit than the one the
// bucket counted (see below). Limit - Remaining is always at least the
// number of requests that may count in the current window.
//
// A refill does not wait for the requests still in flight: they are charged
// to the new window instead. Every request the server may count in the new
// window is then either in flight (charged), answered without headers
// (charged for a period, see Observe, unless ObserveLost shows it arrived
// before the window began), or answered with headers, which
// moved ResetAt to the end of its window. Only while the window length is
// still a guess (no response has shown the Reset-After of a request that
// opened a window, Remaining = Limit - 1) does a refilled window whose end
// no response has confirmed wait for a response, up to PioneerTimeout,
// before refilling again.
//
// # Varying limits
//
// Discord may give one bucket a different limit from one window to the
// next, and the headers of a window tell only its own. So Limit is the limit
// the bucket counts for the current window, and Limit - Remaining the
// requests that may count in it. A refill (a window started before any of
// its answers came) counts the smallest X-RateLimit-Limit seen over the last
// limitMemory (16) to 2*limitMemory windows the bucket began, less the
// requests still in flight. The first response of the current window (sent
// in it, or the one that showed a newer window) to show a higher limit
// raises Limit, and Remaining by the difference: the rest of the window is
// used once one answer came. Any response of the current window with a
// lower limit lowers Limit, and Remaining by the difference, then to the
// response's Remaining if lower. A response that may belong to another
// window (sent before the current one began, or at an unknown time) never
// raises Limit, and lowers it (the same way) only while no response of the
// current window has shown its limit, or when its send time is unknown.
// Requests sent late in a window may be counted in the next one, which may
// allow only the smallest recent limit: while the current window counts more
// than that and that many are in flight, Take admits no more once the
// window's estimated end is nearer than the estimate's slack plus a round
// trip (a decaying maximum of recent ones), and waits for the refill. A
// cycle of limits therefore costs at most the excess of its first decrease
// (the requests already sent on the larger limit), and no 429 once each of
// its limits is remembered. A 429 in a window whose limit a response showed
// lower than the bucket counted is blamed on the limit, not on a late
// reopening: LateReopen learns nothing from it.
//
// # Late reopening
//
// Discord is reported to reopen some buckets later than it announces. The
// caller reports a user-scope 429 with [Bucket.LateReopen]; if its request
// was sent in a window this bucket reopened itself, the bucket learns a
// margin that covers the lateness, adds it to every window end it adopts,
// keeps it for MarginHalfLife and then halves it step by step
// ([Bucket.Margin]). A window reopened at a delay no probe has yet found on
// time (the first reopening, one after a raise, one after a decay step)
// admits a single request, the probe, and holds the rest of Remaining until
// its answer (or PioneerTimeout), so a late server costs one 429 rather than
// a window's worth. A probe costs its window one round trip, once per
// bucket while the server keeps time. The margin and what probes found are
// part of the Bucket, so a BucketStore keeps them; a bucket dropped when
// Idle forgets them.
//
// Every request admitted by Take must be reported exactly once, with Observe
// when a response (or a transport error, with zero Headers) came back, with
// ObserveLost instead when the server cannot count the request after that,
// or with Refund when it was never sent.
//
// A Bucket is not safe for concurrent use.
type Bucket struct {
	// Limit is the number of requests the bucket counts for the current
	// window: the X-RateLimit-Limit of a response of that window, or, after
	// a refill and until such a response, the smallest limit remembered
	// (see Varying limits). Invariant: Limit >= 1 when Known.
	Limit int
	// Remaining is how many more requests may be sent before ResetAt.
	// Invariant: 0 <= Remaining <= Limit.
	Remaining int
	// ResetAt is when the current window ends: the earliest estimate of
	// its responses plus the learned margin, never before a later end
	// that a response outside the window implies. After a refill it is a
	// guess (now plus the longest Reset-After seen, plus the learned
	// margin) until a response confirms it.
	ResetAt time.Time
	// PausedUntil is set by Pause; Take admits nothing before it.
	PausedUntil time.Time
	// Hash is the last X-RateLimit-Bucket seen, or "".
	Hash string
	// Known reports whether a response has revealed the bucket's limit.
	Known bool

	// The unexported fields are grouped by size, small ones first, so the
	// struct wastes no more than 4 bytes on padding: a live limiter keeps a
	// Bucket per bucket, and a MemoryStore a copy of each (times are
	// stamps, see stamp.go, for the same reason).

	periodKnown  bool  // period includes the Reset-After of a request that opened a window
	provisional  bool  // ResetAt was guessed at a refill and no response has confirmed it
	limitSeen    bool  // a response of the current window has set Limit
	limitCut     bool  // a response of the current window showed a lower limit than Limit was
	estRejected  bool  // est came from a 429: the server's own word on a late reopening
	selfOpened   bool  // the current window was opened by a refill
	reopenFailed bool  // LateReopen reported a 429 sent in the current window
	trustSet     bool  // trusted is set
	probing      bool  // the current window admits one probe and holds the rest
	probeOut     bool  // the probe is in flight
	lowWindows   uint8 // windows begun in this epoch; < limitMemory
	lowCur       int32 // smallest limit seen in this epoch of limitMemory windows; 0: none; else in [1, MaxLimit]
	lowPrev      int32 // lowCur of the previous epoch; 0: none; else in [1, MaxLimit]
	rtt          int32 // round trip of answers with headers, decaying maximum, in ms (rounded up); in [0, PioneerTimeout]

	inflight   int32 // admitted, neither observed nor refunded
	ghosts     int32 // observed without headers: handled in an unknown window
	uncredited int32 // in-flight requests whose Refund must not raise Remaining; <= inflight

	ghostsUntil stamp // when every ghost's window has surely ended
	pioneerAt   stamp // when the last pioneer was admitted (unknown bucket)
	windowStart stamp // requests sent at or after it count in the current window
	est         stamp // earliest estimate of the current window's end, margin excluded
	estReset    stamp // X-RateLimit-Reset of est's window; zero if unknown
	floor       stamp // ResetAt does not drop below it in the current window
	written     stamp // ResetAt as last written by this file: another value became a floor
	openedEst   stamp // est of the window the last refill ended
	lateAt      stamp // when lateBy was learned
	probeAt     stamp // when the probe was sent

	period      time.Duration // longest Reset-After seen: the length of a guessed window
	estSlack    time.Duration // how much later than the server's announced end est may be
	openedSlack time.Duration // estSlack of the window the last refill ended
	lateBy      time.Duration // margin learned by LateReopen, at lateAt
	trusted     time.Duration // shortest reopening delay after est a probe found on time
}

// Take reserves one request at time now. It returns ok=true if the request
// may be sent now; otherwise wait is how long until Take may succeed. When
// the bucket is waiting for a response (an unknown bucket with its pioneer
// in flight, a reopening probe in flight, or a refilled window of guessed
// length not yet confirmed after its guessed end) wait is the
// PioneerTimeout deadline; call Take again after each Observe or Refund too.
// Near the end of a window that counts more than the smallest recent limit
// (see Varying limits), Take may refuse with Remaining above 0 and wait
// until ResetAt.
func (b *Bucket) Take(now time.Time) (ok bool, wait time.Duration) {
	if now.Before(b.PausedUntil) {
		return false, b.PausedUntil.Sub(now)
	}
	if !b.Known {
		if b.inflight > 0 {
			if deadline := b.pioneerAt.time().Add(PioneerTimeout); now.Before(deadline) {
				return false, deadline.Sub(now)
			}
		}
		b.pioneerAt = stampOf(now)
		b.inflight++
		return true, 0
	}
	if !now.Before(b.ResetAt) {
		if b.provisional && b.inflight > 0 && !b.periodKnown {
			// The guessed window has passed and no response confirmed
			// it, and no response has shown how long a window is: the
			// guess may be too short, so wait for a response rather
			// than refill twice in one real window.
			if deadline := b.ResetAt.Add(PioneerTimeout); now.Before(deadline) {
				return false, deadline.Sub(now)
			}
		}
		b.refill(now)
	}
	if b.Remaining == 0 {
		return false, b.ResetAt.Sub(now)
	}
	if b.maySpill(now) {
		return false, b.ResetAt.Sub(now) // until the refill
	}
	if b.probing {
		if b.probeOut {
			deadline := b.probeAt.time().Add(PioneerTimeout)
			if now.Before(deadline) {
				return false, earlier(deadline, b.ResetAt).Sub(now)
			}
			b.probing = false // lost: stop holding the window for it
		} else {
			b.probeOut, b.probeAt = true, stampOf(now)
		}
	}
	b.Remaining--
	b.inflight++
	return true, 0
}

// maySpill reports whether a request sent at now, when the current window
// counts more than the smallest recent limit, is both one too many for the
// next window and possibly counted in it: the requests in flight when a
// window ends may land in the next one, which may allow only that smallest
// limit. A request is counted in the current window unless its forward trip
// is longer than the time left to the server's end, which may be earlier than
// the window's estimated end (est, not ResetAt, which a lost answer or one
// of another window may have pushed later) by the estimate's slack; a round
// trip bounds the forward trip.
func (b *Bucket) maySpill(now time.Time) bool {
	low := b.recentLow()
	if low == 0 || b.Limit <= low || b.charged(now) < low {
		return false
	}
	return b.est.time().Sub(now) < b.estSlack+time.Duration(b.rtt)*time.Millisecond
}

// refill starts a new window at now. Requests still in flight may be counted
// by Discord in the new window, so they are charged to it.
func (b *Bucket) refill(now time.Time) {
	delay := now.Sub(b.est.time()) // how long after its estimated end the last window is left
	b.probing = !b.estRejected && (!b.trustSet || delay+probeSlack < b.trusted)
	b.probeOut = false
	b.openedEst, b.openedSlack = b.est, b.estSlack
	b.newWindow()
	if low := b.recentLow(); low > 0 {
		b.Limit = low // no answer of this window yet: the smallest recent limit
	}
	b.Remaining = max(0, b.Limit-b.charged(now))
	b.uncredited = 0
	est := now.Add(max(b.period, minPeriod))
	b.est, b.estSlack = stampOf(est), 0
	b.estReset, b.estRejected = 0, false
	b.floor = 0
	b.setResetAt(est.Add(b.lateMargin(now)))
	b.windowStart = stampOf(now)
	b.provisional = true
	b.selfOpened = true
	b.reopenFailed = false
}

// Refund gives back a request admitted by Take that was never sent. Within
// the same window its slot becomes available again, unless a response has
// since lowered Remaining below what the bucket counted (the response's count
// did not include the refunded request, so crediting it would over-admit).
// A refunded probe lets another probe go. Refund without a matching Take
// does nothing.
func (b *Bucket) Refund(now time.Time) {
	if b.inflight == 0 {
		return
	}
	b.inflight--
	if !b.Known {
		if b.inflight == 0 {
			b.pioneerAt = 0
		}
		return
	}
	b.probeOut = false // it may have been the probe
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
// Take. now is when the response's headers arrived (not when its body was
// read) and sentAt when the request was sent (use the time passed to Take or
// later; the zero Time means unknown, and the response is then only allowed
// to make the bucket more conservative). Pass the headers through
// [ServerClock.Annotate] first to give them a Reopen.
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
// With full headers, the response's estimate e of its window's end is
// now + ResetAfter, or h.Reopen + ReopenMargin if that is earlier (h.Reopen
// is ignored when sentAt is unknown or h.Reopen is before sentAt +
// ResetAfter, which an Annotate after Observe of the same answer never
// gives). With m the learned margin ([Bucket.Margin] less ReopenMargin; none
// for a 429's estimate, which tells when the server does reopen):
//
//   - An unknown bucket becomes Known with the response's limit and window,
//     ending at e + m.
//   - A request sent before the current window began may belong to an
//     older or a newer window: it can only push ResetAt later, for the
//     rest of the window.
//   - The first response sent in a refilled window confirms it: ResetAt
//     becomes e + m.
//   - If e + m is later than ResetAt by more than the request's round trip
//     plus WindowTolerance, Discord has started a newer window: it is
//     adopted with Remaining = min(header, Limit - 1 - requests in flight).
//   - Otherwise the response belongs to the current window: Remaining
//     becomes min(Remaining, header). If its X-RateLimit-Reset matches the
//     current estimate's, the earlier estimate wins; otherwise (no Reset,
//     or another one) ResetAt can only move later.
//
// In each case Limit (and Remaining with it) first follows the response's
// X-RateLimit-Limit by the rules of Varying limits in the Bucket docs; a
// newer window takes its limit as it is.
func (b *Bucket) Observe(now, sentAt time.Time, h Headers) {
	b.observe(now, sentAt, h, false)
}

// ObserveLost is Observe for a request the server cannot count after now:
// something answered for it, without rate-limit headers (a 5xx), or the
// server closed the connection it was sent on. (Not for a request the caller
// gave up on, or a connection the caller closed: the request may still be on
// its way.) With full rate-limit headers it is Observe.
//
// Without them, a request whose count the current window already holds
// stays charged to that window only, rather than to every window starting
// within a period: when now is before the earliest end the window's answers
// allow (its estimate less the estimate's slack) by more than a round trip
// plus WindowTolerance, the server counted the request in this window or
// an earlier one, or not at all. A refilled window that no answer has
// confirmed has no such earliest end (a request in flight at the refill may
// have opened the server's window before it), and the request is charged
// as by Observe.
func (b *Bucket) ObserveLost(now, sentAt time.Time, h Headers) {
	b.observe(now, sentAt, h, true)
}

// countedHere reports whether a request that the server cannot count after
// now was counted in the current window, if at all (see ObserveLost).
func (b *Bucket) countedHere(now time.Time) bool {
	if !b.Known || b.provisional || b.est.isZero() {
		return false
	}
	bound := now.Add(time.Duration(b.rtt)*time.Millisecond + WindowTolerance)
	return bound.Before(b.est.time().Add(-b.estSlack))
}

func (b *Bucket) observe(now, sentAt time.Time, h Headers, arrived bool) {
	if b.inflight > 0 {
		b.inflight--
	}
	b.uncredited = min(b.uncredited, b.inflight)
	if !b.Known && b.inflight == 0 {
		b.pioneerAt = 0
	}
	if h.Has.Bucket {
		b.Hash = h.Bucket
	}
	if stampOf(b.ResetAt) != b.written {
		// Written from outside (Absorb, a store): a later end to keep,
		// taken in the frame of now.
		b.floor = max(b.floor, stampIn(b.ResetAt, now))
		b.written = stampOf(b.ResetAt)
	}
	probe := b.Known && b.probing && b.probeOut && (sentAt.IsZero() || !sentAt.Before(b.windowStart.time()))
	if !h.Has.Limit || !h.Has.Remaining || !h.Has.ResetAfter || h.Limit < 1 {
		if probe {
			b.probeOut = false // no verdict: another probe may go
		}
		if arrived && b.countedHere(now) {
			return // the current window's count holds it already
		}
		if b.Known {
			// The request was (probably) handled, in a window that ends
			// at most a full period from now: keep charging it until then.
			end := now.Add(max(b.period, minPeriod) + WindowTolerance)
			b.setResetAt(later(b.ResetAt, end))
			b.ghosts++
			b.ghostsUntil = stampOf(later(b.ghostsUntil.time(), end))
		}
		return
	}
	if !sentAt.IsZero() && !sentAt.After(now) {
		b.noteRoundTrip(now.Sub(sentAt))
	}
	limit := min(h.Limit, MaxLimit)
	rem := max(0, min(h.Remaining, limit))
	ra := clampWait(h.ResetAfter)
	rejected := limitedAnswer(h)
	b.period = max(b.period, ra)
	if rem == limit-1 && !rejected {
		b.periodKnown = true // its request opened the window: ra is the whole window
	}
	e := b.estimate(now, sentAt, ra, h)
	m := b.lateMargin(now)

	b.noteLimit(limit)
	if !b.Known {
		b.Known = true
		b.Limit = limit
		b.startWindow(now, e, rem, h, rejected)
		return
	}
	if probe {
		b.probeAnswered(sentAt, ra, h, rejected)
	}
	switch {
	case sentAt.IsZero() || sentAt.After(now):
		b.cutLimit(limit)
		b.lower(rem)
		b.push(now.Add(ra + m))
	case sentAt.Before(b.windowStart.time()):
		if !b.limitSeen {
			b.cutLimit(limit) // it may be counted in the current window
		}
		b.push(e.at.Add(m))
	case b.provisional:
		b.setLimit(limit)
		b.lower(rem)
		b.provisional = false
		b.adopt(e, h, m, rejected)
	case e.at.Add(m).After(b.ResetAt.Add(now.Sub(sentAt) + WindowTolerance)):
		b.newWindow()
		b.Limit = limit
		b.startWindow(now, e, rem, h, rejected)
	default:
		b.setLimit(limit)
		b.lower(rem)
		if !b.sameWindow(h) {
			b.push(e.at.Add(m))
		} else if e.at.Before(b.est.time()) {
			b.adopt(e, h, m, rejected)
		}
	}
}

// windowEnd is a response's estimate of its window's end: at, which is never
// earlier than the end the server announced (by the local send times of the
// requests it counts), and at most slack later than it.
type windowEnd struct {
	at    time.Time
	slack time.Duration
}

// estimate returns the earliest safe end of the window that counted a
// request sent at sentAt and answered at now with Reset-After ra and headers
// h (see Observe). The receive-time estimate may be late by up to the round
// trip, its slack; the server clock's, which carries ReopenMargin for its
// own errors, has none.
func (b *Bucket) estimate(now, sentAt time.Time, ra time.Duration, h Headers) windowEnd {
	e := windowEnd{at: now.Add(ra)}
	if !sentAt.IsZero() && !sentAt.After(now) {
		e.slack = now.Sub(sentAt)
	}
	if h.Reopen.IsZero() || sentAt.IsZero() || sentAt.After(now) || h.Reopen.Before(sentAt.Add(ra)) {
		return e
	}
	if c := h.Reopen.Add(b.baseMargin()); c.Before(e.at) {
		return windowEnd{at: c}
	}
	return e
}

// limitedAnswer reports whether h are the headers of a 429: Retry-After and
// X-RateLimit-Global come only with 429s. (X-RateLimit-Scope is documented
// for 429s only, but other limiters rely on Discord sending it with every
// response.)
func limitedAnswer(h Headers) bool {
	return h.Has.RetryAfter || h.Has.Global
}

// probeAnswered records the answer to the probe of the current window. A
// probe counted on time proves that the server had reopened when it counted
// it: by the send times of the requests it counts, at sentAt, or, when the
// server clock places the count later than an ordinary trip explains (a
// slow forward trip: h.Reopen - ra, less the clock's allowance for a faster
// trip, h.Spread, and ReopenMargin, the budget for what the clock cannot
// see), then. The next reopening is judged by its send delay, which
// includes neither: with them counted in, every window probed while the
// forward trips jittered by more than probeSlack.
func (b *Bucket) probeAnswered(sentAt time.Time, ra time.Duration, h Headers, rejected bool) {
	b.probeOut = false
	if sentAt.IsZero() || rejected || b.reopenFailed {
		return // no verdict, or a 429 (LateReopen learns from it): hold on
	}
	b.probing = false
	counted := sentAt
	if !h.Reopen.IsZero() {
		counted = later(counted, h.Reopen.Add(-ra-h.Spread-ReopenMargin))
	}
	tested := counted.Sub(b.openedEst.time())
	if !b.trustSet || tested < b.trusted {
		b.trusted, b.trustSet = tested, true
	}
}

// startWindow adopts the window reported by the response just observed,
// whose limit is Limit. That response's request counts in it, and so may
// every request still in flight.
func (b *Bucket) startWindow(now time.Time, e windowEnd, remaining int, h Headers, rejected bool) {
	b.limitSeen, b.limitCut = true, false
	b.Remaining = max(0, b.Limit-1-b.charged(now))
	b.uncredited = 0
	b.lower(remaining)
	b.floor = 0
	b.adopt(e, h, b.lateMargin(now), rejected)
	b.windowStart = stampOf(now)
	b.provisional = false
	b.selfOpened, b.reopenFailed = false, false
	b.probing, b.probeOut = false, false
}

// adopt makes e the current window's estimate: ResetAt = e + m (e alone for
// a 429's), or the window's floor if that is later.
func (b *Bucket) adopt(e windowEnd, h Headers, m time.Duration, rejected bool) {
	if rejected {
		m = 0 // a 429 tells when the server does reopen, late or not
	}
	b.est, b.estSlack, b.estRejected = stampOf(e.at), e.slack, rejected
	b.estReset = 0
	if h.Has.Reset {
		b.estReset = stampOf(h.Reset)
	}
	b.setResetAt(later(e.at.Add(m), b.floor.at(e.at)))
}

// push moves ResetAt to at least t for the rest of the current window.
func (b *Bucket) push(t time.Time) {
	b.floor = stampOf(later(b.floor.time(), t))
	b.setResetAt(later(b.ResetAt, t))
}

func (b *Bucket) setResetAt(t time.Time) {
	b.ResetAt, b.written = t, stampOf(t)
}

// sameWindow reports whether h describes the window of the current estimate,
// by their X-RateLimit-Reset.
func (b *Bucket) sameWindow(h Headers) bool {
	if !h.Has.Reset || b.estReset.isZero() {
		return false
	}
	d := h.Reset.Sub(b.estReset.time())
	return d <= sameWindowTolerance && d >= -sameWindowTolerance
}

// charged returns how many requests sent earlier may still be counted in a
// window that starts at now: those in flight, and those answered without
// headers less than a period ago.
func (b *Bucket) charged(now time.Time) int {
	if b.ghosts > 0 && !now.Before(b.ghostsUntil.time()) {
		b.ghosts = 0
	}
	return int(b.inflight) + int(b.ghosts)
}

// setLimit applies the limit of a response of the current window. Limit -
// Remaining, the requests that may count in the window, stays as it is: a
// higher limit raises Remaining by the difference, a lower one lowers it.
// Only the first such response may raise it: near its end a window's
// requests may be counted in the next one, and an answer of the window
// before can then come after one of the next.
func (b *Bucket) setLimit(limit int) {
	if limit > b.Limit && !b.limitSeen {
		b.Remaining += limit - b.Limit
		b.Limit = limit
	}
	b.limitSeen = true
	b.cutLimit(limit)
}

// cutLimit applies a limit that may be the current window's: only a lower
// one, which lowers Remaining by the difference.
func (b *Bucket) cutLimit(limit int) {
	if limit < b.Limit {
		b.Remaining = max(0, b.Remaining-(b.Limit-limit))
		b.Limit = limit
		b.limitCut = true
	}
}

// noteRoundTrip takes the round trip d of an answer into rtt, whose other
// samples lose an eighth at each answer.
func (b *Bucket) noteRoundTrip(d time.Duration) {
	ms := int32((min(d, PioneerTimeout) + time.Millisecond - 1) / time.Millisecond)
	b.rtt = max(ms, b.rtt*7/8)
}

// noteLimit remembers a limit a response showed, for the windows that start
// before any of their answers came.
func (b *Bucket) noteLimit(limit int) {
	if l := int32(limit); b.lowCur == 0 || l < b.lowCur {
		b.lowCur = l
	}
}

// newWindow counts a window begun, and starts a new epoch of the limit
// memory every limitMemory windows.
func (b *Bucket) newWindow() {
	b.limitSeen, b.limitCut = false, false
	b.lowWindows++
	if b.lowWindows >= limitMemory {
		b.lowPrev, b.lowCur, b.lowWindows = b.lowCur, 0, 0
	}
}

// recentLow returns the smallest limit seen over the last limitMemory to
// 2*limitMemory windows, or 0 if none was.
func (b *Bucket) recentLow() int {
	switch {
	case b.lowPrev == 0:
		return int(b.lowCur)
	case b.lowCur == 0:
		return int(b.lowPrev)
	}
	return int(min(b.lowPrev, b.lowCur))
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

// LateReopen reports a user-scope 429 (not global, shared or a sublimit),
// received at now, with retry-after wait, for a request admitted by this
// bucket and sent at sentAt. If the request was sent in a window the bucket
// reopened itself (a refill at or before sentAt), Discord reopened that
// window later than the bucket expected: the bucket learns a margin that
// covers it,
//
//	reopened - (the estimate the window was reopened on, plus how late
//	that estimate may have been)
//
// at most MaxLateMargin, where reopened is when the window really reopens,
// by the send times of the requests the server counts: the estimate Observe
// took from this 429's own headers (Reset-After, or Reset through the
// ServerClock), or, if Observe has not seen them yet, now + wait +
// ReopenMargin, later by the answer's return trip. With the request sent
// right at the reopening and no jitter, that is the margin used plus wait
// plus ReopenMargin. The bucket adds the margin to every window end it
// adopts from then on, and keeps it for MarginHalfLife before it decays. A
// 429 in a window whose limit a response showed lower than the bucket
// counted teaches nothing: the limit explains it. It reports whether the
// margin was raised. Call it after Observe of the same answer (before is
// safe, but learns the return trip too, and misses a lower limit the answer
// shows), and Pause the bucket as usual.
func (b *Bucket) LateReopen(now, sentAt time.Time, wait time.Duration) bool {
	if !b.Known || !b.selfOpened || sentAt.IsZero() || sentAt.Before(b.windowStart.time()) || b.limitCut {
		return false
	}
	b.reopenFailed = true
	b.trustSet = false
	b.probeOut = false
	reopened := now.Add(clampWait(wait) + b.baseMargin())
	if b.estRejected {
		reopened = earlier(reopened, b.est.time()) // this window's 429s' own estimate
	}
	need := min(reopened.Sub(b.openedEst.time())+b.openedSlack, MaxLateMargin)
	if need <= b.lateMargin(now) {
		return false
	}
	b.lateBy, b.lateAt = need, stampOf(now)
	return true
}

// ResetSlack returns how much earlier than ResetAt the current window may
// turn out to end, from what its answers tell so far. While the end is
// dated from an answer's receive time plus its Reset-After, it is late by
// that answer's return trip at most, so by up to its round trip: an answer
// of the same window that travelled faster moves ResetAt earlier, though
// not below what another window's answer pushed it to. It is 0 when the
// server's clock dated the end (Headers.Reopen), after a refill (ResetAt a
// guess until an answer), when ResetAt was set from outside, and while the
// limit is unknown.
func (b *Bucket) ResetSlack() time.Duration {
	if !b.Known || stampOf(b.ResetAt) != b.written || b.estSlack <= 0 {
		return 0
	}
	if b.floor.isZero() {
		return b.estSlack
	}
	return max(0, min(b.estSlack, b.ResetAt.Sub(b.floor.time())))
}

// Margin returns how long after the reopening time read from the server's
// clock (Headers.Reopen) the bucket reopens a window at now: ReopenMargin
// plus the margin learned by LateReopen, which is kept for MarginHalfLife
// after its last raise and then halves every MarginHalfLife. An estimate from
// the receive time alone gets only the learned part.
func (b *Bucket) Margin(now time.Time) time.Duration {
	return b.baseMargin() + b.lateMargin(now)
}

// baseMargin is ReopenMargin. (2% of short windows was tried: on 100 ms
// buckets its 2 ms drew a user 429 under the race detector's scheduling
// noise.)
func (b *Bucket) baseMargin() time.Duration { return ReopenMargin }

// lateMargin returns the learned margin at now.
func (b *Bucket) lateMargin(now time.Time) time.Duration {
	if b.lateBy <= 0 {
		return 0
	}
	steps := now.Sub(b.lateAt.time()) / MarginHalfLife
	if steps <= 0 {
		return b.lateBy
	}
	if steps >= 32 {
		return 0
	}
	if m := b.lateBy >> steps; m >= time.Millisecond {
		return m
	}
	return 0
}

// Probing reports whether the current window is held for its probe: Take
// admits one request and then nothing until that request is answered, even
// though Remaining is positive.
func (b *Bucket) Probing() bool { return b.Known && b.probing }

// ProbesReopening reports whether a refill at ResetAt would hold the new
// window for a probe (see Late reopening): no probe has found a reopening
// that early on time. Forecasts use it; Take decides again when it refills.
func (b *Bucket) ProbesReopening() bool {
	return b.Known && !b.estRejected && (!b.trustSet || b.ResetAt.Sub(b.est.time())+probeSlack < b.trusted)
}

// Pause makes Take admit nothing before until (a 429's wait). An earlier
// until than the current pause does nothing.
func (b *Bucket) Pause(until time.Time) {
	b.PausedUntil = later(b.PausedUntil, until)
}

// InFlight returns the number of requests admitted by Take and not yet
// reported with Observe or Refund.
func (b *Bucket) InFlight() int { return int(b.inflight) }

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

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
