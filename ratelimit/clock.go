package ratelimit

import (
	"sync"
	"time"
)

// Tunables of [ServerClock].
const (
	// ResetPrecision is the resolution of X-RateLimit-Reset: Discord (and
	// package sluicetest) send it in epoch seconds with three decimals,
	// computed as floor_ms(now + ceil_ms(reset_after)). Such a Reset may
	// read up to 1 ms before the true end of the window, so
	// [ServerClock.Local] adds ResetPrecision to every conversion.
	ResetPrecision = time.Millisecond

	// ClockSamples is how many recent answers a ServerClock remembers.
	ClockSamples = 64

	// ClockFirst is how many samples a ServerClock needs before Local
	// answers: with fewer, the smallest lead seen says little about how
	// fast the next request may travel. Five are one window's answers of
	// Discord's most common bucket (5 per window), so a bot's first
	// bucket reopens on the server's clock from its second window rather
	// than a return trip late until its fourth.
	ClockFirst = 5

	// ClockWarm is how many samples a ServerClock needs before it takes
	// their range as it is. With n < ClockWarm kept, a few trips
	// understate how much trips differ, and the range counts ClockWarm/n
	// times: with forward trips spread evenly over 200 ms, a request
	// counted before the reset Local announced (ReopenMargin aside) is
	// about 1 in 3,000 with 5 samples and 1 in 30,000 with 8 (simulated;
	// trips that bunch, as most do, fare far better), as with 16 samples
	// and the plain range (1 in a million).
	ClockWarm = 16

	// LeadRise is how fast the floor under Lead may rise, per minute of
	// samples: the smallest lead seen long ago keeps bounding Lead, so a
	// request that travels as fast as one did minutes earlier (after a
	// burst that slowed every recent one) is not counted early. Clocks
	// drift by microseconds per minute; a clock step that raised the lead
	// only makes Lead conservative until the floor has risen to it.
	LeadRise = time.Millisecond

	// maxLead bounds a plausible lead: a sample further than this from
	// the local clock (a broken Reset, a Reset-After clamped to MaxWait)
	// is ignored.
	maxLead = time.Hour
)

// ServerClock is what Discord's answers tell about its clock: the "lead"
// between the time a request leaves this process and the time the server's
// clock reads when it counts the request. With it, the end of a window
// announced in the server's time (X-RateLimit-Reset) becomes a local time at
// which a request may be sent, instead of the receive time plus
// X-RateLimit-Reset-After, which is late by the whole return trip. One
// ServerClock serves every bucket of one API host.
//
// # Arithmetic
//
// X-RateLimit-Reset is the window's end in the server's epoch time and
// X-RateLimit-Reset-After the time left until then, both taken when the
// server counted the request, so
//
//	serverAt = Reset - ResetAfter
//
// is the server's clock at that moment. For a request sent at local time
// sent and answered at local time received, the sample
//
//	phi = serverAt - sent
//
// is the offset of the server's clock from ours plus the forward trip of this
// request, and phi - (received - sent), the offset less the return trip, is
// a lower bound of the offset that no trip can break. From the last
// ClockSamples answers the clock keeps
//
//   - Fast, the smallest phi, or less: the smallest phi ever seen, risen by
//     LeadRise per minute since, so that a request as fast as one was
//     minutes earlier is not counted early after a burst slowed every
//     recent one;
//   - Range, the largest phi less the smallest: how much the trips differ
//     among themselves;
//   - Bound, the largest phi - (received - sent).
//
// and uses
//
//	Lead = max(Bound, Fast - Range), at most Fast
//
// A request sent at local time T is counted at server time T + phi_j, and
// phi_j >= offset >= Bound, so with
//
//	Local(S) = S - Lead + ResetPrecision
//
// a request sent at Local(S) or later is counted no earlier than server time
// S whenever its phi_j >= Lead: always when Lead is Bound, and otherwise as
// long as no trip is faster than the fastest kept by more than their range
// (see below). Local answers once ClockFirst samples are kept; while fewer
// than ClockWarm are, Range counts ClockWarm/n times (n samples kept).
//
// For example, with the server's clock 100 ms ahead of ours, a forward trip
// of 80 ms and a return trip of 120 ms: a request sent at 12:00:00.000
// (local) is counted at 12:00:00.180 (server) in a window that ends at
// 12:00:01.180, and answered at 12:00:00.200 (local) with Reset-After 1.000
// and Reset 12:00:01.180. Then serverAt = 12:00:00.180, phi = 180 ms and the
// bound -20 ms; if the answers before it had the same trips, Range = 0, Lead
// = 180 ms and Local(Reset) = 12:00:01.180 - 0.180 + 0.001 = 12:00:01.001,
// while the receive time plus Reset-After says 12:00:01.200: 199 ms (the
// return trip less the precision) later. A request sent at 12:00:01.001 is
// counted at 12:00:01.181 by the server's clock, after the reset.
// TestReopenStepByStep walks through the same numbers, on to the bucket's
// reopening.
//
// # Why the minimum, less the range
//
// Local must never be early: a request sent before the server's reset is
// counted in the old, exhausted window and gets a 429. phi_j varies with the
// forward trip of each request, and the smallest phi seen is the best
// available bound on how early a request can be counted, as long as the
// trips ahead are like the trips seen: any larger value (the mean, the
// latest sample) sends too early whenever a request travels faster than
// that. They are not always alike. Every answer of a burst sent at once
// (a cold start, with connections being set up and the server's handlers
// queued) may have come 15 ms slower than the next lone request: the
// smallest of those samples then makes the lone request early by 15 ms,
// which no fixed margin covers. So the lead is lowered by how much the
// kept trips differ among themselves (a burst's queue spreads them as much
// as it delays the first), and never further than Bound, which holds
// whatever the trips: once a quick answer has come (a small received -
// sent), Bound is within its round trip of the offset and the lead is
// tight again. With steady trips Range is near zero and Lead the smallest
// phi. A request faster than every one kept by more than their range is
// what the bucket's ReopenMargin covers, and a server that reopens later
// than it announced is what [Bucket.LateReopen] learns. The minimum is also
// safe when a clock steps: a step that lowers phi takes effect with the
// next sample, and one that raises it only makes Local later until the old
// samples leave the ring.
//
// The send time of a sample should be as close to the wire as the caller
// can take it (package actors takes the moment the request's headers were
// written): a send time taken earlier, while the request waited for a
// goroutine or a connection, adds that wait to phi and moves Local early
// for a request that does not wait.
//
// Every method takes the time as an argument. Local times should come from
// one clock that also reads wall time (time.Now values): phi compares the
// server's epoch time with the wall reading of sent, and Local returns a time
// carrying the monotonic reading of the latest sample, so it compares with
// time.Now values as they compare with each other.
//
// The zero value is ready to use. A ServerClock is safe for concurrent use.
type ServerClock struct {
	mu     sync.Mutex
	phis   [ClockSamples]time.Duration // ring of samples
	lows   [ClockSamples]time.Duration // phi - round trip of each; noLow if unknown
	n      int                         // samples kept, <= ClockSamples
	next   int                         // ring position of the next sample
	lead   time.Duration               // max(bound, fast - range), at most fast
	fast   time.Duration               // the fastest phi the lead was derived from
	anchor time.Time                   // sent time of the latest sample
	// floor is the smallest lead ever seen, rising by LeadRise per minute
	// since floorAt.
	floor   time.Duration
	floorAt time.Time
}

// noLow marks a sample whose answer time is unknown: it bounds nothing.
const noLow = time.Duration(-1 << 63)

// Observe records the answer, received at local time received, to a
// request sent at local time sent. It uses h only if it has both Reset and
// ResetAfter; a sample whose lead is further than an hour from zero (a
// broken header, or a Reset-After cut to MaxWait) is ignored, as is a zero
// sent. A zero received (or one before sent) adds no Bound. Call it for
// every answer that carries the headers, 429s included, before
// [ServerClock.Annotate].
func (c *ServerClock) Observe(sent, received time.Time, h Headers) {
	if sent.IsZero() || !h.Has.Reset || !h.Has.ResetAfter {
		return
	}
	phi := h.Reset.Add(-h.ResetAfter).Sub(sent)
	if phi > maxLead || phi < -maxLead {
		return
	}
	low := noLow
	if !received.IsZero() && !received.Before(sent) {
		low = phi - received.Sub(sent)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.phis[c.next], c.lows[c.next] = phi, low
	c.next = (c.next + 1) % ClockSamples
	c.n = min(c.n+1, ClockSamples)
	smallest, largest, bound := c.phis[0], c.phis[0], c.lows[0]
	for i := 1; i < c.n; i++ {
		smallest, largest, bound = min(smallest, c.phis[i]), max(largest, c.phis[i]), max(bound, c.lows[i])
	}
	if c.floorAt.IsZero() || phi <= c.floorAtTime(sent) {
		c.floor, c.floorAt = phi, sent
	}
	fast := min(smallest, c.floorAtTime(sent))
	c.fast = fast
	spread := largest - smallest
	if c.n < ClockWarm {
		spread = spread * ClockWarm / time.Duration(c.n)
	}
	c.lead = fast - spread
	if bound != noLow {
		c.lead = min(fast, max(c.lead, bound))
	}
	c.anchor = sent
}

// floorAtTime is the floor at local time t: the smallest lead seen, risen
// by LeadRise per minute since.
func (c *ServerClock) floorAtTime(t time.Time) time.Duration {
	return c.floor + time.Duration(float64(LeadRise)*t.Sub(c.floorAt).Minutes())
}

// Lead returns the lead Local uses: how far ahead of the local send time
// the server's clock reads, at the soonest, when it counts a request (see
// ServerClock). ok is false before the first sample.
func (c *ServerClock) Lead() (lead time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lead, c.n > 0
}

// Local converts the server time server to the earliest local send time
// whose request the server counts no earlier than server: server - Lead +
// ResetPrecision (see ServerClock). ok is false, and the time zero, while
// fewer than ClockFirst samples are kept.
func (c *ServerClock) Local(server time.Time) (local time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.local(server)
}

func (c *ServerClock) local(server time.Time) (time.Time, bool) {
	if c.n < ClockFirst {
		return time.Time{}, false
	}
	// server carries no monotonic reading, so Sub uses wall times; Add
	// keeps the anchor's monotonic reading in the result.
	return c.anchor.Add(server.Sub(c.anchor) - c.lead + ResetPrecision), true
}

// Annotate sets h.Reopen to Local(h.Reset), the local time at which the
// window h describes reopens, when h has a Reset and Local answers;
// otherwise it leaves h alone. Call it after [ServerClock.Observe] of the
// same answer, so that the answer's own sample bounds the result: Reopen is
// then never earlier than sent + ResetAfter + ResetPrecision, and
// [Bucket.Observe] ignores a Reopen that is.
func (c *ServerClock) Annotate(h *Headers) {
	if !h.Has.Reset {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.local(h.Reset); ok {
		h.Reopen, h.Spread = t, max(0, c.fast-c.lead)
	}
}
