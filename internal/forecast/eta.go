package forecast

import (
	"iter"
	"math"
	"slices"
	"strconv"
	"time"
)

// A request's ETA is the latest of what each limit it is under tells,
// each as a window [Start, End) in which the request is expected to go:
//
//   - its bucket (lanes.Pace.Slot): the job queue's estimate,
//     nextWindowStart + floor(waiting/perWindow) × window, from its place
//     in the bucket's queue, the bucket's count and its pause (Part, which
//     its bucket actor tells);
//   - its declared groups (ratelimit.Group.Estimate): its reserved window
//     (Declared, which the caller reads from the groups);
//   - its global window (globalSlots): a replay of the supervisor's
//     admission over the requests waiting for the window (Replay).
//
// Assemble puts them together; the caller only gathers them, with what
// the live requests publish (Live) and the windows' state (Window).

// Stage is where a request is on its way to its outcome (sluice.Stage
// documents each; the two must stay identical).
type Stage int32

// The stages of a request, in order.
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
	return "Stage(" + strconv.FormatUint(uint64(s), 10) + ")"
}

// Waiting reports whether a request at stage s still waits to be sent
// (not sent, no outcome): only then do its declared groups and its global
// window tell anything of its ETA.
func (s Stage) Waiting() bool { return s != StageDone && s != StageSent }

// What sets an ETA's Start (ETA.Limit), or a refused wait
// (sluice.WaitError.By).
const (
	BoundBucket   = "bucket"
	BoundDeclared = "declared"
	BoundGlobal   = "global"
	BoundRetry    = "retry"
)

// ETA is the internal form of sluice.ETA, which documents every field
// (the two must stay identical).
type ETA struct {
	Stage      Stage
	Position   int
	Start, End time.Time
	Limit      string
	Declared   string
	Known      bool
}

// Part is the part of a request's ETA its bucket actor knows: its stage,
// its place in its bucket's queue and its bucket's window.
type Part struct {
	Stage      Stage
	Pos        int
	Start, End time.Time
	Early      time.Time // the earliest Start may turn out to be (lanes.Pace.Earliest); zero: Start
	Known      bool      // the bucket's limit is known: Start is not a mere lower bound
	Retry      bool      // Start is the end of a retry's backoff
	Granted    bool      // a global slot is reserved for it (a grant its actor holds)
}

// Declared is the latest window a request's declared groups reserved for
// it, and its limit's name (declared.Groups.Estimate).
type Declared struct {
	Start, End time.Time
	Name       string
	OK         bool // false: no declared group tells a window for it
}

// Asked is a request whose ETA is asked: its bucket actor's part, its
// declared groups' window (read only while its stage is Waiting), and the
// request as the global replay sees it.
type Asked struct {
	Part
	Declared Declared
	Window   int    // the global window it counts on: an index into Global.Windows
	Exempt   bool   // it needs no global slot (routes.Route.GlobalExempt)
	Waiter   Waiter // its stamps; Assemble sets Due, Guess and Target from its ETA so far
}

// Values of a live request's published due time (Live.Due) that are not
// a time.
const (
	DueUnset = 0             // not in a bucket's queue yet: it may go at once
	DueNever = math.MinInt64 // on the wire, or sent outside the limits: it waits for no window
)

// Live is a live request other than the asked ones, which the global
// replay counts as its bucket actor published it: its Due is a time
// (Unix ns), DueUnset or DueNever; its Target is ignored. The caller
// leaves out the requests that wait for no global window (exempt, sent
// outside the limits, or with their outcome).
type Live struct {
	Waiter
	Window  int  // the global window it counts on: an index into Global.Windows
	Holding bool // a global slot granted to its bucket actor is meant for it: it counts as served
}

// Limiter is what every global limiter tells (ratelimit.GlobalLimiter):
// how long from now until it would give a slot. A limiter that is a
// Source too is replayed.
type Limiter interface {
	Wait(now time.Time) time.Duration
}

// Window is a global window as the ETAs read it.
type Window struct {
	Limiter Limiter
	// Granted is how many slots it has granted to bucket actors that
	// have not spent them yet.
	Granted int
	// Line is its admission queue's line as the replay starts from it
	// (zero: none known).
	Line Line
}

// Global is what the ETAs' global part is replayed from: every live
// request besides the asked ones (read only when an asked one waits for a
// global slot, once; nil: none), the global windows, the answers' round
// trip (ObserveRTT), and whether the server's clock is known
// (ratelimit.ServerClock.Local).
type Global struct {
	Live       iter.Seq[Live]
	Windows    []Window
	RTT        time.Duration
	ClockKnown bool
}

// waitsForSlot reports whether a is still to be sent and needs a global
// slot it does not hold: only then is its global window replayed.
func (a *Asked) waitsForSlot() bool { return a.Stage.Waiting() && !a.Exempt && !a.Granted }

// Assemble completes the asked requests' ETAs with what their declared
// groups and global windows tell, at now: the result's i-th is asked[i]'s.
// asked is not modified. O(n log n) in the requests waiting for a global
// window when one asked waits for it (it then reads g.Live once),
// O(len(asked)) otherwise.
func Assemble(asked []Asked, g Global, now time.Time) []ETA {
	out := make([]ETA, len(asked))
	var waiting []int // the asked that wait for a send
	for i := range asked {
		p := &asked[i]
		e := ETA{Stage: p.Stage, Position: p.Pos, Start: p.Start, End: p.End, Known: p.Known}
		switch p.Stage {
		case StageDone:
			out[i] = ETA{Stage: StageDone}
			continue
		case StageSent:
			e.Limit = BoundBucket
			out[i] = e
			continue
		case StagePending:
			e.Start, e.End = now, now
		}
		if e.Start.Before(now) {
			e.Start = now
		}
		e.End = later(e.End, e.Start)
		e.Limit = BoundBucket
		if p.Retry {
			e.Limit = BoundRetry
		}
		// The declared window when it is later, or when the bucket's
		// limit is unknown (its window is only a lower bound, [now, now]):
		// the request goes inside the group's window unless its bucket
		// turns out to hold it longer.
		if d := p.Declared; d.OK && (d.Start.After(e.Start) || !e.Known && d.End.After(e.Start)) {
			e.Start, e.End, e.Limit, e.Declared = later(d.Start, e.Start), d.End, BoundDeclared, d.Name
		}
		out[i] = e
		waiting = append(waiting, i)
	}
	globalSlots(out, asked, waiting, g, now)
	for _, i := range waiting {
		// Set by its bucket: from the earliest its bucket may reopen.
		if e, early := &out[i], asked[i].Early; e.Limit == BoundBucket && !early.IsZero() && early.Before(e.Start) {
			e.Start = later(now, early)
		}
	}
	return out
}

// globalSlots raises the ETAs of the waiting requests (indexes into out)
// to their global window's forecast: a replay of the supervisor's
// admission over every request waiting for the window (Replay), each
// from the time its own limits let it go (Live.Due; for the asked ones,
// their ETA so far).
func globalSlots(out []ETA, asked []Asked, waiting []int, g Global, now time.Time) {
	if !slices.ContainsFunc(waiting, func(i int) bool { return asked[i].waitsForSlot() }) {
		return // none waits for a global slot: the live requests are not read
	}
	ws := make([][]Waiter, len(g.Windows))
	holding := make([]int, len(g.Windows)) // requests left out that hold a granted slot
	ids := make(map[uint64]bool, len(waiting))
	for _, i := range waiting {
		p := &asked[i]
		ids[p.Waiter.ID] = true
		if p.Granted {
			holding[p.Window]++
		}
		if !p.waitsForSlot() {
			continue // needs no global slot, or holds one already
		}
		w := p.Waiter
		w.Due, w.Guess, w.Target = out[i].Start.UnixNano(), !out[i].Known && out[i].Limit != BoundDeclared, i
		ws[p.Window] = append(ws[p.Window], w)
	}
	live := g.Live
	if live == nil {
		live = func(func(Live) bool) {} // none
	}
	var onWire map[Lane]bool
	for l := range live {
		if ids[l.ID] {
			continue
		}
		if l.Holding {
			holding[l.Window]++
			continue // served from its actor's grant
		}
		due := l.Due
		switch due {
		case DueNever:
			if onWire == nil {
				onWire = map[Lane]bool{}
			}
			// Its lane: its actor and its route family (method,
			// template), which is immutable, unlike the lane a bucket
			// actor keeps it in.
			onWire[Lane{Actor: l.Actor, Route: l.Route}] = true
			continue
		case DueUnset:
			due = now.UnixNano()
		}
		w := l.Waiter
		w.Due, w.Target = due, -1
		ws[l.Window] = append(ws[l.Window], w)
	}
	// A window ends one pace after its first request was sent once the
	// server's clock answers (ClockFirst samples: the bucket then sends
	// its next window to arrive at the server's reset, Local); before,
	// the bucket dates it from the answer, a round trip later.
	lag := g.RTT
	if g.ClockKnown {
		lag = 0
	}
	for w, win := range g.Windows {
		mine := ws[w]
		if !slices.ContainsFunc(mine, func(e Waiter) bool { return e.Target >= 0 }) {
			continue
		}
		src, ok := win.Limiter.(Source)
		if !ok {
			// A custom limiter tells only its wait for the next slot.
			for _, e := range mine {
				if e.Target >= 0 {
					if start := now.Add(win.Limiter.Wait(now)); start.After(out[e.Target].Start) {
						raise(&out[e.Target], start, start)
					}
				}
			}
			continue
		}
		_, per := src.Limit()
		// The granted slots left to the replay: those no request left out
		// holds (a grant an actor could not mark yet, or one it is
		// giving back).
		held := max(0, win.Granted-holding[w])
		at := Replay(mine, src, now, g.RTT, lag, held, onWire, win.Line)
		for j, e := range mine {
			// Later than its own limits let it go, because the window held
			// it (not because the replay's coarser bucket model, a window
			// from its first request's slot, drifts later than its bucket's
			// own ETA: one saturated bucket at 150 ms had its ETAs a
			// window late).
			if e.Target >= 0 && at[j].At > e.Due && at[j].Waited {
				// From the earliest it may go to one period after the
				// forecast: the slot's period, and the doubt of the
				// round trips before it; at a burst's cut, to one
				// period after the next burst (burstCut).
				end := now.Add(time.Duration(max(at[j].At, at[j].Late) - now.UnixNano())).Add(per)
				raise(&out[e.Target], now.Add(time.Duration(at[j].Early-now.UnixNano())), end)
			}
		}
	}
}

// raise moves e's window to [start, end) (no earlier than it was) when
// the global window lets it go later than its other limits.
func raise(e *ETA, start, end time.Time) {
	e.Start, e.End, e.Limit, e.Declared = later(start, e.Start), later(end, e.Start), BoundGlobal, ""
}

// ObserveRTT returns the round-trip estimate old (0: none yet) after an
// answer that took d: it follows the shortest at once and longer ones
// slowly (1/32 per answer), so it stays close to the least round trip
// lately: a burst's queueing does not stretch every later forecast, and a
// global forecast starts early rather than late (a forecast window is one
// period wide from its start). A d that is no round trip (not positive)
// leaves it.
func ObserveRTT(old, d time.Duration) time.Duration {
	switch {
	case d <= 0:
		return old
	case old == 0 || d < old:
		return d
	}
	return old + (d-old)/32
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
