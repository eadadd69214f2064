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

// A call's ETA is the latest of what each limit it is under tells,
// each as a window [Start, End) in which the call is expected to go:
//
//   - its bucket (lanes.Pace.Slot): the job queue's estimate,
//     nextWindowStart + floor(waiting/perWindow) × window, from its place
//     in the bucket's queue, the bucket's count and its pause;
//   - its declared groups (ratelimit.Group.Estimate): its reserved window;
//   - its global window (System.globalSlots): a replay of the
//     supervisor's admission over the calls waiting for the window
//     (forecast.Replay, internal/forecast).
//
// The bucket actor that holds the call tells the first (an etaMsg, routed
// through the supervisor so it arrives after the call's enqueueMsg); the
// others are synchronized and read by the asking goroutine, so an actor
// spends O(its queue) on a question and no more.

// Stage is where a call is on its way to its outcome (sluice.Stage
// documents each; the two must stay identical).
type Stage int32

// The stages of a call, in order.
const (
	StagePending Stage = iota
	StageQueued
	StageRetrying
	StageSent
	StageDone
)

var stageNames = [...]string{"pending", "queued", "retrying", "sent", "done"}

// String returns the stage's name: "pending", "queued", "retrying", "sent"
// or "done".
func (s Stage) String() string {
	if s >= 0 && int(s) < len(stageNames) {
		return stageNames[s]
	}
	return "Stage(" + itoa(uint64(s)) + ")"
}

// What sets an ETA's Start (ETA.Limit).
const (
	BoundBucket   = "bucket"
	BoundDeclared = "declared"
	BoundGlobal   = "global"
	BoundRetry    = "retry"
)

// ETA is the actors' form of sluice.ETA, which documents every field (the
// two must stay identical).
type ETA struct {
	Stage      Stage
	Position   int
	Start, End time.Time
	Limit      string
	Declared   string
	Known      bool
}

// RequestETA is the actors' form of sluice.RequestSnapshot (the two must
// stay identical).
type RequestETA struct {
	ID     uint64
	Route  string
	Bucket string
	ETA    ETA
	Class  admission.Class
}

// laneETA is the part of a call's ETA its bucket actor knows.
type laneETA struct {
	call       *Call
	stage      Stage
	pos        int
	start, end time.Time
	early      time.Time // the earliest start may turn out to be (lanes.Pace.Earliest); zero: start
	known      bool      // the bucket's limit is known: start is not a mere lower bound
	retry      bool      // start is the end of a retry's backoff
	granted    bool      // a global slot is reserved for it (a grant its actor holds)
	bucket     string    // the lane's key
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

// Values of Call.due that are not a time.
const (
	dueUnset = 0             // not in a bucket's queue yet: it may go at once
	dueNever = math.MinInt64 // on the wire, or sent outside the limits: it waits for no window
)

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
	pos := 0
	for _, c := range l.line.Items() {
		if c.Finished() {
			continue
		}
		start, _, known := l.Slot(now, pos)
		if g, _, ok := b.sys.groups.Estimate(c.decl(), now); ok && (g.Start.After(start) || !known) {
			start, known = later(g.Start, start), true // a declared window is a forecast too
		}
		c.stamp(start, known, l, now)
		pos++
	}
}

// eta answers an etaMsg: c's stage, its place in its bucket's queue and its
// bucket's window. O(the actor's queues).
func (b *bucket) eta(c *Call, now time.Time) laneETA {
	out := laneETA{call: c, stage: StagePending}
	switch {
	case c.Finished():
		out.stage = StageDone
		return out
	case c.lane != nil:
		out.stage, out.start, out.end, out.known, out.bucket = StageSent, c.sentAt, c.sentAt, true, c.lane.resolve().key
		return out
	}
	for _, l := range b.lanes {
		pos := 0
		for _, q := range l.line.Items() {
			if q == c {
				out.stage, out.pos, out.bucket = StageQueued, pos, l.key
				out.start, out.end, out.known = l.Slot(now, pos)
				out.early = l.Earliest(now, pos, out.start)
				out.granted = q.holding.Load()
				return out
			}
			if !q.Finished() {
				pos++
			}
		}
		for _, q := range l.line.Retries() {
			if q == c {
				out.stage, out.bucket = StageRetrying, l.key
				// It goes back to the front of the queue when its backoff
				// ends (behind a request the share promoted there, if one
				// still is then: not known now, so counted as the head),
				// and then waits for its bucket like a head.
				out.start, out.end, out.known = l.Slot(later(now, c.notBefore), 0)
				out.early = l.Earliest(later(now, c.notBefore), 0, out.start)
				out.retry = !out.start.After(c.notBefore)
				return out
			}
		}
	}
	return out
}

// queued is the laneETA of every call waiting in one of the actor's queues
// or for a retry, for a Snapshot.
func (b *bucket) queued(now time.Time) []laneETA {
	var out []laneETA
	for _, l := range b.lanes {
		pos := 0
		for _, c := range l.line.Items() {
			if c.Finished() {
				continue
			}
			e := laneETA{call: c, stage: StageQueued, pos: pos, bucket: l.key, granted: c.holding.Load()}
			e.start, e.end, e.known = l.Slot(now, pos)
			e.early = l.Earliest(now, pos, e.start)
			out = append(out, e)
			pos++
		}
		for _, c := range l.line.Retries() {
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
func (s *System) ETA(ctx context.Context, c *Call) (ETA, error) {
	if c.Finished() {
		return ETA{Stage: StageDone}, nil
	}
	if c.direct {
		// Sent at once, outside the limits.
		return ETA{Stage: StageSent, Start: c.Submitted, End: c.Submitted, Known: true}, nil
	}
	reply := make(chan laneETA, 1)
	m := &etaMsg{call: c, reply: reply}
	s.root.Send(s.sup, m)
	var le laneETA
	select {
	case le = <-reply:
	case <-c.Done():
		return ETA{Stage: StageDone}, nil
	case <-s.stopped:
		return ETA{Stage: StageDone}, nil // Close answered every call
	case <-ctx.Done():
		return ETA{}, ctx.Err()
	}
	if sh := c.place.Shared(); sh != nil {
		sh.Refresh(ctx, s.now()) // the places ahead in every process
	}
	now := s.now()
	return s.finish([]laneETA{le}, now, &m.ring)[0].ETA, nil
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
	stage := StagePending
	if c.Finished() {
		stage = StageDone
	}
	m.reply <- laneETA{call: c, stage: stage}
}

// finish completes the actors' parts of ETAs with what the declared groups
// and the global windows tell, at now; ring is the admission queues' order
// (nil: none known).
func (s *System) finish(parts []laneETA, now time.Time, ring *ringKeys) []RequestETA {
	out := make([]RequestETA, len(parts))
	var waiting []int // the parts that wait for a send
	for i, p := range parts {
		c := p.call
		e := ETA{Stage: p.stage, Position: p.pos, Start: p.start, End: p.end, Known: p.known}
		out[i] = RequestETA{ID: c.ID, Route: c.Route.String(), Bucket: p.bucket, Class: c.Class}
		switch p.stage {
		case StageDone:
			out[i].ETA = ETA{Stage: StageDone}
			continue
		case StageSent:
			e.Limit = BoundBucket
			out[i].ETA = e
			continue
		case StagePending:
			e.Start, e.End = now, now
		}
		if e.Start.Before(now) {
			e.Start = now
		}
		e.End = later(e.End, e.Start)
		e.Limit = BoundBucket
		if p.retry {
			e.Limit = BoundRetry
		}
		// The declared window when it is later, or when the bucket's
		// limit is unknown (its window is only a lower bound, [now, now]):
		// the request goes inside the group's window unless its bucket
		// turns out to hold it longer.
		if g, name, ok := s.groups.Estimate(c.decl(), now); ok && (g.Start.After(e.Start) || !e.Known && g.End.After(e.Start)) {
			e.Start, e.End, e.Limit, e.Declared = later(g.Start, e.Start), g.End, BoundDeclared, name
		}
		out[i].ETA = e
		waiting = append(waiting, i)
	}
	s.globalSlots(out, parts, waiting, now, ring)
	for _, i := range waiting {
		// Set by its bucket: from the earliest its bucket may reopen.
		if e := &out[i].ETA; e.Limit == BoundBucket && !parts[i].early.IsZero() && parts[i].early.Before(e.Start) {
			e.Start = later(now, parts[i].early)
		}
	}
	return out
}

// globalSlots raises the ETAs of the waiting calls (indexes into out) to
// their global window's forecast: a replay of the supervisor's admission
// over every call waiting for the window (forecast.Replay), each from
// the time its own limits let it go (Call.due; for the asked calls, their
// ETA so far).
func (s *System) globalSlots(out []RequestETA, parts []laneETA, waiting []int, now time.Time, ring *ringKeys) {
	var ws [numWindows][]forecast.Waiter
	asked := make(map[uint64]bool, len(waiting))
	var holding [numWindows]int // calls left out that hold a granted slot
	for _, i := range waiting {
		c := parts[i].call
		asked[c.ID] = true
		if parts[i].granted {
			holding[c.window]++
		}
		if c.Route.GlobalExempt || parts[i].granted {
			continue // needs no global slot, or holds one already
		}
		e := out[i].ETA
		ws[c.window] = append(ws[c.window], waiterOf(c, e.Start.UnixNano(), !e.Known && e.Limit != BoundDeclared, i))
	}
	if !slices.ContainsFunc(ws[:], func(w []forecast.Waiter) bool { return len(w) > 0 }) {
		return
	}
	var onWire map[forecast.Lane]bool
	s.live.each(func(c *Call) bool {
		if asked[c.ID] || c.Route.GlobalExempt || c.direct || c.Finished() {
			return true
		}
		if c.holding.Load() {
			holding[c.window]++
			return true // served from its actor's grant
		}
		due := c.due.Load()
		switch due {
		case dueNever:
			if onWire == nil {
				onWire = map[forecast.Lane]bool{}
			}
			onWire[forecastLane(c)] = true
			return true
		case dueUnset:
			due = now.UnixNano()
		}
		ws[c.window] = append(ws[c.window], waiterOf(c, due, c.guess.Load(), -1))
		return true
	})
	rtt := time.Duration(s.rtt.Load())
	for w := range Window(numWindows) {
		mine := ws[w]
		if !slices.ContainsFunc(mine, func(e forecast.Waiter) bool { return e.Target >= 0 }) {
			continue
		}
		src, ok := s.windows[w].limiter.(forecast.Source)
		if !ok {
			// A custom limiter tells only its wait for the next slot.
			for _, e := range mine {
				if e.Target >= 0 {
					if start := now.Add(s.windows[w].limiter.Wait(now)); start.After(out[e.Target].ETA.Start) {
						raise(&out[e.Target].ETA, start, start)
					}
				}
			}
			continue
		}
		_, per := src.Limit()
		var line forecast.Line
		if ring != nil {
			line = ring[w]
		}
		// The granted slots left to the replay: those no call left out
		// holds (a grant an actor could not mark yet, or one it is
		// giving back).
		held := max(0, int(s.windows[w].granted.Load())-holding[w])
		// A window ends one pace after its first call was sent once the
		// server's clock answers (ClockFirst samples: the bucket then
		// sends its next window to arrive at the server's reset, Local);
		// before, the bucket dates it from the answer, a round trip later.
		lag := rtt
		if _, ok := s.clock.Local(now); ok {
			lag = 0
		}
		at := forecast.Replay(mine, src, now, rtt, lag, held, onWire, line)
		for j, e := range mine {
			// Later than its own limits let it go, because the window held
			// it (not because the replay's coarser bucket model, a window
			// from its first call's slot, drifts later than its bucket's
			// own ETA: one saturated bucket at 150 ms had its ETAs a
			// window late).
			if e.Target >= 0 && at[j].At > e.Due && at[j].Waited {
				// From the earliest it may go to one period after the
				// forecast: the slot's period, and the doubt of the
				// round trips before it; at a burst's cut, to one
				// period after the next burst (burstCut).
				end := now.Add(time.Duration(max(at[j].At, at[j].Late) - now.UnixNano())).Add(per)
				raise(&out[e.Target].ETA, now.Add(time.Duration(at[j].Early-now.UnixNano())), end)
			}
		}
	}
}

// waiterOf is c as the global forecast sees it, due at due (Unix ns).
func waiterOf(c *Call, due int64, guess bool, target int) forecast.Waiter {
	return forecast.Waiter{
		ID: c.ID, Submitted: c.Submitted.UnixNano(), Due: due, Guess: guess, Pace: c.pace.Load(), Limit: int(c.limit.Load()), Probe: c.reprobe.Load(),
		Actor: c.Route.Major, Route: c.Route.TemplateKey(), Target: target, Class: c.Class,
	}
}

// raise moves e's window to [start, end) (no earlier than it was) when
// the global window lets it go later than its other limits.
func raise(e *ETA, start, end time.Time) {
	e.Start, e.End, e.Limit, e.Declared = later(start, e.Start), later(end, e.Start), BoundGlobal, ""
}

// requests completes the ETAs of the calls waiting in the actors' queues,
// for a Snapshot, in submission order.
func (s *System) requests(parts []laneETA, now time.Time, ring *ringKeys) []RequestETA {
	out := s.finish(parts, now, ring)
	slices.SortFunc(out, func(a, b RequestETA) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// forecastLane names c's lane for the forecast: its actor and its route
// family (method, template), which is immutable, unlike the lane a bucket
// actor keeps it in.
func forecastLane(c *Call) forecast.Lane {
	return forecast.Lane{Actor: c.Route.Major, Route: c.Route.TemplateKey()}
}

// observeRTT adds an answer's round trip to System.rtt, which follows the
// shortest at once and longer ones slowly (1/32 per answer): close to the
// least round trip lately, so a burst's queueing does not stretch every
// later forecast, and a global forecast starts early rather than late (a
// forecast window is one period wide from its start). Concurrent answers
// may overwrite each other's updates: an estimate loses little.
func (s *System) observeRTT(d time.Duration) {
	if d <= 0 {
		return
	}
	old := s.rtt.Load()
	if old == 0 {
		s.rtt.Store(int64(d))
		return
	}
	if int64(d) < old {
		s.rtt.Store(int64(d))
		return
	}
	s.rtt.Store(old + (int64(d)-old)/32)
}
