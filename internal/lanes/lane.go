package lanes

import (
	"context"
	"strings"
	"time"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// LaneRules is what a Lane reads of its requests (T) besides what its
// queue reads (Rules): when each was submitted and whether it needs a
// global slot. Pure reads, as Rules'.
type LaneRules[T any] interface {
	Rules[T]
	// Submitted is when the request was submitted: the earliest ready
	// one's is an ask's or a keep's Since (Seq breaks ties).
	Submitted(T) time.Time
	// Exempt reports whether the request needs no global slot (an
	// interaction callback: routes.Route.GlobalExempt).
	Exempt(T) bool
}

// Lane is one rate-limit bucket inside a bucket actor: its queue, its
// count (ratelimit.Bucket) and its state machine. A lane is keyed by its
// route (routes.Route.Key) while Discord has not told the route's hash,
// and by routes.BucketKey(hash, major) once it has. T is the request, R
// its rules, as Queue's.
//
// Invariants, kept by its owner (a bucket actor, package actors: no other
// goroutine touches a lane, and the owner calls the methods that change
// it):
//   - a request is in at most one of Line's queue and retries, or on the
//     wire, recorded by the owner as admitted by this lane (the actors'
//     Call.lane; or by a lane merged into another: see MergedInto);
//   - Running == the number of requests on the wire admitted by this lane
//     == State.InFlight() minus the holds other lanes' pioneers took here
//     (those are in State.InFlight() too, and reported exactly once, by
//     Observe or Refund, when the pioneer's answer arrives: SettleHolds);
//   - the machine's state follows State (Sync): initial while the limit is
//     unknown, limited during a 429's pause, exhausted while nothing
//     remains before the reset, open otherwise, idle once the window is
//     over with nothing to do.
type Lane[T comparable, R LaneRules[T]] struct {
	Key      string
	Template string // "METHOD /template": the key route→hash aliases are learned by
	// Routes are the (method, template) pairs whose requests this lane has
	// taken besides its own (Template's, see Route): a request of one of
	// them finds its lane without building a key or asking the store. Most
	// lanes serve their own route only, and a live bucket pays for no
	// slice.
	Routes []RouteRef

	// The small fields are together (a struct's padding is memory per
	// live bucket); the state they belong to says what they mean.
	RouteKeyed bool // keyed by its route: the hash is not known yet
	// First is set while the lane's template has never been answered: its
	// pioneer may land in the bucket of a related route, so it takes a slot
	// from each such known one (holds, see MayShare) and goes alone.
	First    bool
	PerToken bool // a webhook or interaction token's bucket: never stored
	// Serial sends one request at a time: set for routes with hidden
	// sublimits (channel name and topic edits) and after any shared or
	// sublimit 429, so at most one request meets an unseen limit.
	Serial  bool
	Running int32 // requests of the lane on the wire

	// Pace is the bucket's count (State), its window, and the shared
	// count's hold (SharedUntil: another process on the token refused the
	// head; see Pace). Its methods say when each place may go.
	Pace
	// Line is the queue and the retries (Queue: by class, then FIFO; the
	// lower classes' share).
	Line Queue[T, R]

	// Machine is the lane's state machine, made by its owner (NewLane)
	// with its transition hook.
	Machine *fsm.Bucket

	// MergedInto is set when the lane turned out to share its hash with
	// another lane of the actor: its work moved there (Merge), and its
	// requests still on the wire report there (Resolve).
	MergedInto *Lane[T, R]
}

// RouteRef names a route family: method and template.
type RouteRef struct{ Method, Template string }

// NewLane makes the lane of key for route, whose TemplateKey is template,
// with the count st (the zero Bucket while it is not known). machine
// makes its state machine, with the owner's transition hook (which may
// read the lane, its Key at each transition: a lane is renamed when it
// learns its bucket). The machine starts synced to st at now.
func NewLane[T comparable, R LaneRules[T]](key, template string, routeKeyed, first bool, route routes.Route,
	st ratelimit.Bucket, machine func(*Lane[T, R]) *fsm.Bucket, now time.Time) *Lane[T, R] {
	l := &Lane[T, R]{Key: key, Template: template, RouteKeyed: routeKeyed, First: first,
		PerToken: route.PerToken, Serial: route.HiddenSublimit}
	l.State = st
	l.Machine = machine(l)
	l.Sync(now)
	return l
}

// NumRoutes is how many route families the lane serves: its own and Routes.
func (l *Lane[T, R]) NumRoutes() int { return 1 + len(l.Routes) }

// Route returns the lane's i-th route family, 0 <= i < NumRoutes: its own
// (read from Template, "METHOD /template") first.
func (l *Lane[T, R]) Route(i int) RouteRef {
	if i > 0 {
		return l.Routes[i-1]
	}
	m, t, _ := strings.Cut(l.Template, " ")
	return RouteRef{m, t}
}

// Serves reports whether the lane takes r's requests: r's route family is
// one of its own.
func (l *Lane[T, R]) Serves(r routes.Route) bool {
	return l.ServesRef(RouteRef{r.Method, r.Template})
}

// ServesRef reports whether r is one of the lane's route families.
func (l *Lane[T, R]) ServesRef(r RouteRef) bool {
	for i := range l.NumRoutes() {
		if l.Route(i) == r {
			return true
		}
	}
	return false
}

// MayShare reports whether l, a lane whose template was never answered,
// might turn out to share k's bucket: whether one of their route templates
// is related to one of the other's (routes.Related). A first pioneer holds
// a slot only in the known lanes it might share, so a route never seen
// does not wait for an unrelated bucket's window.
func (l *Lane[T, R]) MayShare(k *Lane[T, R]) bool {
	for i := range l.NumRoutes() {
		for j := range k.NumRoutes() {
			if routes.Related(l.Route(i).Template, k.Route(j).Template) {
				return true
			}
		}
	}
	return false
}

// HoldsIn reports whether l's first pioneer holds a slot in k: k is
// another lane, its limit known, that l may turn out to share (MayShare).
// The pioneer goes only when each such lane can spare one, and takes it.
func (l *Lane[T, R]) HoldsIn(k *Lane[T, R]) bool {
	return k != l && k.State.Known && l.MayShare(k)
}

// Merge hands the work of other, a lane that turned out to share l's
// bucket, over to l, once: its count (ratelimit.Bucket.Absorb), its queue
// and retries (Queue.Merge), its requests on the wire, its serial flag,
// its window and its route families (each once). other follows l from
// then on (MergedInto, Resolve); the owner drops it from its lanes.
func (l *Lane[T, R]) Merge(other *Lane[T, R]) {
	l.State.Absorb(&other.State)
	l.Line.Merge(&other.Line)
	l.Running += other.Running
	l.Serial = l.Serial || other.Serial
	l.Window = max(l.Window, other.Window)
	l.settledAt = max(l.settledAt, other.settledAt)
	for i := range other.NumRoutes() {
		if r := other.Route(i); !l.ServesRef(r) {
			l.Routes = append(l.Routes, r)
		}
	}
	other.Running = 0
	other.MergedInto = l
}

// Resolve follows merges to the lane that owns the work now.
func (l *Lane[T, R]) Resolve() *Lane[T, R] {
	for l.MergedInto != nil {
		l = l.MergedInto
	}
	return l
}

// Fire applies e to the lane's machine if its state allows it.
func (l *Lane[T, R]) Fire(e fsm.BucketEvent) {
	if l.Machine.Can(e) {
		_ = l.Machine.Fire(context.Background(), e)
	}
}

// Sync moves the machine to the state the count implies at now.
func (l *Lane[T, R]) Sync(now time.Time) {
	st := &l.State
	switch {
	case !st.Known:
		return // initial until a response tells the limit
	case now.Before(st.PausedUntil):
		l.Fire(fsm.RateLimited)
	case st.Remaining == 0 && now.Before(st.ResetAt):
		l.Fire(fsm.Discovered)
		l.Fire(fsm.Drained)
	default:
		l.Fire(fsm.Discovered)
		l.Fire(fsm.Reset)
		l.Fire(fsm.Wake)
	}
}

// Peek reports whether Take would admit a request at now, without taking:
// st is a copy.
func Peek(st ratelimit.Bucket, now time.Time) (bool, time.Duration) {
	return st.Take(now)
}

// ProbeOut reports whether a probe of the lane's reopening window is on
// the wire (ratelimit.Bucket.Probing): its queue goes at the probe's
// answer, a round trip away.
func (l *Lane[T, R]) ProbeOut() bool { return l.State.Probing() && l.State.InFlight() > 0 }

// Idle reports whether the lane holds nothing worth keeping in the actor at
// now: nothing queued, retrying or running, and its window and pause over
// (plus grace, the configured IdleAfter); if not, how long until they are
// (0: until something else changes).
func (l *Lane[T, R]) Idle(now time.Time, grace time.Duration) (bool, time.Duration) {
	if !l.Line.Empty() || l.Running > 0 || l.State.InFlight() > 0 {
		return false, 0
	}
	return l.Over(now, grace)
}
