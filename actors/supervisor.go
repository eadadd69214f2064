package actors

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/supervision"
	"github.com/sluicehq/sluice/transport"
)

// supervisor owns the HTTP/2 connection, the global limit's pauses, the ban
// breaker, the queue of buckets waiting for admission, and the bucket
// actors. Its state machine is fsm.Supervisor; its Receive is the only code
// that fires it.
type supervisor struct {
	sys     *System
	self    *actor.PID
	machine *fsm.Supervisor

	// conns are the live connections, at most Config.Connections: the
	// first is dialled at start, the others one after the other while
	// requests wait (unless a connection failed since), so one connection's death
	// ends only the requests it carried (the blast radius), not all.
	// Invariant: len(conns) > 0  <=>  machine is connected or global_limit;
	// sys.gate always holds the conns and hold last published (publish).
	conns   []pooled
	dialing bool // a dial is in flight (at most one at a time)
	// children maps a major-parameter string to its bucket actor.
	// Invariant: at most one actor per key; the supervisor is the only
	// sender of enqueueMsg.
	children map[string]*child
	peak     int // most children since children was last rebuilt (see forget)
	// windows are the two global windows, each with its own admission
	// queue (ring), pause and pacer: the children waiting for a window's
	// slots are in its ring, each at most once (child.waiting), served in
	// the order of their virtual deadline (see admit), so a hot bucket
	// never waits behind a thousand cold ones' backlog, nor they behind it
	// for ever; and neither window waits for the other.
	windows [numWindows]*windowAdmission

	closing error // set by closeMsg: new submits fail with it
	stopped bool  // set on Stopping: later messages are not acted on
	// failures counts connections in a row that failed: dials that failed
	// and connections that died young (see youngLife). It grows the
	// reconnection backoff. refused counts the last of them in a row that
	// showed the API refusing or out of reach: dials that failed, and
	// young deaths of connections the server never accepted
	// (transport.Conn.Accepted) or that ended in a GOAWAY. At
	// maxDialFailures the buckets waiting for a connection fail with an
	// *UnavailableError. A connection the server accepted and then dropped
	// before answering (a reset, a crash under load) shows the API
	// reachable: it grows the backoff, and the requests it carried are
	// resent within their own retry budgets, so nothing waits forever.
	failures    int
	refused     int
	redialArmed bool  // a redial timer is pending: submit does not dial
	lastErr     error // the last failed connection's error

	// breaker holds every request, exempt ones too (a Cloudflare ban is per
	// IP), then lets one probe through; probing is set while it is out.
	breaker *supervision.Breaker
	probing bool

	tbuf    traceBuf
	current any // the message being handled; still set after a panic (see Receive)
	timers  timers
	names   namer // bucket actors' names
}

// pooled is a live connection and when it came up.
type pooled struct {
	conn *transport.Conn
	upAt time.Time
}

type child struct {
	key       string
	window    Window // the global window its requests count on
	pid       *actor.PID
	forwarded uint64 // enqueueMsgs sent by the supervisor
	waiting   bool   // in ring
	want      int    // requests the bucket reported ready (while waiting)
	global    bool   // they need global slots
	deadline  time.Time
	first     uint64 // the id of the request its deadline came from: breaks ties
	index     int    // in its window's ring
	// soon: its queue waits for its own bucket window, which reopens at
	// soonAt; soonWant slots are kept back for it from the actors behind
	// soonDeadline (soonFirst) in line. Invariant: in its window's soon
	// set exactly while soonWant > 0, and never while waiting.
	soonAt       time.Time
	soonWant     int
	soonDeadline time.Time
	soonFirst    uint64
}

// gate is what the supervisor publishes for the bucket actors: the
// connection to send on and whether every request must ask it first. A
// fresh value is stored each time (never mutated); only the supervisor
// stores it.
type gate struct {
	conns []*transport.Conn // empty: no connection
	hold  bool              // a ban (or its probe) holds every request
	// turn is where the next pick starts looking (System.turn, shared by
	// every gate published): among connections carrying as few requests,
	// successive picks take turns.
	turn *atomic.Uint32
}

// pick returns the connection carrying the fewest requests, counting
// those picked and not yet sent, and Claims it (nil: none); among equally
// loaded ones, successive picks take turns. The request's worker Unclaims
// it as it hands the request over (System.work): requests dispatched
// together spread over the pool, so one reset ends fewer of a bucket's
// window. Taking turns keeps them spread when the machine is so busy that
// each request of a burst is answered before the next is picked (every
// connection then carries none, and the first would take them all).
func (g *gate) pick() *transport.Conn {
	var best *transport.Conn
	least := 0
	n := len(g.conns)
	if n == 0 {
		return nil
	}
	start := int(g.turn.Add(1) % uint32(n))
	for i := range n {
		c := g.conns[(start+i)%n]
		if l := c.Load(); best == nil || l < least {
			best, least = c, l
		}
	}
	if best != nil {
		best.Claim()
	}
	return best
}

// pathWeight is how many times more a bucket's remaining backlog (its
// queue at its own pace) counts than the time it has waited, when the
// admission queue orders buckets. The longest backlog bounds the whole
// load's completion; waiting time keeps short backlogs from starving when
// the global limit cannot serve everyone.
const pathWeight = 8

// pioneerFirst moves the virtual deadline of a bucket whose ready request
// is its pioneer (its limit not known yet) ahead of any known bucket's:
// the admission queue serves pioneers first, among themselves by their
// deadlines. A pioneer is one request, and its answer starts its bucket's
// windows and lets the rest of its queue pipeline; weighed by its queue at
// unknownPace instead, a bucket whose pioneer met a 502 or a lost
// connection while the others became known waited behind their whole
// first windows under a binding global limit, and finished a window later
// (scenario 14 of docs/comparison.md). The forecast does the same
// (admissionForecast).
const pioneerFirst = 1000 * time.Hour

// maxDialFailures is how many connections in a row may fail to reach the
// API (a dial that failed, or a connection that died young without being
// accepted, or in a GOAWAY) before the buckets waiting for a connection
// fail their queues with an *UnavailableError; every further such failure
// fails what waits again, until a connection is accepted or serves answers.
const maxDialFailures = 3

// youngLife is the age under which a connection that delivered no answer
// counts as a failed connection when it dies, if no connection answered
// anything for as long: a server that completes the handshake and closes,
// or sends GOAWAY before answering anything, must meet a growing backoff,
// not a reconnection storm; a connection reset while others answer is an
// ordinary fault, replaced at once.
const youngLife = 10 * time.Second

func newSupervisor(sys *System) actor.Actor {
	s := &supervisor{sys: sys, children: map[string]*child{},
		breaker: supervision.NewBreaker(sys.cfg.BanBackoff, ratelimit.MaxWait)}
	timers := [numWindows][2]timerKind{BotWindow: {timerGlobal, timerRetry}, IPWindow: {timerGlobalIP, timerRetryIP}}
	for w := range Window(numWindows) {
		a := &windowAdmission{w: w, g: sys.windows[w], timer: timers[w][0], retry: timers[w][1]}
		if n, per, ok := a.g.limit(); ok {
			// The pacer spreads the slots handed out from the ring
			// evenly over the window, so they free evenly too and a
			// bucket that joins is served within a slot's time, not at
			// the next burst (see pacer).
			a.pacer = pacer{burst: float64(n), every: per / time.Duration(n), tokens: float64(n), period: per}
		}
		a.machine = fsm.NewWindow(func(e fsm.WindowEvent, from, to fsm.WindowState) {
			sys.windowTransition(s, s.self, w, e.String(), from.String(), to.String())
		})
		s.windows[w] = a
	}
	s.machine = fsm.NewSupervisor(func(e fsm.SupervisorEvent, from, to fsm.SupervisorState) {
		sys.supState.Store(int64(to))
		sys.transition(s, s.self, "", e.String(), from.String(), to.String())
	})
	return s
}

// waiting returns how many children wait for admission, in both windows.
func (s *supervisor) waiting() int {
	n := 0
	for _, a := range s.windows {
		n += a.ring.Len()
	}
	return n
}

// paused reports whether a global 429 pauses any window: the supervisor is
// in global_limit while one is (once connected). Each window's machine
// leaves global_limit on its own timer.
func (s *supervisor) paused() bool {
	for _, a := range s.windows {
		if a.machine.Current() == fsm.WindowPaused {
			return true
		}
	}
	return false
}

func (s *supervisor) fire(e fsm.SupervisorEvent) {
	// A stale event (e.g. a timer for a state already left) fails with
	// fsm.ErrInvalidEvent and is harmless: it is not acted on.
	_ = s.machine.Fire(context.Background(), e)
}

func (s *supervisor) traceName() string         { return "supervisor" }
func (s *supervisor) traceState(any) string     { return s.machine.Current().String() }
func (s *supervisor) traceKey(any) string       { return "" }
func (s *supervisor) traceBuffer(any) *traceBuf { return &s.tbuf }

// Receive handles one message at a time. The supervisor runs under a
// guardian that resumes it after a panic (supervision.ResumeStrategy): the
// same instance goes on and its children are untouched; the message that
// failed is answered here, on the next message.
func (s *supervisor) Receive(ctx actor.Context) {
	if s.current != nil {
		s.recoverCrash(ctx)
	}
	msg := ctx.Message()
	s.current = msg
	if h := s.sys.crashHook; h != nil {
		h(msg)
	}
	s.receive(ctx)
	s.current = nil
}

// recoverCrash answers the calls of the message whose handling panicked.
func (s *supervisor) recoverCrash(ctx actor.Context) {
	m := s.current
	s.current = nil
	s.sys.log.Error("sluice: the supervisor crashed; resuming it with its connection and buckets",
		slog.String("message", messageName(m)))
	switch m := m.(type) {
	case *submitMsg:
		for _, c := range m.calls {
			c.Complete(nil, fmt.Errorf("%w: the supervisor failed while routing %s", ErrActorCrashed, c.Route.Redacted()))
		}
	case *wantMsg:
		// The bucket waits for an answer: let it look again.
		if ch := s.children[m.key]; ch != nil {
			ctx.Send(ch.pid, &grantMsg{})
		}
	}
}

func (s *supervisor) receive(ctx actor.Context) {
	if s.stopped {
		if m, ok := ctx.Message().(*dialedMsg); ok && m.conn != nil {
			m.conn.Close()
		}
		return
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.self = ctx.Self()
		s.timers = timers{sys: s.sys, pid: s.self}
		s.publish()
		s.dial()
	case *submitMsg:
		for _, c := range m.calls {
			s.submit(ctx, c)
		}
	case *wantMsg:
		s.want(ctx, m)
	case *soonMsg:
		s.soon(m)
	case *etaMsg:
		s.answerETA(ctx, m)
	case *freedMsg:
		s.windows[m.window].pacer.refund(m.cancelled)
		s.admit(ctx)
	case *probeDoneMsg:
		s.probeDone(ctx, m)
	case *dialedMsg:
		s.dialed(ctx, m)
	case *connDownMsg:
		s.connDown(ctx, m)
	case *redialMsg:
		if s.timers.current(timerRedial, m.gen) {
			s.redialArmed = false
			if s.demand() {
				s.dial()
			}
		}
	case *globalHitMsg:
		s.globalHit(m.window, m.until)
	case *sharedWakeMsg:
		if m.all {
			for _, ch := range s.children {
				ctx.Send(ch.pid, m)
			}
		} else if ch := s.children[m.major]; ch != nil {
			ctx.Send(ch.pid, m)
		}
	case *banMsg:
		// A Cloudflare ban carries no Retry-After; the breaker's own
		// backoff decides when to probe.
		now := s.sys.now()
		if s.breaker.State(now) != supervision.Open {
			s.sys.log.Error("sluice: the API answered like a Cloudflare ban; holding every request, then probing")
		}
		s.breaker.Trip(now)
		s.holdForBan(now)
	case *globalClearMsg:
		a := s.windows[m.window]
		if !s.timers.current(a.timer, m.gen) {
			return
		}
		_ = a.machine.Fire(context.Background(), fsm.WindowClear) // stale: already open
		if s.machine.Current() == fsm.GlobalLimit && !s.paused() {
			s.fire(fsm.GlobalClear)
		}
		s.admit(ctx)
	case *globalRetryMsg:
		if s.timers.current(s.windows[m.window].retry, m.gen) {
			s.admit(ctx)
		}
	case *idleMsg:
		s.idle(ctx, m)
	case *closeMsg:
		s.close(ctx, m.err)
	case *actor.Terminated:
		// A child stopped. After an idle stop it is gone from the map
		// already; otherwise it is removed here so the next request for
		// its bucket spawns a fresh actor.
		s.sys.buckets.Add(-1)
		for key, ch := range s.children {
			if ch.pid.Equal(m.Who) {
				s.forget(key)
				s.unring(ch)
				s.windows[ch.window].unsoon(ch)
				break
			}
		}
	case *snapshotMsg:
		now := s.sys.now()
		snap := supervisorSnapshot{snap: Snapshot{
			Time: now, State: s.machine.Current().String(), Breaker: s.breaker.State(now).String(),
			Waiting: s.waiting(), Running: int(s.sys.running.Load()),
		}}
		for _, a := range s.windows {
			for _, ch := range a.ring {
				snap.snap.Pending += ch.want
			}
			n, _, _ := a.g.limit()
			snap.snap.Windows = append(snap.snap.Windows, WindowSnapshot{Name: a.w.String(), State: a.machine.Current().String(),
				Limit: n, Used: a.g.used(now), PausedFor: max(0, a.until.Sub(now))})
		}
		snap.snap.GlobalUsed = snap.snap.Windows[BotWindow].Used
		for w := range snap.ring {
			snap.ring[w] = s.ringOf(Window(w))
		}
		for _, ch := range s.children {
			snap.buckets = append(snap.buckets, ch.pid)
		}
		m.reply <- snap
	case *actor.Stopping:
		s.stopped = true
		s.timers.stopAll()
		s.clearRing()
		for _, p := range s.conns {
			p.conn.Close()
		}
		s.conns = nil
		s.publish()
	}
}

// connDown removes a dead connection from the pool. A connection that died
// young counts as a failed one (growing backoff); otherwise it is replaced
// at once if requests wait.
func (s *supervisor) connDown(ctx actor.Context, m *connDownMsg) {
	i := slices.IndexFunc(s.conns, func(p pooled) bool { return p.conn == m.conn })
	m.conn.Close()
	if i < 0 {
		return // already gone
	}
	p := s.conns[i]
	s.conns = slices.Delete(s.conns, i, i+1)
	s.sys.log.Warn("sluice: connection died", slog.String("reason", errString(m.err)), slog.Int("left", len(s.conns)))
	if len(s.conns) == 0 {
		s.fire(fsm.Down)
	}
	s.publish()
	now := s.sys.now()
	silent := now.Sub(time.Unix(0, s.sys.lastAnswer.Load())) >= youngLife
	if p.conn.Answered() == 0 && now.Sub(p.upAt) < youngLife && silent {
		s.failed(ctx, m.err, !p.conn.Accepted() || errors.Is(m.err, transport.ErrGoAway))
		return
	}
	s.failures, s.refused = 0, 0
	if s.demand() {
		s.dial()
	}
}

// publish stores the gate the bucket actors read.
func (s *supervisor) publish() {
	hold := s.closing != nil || s.probing || s.breaker.State(s.sys.now()) != supervision.Closed
	g := &gate{hold: hold, conns: make([]*transport.Conn, len(s.conns)), turn: &s.sys.turn}
	for i, p := range s.conns {
		g.conns[i] = p.conn
	}
	s.sys.gate.Store(g)
}

// submit routes c to the bucket actor of its major parameters, spawning it
// if needed. Every bucket Discord can share lives in one actor: buckets
// are hash + major parameters, so routes that may share one always share
// their major parameters.
func (s *supervisor) submit(ctx actor.Context, c *Call) {
	if s.closing != nil {
		c.Complete(nil, s.closing)
		return
	}
	if c.Finished() {
		return
	}
	key := c.Route.Major
	ch := s.children[key]
	var bind *bucket
	if ch == nil {
		pid, err := ctx.SpawnNamed(s.sys.bucketProps, s.names.next(ctx.Self().Id))
		if err != nil {
			c.Complete(nil, err)
			return
		}
		// The actor gets its bucket with this first message (bucketCell).
		bind = newBucket(s.sys, key, c.Route.PerToken, c.window)
		ch = &child{key: key, window: c.window, pid: pid}
		s.children[key] = ch
		s.peak = max(s.peak, len(s.children))
		s.sys.buckets.Add(1)
	}
	ch.forwarded++
	ctx.Send(ch.pid, &enqueueMsg{calls: []*Call{c}, bind: bind})
	s.dial() // connect on demand, and refill the pool
}

// want queues a bucket for admission (once; its latest report wins) and
// serves the queue.
func (s *supervisor) want(ctx actor.Context, m *wantMsg) {
	ch := s.children[m.key]
	if ch == nil || s.closing != nil {
		return // stopped meanwhile, or closing: drainMsg fails its queue
	}
	if len(s.conns) == 0 && s.redialArmed && s.refused >= maxDialFailures {
		// Connections keep failing and the next try is a backoff away:
		// fail at once rather than wait behind it.
		ctx.Send(ch.pid, &grantMsg{err: &UnavailableError{Failures: s.refused, Err: s.lastErr}})
		return
	}
	ch.want, ch.global = m.want, m.global
	a := s.windows[ch.window]
	a.unsoon(ch) // ready now
	a.pacer.long(s.sys.now(), m.path)
	deadline := virtualDeadline(s.sys.now(), m.since, m.path, m.pioneer)

	if !ch.waiting {
		ch.waiting = true
		ch.deadline, ch.first = deadline, m.first
		heap.Push(&a.ring, ch)
	} else if deadline.Before(ch.deadline) {
		ch.deadline, ch.first = deadline, m.first
		heap.Fix(&a.ring, ch.index)
	}
	a.store()
	s.dial() // refill the pool while requests wait
	s.admit(ctx)
}

// virtualDeadline is a bucket's place in its window's admission queue:
// when the earliest of its ready requests was submitted (since; now if
// unknown or later), less pathWeight times how long its queue still
// needs at its own pace (path, in whole windows, lane.backlog), and ahead
// of every known bucket for a pioneer (pioneerFirst); ties go to that
// request's id. Among buckets with equal backlogs the window serves
// requests in the order they were submitted, not in the order their
// actors happened to ask. The bucket whose backlog is longest (a hot
// channel) goes first, so its bucket windows are not wasted while cold
// channels, each with little to send, take the rest of the global window;
// a bucket that keeps waiting gains on later ones, so none starves. The
// global part of an ETA replays this rule (admissionForecast): a change
// here is a change there.
func virtualDeadline(now, since time.Time, path time.Duration, pioneer bool) time.Time {
	base := now
	if !since.IsZero() && since.Before(base) {
		base = since
	}
	deadline := base.Add(-pathWeight * path)
	if pioneer {
		deadline = deadline.Add(-pioneerFirst)
	}
	return deadline
}

// soon keeps slots back for a bucket whose queue waits for its own window,
// which reopens within the global window's period (soonMsg), from the
// actors behind it in line (admitWindow). Ignored while it is in line
// already: its want stands.
func (s *supervisor) soon(m *soonMsg) {
	ch := s.children[m.key]
	if ch == nil || ch.waiting || s.closing != nil || m.want <= 0 {
		return
	}
	a := s.windows[ch.window]
	ch.soonAt, ch.soonWant, ch.soonFirst = m.at, m.want, m.first
	ch.soonDeadline = virtualDeadline(s.sys.now(), m.since, m.path, false)
	if a.soon == nil {
		a.soon = map[*child]struct{}{}
	}
	a.soon[ch] = struct{}{}
}

// admit serves the buckets waiting for admission, in each window earliest
// virtual deadline first, while the connection, the ban breaker and the
// window allow; each gets as many global slots as it has requests ready
// (at most its bucket's remaining count, so no bucket takes more than its
// own limit allows), in one grantMsg.
func (s *supervisor) admit(ctx actor.Context) {
	if s.waiting() == 0 || len(s.conns) == 0 || s.closing != nil {
		return
	}
	now := s.sys.now()
	if s.breaker.State(now) != supervision.Closed {
		ok, probe, _ := s.breaker.Allow(now)
		if !ok {
			return // the globalClear timer (or the probe's answer) admits again
		}
		if probe {
			s.admitProbe(ctx, now)
			return
		}
	}
	for _, a := range s.windows {
		s.admitWindow(ctx, a, now)
	}
}

// admitProbe lets the ban breaker's one probe through: the earliest
// waiting bucket of either window.
func (s *supervisor) admitProbe(ctx actor.Context, now time.Time) {
	var a *windowAdmission
	for _, w := range s.windows {
		if w.ring.Len() > 0 && (a == nil || w.ring[0].deadline.Before(a.ring[0].deadline)) {
			a = w
		}
	}
	ch := a.ring[0]
	slots := 0
	if ch.global {
		if ok, wait := a.g.limiter.Reserve(now); !ok {
			s.breaker.Abandon()
			s.retryAfter(a, wait)
			return
		}
		slots = 1
	}
	s.unring(ch)
	s.probing = true
	s.publish()
	ctx.Send(ch.pid, &grantMsg{slots: slots, probe: true})
}

// retryAfter arms a's timer that admits again when its next slot frees.
func (s *supervisor) retryAfter(a *windowAdmission, wait time.Duration) {
	w := a.w
	s.timers.after(a.retry, wait, func(gen uint64) any { return &globalRetryMsg{gen: gen, window: w} })
}

// admitWindow serves a's ring.
func (s *supervisor) admitWindow(ctx actor.Context, a *windowAdmission, now time.Time) {
	paused := a.machine.Current() == fsm.WindowPaused // globalClear admits again
	var held []*child                                 // waiting for the window
	for a.ring.Len() > 0 {
		if paused {
			s.admitExempt(ctx, a)
			break
		}
		ch := heap.Pop(&a.ring).(*child)
		if !ch.global { // exempt: needs no global slot
			ch.waiting = false
			ctx.Send(ch.pid, &grantMsg{})
			continue
		}
		kept := a.keptAhead(now, ch)
		slots := 0
		for !paused && slots < ch.want {
			if kept > 0 && a.g.limitOf()-a.g.used(now) <= kept {
				// The slots left are kept for buckets ahead of it in
				// line that reopen within the period: until they ask,
				// or their keep lapses.
				paused = true
				s.retryAfter(a, a.keepLapses(now))
				break
			}
			if wait := a.pacer.take(now); wait > 0 {
				paused = true
				s.retryAfter(a, wait)
				break
			}
			ok, wait := a.g.limiter.Reserve(now)
			if !ok {
				// The window is full: the pacer's token buys nothing.
				// Kept spent, every admission tried while the window
				// is full (each answer and each bucket's ask) took one,
				// and the window reopened with a fraction of its slots
				// to hand out at once.
				a.pacer.refund(1)
				paused = true
				s.retryAfter(a, wait)
				break
			}
			slots++
		}
		if slots > 0 && slots < ch.want {
			// Served in part: it keeps its place in line for the rest,
			// which goes as the window's next slots free (asking again
			// would put it behind every bucket ready since).
			ch.want -= slots
			ctx.Send(ch.pid, &grantMsg{slots: slots, more: true})
			held = append(held, ch)
			continue
		}
		if slots > 0 {
			ch.waiting = false
			ctx.Send(ch.pid, &grantMsg{slots: slots})
			continue
		}
		held = append(held, ch)
	}
	for _, ch := range held {
		heap.Push(&a.ring, ch)
	}
	a.store()
}

// admitExempt answers the buckets waiting in a's ring that need no global
// slot (interaction callbacks) while the window is paused.
func (s *supervisor) admitExempt(ctx actor.Context, a *windowAdmission) {
	var exempt []*child
	for _, ch := range a.ring {
		if !ch.global {
			exempt = append(exempt, ch)
		}
	}
	for _, ch := range exempt {
		s.unring(ch)
		ctx.Send(ch.pid, &grantMsg{})
	}
}

// ringOf is every waiting actor's place in w's admission queue, for the
// global forecasts (nil for an empty queue). O(the queue).
func (s *supervisor) ringOf(w Window) map[string]ringKey {
	a := s.windows[w]
	if len(a.ring) == 0 {
		return nil
	}
	out := make(map[string]ringKey, len(a.ring))
	for _, ch := range a.ring {
		out[ch.key] = ringKey{deadline: ch.deadline.UnixNano(), first: ch.first}
	}
	return out
}

// unring removes ch from its window's admission queue.
func (s *supervisor) unring(ch *child) {
	if !ch.waiting {
		return
	}
	ch.waiting = false
	a := s.windows[ch.window]
	heap.Remove(&a.ring, ch.index)
	a.store()
}

// clearRing empties both admission queues.
func (s *supervisor) clearRing() {
	for _, a := range s.windows {
		for ch := range a.soon {
			a.unsoon(ch)
		}
		for _, ch := range a.ring {
			ch.waiting = false
		}
		a.ring = nil
		a.store()
	}
}

// pacer is a token bucket with the global limit's rate and burst: the
// admission queue hands out at most its tokens. Left alone, a sliding
// window that was filled in one burst frees in one burst a period later,
// and a bucket joining the queue just after waits for the next one (a hot
// channel then gets one bucket window per period); paced, the frees
// spread out. Its burst lets a limiter idle for a period use the whole
// window at once, so the long-run rate and the burst are the window's own.
// It only paces while some waiting bucket has a backlog longer than the
// window's period (and for two periods after): only such a bucket needs
// slots in every period; otherwise smoothing would only add the lag
// between its phase and the window's. The zero value (no Limit known) never
// waits.
type pacer struct {
	burst  float64
	every  time.Duration // one token per every
	tokens float64
	last   time.Time
	period time.Duration
	until  time.Time // pacing on before it
}

// long notes a waiting bucket's backlog at now: one longer than a period
// turns pacing on.
func (p *pacer) long(now time.Time, backlog time.Duration) {
	if p.every > 0 && backlog > p.period {
		p.until = later(p.until, now.Add(2*p.period))
	}
}

// refund returns n tokens spent on slots that were cancelled unused: the
// server counted nothing for them.
func (p *pacer) refund(n int) {
	if p.every > 0 && n > 0 {
		p.tokens = min(p.burst, p.tokens+float64(n))
	}
}

// take spends a token at now, or returns how long until one accrues.
func (p *pacer) take(now time.Time) time.Duration {
	if p.every <= 0 {
		return 0
	}
	if !p.last.IsZero() && now.After(p.last) {
		p.tokens = min(p.burst, p.tokens+float64(now.Sub(p.last))/float64(p.every))
	}
	p.last = later(p.last, now)
	if !now.Before(p.until) {
		p.tokens = max(0, p.tokens-1) // not pacing: still counted, never waits
		return 0
	}
	if p.tokens < 1 {
		return max(time.Microsecond, time.Duration((1-p.tokens)*float64(p.every)))
	}
	p.tokens--
	return 0
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// admissionQueue is a min-heap of waiting children by virtual deadline
// (container/heap), ties in arrival order.
type admissionQueue []*child

func (q admissionQueue) Len() int { return len(q) }
func (q admissionQueue) Less(i, j int) bool {
	if !q[i].deadline.Equal(q[j].deadline) {
		return q[i].deadline.Before(q[j].deadline)
	}
	return q[i].first < q[j].first
}
func (q admissionQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *admissionQueue) Push(x any) {
	ch := x.(*child)
	ch.index = len(*q)
	*q = append(*q, ch)
}
func (q *admissionQueue) Pop() any {
	old := *q
	ch := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	ch.index = -1
	return ch
}

func (s *supervisor) probeDone(ctx actor.Context, m *probeDoneMsg) {
	if !s.probing {
		return
	}
	s.probing = false
	now := s.sys.now()
	switch {
	case m.abandoned || m.status == 0:
		s.breaker.Abandon() // no answer: says nothing about the ban
	case m.banned:
		s.breaker.Probed(now, true)
		s.holdForBan(now)
	default:
		s.sys.log.Info("sluice: the ban probe passed; resuming")
		s.breaker.Probed(now, false)
	}
	s.publish()
	s.admit(ctx)
}

// demand reports whether any request waits for an outcome: without one,
// a lost connection is not replaced until a request comes.
func (s *supervisor) demand() bool { return s.sys.pending.Load() > 0 }

// callsPerConn is how many requests awaiting an outcome (queued, waiting
// for admission or on the wire) each connection of the pool serves at most
// while the pool can grow: one more beyond that dials another, up to
// Config.Connections. A reset ends every
// request in flight on its connection: with 4 connections for the bursts of
// 50 requests a global limit of 50/s lets through, one drop ended a dozen
// of them, and their channels' next windows with them; a pool that grows
// with the load keeps that to a few (docs/failure-modes.md has the
// figures). A bot that sends a request now and then keeps one connection.
// The count is the callers' (System.pending), exact when each request is
// submitted, not the buckets' view of what they are about to send.
const callsPerConn = 4

// crowded reports whether the open connections serve more than
// callsPerConn requests awaiting an outcome each.
func (s *supervisor) crowded() bool {
	return s.sys.pending.Load() > int64(callsPerConn*len(s.conns))
}

// dial opens a connection: the first one (state disconnected -> connecting),
// or one more for the pool while connected, requests wait, none failed
// since and the open ones are crowded (callsPerConn). One dial at a time;
// none while a backoff runs.
func (s *supervisor) dial() {
	if s.dialing || s.redialArmed || s.closing != nil {
		return
	}
	switch s.machine.Current() {
	case fsm.Disconnected:
		s.fire(fsm.Dial)
	case fsm.Connected, fsm.GlobalLimit:
		if len(s.conns) >= s.sys.cfg.connections() || s.failures > 0 || !s.crowded() { // crowded implies demand
			return
		}
	default:
		return
	}
	s.dialing = true
	s.sys.goWork(func() {
		var conn *transport.Conn
		err := fmt.Errorf("%w: dialing panicked", ErrInternal)
		defer func() {
			if r := recover(); r != nil {
				s.sys.log.Error("sluice: panic while dialing", slog.Any("panic", r))
			}
			s.sys.root.Send(s.self, &dialedMsg{conn: conn, err: err})
		}()
		ctx, cancel := context.WithTimeout(s.sys.hardCtx, s.sys.cfg.dialTimeout())
		defer cancel()
		conn, err = transport.Dial(ctx, s.sys.cfg.BaseURL, s.sys.cfg.Transport)
	})
}

// failed counts a failed connection (a dial, or one that died young;
// refused: it showed the API refusing or out of reach, see
// supervisor.refused), fails what waits for a connection once too many
// in a row refused, and arms the redial after a backoff that grows with
// the count of failures.
func (s *supervisor) failed(ctx actor.Context, err error, refused bool) {
	s.failures++
	if refused {
		s.refused++
	} else {
		s.refused = 0
	}
	s.lastErr = err
	s.sys.log.Warn("sluice: connecting failed", slog.Int("failures", s.failures), slog.String("error", errString(err)))
	if s.refused >= maxDialFailures && len(s.conns) == 0 {
		// Nothing can be sent: fail what waits rather than hang it.
		uerr := &UnavailableError{Failures: s.refused, Err: err}
		for _, a := range s.windows {
			for _, ch := range a.ring {
				ctx.Send(ch.pid, &grantMsg{err: uerr})
			}
		}
		s.clearRing()
	}
	delay := s.sys.cfg.Backoff.Delay(s.failures-1, rand.Float64)
	s.redialArmed = true
	s.timers.after(timerRedial, delay, func(gen uint64) any { return &redialMsg{gen} })
}

func (s *supervisor) dialed(ctx actor.Context, m *dialedMsg) {
	s.dialing = false
	if m.err != nil {
		if len(s.conns) == 0 {
			s.fire(fsm.DialFailed)
		}
		s.failed(ctx, m.err, true)
		return
	}
	if s.sys.hardCtx.Err() != nil || s.closing != nil {
		m.conn.Close()
		return
	}
	s.conns = append(s.conns, pooled{conn: m.conn, upAt: s.sys.now()})
	// The state follows the pool: an extra connection dialled before the
	// pool emptied may be the one that brings it back.
	if st := s.machine.Current(); st == fsm.Disconnected || st == fsm.Connecting {
		if st == fsm.Disconnected {
			s.fire(fsm.Dial)
		}
		s.fire(fsm.Up)
		if s.paused() {
			s.fire(fsm.GlobalHit)
		}
	}
	s.publish()
	s.dial() // the next connection of the pool, if it is due
	conn := m.conn
	s.sys.goWork(func() {
		select {
		case <-conn.Done():
			s.sys.root.Send(s.self, &connDownMsg{conn: conn, err: conn.Err()})
		case <-s.sys.hardCtx.Done():
		}
	})
	s.admit(ctx)
}

// globalHit pauses every non-exempt request of window w until then: a
// global 429 counted on it. Requests wait in their buckets' queues, not
// here; the other window goes on.
func (s *supervisor) globalHit(w Window, until time.Time) {
	now := s.sys.now()
	a := s.windows[w]
	if !until.After(a.until) {
		return // already paused at least that long
	}
	a.until = until
	a.g.limiter.Block(until)
	_ = a.machine.Fire(context.Background(), fsm.WindowHit) // allowed in both states
	switch s.machine.Current() {
	case fsm.Connected, fsm.GlobalLimit:
		s.fire(fsm.GlobalHit)
	}
	s.timers.after(a.timer, until.Sub(now), func(gen uint64) any { return &globalClearMsg{gen: gen, window: w} })
}

// holdForBan publishes the hold and arms the timers that admit again once
// the breaker's backoff ends (pausing both windows for as long: a ban is
// per IP and holds every request).
func (s *supervisor) holdForBan(now time.Time) {
	s.publish()
	if _, _, wait := s.breaker.Allow(now); wait > 0 {
		for w := range Window(numWindows) {
			s.globalHit(w, now.Add(wait))
		}
	}
}

func (s *supervisor) idle(ctx actor.Context, m *idleMsg) {
	from := ctx.Sender()
	ch := s.children[m.key]
	if ch == nil || !ch.pid.Equal(from) {
		ctx.Poison(from) // not ours any more: nothing else is sent to it
		return
	}
	if ch.forwarded != m.received {
		return // an enqueue is on its way; the bucket will report again
	}
	s.forget(m.key)
	s.unring(ch)
	s.windows[ch.window].unsoon(ch)
	ctx.Poison(from)
}

// forget removes a child from the map, and rebuilds the map once it has
// fallen to a quarter of its peak: Go maps never shrink, and a bot that
// touched 50,000 channels once would keep their buckets for good.
func (s *supervisor) forget(key string) {
	delete(s.children, key)
	if s.peak >= 1024 && len(s.children) < s.peak/4 {
		m := make(map[string]*child, len(s.children))
		for k, v := range s.children {
			m[k] = v
		}
		s.children, s.peak = m, len(m)
	}
}

func (s *supervisor) close(ctx actor.Context, err error) {
	if s.closing != nil {
		return
	}
	s.closing = err
	s.clearRing()
	s.publish()
	for _, ch := range s.children {
		ctx.Send(ch.pid, &drainMsg{err: err})
	}
}

func errString(err error) string {
	if err == nil {
		return "closed"
	}
	return err.Error()
}
