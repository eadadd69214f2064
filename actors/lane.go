package actors

import (
	"context"
	"strings"
	"time"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/lanes"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// lane is one rate-limit bucket inside a bucket actor: its queue, its
// count (ratelimit.Bucket) and its state machine. A lane is keyed by its
// route (routes.Route.Key) while Discord has not told the route's hash,
// and by routes.BucketKey(hash, major) once it has.
//
// Invariants, kept by the owning bucket actor (no other goroutine touches a
// lane):
//   - a call is in at most one of the line's queue and retries, or on the
//     wire with call.lane pointing at the lane that admitted it (or at a lane merged
//     into another: see mergedInto);
//   - running == the number of calls on the wire admitted by this lane ==
//     State.InFlight() minus the holds other lanes' pioneers took here
//     (those are in State.InFlight() too, and reported exactly once, by
//     Observe or Refund, when the pioneer's answer arrives);
//   - the machine's state follows State (sync): initial while the limit is
//     unknown, limited during a 429's pause, exhausted while nothing
//     remains before the reset, open otherwise, idle once the window is
//     over with nothing to do.
type lane struct {
	key      string
	template string // "METHOD /template": the key route→hash aliases are learned by
	// routes are the (method, template) pairs whose requests this lane has
	// taken besides its own (template's, see route): a request of one of
	// them finds its lane without building a key or asking the store. Most
	// lanes serve their own route only, and a live bucket pays for no
	// slice.
	routes []routeRef

	// The small fields are together (a struct's padding is memory per
	// live bucket); the state they belong to says what they mean.
	routeKeyed bool // keyed by its route: the hash is not known yet
	// first is set while the lane's template has never been answered: its
	// pioneer may land in the bucket of a related route, so it takes a slot
	// from each such known one (holds, see mayShare) and goes alone.
	first    bool
	perToken bool // a webhook or interaction token's bucket: never stored
	// serial sends one request at a time: set for routes with hidden
	// sublimits (channel name and topic edits) and after any shared or
	// sublimit 429, so at most one request meets an unseen limit.
	serial  bool
	running int32 // requests of the lane on the wire

	// Pace is the bucket's count (State), its window, and the shared
	// count's hold (SharedUntil: another process on the token refused the
	// head; see lanes.Pace). Its methods say when each place may go.
	lanes.Pace
	// line is the queue and the retries (lanes.Queue: by class, then FIFO;
	// the lower classes' share).
	line lanes.Queue[*Call, callRules]

	machine *fsm.Bucket

	// mergedInto is set when the lane turned out to share its hash with
	// another lane of the actor: its work moved there, and its calls still
	// on the wire report there.
	mergedInto *lane
}

// callRules is how the pure packages read a call: a lane's queue
// (lanes.Rules) and its template's first pioneer turn (pioneers.Rules).
type callRules struct{}

func (callRules) Class(c *Call) admission.Class   { return c.Class }
func (callRules) Seq(c *Call) uint64              { return c.ID }
func (callRules) Finished(c *Call) bool           { return c.Finished() }
func (callRules) Place(c *Call) (time.Time, bool) { return c.place.Start() }
func (callRules) NotBefore(c *Call) time.Time     { return c.notBefore }
func (callRules) OnWire(c *Call) bool             { return c.onWire() }

// routeRef names a route family: method and template.
type routeRef struct{ method, template string }

// numRoutes is how many route families the lane serves: its own and routes.
func (l *lane) numRoutes() int { return 1 + len(l.routes) }

// route returns the lane's i-th route family, 0 <= i < numRoutes: its own
// (read from template, "METHOD /template") first.
func (l *lane) route(i int) routeRef {
	if i > 0 {
		return l.routes[i-1]
	}
	m, t, _ := strings.Cut(l.template, " ")
	return routeRef{m, t}
}

func (l *lane) serves(r routes.Route) bool { return l.servesRef(routeRef{r.Method, r.Template}) }

func (l *lane) servesRef(r routeRef) bool {
	for i := range l.numRoutes() {
		if l.route(i) == r {
			return true
		}
	}
	return false
}

// mayShare reports whether l, a lane whose template was never answered,
// might turn out to share k's bucket: whether one of their route templates
// is related to one of the other's (routes.Related). A first pioneer holds
// a slot only in the known lanes it might share, so a route never seen
// does not wait for an unrelated bucket's window.
func mayShare(l, k *lane) bool {
	for i := range l.numRoutes() {
		for j := range k.numRoutes() {
			if routes.Related(l.route(i).template, k.route(j).template) {
				return true
			}
		}
	}
	return false
}

// newLane makes the lane of key for route, whose TemplateKey is template.
func newLane(b *bucket, key, template string, routeKeyed, first bool, route routes.Route) *lane {
	l := &lane{key: key, template: template, routeKeyed: routeKeyed, first: first,
		perToken: route.PerToken, serial: route.HiddenSublimit}
	if st, ok := b.sys.store.Load(key); ok && !routeKeyed {
		l.State = st
	}
	l.machine = fsm.NewBucket(func(e fsm.BucketEvent, from, to fsm.BucketState) {
		b.sys.transition(b, b.self, l.key, e.String(), from.String(), to.String())
	})
	l.sync(b.sys.now())
	return l
}

// resolve follows merges to the lane that owns the work now.
func (l *lane) resolve() *lane {
	for l.mergedInto != nil {
		l = l.mergedInto
	}
	return l
}

func (l *lane) fire(e fsm.BucketEvent) {
	if l.machine.Can(e) {
		_ = l.machine.Fire(context.Background(), e)
	}
}

// sync moves the machine to the state the count implies.
func (l *lane) sync(now time.Time) {
	st := &l.State
	switch {
	case !st.Known:
		return // initial until a response tells the limit
	case now.Before(st.PausedUntil):
		l.fire(fsm.RateLimited)
	case st.Remaining == 0 && now.Before(st.ResetAt):
		l.fire(fsm.Discovered)
		l.fire(fsm.Drained)
	default:
		l.fire(fsm.Discovered)
		l.fire(fsm.Reset)
		l.fire(fsm.Wake)
	}
}

// peek reports whether Take would admit a request at now, without taking:
// st is a copy.
func peek(st ratelimit.Bucket, now time.Time) (bool, time.Duration) {
	return st.Take(now)
}

// idle reports whether the lane holds nothing worth keeping in the actor at
// now: nothing queued, retrying or running, and its window and pause over
// (plus the configured grace).
func (l *lane) idle(now time.Time, grace time.Duration) (bool, time.Duration) {
	if !l.line.Empty() || l.running > 0 || l.State.InFlight() > 0 {
		return false, 0
	}
	return l.Over(now, grace)
}
