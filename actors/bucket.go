package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/attempt"
	"github.com/sluicehq/sluice/internal/failure"
	"github.com/sluicehq/sluice/internal/forecast"
	"github.com/sluicehq/sluice/internal/globalwin"
	"github.com/sluicehq/sluice/internal/lanes"
	"github.com/sluicehq/sluice/internal/pioneers"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/internal/tracing"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
	"github.com/sluicehq/sluice/supervision"
	"github.com/sluicehq/sluice/transport"
)

// bucket is the actor of one major-parameter value (a channel, a guild, a
// webhook, an interaction, or none): it owns every rate-limit bucket
// (lane) of it, their queues, their pioneers and their reset timers, and
// sends their requests itself. Discord's buckets are hash + major
// parameters, so two routes can share a bucket only if they share their
// major parameters: every merge, hold and pioneer decision is local to one
// actor, with no message.
type bucket struct {
	sys      *System
	self     *actor.PID
	key      string // the major parameters: the key the supervisor knows it by
	perToken bool
	window   Window // the global window all its requests count on (the key tells)
	idleSent bool   // an idleMsg is out (the supervisor may stop the actor)
	// firstOut is set while one of pioneers (below) is a first pioneer (a
	// template never answered), which goes alone.
	firstOut bool
	// currentWired is set once this handler has handed the call current
	// (below) carries, if any, to a worker: after a panic its worker
	// answers it (recoverCrash). A count of its sends would not tell: an
	// answer the shared count deferred takes one back, and the same
	// handler may send it again.
	currentWired bool

	// lanes are the buckets of this major, unknown routes included (few:
	// one per route family used on a channel). Served round-robin from
	// next, so no lane waits behind another's backlog.
	lanes []*lane
	next  int

	// Admission (see gate and supervisor.ring). Invariants: wanting is set
	// from a wantMsg until its grantMsg; grants are global-window slots
	// reserved for this actor, spent before any other and cancelled when
	// nothing can use them; probe is set from the grant of the ban
	// breaker's probe until that one request is sent.
	// (The small fields are together: a struct's padding is memory per
	// live bucket.)
	grants      int
	holders     []*Call       // the queued calls the grants are for (Call.holding)
	want        int           // the requests asked for, while wanting
	toldPath    time.Duration // the backlog last told with want, or with soon while not wanting
	soonAt      time.Time     // when the keep last told with soonMsg counts its slots by (its reopening and slack)
	wanting     bool
	kept        bool            // a keep told with soonMsg may stand: no want since, nor withdrawal
	wantClass   admission.Class // the class of want
	wantPioneer bool            // and whether it was for a pioneer
	probe       bool

	// pioneers counts requests of lanes whose limit is unknown on the wire
	// (firstOut, above).
	pioneers int

	received   uint64                  // enqueueMsgs from the supervisor
	lastWake   uint64                  // seq of the last sharedWakeMsg
	draining   error                   // set on Close
	timerSlots [bucketTimers]timerSlot // its timers' slots (b.timers): a bucket's kinds only

	// current is the message being handled; it is cleared when the handler
	// returns normally, so after a panic it names the message that failed.
	// The actor's producer hands the same *bucket to every incarnation, so
	// a restart keeps the lanes.
	current any
	// dispatching is the call dispatch is putting on the wire, from its
	// pop until a worker has it: in no queue and not on the wire, so a
	// panic in between leaves it here for recoverCrash to fail.
	dispatching *Call
	tbuf        *tracing.Buffer // made at the first traced message (b.TraceBuffer): 24 bytes less a live bucket untraced
	crashes     *supervision.Intensity
	broken      error // set past the restart intensity
}

func newBucket(sys *System, key string, perToken bool, window Window) *bucket {
	return &bucket{sys: sys, key: key, perToken: perToken, window: window}
}

// attach makes b the bucket of the actor of ctx; called once, by its
// bucketCell, before b's first message.
func (b *bucket) attach(ctx actor.Context) {
	b.self = ctx.Self()
}

// timers are b's timers, over its slots: made when used rather than kept,
// 40 bytes less a live bucket.
func (b *bucket) timers() timers {
	return timers{sys: b.sys, pid: b.self, slots: b.timerSlots[:]}
}

// win is the global window of the bucket's requests.
func (b *bucket) win() *globalwin.Window { return b.sys.windows[b.window] }

func (b *bucket) TraceName() string { return "bucket" }
func (b *bucket) TraceBuffer(any) *tracing.Buffer {
	if b.tbuf == nil {
		b.tbuf = new(tracing.Buffer)
	}
	return b.tbuf
}

// TraceState and TraceKey describe the lane a message concerns (the
// actor's major parameters for the others).
func (b *bucket) TraceState(msg any) string {
	if l := b.laneOf(msg); l != nil {
		return l.Machine.Current().String()
	}
	if _, ok := msg.(*enqueueMsg); ok {
		return fsm.Initial.String()
	}
	return ""
}

func (b *bucket) TraceKey(msg any) string {
	if l := b.laneOf(msg); l != nil {
		return l.Key
	}
	if m, ok := msg.(*enqueueMsg); ok {
		return b.keyFor(m.call.Route)
	}
	return b.key
}

func (b *bucket) laneOf(msg any) *lane {
	c := callOf(msg)
	if c == nil {
		return nil
	}
	if c.lane != nil {
		return c.lane.Resolve()
	}
	return b.find(b.keyFor(c.Route))
}

// Receive handles one message at a time.
func (b *bucket) Receive(ctx actor.Context) {
	msg := ctx.Message()
	if _, ok := msg.(*actor.Restarting); ok {
		b.recoverCrash(ctx)
		return
	}
	b.current, b.currentWired = msg, false
	if h := b.sys.crashHook; h != nil {
		h(msg)
	}
	b.receive(ctx, msg)
	b.current = nil
}

// callOf is the call msg carries, if any.
func callOf(msg any) *Call {
	switch m := msg.(type) {
	case *enqueueMsg:
		return m.call
	case *resultMsg:
		return m.call
	}
	return nil
}

// recoverCrash runs in the restarting incarnation: the calls carried by the
// message that panicked, and the call it was putting on the wire if any
// (dispatching), get failure.ErrActorCrashed, and their bookkeeping is undone;
// everything else stays.
func (b *bucket) recoverCrash(ctx actor.Context) {
	m := b.current
	b.current = nil
	now := b.sys.now()
	if b.crashes == nil {
		b.crashes = supervision.NewIntensity(maxCrashes, crashWindow)
	}
	recent, exceeded := b.crashes.Crash(now)
	b.sys.log.Error("sluice: bucket actor crashed; restarting it with its queues and limits",
		slog.String("bucket", b.key), slog.String("message", fmt.Sprintf("%T", m)), slog.Int("recent_crashes", recent))
	if exceeded && b.broken == nil {
		b.broken = fmt.Errorf("%w: %d crashes within %s; the bucket's actor is stopping", failure.ErrActorCrashed, recent, crashWindow)
		b.sys.log.Error("sluice: bucket actor crashes too often; failing its requests and stopping it", slog.String("bucket", b.key))
		b.failQueued(b.broken, nil)
	}
	fail := func(c *Call) {
		if c.lane != nil {
			b.release(ctx, c, now, ratelimit.Headers{}, ratelimit.ChargeUnknown)
		}
		c.Complete(nil, fmt.Errorf("%w while handling %s", failure.ErrActorCrashed, c.Route.Redacted()))
	}
	// A panic in dispatch is the dispatched call's: popped for the wire and
	// not handed to a worker, nothing else will answer it, and it was not
	// sent. The message's own call was handled by then (queued, answered,
	// or on the wire, where its worker answers it): it stays as it is. So
	// does the message's call if this handler put it on the wire (a new
	// call, or one its answer put back at the head of its queue) before a
	// panic later on (currentWired): its worker answers it, and answered
	// failure.ErrActorCrashed it might be sent again by its caller.
	dispatched := b.dispatching
	if c := dispatched; c != nil {
		b.dispatching = nil
		b.notSent(ctx, c, now, fmt.Errorf("%w while handling %s", failure.ErrActorCrashed, c.Route.Redacted()))
	}
	if c := callOf(m); c != nil && dispatched == nil && !(b.currentWired && c.lane != nil) {
		fail(c) // an enqueueMsg's or a resultMsg's call
	}
	if _, ok := m.(*grantMsg); ok {
		b.wanting = false
		if b.probe { // the handler's end, which abandons an unused probe, was not reached
			b.probe = false
			ctx.Send(b.sys.sup, &probeDoneMsg{abandoned: true})
		}
	}
}

// notSent ends c's attempt, which never reached a worker, and answers it
// with err: what try and dispatch took for it is given back (its lane's
// slot as not counted, once c.lane is set; its declared place and global
// slot before), and the ban breaker's probe it carried is abandoned.
func (b *bucket) notSent(ctx actor.Context, c *Call, now time.Time, err error) {
	if c.lane != nil {
		b.release(ctx, c, now, ratelimit.Headers{}, ratelimit.ChargeNone)
	} else {
		b.sys.groups.Cancel(c.decl(), now)
		b.releaseGlobal(ctx, c, now, true)
	}
	if c.probe {
		c.probe = false
		ctx.Send(b.sys.sup, &probeDoneMsg{abandoned: true})
	}
	c.Complete(nil, err)
}

// dispatchPoint is what crashHook sees in dispatch: c popped from its
// lane (placed false), then its attempt counted there, a pioneer's holds
// too (placed true).
type dispatchPoint struct {
	call   *Call
	placed bool
}

func (b *bucket) receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case *actor.Started:
		// Only after a restart (bucketCell keeps the first start): the
		// timers stay armed; carry on.
		b.pump(ctx)
	case *enqueueMsg:
		b.received++
		b.idleSent = false
		b.enqueue(m.call)
		b.pump(ctx)
	case *resultMsg:
		b.result(ctx, m)
		b.pump(ctx)
	case *grantMsg:
		b.wanting = m.more // still in line for the rest
		b.want = max(0, b.want-m.slots)
		if m.err != nil {
			b.failQueued(m.err, nil)
		}
		b.grants += m.slots
		b.win().Granted.Add(int32(m.slots))
		b.probe = b.probe || m.probe
		b.pump(ctx)
		if b.probe { // nothing could use it
			b.probe = false
			ctx.Send(b.sys.sup, &probeDoneMsg{abandoned: true})
		}
	case *pioneeredMsg:
		b.pump(ctx) // which adopts what the template's answer taught
	case *sharedWakeMsg:
		if !m.all {
			b.lastWake = max(b.lastWake, m.seq)
		}
		for _, l := range b.lanes {
			if m.all && l.SharedLocal || !m.all && l.SharedNotify {
				l.SharedNotify, l.SharedLocal, l.SharedUntil = false, false, time.Time{}
			}
		}
		b.pump(ctx)
	case *wakeMsg:
		kind := timerWake
		switch {
		case m.retry:
			kind = timerRetry
		case m.idle:
			kind = timerIdle
		}
		if b.timers().fired(kind, m.gen) {
			b.pump(ctx)
		}
	case *etaMsg:
		m.reply <- b.eta(m.call, b.sys.now())
	case *bucketSnapshotMsg:
		now, at := b.sys.now(), m.at
		out := make([]BucketSnapshot, 0, len(b.lanes))
		for _, l := range b.lanes {
			out = append(out, l.Snapshot(at))
		}
		m.reply <- bucketSnapshot{buckets: out, queued: b.queued(now)}
	case *drainMsg:
		b.draining = m.err
		b.failQueued(m.err, nil)
		b.maybeIdle(ctx)
	case *actor.Stopping:
		b.timers().stopAll()
		b.saveAll()
		err := failure.ErrClosed
		if b.broken != nil {
			err = b.broken
		}
		b.failQueued(err, nil)
		b.cancelGrants()
	}
}

// keyFor is the lane key of route: its bucket once its template's hash is
// known (learned by any route of the template, on any channel), else the
// route itself.
func (b *bucket) keyFor(r routes.Route) string {
	if hash, ok := b.sys.store.Alias(r.TemplateKey()); ok && hash != "" {
		return routes.BucketKey(hash, r.Major)
	}
	return r.Key()
}

func (b *bucket) find(key string) *lane {
	for _, l := range b.lanes {
		if l.Key == key {
			return l
		}
	}
	return nil
}

// laneFor returns the lane of route, creating it.
func (b *bucket) laneFor(r routes.Route) *lane {
	for _, l := range b.lanes {
		if l.Serves(r) {
			return l
		}
	}
	template := r.TemplateKey()
	hash, known := b.sys.store.Alias(template)
	key := r.Key()
	if known && hash != "" {
		key = routes.BucketKey(hash, r.Major)
	}
	if l := b.find(key); l != nil {
		l.Routes = append(l.Routes, lanes.RouteRef{Method: r.Method, Template: r.Template})
		return l
	}
	l := newLane(b, key, template, key == r.Key(), !known, r)
	b.lanes = append(b.lanes, l)
	return l
}

func (b *bucket) enqueue(c *Call) {
	if c.Finished() {
		return
	}
	switch {
	case b.draining != nil:
		c.Complete(nil, b.draining)
		return
	case b.broken != nil:
		c.Complete(nil, b.broken)
		return
	}
	l := b.laneFor(c.Route)
	if max := b.sys.cfg.MaxQueue; max > 0 && l.Line.Len() >= max {
		c.Complete(nil, fmt.Errorf("%w: %d requests queued for %s", failure.ErrQueueFull, l.Line.Len(), c.Route.Redacted()))
		return
	}
	l.Line.NoteClass(c) // before PlaceOf: it may drop finished calls from the head
	now := b.sys.now()
	// Its predicted wait, and whether MaxWait refuses it (forecast.Waits).
	dl, hasDl := c.deadline()
	limit := forecast.MaxWait(b.sys.cfg.MaxWait, c.MaxWait, dl, hasDl, now)
	pos, start, known := l.Place(c, now, limit)
	in := forecast.Waits{Bucket: start.Sub(now), Known: known, Declared: b.sys.groups.Reserve(c.decl(), now),
		Global: b.win().Limiter.Blocked(now), Exempt: c.Route.GlobalExempt, Limit: limit}
	wait, by, known, refuse := in.Weigh()
	c.stamp(now.Add(wait), known, l, now)
	if refuse {
		declared := ""
		if by == forecast.BoundDeclared {
			_, declared, _ = b.sys.groups.Estimate(c.decl(), now)
		}
		b.sys.groups.Release(c.decl(), c.window, false, now) // no answer yet
		c.Complete(nil, &failure.WaitError{Bucket: c.Route.Redacted(), Declared: declared, By: by, Wait: wait, Limit: limit, At: now.Add(wait)})
		return
	}
	c.queuedAt = now
	telemetry.EventWith(c.span, "queued", attribute.String("sluice.bucket", l.Key))
	if l.Line.Insert(pos, c) {
		b.restamp(l, now) // its place moved the calls behind it
	}
}

// ready reports whether l's head may go now as far as the buckets are
// concerned; otherwise wait is when to look again (0: an answer will
// wake the actor). The lane's state machine decides (lanes.Lane.Ready):
// an unknown (initial) bucket sends one pioneer at a time, and a first
// pioneer goes alone, once its template's turn is free, and only with a
// slot held in every known bucket of the actor it might share
// (lanes.Lane.FirstReady).
func (b *bucket) ready(l *lane, now time.Time) (bool, time.Duration) {
	ok, wait, turn := l.Ready(now, b.pioneers, b.firstOut)
	if turn {
		if c := l.Line.Head(); c != nil && !b.sys.firsts.Free(l.Template, c, l, b.self) {
			return false, pioneers.Poll // another actor's first pioneer of the template
		}
		ok, wait = l.FirstReady(b.lanes, now)
	}
	if !ok {
		return false, wait
	}
	// The declared limits the head is under (Config: sluice.Limit). A
	// head whose window moved back (a higher class took its place) goes
	// behind the calls due before it, and the new head is asked.
	for i := 0; ; i++ {
		ok, wait, moved := b.sys.groups.Ready(l.Line.Head().decl(), now)
		if ok || !moved || i >= l.Line.Len() || !l.Line.Order(0) {
			return ok, wait
		}
		b.restamp(l, now)
	}
}

// admit reports whether a request may go now as far as the connection, the
// ban breaker and the global window (globalwin.Window.Admit) are
// concerned, reserving its global slot (global) when it needs one.
func (b *bucket) admit(g *gate, c *Call, now time.Time) (ok, global bool) {
	if g == nil || !g.live() || (g.hold && !b.probe) {
		return false, false // no connection it could go on (one that died is not)
	}
	if c.Route.GlobalExempt {
		return true, false
	}
	ok, spent := b.win().Admit(now, b.grants, b.wanting || b.probe)
	if spent {
		b.grants--
	}
	return ok, ok
}

// pump sends queued requests while their buckets and admission allow, one
// lane at a time in turn. It is the only place that takes from a bucket.
func (b *bucket) pump(ctx actor.Context) {
	now := b.sys.now()
	if b.broken != nil {
		b.failQueued(b.broken, nil)
		b.maybeIdle(ctx)
		return
	}
	if err := b.sys.budget(now); err != nil {
		b.failQueued(err, nil)
		b.cancelGrants()
		b.maybeIdle(ctx)
		return
	}
	if b.sys.auth.active() {
		// The token was rejected: what would be sent with it fails, except
		// the one call let through to check it again.
		b.failQueued(failure.ErrUnauthorized, func(c *Call) bool { return b.sys.botAuthenticated(c) && !c.authProbe.Load() })
	}
	var wake time.Duration
	for _, l := range b.lanes {
		if w := b.dueRetries(l, now); w > 0 && (wake == 0 || w < wake) {
			wake = w
		}
	}
	if wake > 0 {
		b.timers().after(timerRetry, wake, func(gen uint64) any { return &wakeMsg{gen: gen, retry: true} })
	}
	g := b.sys.gate.Load()
	wake = 0
	held := false
	for progress := true; progress; {
		progress = false
		b.adoptLearned()
		n := len(b.lanes)
		// The lanes' heads by class, the highest first: granted slots go
		// to them first.
		hi, lo := lanes.HeadClasses(b.lanes)
		for class := hi; class >= lo; class-- {
			for i := range n {
				l := b.lanes[(b.next+i)%n]
				c := l.Line.Head()
				if c == nil || c.Class != class {
					continue
				}
				went, heldBack, wait := b.try(ctx, l, c, g, now)
				progress, held = progress || went, held || heldBack
				if wait > 0 && (wake == 0 || wait < wake) {
					wake = wait
				}
			}
		}
		if n > 0 {
			b.next = (b.next + 1) % n
		}
	}
	for _, l := range b.lanes {
		l.Sync(now)
	}
	switch {
	case held:
		b.askAdmission(ctx, now)
	case !lanes.ProbeAwaited(b.lanes): // a queue waiting for its probe's answer keeps its grants
		b.cancelGrants()
	}
	if !b.wanting {
		b.announceSoon(ctx, now)
	}
	if wake > 0 {
		if _, per, ok := b.win().Limit(); ok && wake > per {
			// Its reopening is more than the global window's period
			// away: pump once it is within it, so the keep its queue may
			// need is told a period ahead (announceSoon), not when its
			// window has reopened and the line has handed the slots out.
			wake += time.Millisecond - per
		}
		b.timers().after(timerWake, wake, func(gen uint64) any { return &wakeMsg{gen: gen} })
	}
	b.markHolders()
	if h := b.sys.crashHook; h != nil {
		h(pumpedPoint{})
	}
	b.maybeIdle(ctx)
}

// pumpedPoint is what crashHook sees near the end of pump, after every
// dispatch: a panic there comes after a worker took the calls sent.
type pumpedPoint struct{}

// try sends c, the head of l, if its bucket, its declared groups and
// admission let it go at now. It reports whether the actor went on (went:
// c was sent, or its first pioneer's turn ended with the template's
// answer, or c's declared window moved back and l has a new head),
// whether admission held c back (held: the actor asks for slots), and
// otherwise when to look again (wait; 0: an answer or a message wakes
// the actor).
func (b *bucket) try(ctx actor.Context, l *lane, c *Call, g *gate, now time.Time) (went, held bool, wait time.Duration) {
	if ok, wait := b.ready(l, now); !ok {
		return false, false, wait
	} else if l.Line.Head() != c {
		// c's declared window moved back (ready put it behind the calls
		// due first): the next round takes the new head.
		return true, false, 0
	}
	if l.First && l.Machine.Current() == fsm.Initial {
		if !b.sys.firsts.Take(l.Template, c, l, b.self) {
			// Another actor's first pioneer of the template took the turn
			// since ready: its answer (a pioneeredMsg) wakes this.
			return false, false, pioneers.Poll
		}
		if hash, known := b.sys.store.Alias(l.Template); known && hash != "" {
			// The turn came free with the template's answer (recorded
			// before its turn ended): no guess to make.
			b.endFirstTurn(ctx, l.Template, c)
			return true, false, 0 // adoptLearned, at the next round
		}
	}
	if ok, wait := b.sys.groups.Take(c.decl(), now); !ok {
		return false, false, wait // another actor took the declared group's last slot
	}
	admitted, global := b.admit(g, c, now)
	if !admitted {
		b.sys.groups.Cancel(c.decl(), now) // it keeps its place
		if c.readyAt.IsZero() {
			c.readyAt = now
		}
		return false, true, 0
	}
	b.dispatch(ctx, l, c, g, global, now)
	return true, false, 0
}

// markHolders records which queued calls the actor's granted slots are
// for (Call.holding; lanes.Holders chooses them).
func (b *bucket) markHolders() {
	for _, c := range b.holders {
		c.holding.Store(false)
	}
	clear(b.holders)
	b.holders = lanes.Holders(b.lanes, b.next, b.grants, b.holders[:0])
	for _, c := range b.holders {
		c.holding.Store(true)
	}
}

// askAdmission tells the supervisor how many requests wait for admission
// (once until its answer).
func (b *bucket) askAdmission(ctx actor.Context, now time.Time) {
	ask := lanes.Ask(b.lanes, now, b.ready)
	if ask.Want == 0 {
		return
	}
	if b.wanting && ask.Path < 2*b.toldPath+time.Second && (!ask.Pioneer || b.wantPioneer) && ask.Want <= b.want && ask.Class == b.wantClass {
		// Asked already; only more ready requests (at most a window's),
		// another class, a much longer backlog or a pioneer is worth
		// telling.
		return
	}
	b.wanting, b.want, b.toldPath, b.wantPioneer, b.wantClass, b.kept = true, ask.Want, ask.Path, ask.Pioneer, ask.Class, b.kept && ask.Pioneer // a want replaces the keep, but a pioneer's
	ctx.Send(b.sys.sup, &wantMsg{key: b.key, ask: ask})
}

// announceSoon tells the supervisor when a queue that waits for its own
// bucket window will be ready, if that is within the global window's
// period, its backlog then is longer than the period and others wait for
// the window (soonMsg): the window keeps its slots from the actors behind
// it in line. Once per reopening. A queue behind a pioneer on the wire
// (its bucket's limit not known yet), or behind a first pioneer waiting
// for its turn (lanes.AwaitsTurn), waits for the pioneer's answer, a
// round trip or two away: it says so whether others wait or not, as the buckets
// that learn their limits first would otherwise take the window's slots
// one after the other, each alone in line, before a longer backlog
// behind a later answer could ask. A keep that no queue needs any more
// (cancelled, or its pioneer's answer shut its bucket for longer) is
// withdrawn at once, not left to lapse.
func (b *bucket) announceSoon(ctx actor.Context, now time.Time) {
	w := b.win()
	others := w.Waiting.Load() > 0
	if !others && b.pioneers == 0 && !b.kept && !lanes.AwaitsTurn(b.lanes) {
		return // nobody in line, no queue behind a pioneer (out or awaiting its turn), no keep standing
	}
	_, per, ok := w.Limit()
	if !ok {
		return
	}
	rtt := time.Duration(b.sys.rtt.Load())
	// A queue behind its pioneer tells it once a period at most after the
	// last keep counted its slots by (soonAt: its reopening and slack),
	// unless its backlog has doubled since (Soon.Told): each request that
	// joins would otherwise tell it again, and a slow pioneer's queue keep
	// slots idle again and again.
	behind := b.soonAt.IsZero() || now.Sub(b.soonAt) >= per
	k, needed := lanes.Keep(b.lanes, now, lanes.Soon{Per: per, RTT: rtt, Others: others, Behind: behind, Told: b.toldPath}, b.ready)
	if b.kept && !needed {
		// Withdrawn: a keep that wants nothing. The next one, if a queue
		// needs it again, is told afresh (no "told already").
		b.kept, b.soonAt = false, time.Time{}
		ctx.Send(b.sys.sup, &soonMsg{key: b.key})
		return
	}
	if k.Want == 0 || k.Path < per || k.At.Add(k.Slack).Equal(b.soonAt) {
		// Nothing waits, or its queue needs no window after the
		// reopening one: waiting for the next burst costs it at most a
		// period, once, while slots kept idle for it cost the window's
		// whole line as much. Only a longer backlog loses every one of
		// its later windows with the first.
		return
	}
	b.soonAt, b.kept, b.toldPath = k.At.Add(k.Slack), true, k.Path
	ctx.Send(b.sys.sup, &soonMsg{key: b.key, keep: k})
}

// cancelGrants gives back global slots reserved for us that nothing can
// use now.
func (b *bucket) cancelGrants() {
	if b.grants == 0 {
		return
	}
	now := b.sys.now()
	n := b.grants
	b.win().Granted.Add(-int32(n))
	for ; b.grants > 0; b.grants-- {
		b.win().Limiter.Cancel(now)
	}
	b.sys.root.Send(b.sys.sup, &freedMsg{window: b.window, cancelled: n})
}

// dispatch takes c's slot from its lane (and, for a first pioneer, one from
// every known lane it might share: lanes.Lane.MayShare) and puts c on the
// wire.
//
// Until a worker has c, a panic leaves it in b.dispatching: recoverCrash
// gives back what was taken for it as for a request not sent (its global
// slot and declared place from the start, its lane's slot once c.lane is
// set) and answers it. What is taken and what release gives back are side
// by side: the lane's slot, its running counts and c.lane (with c.sentAt);
// a pioneer's count and c.pioneer; each hold and its entry in c.holds.
func (b *bucket) dispatch(ctx actor.Context, l *lane, c *Call, g *gate, global bool, now time.Time) {
	b.dispatching, c.global = c, global
	l.Line.Pop()
	if h := b.sys.crashHook; h != nil {
		h(dispatchPoint{call: c})
	}
	if l.Line.Served(c) {
		b.restamp(l, now) // the share moved a call of a lower class to the head
	}
	l.State.Take(now)
	l.Running++
	b.sys.running.Add(1)
	c.lane, c.sentAt = l, now
	if !l.State.Known {
		c.pioneer = true
		b.pioneers++
		if l.First {
			c.first = true
			b.firstOut = true
			c.firstWire.Store(true)
			for _, k := range b.lanes {
				if l.HoldsIn(k) {
					k.State.Take(now) // a hold: reported when the pioneer is answered
					c.holds = append(c.holds, k)
				}
			}
		}
	}
	if h := b.sys.crashHook; h != nil {
		h(dispatchPoint{call: c, placed: true})
	}
	c.due.Store(forecast.DueNever)
	c.probe = b.probe
	b.probe = false
	if c.readyAt.IsZero() {
		c.waitBucket.Add(int64(now.Sub(c.queuedAt)))
	} else {
		c.waitBucket.Add(int64(c.readyAt.Sub(c.queuedAt)))
		c.waitGlobal.Add(int64(now.Sub(c.readyAt)))
		c.readyAt = time.Time{}
	}
	c.sends.Add(1)
	telemetry.Event(c.span, "dispatched")
	telemetry.Event(c.span, "sent")
	self := b.self
	var sr *ratelimit.SharedRequest
	if b.win().Shared != nil {
		template := c.Route.TemplateKey()
		hash, _ := b.sys.store.Alias(template)
		sr = &ratelimit.SharedRequest{Now: now, Route: c.Route.Key(), Template: template, Major: c.Route.Major, Hash: hash,
			Global: global || !c.Route.GlobalExempt, Local: l.State, Window: l.Window, Margin: l.State.Margin(now),
			Serial: l.Serial}
		c.place.FillShared(sr, c.Class)
	}
	conn := g.pick()    // claimed here, ended by the worker or just below
	b.dispatching = nil // the worker's now
	if c == callOf(b.current) {
		b.currentWired = true
	}
	if !b.sys.workers.Go(job{conn: conn, call: c, bucket: self, sr: sr}) {
		conn.Unclaim()
		b.notSent(ctx, c, now, failure.ErrClosed)
	}
}

// release ends c's attempt in the bookkeeping: its lane's count
// (lanes.Pace.Settle), the holds of a pioneer (lanes.SettleHolds), its
// declared groups, the pioneer count and its global slot.
func (b *bucket) release(ctx actor.Context, c *Call, at time.Time, h ratelimit.Headers, count ratelimit.Charge) *lane {
	uncounted := count == ratelimit.ChargeNone
	l := c.lane.Resolve()
	c.lane = nil
	l.Running--
	b.sys.running.Add(-1)
	if c.pioneer {
		c.pioneer = false
		b.pioneers--
		if c.first {
			c.first = false
			b.firstOut = false
			c.firstWire.Store(false)
			// The template's hash, for every channel, before the actors
			// waiting for this pioneer are told (learn records it too).
			if h.Has.Bucket && h.Bucket != "" && l.RouteKeyed {
				b.sys.store.SetAlias(l.Template, h.Bucket)
			}
			b.endFirstTurn(ctx, l.Template, c)
		}
	}
	l.Settle(at, c.sentAt, h, count)
	if uncounted {
		b.sys.groups.Cancel(c.decl(), at) // a finished call's place is released there
	} else {
		b.sys.groups.Settle(c.decl(), c.sentAt, at)
	}
	lanes.SettleHolds(c.holds, c.Route.Major, at, c.sentAt, h, count)
	c.holds = nil
	b.releaseGlobal(ctx, c, at, uncounted)
	return l
}

// releaseGlobal gives back c's slot of its global window, if it holds one:
// cancelled if it was not counted, settled otherwise.
func (b *bucket) releaseGlobal(ctx actor.Context, c *Call, at time.Time, uncounted bool) {
	if !c.global {
		return
	}
	c.global = false
	w := b.win()
	if uncounted {
		w.Limiter.Cancel(at)
		ctx.Send(b.sys.sup, &freedMsg{window: b.window, cancelled: 1})
	} else {
		w.Limiter.Settle(at)
		if w.Waiting.Load() > 0 {
			ctx.Send(b.sys.sup, &freedMsg{window: b.window})
		}
	}
}

func (b *bucket) result(ctx actor.Context, m *resultMsg) {
	c := m.call
	if c.lane == nil {
		return // not on the wire for us (already released)
	}
	if m.Deferred != nil {
		b.deferred(ctx, c, m)
		return
	}
	c.waitNetwork.Add(int64(m.At.Sub(c.sentAt)))
	h := m.Headers
	answered := m.Resp != nil || h.Has.RateLimit
	if answered {
		b.sys.observeRTT(m.At.Sub(c.sentAt))
		b.sys.clock.Observe(m.Wired, m.At, h)
		b.sys.clock.Annotate(&h)
	}
	notSent := m.Err != nil && (transport.Classify(m.Err) == transport.NotSent || errors.Is(m.Err, attempt.ErrNotSent))
	status := 0
	if m.Resp != nil {
		status = m.Resp.StatusCode
		telemetry.EventWith(c.span, "headers", attribute.Int("http.response.status_code", status))
	}
	v := m.Verdict
	// What the attempt means, by the one outcome table: what its bucket,
	// its global slot and its declared groups count, what pauses, and
	// what becomes of c. (A 5xx without rate-limit headers stays charged
	// like a lost answer: giving its slot back drew user 429s at window
	// edges under load.)
	o := ratelimit.Judge(ratelimit.Attempt{
		Sent: !notSent, Status: status, PeerClosed: m.Resp == nil && transport.PeerClosed(m.Err),
		Headers: h, Verdict: v, BotToken: b.sys.botAuthenticated(c), Safe: c.Safe,
		Retries: c.attempts, MaxRetries: b.sys.cfg.MaxRetries,
		ErrorRetries: c.errAttempts, MaxErrorRetries: b.sys.cfg.MaxErrorRetries,
	})
	count := o.Charge
	prev := &c.lane.Resolve().State
	known, limit, paused := prev.Known, prev.Limit, prev.PausedUntil
	if c.first && m.Resp != nil && status < 500 && status != http.StatusTooManyRequests && !(h.Has.Bucket && h.Bucket != "") {
		// A first answer without a bucket: nothing to learn, the
		// template's other first pioneers need not wait (release tells
		// them).
		b.sys.firsts.Settle(c.lane.Resolve().Template)
	}
	l := b.release(ctx, c, m.At, h, count)
	if answered {
		b.learn(l, c, h, status)
		l = l.Resolve() // learn may have merged it into its bucket's lane, which takes the window
		l.Widen(h, status)
	}
	l = l.Resolve()
	defer func() {
		if st := &l.State; st.Known != known || st.Limit != limit || st.PausedUntil.After(paused) {
			// The queue's due times were guessed without this: the
			// global forecasts of other calls read them.
			b.restamp(l, b.sys.now())
		}
	}()
	if c.probe {
		c.probe = false
		ctx.Send(b.sys.sup, &probeDoneMsg{status: status, banned: o.Pause == ratelimit.PauseBan})
	}
	if m.Err != nil {
		b.failed(l, c, m.Err, o)
		return
	}
	now := b.sys.now()
	if o.Invalid {
		b.sys.countInvalid(now)
	}
	scope := ""
	if status == http.StatusTooManyRequests {
		scope = v.Kind.Scope()
	}
	b.sys.tel.Response(status, scope)
	if c.authProbe.Load() && status != http.StatusUnauthorized && b.sys.auth.accepted() {
		b.sys.log.Info("sluice: the API accepts the token again")
	}
	if o.Pause == ratelimit.PauseAuth && b.sys.auth.rejected(now, b.sys.cfg.UnauthorizedProbe) {
		// Our token was rejected: every later request would be a 401 too.
		b.sys.log.Error("sluice: the API rejected the token (401); failing requests sent with it, checking it again periodically",
			slog.Duration("check_every", b.sys.cfg.UnauthorizedProbe))
	}
	switch {
	case status == http.StatusTooManyRequests:
		b.limited(ctx, l, c, v, o, m.At)
	case o.Next == ratelimit.Resend:
		b.sys.log.Warn("sluice: retrying after a server error", slog.Int("status", status), slog.String("route", c.Route.Redacted()))
		b.retryLater(l, now, c)
	default:
		c.Complete(m.Resp, nil)
	}
}

// deferred puts back in line a request the shared count refused before it
// was sent (Config.Shared): its slots are given back, and its lane waits for
// the time told, or for the answer another process's request gets.
func (b *bucket) deferred(ctx actor.Context, c *Call, m *resultMsg) {
	g := m.Deferred
	l := b.release(ctx, c, m.At, ratelimit.Headers{}, ratelimit.ChargeNone).Resolve()
	c.sends.Add(-1)
	now := b.sys.now()
	if b.draining != nil {
		c.Complete(nil, b.draining) // Close began: nothing goes back in line
		return
	}
	if g.Scope == "budget" {
		// The invalid answers of every process on the token reached the
		// budget.
		e := &failure.BudgetError{RetryAfter: g.Wait}
		if inv := b.sys.cfg.Invalid; inv != nil {
			_, e.Count, e.Window = inv.Refusing(now)
		}
		c.Complete(nil, e)
		return
	}
	own := false // the wait is c's alone
	if sh := c.place.Shared(); g.Scope == "declared" && sh != nil {
		// Its window, as the store has it now. A window that moved (c
		// came after its end and was placed again, behind the others)
		// holds c, not the lane: the calls behind it are due sooner.
		own = sh.Refused(now, g.Wait)
	}
	requeueFront(l, c, now)
	if own || g.Notify && b.lastWake > m.WakeSeq {
		return // or the answer it waits for came while it was being refused
	}
	if until := now.Add(g.Wait); until.After(l.SharedUntil) {
		l.SharedUntil, l.SharedLocal = until, g.Local
	}
	l.SharedNotify = l.SharedNotify || g.Notify
}

// learn records what an answer tells about l's route: its template's hash
// (for every channel), and which bucket it is. A lane keyed by its route
// that learns its bucket takes that bucket's key, or merges into the lane
// that already has it: one owner per real bucket.
func (b *bucket) learn(l *lane, c *Call, h ratelimit.Headers, status int) {
	l.Answered(h, status)
	if !h.Has.Bucket || h.Bucket == "" || !l.RouteKeyed {
		return
	}
	b.sys.store.SetAlias(l.Template, h.Bucket)
	b.rekey(l, routes.BucketKey(h.Bucket, c.Route.Major))
}

// endFirstTurn ends c's turn as the first pioneer of template, if it has
// it, and tells the actors waiting for it.
func (b *bucket) endFirstTurn(ctx actor.Context, template string, c *Call) {
	for _, pid := range b.sys.firsts.Done(template, c) {
		ctx.Send(pid, &pioneeredMsg{template: template})
	}
}

// adoptLearned gives each lane keyed by its route whose template's hash
// was learned meanwhile (another actor's first pioneer was answered) its
// bucket's key, or merges it into the lane that has it, before any of its
// requests goes: a request of a route sharing a hash with a known bucket
// of this channel counts there, instead of going as a pioneer beside it.
func (b *bucket) adoptLearned() {
	for i := 0; i < len(b.lanes); i++ {
		l := b.lanes[i]
		if !l.First || !l.RouteKeyed || l.Running > 0 {
			continue
		}
		c := l.Line.Head()
		if c == nil {
			continue
		}
		hash, ok := b.sys.store.Alias(l.Template)
		if !ok || hash == "" {
			continue
		}
		l.First = false
		if b.rekey(l, routes.BucketKey(hash, c.Route.Major)) {
			i-- // l left b.lanes
		}
	}
}

// rekey gives l, a lane keyed by its route, the key of its bucket (target),
// or merges it into the lane that already has that key, and reports whether
// it merged (l then left b.lanes).
func (b *bucket) rekey(l *lane, target string) (merged bool) {
	owner := b.find(target)
	if owner == nil {
		l.Key, l.RouteKeyed = target, false
		return false
	}
	// Another route of this major got there first: hand the work over once.
	owner.Merge(l)
	for i, x := range b.lanes {
		if x == l {
			b.lanes = append(b.lanes[:i], b.lanes[i+1:]...)
			break
		}
	}
	return true
}

// limited handles a 429 as its outcome o says.
func (b *bucket) limited(ctx actor.Context, l *lane, c *Call, v ratelimit.Verdict, o ratelimit.Outcome, at time.Time) {
	scope := v.Kind.Scope()
	l.Limited(o, at, c.sentAt) // the lane's pause (a user or serial 429)
	switch o.Pause {
	case ratelimit.PauseBan:
		ctx.Send(b.sys.sup, &banMsg{wait: o.Wait})
	case ratelimit.PauseGlobal:
		// The worker paused the global window already (attempt.Runner.Run).
	case ratelimit.PauseSerial:
		// A declared limit that still met one: stricter than declared, or
		// spent by someone else too.
		b.sys.groups.Block(c.decl(), at.Add(o.Wait), at)
	}
	if o.Pause != ratelimit.PauseBan { // (the supervisor tells of a ban)
		b.sys.log.Warn("sluice: 429", slog.String("scope", scope), slog.String("route", c.Route.Redacted()), slog.Duration("retry_after", o.Wait))
	}
	c.attempts++
	if o.Next == ratelimit.Fail {
		c.Complete(nil, &failure.RateLimitError{Scope: scope, RetryAfter: o.Wait, Attempts: c.attempts, Bucket: c.Route.Redacted()})
		return
	}
	requeueFront(l, c, b.sys.now())
}

// failed handles a request that got no complete response, as its outcome
// o says once what the caller did is accounted for (failure.Failed).
func (b *bucket) failed(l *lane, c *Call, err error, o ratelimit.Outcome) {
	if c.Finished() {
		return
	}
	switch fate, end := failure.Failed(err, c.ended(), o.Next); fate {
	case failure.Complete:
		c.Complete(nil, end)
	case failure.Requeue:
		requeueFront(l, c, b.sys.now())
	case failure.Resend:
		b.sys.log.Warn("sluice: retrying after a transport error", slog.String("route", c.Route.Redacted()), slog.String("error", err.Error()))
		b.retryLater(l, b.sys.now(), c)
	default:
		c.Complete(nil, fmt.Errorf("sluice: %s: %w", c.Route.Redacted(), err))
	}
}

// requeueFront puts c back at the head of l's queue (behind a request the
// share promoted there): it was in line first.
func requeueFront(l *lane, c *Call, now time.Time) {
	c.queuedAt = now
	start, _, known := l.Slot(now, l.Line.PushFront(c))
	c.stamp(start, known, l, now)
}

// retryLater sends c again after a backoff, without holding the queue.
func (b *bucket) retryLater(l *lane, now time.Time, c *Call) {
	c.notBefore = now.Add(b.sys.cfg.RetryBackoff.Delay(c.errAttempts, rand.Float64))
	c.errAttempts++
	c.stamp(c.notBefore, true, l, now)
	l.Line.Retry(c)
}

// dueRetries moves l's retries whose backoff is over to the front of its
// queue, in the order they failed, and returns the wait for the next one
// (0: none).
func (b *bucket) dueRetries(l *lane, now time.Time) time.Duration {
	due, next := l.Line.DueRetries(now)
	for _, c := range due {
		c.queuedAt = now
		telemetry.Event(c.span, "retry")
	}
	return next
}

// failQueued fails the calls waiting in a queue or for a retry that match
// (every one when match is nil).
func (b *bucket) failQueued(err error, match func(*Call) bool) {
	keep := func(c *Call) bool {
		if match == nil || match(c) {
			c.Complete(nil, err)
			return false
		}
		return true
	}
	for _, l := range b.lanes {
		l.Line.Filter(keep)
	}
}

// maybeIdle drops the lanes that have nothing to do (their learned limits
// go to the store), and tells the supervisor when none is left, so the
// actor can stop and memory follows the working set.
func (b *bucket) maybeIdle(ctx actor.Context) {
	if b.awaiting() || b.idleSent {
		return
	}
	now := b.sys.now()
	var wake time.Duration
	keep := b.lanes[:0]
	for _, l := range b.lanes {
		idle, wait := l.Idle(now, b.sys.cfg.IdleAfter)
		if !idle {
			keep = append(keep, l)
			if wait > 0 && (wake == 0 || wait < wake) {
				wake = wait
			}
			continue
		}
		l.Fire(fsm.Reset)
		l.Fire(fsm.Quiet)
		b.save(l)
	}
	for i := len(keep); i < len(b.lanes); i++ {
		b.lanes[i] = nil
	}
	b.lanes = keep
	if b.next >= len(b.lanes) {
		b.next = 0
	}
	if len(b.lanes) > 0 {
		if wake > 0 {
			// Kept while it fires no later: each message moves the end
			// later, and the firing checks it again.
			b.timers().within(timerIdle, wake, func(gen uint64) any { return &wakeMsg{gen: gen, idle: true} })
		}
		return
	}
	b.idleSent = true
	ctx.Request(b.sys.sup, &idleMsg{key: b.key, received: b.received})
}

// awaiting reports whether the actor waits for a message that must find it
// alive: an admission answer, or held global slots to give back.
func (b *bucket) awaiting() bool { return b.wanting || b.grants > 0 || b.pioneers > 0 }

func (b *bucket) save(l *lane) {
	if l.State.Known && !l.PerToken && !l.RouteKeyed {
		b.sys.store.Save(l.Key, l.State)
	}
}

func (b *bucket) saveAll() {
	for _, l := range b.lanes {
		b.save(l)
	}
}
