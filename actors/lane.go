package actors

import (
	"context"
	"strings"
	"time"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/internal/admission"
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
//   - a call is in at most one of queue and retries, or on the wire with
//     call.lane pointing at the lane that admitted it (or at a lane merged
//     into another: see mergedInto);
//   - running == the number of calls on the wire admitted by this lane ==
//     state.InFlight() minus the holds other lanes' pioneers took here
//     (those are in state.InFlight() too, and reported exactly once, by
//     Observe or Refund, when the pioneer's answer arrives);
//   - the machine's state follows state (sync): initial while the limit is
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
	serial       bool
	sharedNotify bool            // see sharedUntil
	sharedLocal  bool            // see sharedUntil
	lowest       admission.Class // see promoted
	running      int32           // requests of the lane on the wire
	share        admission.Share // see promoted

	state   ratelimit.Bucket
	machine *fsm.Bucket
	// window is the longest Reset-After seen: the window length used to
	// predict waits.
	window time.Duration

	queue   []*Call // by class, then FIFO (lane.placeOf); finished calls are skipped lazily
	retries []*Call // waiting for their backoff after a 5xx or a lost connection
	// lowest (above) is at most the class of every call in queue and
	// retries (the lowest queued since both were last empty): while the
	// head is of that class, no lower class waits and the share (share)
	// needs no look at the queue. share (above) counts the calls sent
	// ahead of a lower class waiting in the queue (admission.Share);
	// promoted is the call the share moved to the head, until it is sent.
	promoted *Call

	// sharedUntil holds the lane until then: the shared count (another
	// process on the token) refused its head; sharedNotify (above) is set
	// when that wait ends early with an answer another process waits for
	// (a sharedWakeMsg); sharedLocal (above) is set when sharedUntil came
	// from the fallback share (SharedGrant.Local: Redis was out): it ends
	// when Redis answers again (System.SharedResumed), whose count is the
	// one that holds.
	sharedUntil time.Time

	// mergedInto is set when the lane turned out to share its hash with
	// another lane of the actor: its work moved there, and its calls still
	// on the wire report there.
	mergedInto *lane
}

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
// is the other's, its parent, its child or its sibling (related). Discord
// shares bucket hashes between related routes (a channel's messages and
// one message, a reaction's add and remove, the users of a reaction);
// unrelated ones (a message and a reaction on it, a member and a role)
// have their own. A first pioneer holds a slot only in the known lanes it
// might share, so a route never seen does not wait for an unrelated
// bucket's window.
func mayShare(l, k *lane) bool {
	for i := range l.numRoutes() {
		for j := range k.numRoutes() {
			if related(l.route(i).template, k.route(j).template) {
				return true
			}
		}
	}
	return false
}

// related reports whether two route templates are equal, parent and child,
// or siblings (the same parent): "/channels/{channel_id}/messages" is
// related to "/channels/{channel_id}/messages/{message_id}" and to
// "/channels/{channel_id}/pins", not to
// "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me".
func related(a, b string) bool {
	pa, pb := parent(a), parent(b)
	return a == b || pa == pb || pa == b || a == pb
}

// parent is a template without its last segment ("" for a top-level one).
func parent(template string) string {
	if i := strings.LastIndexByte(template, '/'); i > 0 {
		return template[:i]
	}
	return ""
}

// newLane makes the lane of key for route, whose TemplateKey is template.
func newLane(b *bucket, key, template string, routeKeyed, first bool, route routes.Route) *lane {
	l := &lane{key: key, template: template, routeKeyed: routeKeyed, first: first,
		perToken: route.PerToken, serial: route.HiddenSublimit}
	if st, ok := b.sys.store.Load(key); ok && !routeKeyed {
		l.state = st
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
	st := &l.state
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

// head returns the first live call of the queue, dropping finished ones.
func (l *lane) head() *Call {
	for len(l.queue) > 0 {
		c := l.queue[0]
		if !c.Finished() {
			return c
		}
		l.pop()
	}
	return nil
}

// compact drops the finished calls from the whole queue (cancelled by
// their callers while they waited: head drops them only once they reach
// it).
func (l *lane) compact() {
	out := l.queue[:0]
	for _, c := range l.queue {
		if !c.Finished() {
			out = append(out, c)
		}
	}
	clear(l.queue[len(out):])
	l.queue = out
}

// pop drops the queue's first call. An emptied queue keeps its room: a
// lane that holds one request at a time allocates its queue once, not
// once a request.
func (l *lane) pop() {
	l.queue[0] = nil
	if len(l.queue) == 1 {
		l.queue = l.queue[:0]
		return
	}
	l.queue = l.queue[1:]
}

// idle reports whether the lane holds nothing worth keeping in the actor at
// now: nothing queued, retrying or running, and its window and pause over
// (plus the configured grace).
func (l *lane) idle(now time.Time, grace time.Duration) (bool, time.Duration) {
	if len(l.queue) > 0 || len(l.retries) > 0 || l.running > 0 || l.state.InFlight() > 0 {
		return false, 0
	}
	end := l.state.ResetAt
	if l.state.PausedUntil.After(end) {
		end = l.state.PausedUntil
	}
	end = end.Add(grace)
	if now.Before(end) {
		return false, end.Sub(now)
	}
	return true, 0
}

// peek reports whether Take would admit a request at now, without taking.
func peek(st ratelimit.Bucket, now time.Time) (bool, time.Duration) {
	return st.Take(now)
}

// room is how many of its queue the lane's bucket has room for at now,
// its window refilled if it has ended: slots for them all are asked
// together. A window that holds for its probe sends one and the rest a
// round trip later, with the slots kept for them (bucket.probeAwaited):
// asked for one at a time, as the stale count of an ended window (often
// 0) did, the rest waited a whole global window behind the probe under a
// binding global limit, at every reopening.
func (l *lane) room(now time.Time) int {
	st := l.state
	if ok, _ := st.Take(now); !ok {
		return 0
	}
	return 1 + st.Remaining
}

// backlog is how long the lane's queue needs at its bucket's own pace, in
// whole windows: the refills its last request waits for, times the window.
// Not the time to the last one's window: that counts when the current
// window happens to end, so two buckets of one shape, queues of one
// length, would tell apart by noise and be served in its order rather
// than in their requests' (admission.Deadline); the global forecast
// reckons the same way (forecast.Replay).
func (l *lane) backlog(now time.Time) time.Duration {
	if !l.state.Known {
		return time.Duration(len(l.queue)) * admission.UnknownPace
	}
	if len(l.queue) == 0 {
		return 0
	}
	n, window, _ := l.refills(now, len(l.queue)-1)
	return time.Duration(n) * window
}

// placeOf is where c goes in l's queue: behind every call of its class or
// a higher one, ahead of the lower classes' calls (a higher class goes
// first in its bucket, FIFO within a class), but never ahead of the call
// the share promoted to the head (served). A call under declared limits
// goes at the end, for order to place it by its groups' window, and no
// call passes one such: their groups counted them in that order.
func (l *lane) placeOf(c *Call) int {
	i := len(l.queue)
	if _, placed := placeStart(c); placed {
		return i
	}
	stop := 0 // the call the share promoted keeps the head
	if i > 0 && l.queue[0] == l.promoted {
		stop = 1
	}
	for ; i > stop; i-- {
		p := l.queue[i-1]
		if _, placed := placeStart(p); !p.Finished() && (placed || p.Class >= c.Class) {
			break
		}
	}
	return i
}

// noteClass keeps lowest at most c's class, c joining the queue or the
// retries.
func (l *lane) noteClass(c *Call) {
	if len(l.retries) == 0 && l.head() == nil {
		l.lowest = c.Class // both empty: start again
		return
	}
	l.lowest = min(l.lowest, c.Class)
}

// served counts c, just taken from the head of the queue to be sent,
// toward the lower classes' share (admission.Share). When ShareEvery-1
// calls in a row went ahead of a lower class, the oldest waiting call of
// a class below c's goes next: it is promoted to the head (or kept there)
// and served reports whether it moved.
func (l *lane) served(c *Call) (moved bool) {
	lower := c == l.promoted
	l.promoted = nil
	passed := false
	if c.Class > l.lowest {
		lowest := admission.Interactive
		for _, q := range l.queue {
			if !q.Finished() {
				lowest = min(lowest, q.Class)
			}
		}
		for _, q := range l.retries {
			lowest = min(lowest, q.Class)
		}
		l.lowest, passed = lowest, lowest < c.Class
	}
	l.share.Served(1, lower, passed)
	if !passed || !l.share.Due() || l.head() == nil {
		return false
	}
	// The oldest call of a class c passed goes next (placeOf puts no
	// newcomer ahead of it): moved to the head, or kept there if it is
	// the head already.
	at := admission.SharePick(l.queue, c.Class, func(q *Call) (admission.Class, bool) {
		_, placed := placeStart(q)
		return q.Class, !q.Finished() && !placed
	}, func(a, b *Call) bool { return a.ID < b.ID })
	if at < 0 {
		return false
	}
	q := l.queue[at]
	copy(l.queue[1:at+1], l.queue[:at])
	l.queue[0], l.promoted = q, q
	return at > 0
}

// topClass is the highest class among the first n live calls of the
// queue: the class an ask for them carries.
func (l *lane) topClass(n int) admission.Class {
	top := admission.Bulk
	for _, c := range l.queue {
		if n == 0 {
			break
		}
		if !c.Finished() {
			top = max(top, c.Class)
			n--
		}
	}
	return top
}

// mergeQueues merges two queues, each by class then submission order, in
// that order (placeOf).
func mergeQueues(a, b []*Call) []*Call {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	out := make([]*Call, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].Class > b[0].Class || a[0].Class == b[0].Class && a[0].ID <= b[0].ID {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}
