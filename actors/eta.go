package actors

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/forecast"
)

// A call's ETA is the latest of what each limit it is under tells
// (forecast.Assemble, internal/forecast, documents the parts and puts
// them together): its bucket, its declared groups, its global window.
//
// The bucket actor that holds the call tells the first (an etaMsg, routed
// through the supervisor so it arrives after the call's enqueueMsg); the
// others are synchronized and read by the asking goroutine (System.finish
// gathers them), so an actor spends O(its queue) on a question and no
// more.

// RequestETA is the actors' form of sluice.RequestSnapshot (the two must
// stay identical).
type RequestETA struct {
	ID     uint64
	Route  string
	Bucket string
	ETA    forecast.ETA
	Class  admission.Class
}

// laneETA is the part of a call's ETA its bucket actor knows
// (forecast.Part), with the call and its lane's key.
type laneETA struct {
	forecast.Part
	call   *Call
	bucket string // the lane's key
}

// etaMsg: API -> supervisor -> bucket. Where is the call, and when does
// its bucket let it go? The supervisor forwards it to the bucket actor of
// the call's major parameters, after the call's own enqueueMsg; with no
// such actor, it answers for the call (it has its outcome, or is on its
// way).
type etaMsg struct {
	call  *Call
	reply chan laneETA // buffered: a sender never blocks
	// ring holds the order of the admission queue of the call's window
	// when the supervisor forwarded the message (set before, read by the
	// asker after the reply).
	ring ringKeys
}

// ringKeys is, for each window, its admission queue's line as the
// forecast starts from it.
type ringKeys [numWindows]forecast.Line

// stamp records when c's bucket and groups would let it go, for the
// global forecasts of the calls behind it; known is false when that is
// only a lower bound (its bucket's limit is not known). It records l's
// window too (its pace; 0 while unknown).
func (c *Call) stamp(at time.Time, known bool, l *lane, now time.Time) {
	_, _, window, ok := l.Plan(now)
	c.pace.Store(int64(window))
	limit := int32(0)
	if ok {
		limit = int32(min(l.State.Limit, math.MaxInt32))
	}
	c.limit.Store(limit)
	c.reprobe.Store(ok && l.State.ProbesReopening())
	c.guess.Store(!known)
	c.due.Store(at.UnixNano())
}

// restamp records again the due times of l's queue, after its count
// changed shape (its limit became known or changed, a pause): the old
// ones were guessed without it.
func (b *bucket) restamp(l *lane, now time.Time) {
	for pos, c := range l.Line.Live() {
		start, _, known := l.Slot(now, pos)
		if g, _, ok := b.sys.groups.Estimate(c.decl(), now); ok && (g.Start.After(start) || !known) {
			start, known = later(g.Start, start), true // a declared window is a forecast too
		}
		c.stamp(start, known, l, now)
	}
}

// eta answers an etaMsg: c's stage, its place in its bucket's queue and its
// bucket's window. O(the actor's queues).
func (b *bucket) eta(c *Call, now time.Time) laneETA {
	out := laneETA{call: c, Part: forecast.Part{Stage: forecast.StagePending}}
	switch {
	case c.Finished():
		out.Stage = forecast.StageDone
		return out
	case c.lane != nil:
		out.Stage, out.Start, out.End, out.Known, out.bucket = forecast.StageSent, c.sentAt, c.sentAt, true, c.lane.Resolve().Key
		return out
	}
	for _, l := range b.lanes {
		if p, ok := l.Part(c, now); ok { // queued or retrying here (lanes.Lane.Part)
			out.Part, out.bucket = p, l.Key
			if p.Stage == forecast.StageQueued {
				out.Granted = c.holding.Load()
			}
			return out
		}
	}
	return out
}

// queued is the laneETA of every call waiting in one of the actor's queues
// or for a retry, for a Snapshot.
func (b *bucket) queued(now time.Time) []laneETA {
	var out []laneETA
	for _, l := range b.lanes {
		for pos, c := range l.Line.Live() {
			e := laneETA{call: c, bucket: l.Key, Part: l.Queued(now, pos)}
			e.Granted = c.holding.Load()
			out = append(out, e)
		}
		for _, c := range l.Line.Retries() {
			if !c.Finished() {
				out = append(out, b.eta(c, now))
			}
		}
	}
	return out
}

// ETA tells where c is and when it is expected to be sent. It asks c's
// bucket actor, so it costs two messages, plus a pass over the calls
// waiting for c's global window (O(n log n)); it returns when ctx ends at
// the latest.
func (s *System) ETA(ctx context.Context, c *Call) (forecast.ETA, error) {
	if c.Finished() {
		return forecast.ETA{Stage: forecast.StageDone}, nil
	}
	if c.direct {
		// Sent at once, outside the limits.
		return forecast.ETA{Stage: forecast.StageSent, Start: c.Submitted, End: c.Submitted, Known: true}, nil
	}
	reply := make(chan laneETA, 1)
	m := &etaMsg{call: c, reply: reply}
	s.root.Send(s.sup, m)
	var le laneETA
	select {
	case le = <-reply:
	case <-c.Done():
		return forecast.ETA{Stage: forecast.StageDone}, nil
	case <-s.stopped:
		return forecast.ETA{Stage: forecast.StageDone}, nil // Close answered every call
	case <-ctx.Done():
		return forecast.ETA{}, ctx.Err()
	}
	if sh := c.place.Shared(); sh != nil {
		sh.Refresh(ctx, s.now()) // the places ahead in every process
	}
	now := s.now()
	return s.finish([]laneETA{le}, now, &m.ring)[0], nil
}

// answerETA is the supervisor's part of an etaMsg: forward it to the
// call's bucket actor, or answer it when there is none.
func (s *supervisor) answerETA(ctx actor.Context, m *etaMsg) {
	c := m.call
	if !c.Route.GlobalExempt && !c.Finished() {
		m.ring[c.window] = s.ringOf(c.window) // the one queue its forecast replays
	}
	if ch := s.children[c.Route.Major]; ch != nil && !c.Finished() {
		ctx.Send(ch.pid, m)
		return
	}
	stage := forecast.StagePending
	if c.Finished() {
		stage = forecast.StageDone
	}
	m.reply <- laneETA{call: c, Part: forecast.Part{Stage: stage}}
}

// finish completes the actors' parts of ETAs at now (forecast.Assemble):
// it gathers what the declared groups tell of the calls still waiting,
// and what the global forecast reads: every live call's stamps, the
// windows' limiters and granted slots, the round trip, the server's
// clock. ring is the admission queues' order (nil: none known).
func (s *System) finish(parts []laneETA, now time.Time, ring *ringKeys) []forecast.ETA {
	asked := make([]forecast.Asked, len(parts))
	for i := range parts {
		p, c := &parts[i], parts[i].call
		asked[i] = forecast.Asked{Part: p.Part, Window: int(c.window), Exempt: c.Route.GlobalExempt, Waiter: c.waiter()}
		if p.Stage.Waiting() {
			if g, name, ok := s.groups.Estimate(c.decl(), now); ok {
				asked[i].Declared = forecast.Declared{Start: g.Start, End: g.End, Name: name, OK: true}
			}
		}
	}
	var wins [numWindows]forecast.Window
	for w := range wins {
		wins[w] = forecast.Window{Limiter: s.windows[w].Limiter, Granted: int(s.windows[w].Granted.Load())}
		if ring != nil {
			wins[w].Line = ring[w]
		}
	}
	_, clockKnown := s.clock.Local(now)
	return forecast.Assemble(asked, forecast.Global{Live: s.liveWaiters, Windows: wins[:], RTT: time.Duration(s.rtt.Load()), ClockKnown: clockKnown}, now)
}

// liveWaiters yields every live call that may wait for a global window
// (not exempt, not sent outside the limits, without its outcome) as the
// global forecast reads it.
func (s *System) liveWaiters(yield func(forecast.Live) bool) {
	s.live.Each(func(c *Call) bool {
		if c.Route.GlobalExempt || c.direct || c.Finished() {
			return true
		}
		return yield(forecast.Live{Waiter: c.waiter(), Window: int(c.window), Holding: c.holding.Load()})
	})
}

// waiter is c as the global forecast reads it: what its bucket actor
// stamped on it (Call.due, forecast.DueUnset or DueNever when not a time).
func (c *Call) waiter() forecast.Waiter {
	return forecast.Waiter{
		ID: c.ID, Submitted: c.Submitted.UnixNano(), Due: c.due.Load(), Guess: c.guess.Load(), Pace: c.pace.Load(), Limit: int(c.limit.Load()), Probe: c.reprobe.Load(),
		Actor: c.Route.Major, Route: c.Route.TemplateKey(), Target: -1, Class: c.Class,
	}
}

// requests completes the ETAs of the calls waiting in the actors' queues,
// for a Snapshot, in submission order.
func (s *System) requests(parts []laneETA, now time.Time, ring *ringKeys) []RequestETA {
	etas := s.finish(parts, now, ring)
	out := make([]RequestETA, len(parts))
	for i, p := range parts {
		out[i] = RequestETA{ID: p.call.ID, Route: p.call.Route.String(), Bucket: p.bucket, ETA: etas[i], Class: p.call.Class}
	}
	slices.SortFunc(out, func(a, b RequestETA) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// observeRTT adds an answer's round trip to System.rtt
// (forecast.ObserveRTT). Concurrent answers may overwrite each other's
// updates: an estimate loses little.
func (s *System) observeRTT(d time.Duration) {
	old := s.rtt.Load()
	if rtt := int64(forecast.ObserveRTT(time.Duration(old), d)); rtt != old {
		s.rtt.Store(rtt)
	}
}
