package actors

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/internal/actorhost"
	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/connpool"
	"github.com/sluicehq/sluice/internal/failure"
	"github.com/sluicehq/sluice/internal/forecast"
	"github.com/sluicehq/sluice/internal/tracing"
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

	// pool is the connections' policy (connpool.State): the live
	// connections, at most Config.Connections, the dial in flight, the
	// failed connections in a row and their backoff. The supervisor applies
	// its decisions: it dials, closes, arms the redial timer and fails
	// what waits.
	// Invariant: pool.Len() > 0  <=>  machine is connected or global_limit;
	// sys.gate always holds the pool's conns and hold last published
	// (publish).
	pool connpool.State
	// children maps a major-parameter string to its bucket actor.
	// Invariant: at most one actor per key; the supervisor is the only
	// sender of enqueueMsg.
	children map[string]*child
	peak     int // most children since children was last rebuilt (see forget)
	// windows are the two global windows, each with its own line
	// (admission.Queue) and pause: the children waiting for a window's
	// slots are in its line, each at most once, served in the order of
	// their virtual deadline (admission.Deadline), so a hot bucket
	// never waits behind a thousand cold ones' backlog, nor they behind it
	// for ever; and neither window waits for the other.
	windows [numWindows]*windowAdmission

	closing error // set by closeMsg: new submits fail with it
	stopped bool  // set on Stopping: later messages are not acted on

	// breaker holds every request, exempt ones too (a Cloudflare ban is per
	// IP), then lets one probe through; probing is set while it is out.
	breaker *supervision.Breaker
	probing bool

	tbuf    tracing.Buffer
	current any // the message being handled; still set after a panic (see Receive)
	timers  timers
	names   actorhost.Namer // bucket actors' names
	// timerSlots are timers' slots: every kind.
	timerSlots [numTimers]timerSlot
}

type child struct {
	key       string
	window    Window // the global window its requests count on
	pid       *actor.PID
	forwarded uint64 // enqueueMsgs sent by the supervisor
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

// pick claims the least loaded live connection (transport.Pick; nil:
// none). The request's worker Unclaims it as it hands the request over
// (attempt.Runner.Run).
func (g *gate) pick() *transport.Conn { return transport.Pick(g.conns, g.turn) }

// live reports whether any of g's connections has not died. The
// supervisor removes a dead connection from the gate when its connDownMsg
// comes, which may be a while behind other messages.
func (g *gate) live() bool { return transport.AnyAlive(g.conns) }

func newSupervisor(sys *System) actor.Actor {
	s := &supervisor{sys: sys, children: map[string]*child{},
		breaker: supervision.NewBreaker(sys.cfg.BanBackoff, ratelimit.MaxWait)}
	timers := [numWindows][2]timerKind{BotWindow: {timerGlobal, timerRetry}, IPWindow: {timerGlobalIP, timerRetryIP}}
	for w := range Window(numWindows) {
		n, per, _ := sys.windows[w].Limit()
		a := &windowAdmission{w: w, g: sys.windows[w], q: admission.New[*child](n, per), timer: timers[w][0], retry: timers[w][1]}
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
		n += a.q.Len()
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

func (s *supervisor) TraceName() string               { return "supervisor" }
func (s *supervisor) TraceState(any) string           { return s.machine.Current().String() }
func (s *supervisor) TraceKey(any) string             { return "" }
func (s *supervisor) TraceBuffer(any) *tracing.Buffer { return &s.tbuf }

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
		m.call.Complete(nil, fmt.Errorf("%w: the supervisor failed while routing %s", failure.ErrActorCrashed, m.call.Route.Redacted()))
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
		s.timers = timers{sys: s.sys, pid: s.self, slots: s.timerSlots[:]}
		s.publish()
		s.dial()
	case *submitMsg:
		s.submit(ctx, m.call)
	case *wantMsg:
		s.want(ctx, m)
	case *soonMsg:
		s.soon(m)
		if m.keep.Want <= 0 {
			s.admit(ctx) // the slots it kept may go to the line now
		}
	case *etaMsg:
		s.answerETA(ctx, m)
	case *freedMsg:
		s.windows[m.window].q.Refund(m.cancelled)
		s.admit(ctx)
	case *probeDoneMsg:
		s.probeDone(ctx, m)
	case *dialedMsg:
		s.dialed(ctx, m)
	case *connDownMsg:
		s.connDown(ctx, m)
	case *redialMsg:
		if s.timers.current(timerRedial, m.gen) {
			s.pool.BackoffEnded()
			if s.pool.Demand(s.sys.pending.Load()) {
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
			snap.snap.Pending += a.q.Pending()
			n, _, _ := a.g.Limit()
			snap.snap.Windows = append(snap.snap.Windows, WindowSnapshot{Name: a.w.String(), State: a.machine.Current().String(),
				Limit: n, Used: a.g.Count(now), PausedFor: max(0, a.until.Sub(now))})
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
		for _, c := range s.pool.Clear() {
			c.Close()
		}
		s.publish()
	}
}

// connDown removes a dead connection from the pool. A connection that died
// young counts as a failed one (growing backoff); otherwise it is replaced
// at once if requests wait (connpool.State.Died has the rules).
func (s *supervisor) connDown(ctx actor.Context, m *connDownMsg) {
	upAt, ok := s.pool.Remove(m.conn)
	m.conn.Close()
	if !ok {
		return // already gone
	}
	s.sys.log.Warn("sluice: connection died", slog.String("reason", errString(m.err)), slog.Int("left", s.pool.Len()))
	if s.pool.Len() == 0 {
		s.fire(fsm.Down)
	}
	s.publish()
	now, last := s.sys.now(), time.Unix(0, s.sys.lastAnswer.Load())
	d := connpool.Death{UpAt: upAt, Answered: m.conn.Answered(), Accepted: m.conn.Accepted(), Err: m.err}
	if failed, refused := s.pool.Died(d, now, last); failed {
		s.failed(ctx, m.err, refused)
		return
	}
	if s.pool.Demand(s.sys.pending.Load()) {
		s.dial()
	}
}

// publish stores the gate the bucket actors read.
func (s *supervisor) publish() {
	hold := s.closing != nil || s.probing || s.breaker.State(s.sys.now()) != supervision.Closed
	s.sys.gate.Store(&gate{hold: hold, conns: s.pool.Conns(), turn: &s.sys.turn})
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
		pid, err := ctx.SpawnNamed(s.sys.bucketProps, s.names.Next(ctx.Self().Id))
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
	ctx.Send(ch.pid, &enqueueMsg{call: c, bind: bind})
	s.dial() // connect on demand, and refill the pool
}

// want puts a bucket in its window's line (once; its latest report wins)
// and serves the line (admission.Queue.Want).
func (s *supervisor) want(ctx actor.Context, m *wantMsg) {
	ch := s.children[m.key]
	if ch == nil || s.closing != nil {
		return // stopped meanwhile, or closing: drainMsg fails its queue
	}
	if n, last, ok := s.pool.Unavailable(); ok {
		// Connections keep failing and the next try is a backoff away:
		// fail at once rather than wait behind it.
		ctx.Send(ch.pid, &grantMsg{err: &failure.UnavailableError{Failures: n, Err: last}})
		return
	}
	a := s.windows[ch.window]
	a.q.Want(s.sys.now(), ch, m.ask)
	a.store()
	s.dial() // refill the pool while requests wait
	s.admit(ctx)
}

// soon keeps slots back for a bucket whose queue waits for its own window,
// which reopens within the global window's period (soonMsg), from the
// actors behind it in line (admission.Queue.Soon).
func (s *supervisor) soon(m *soonMsg) {
	if ch := s.children[m.key]; ch != nil && s.closing == nil {
		a := s.windows[ch.window]
		a.q.Soon(s.sys.now(), ch, m.keep)
		a.store()
	}
}

// admit serves the buckets waiting for admission, in each window by the
// rule of admission.Queue.Serve, while the connection, the ban breaker and
// the window allow: each gets as many global slots as it has requests
// ready (at most its bucket's remaining count, so no bucket takes more
// than its own limit allows), in one grantMsg.
func (s *supervisor) admit(ctx actor.Context) {
	if s.waiting() == 0 || s.pool.Len() == 0 || s.closing != nil {
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
		grants, retry, again := a.q.Serve(now, a.g, a.machine.Current() == fsm.WindowPaused)
		a.store()
		for _, g := range grants {
			ctx.Send(g.Key.pid, &grantMsg{slots: g.Slots, more: g.More})
		}
		if again {
			s.retryAfter(a, retry)
		}
	}
}

// admitProbe lets the ban breaker's one probe through: the earliest
// waiting bucket of either window.
func (s *supervisor) admitProbe(ctx actor.Context, now time.Time) {
	var a *windowAdmission
	var ch *child
	var first admission.Place
	var global bool
	for _, w := range s.windows {
		if k, p, g, ok := w.q.Head(); ok && (a == nil || p.Before(first)) {
			a, ch, first, global = w, k, p, g
		}
	}
	slots := 0
	if global {
		if ok, wait := a.g.Limiter.Reserve(now); !ok {
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

// ringOf is w's admission queue for the global forecasts: every waiting
// actor's place (nil for an empty queue) and the share. O(the queue).
func (s *supervisor) ringOf(w Window) forecast.Line {
	q := s.windows[w].q
	line := forecast.Line{Share: q.Share()}
	places := q.Places()
	if places == nil {
		return line
	}
	line.Places = make(map[string]admission.Place, len(places))
	for ch, p := range places {
		line.Places[ch.key] = p
	}
	return line
}

// unring takes ch out of its window's line and drops its keep.
func (s *supervisor) unring(ch *child) {
	a := s.windows[ch.window]
	a.q.Remove(ch)
	a.store()
}

// clearRing empties both lines and returns the children that were in
// them.
func (s *supervisor) clearRing() []*child {
	var out []*child
	for _, a := range s.windows {
		out = append(out, a.q.Clear()...)
		a.store()
	}
	return out
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
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

// dial opens a connection: the first one (state disconnected -> connecting),
// or one more for the pool while connected, requests wait, none failed
// since and the open ones are crowded (connpool.CallsPerConn), up to
// Config.Connections. One dial at a time; none while a backoff runs
// (connpool.State.Dial decides).
func (s *supervisor) dial() {
	if s.closing != nil {
		return
	}
	st := s.machine.Current()
	if st != fsm.Disconnected && st != fsm.Connected && st != fsm.GlobalLimit {
		return
	}
	if !s.pool.Dial(st == fsm.Disconnected, s.sys.pending.Load(), s.sys.cfg.connections()) {
		return
	}
	if st == fsm.Disconnected {
		s.fire(fsm.Dial)
	}
	s.sys.workers.Go(job{f: func() {
		var conn *transport.Conn
		err := fmt.Errorf("%w: dialing panicked", failure.ErrInternal)
		defer func() {
			if r := recover(); r != nil {
				s.sys.log.Error("sluice: panic while dialing", slog.Any("panic", r))
			}
			s.sys.root.Send(s.self, &dialedMsg{conn: conn, err: err})
		}()
		ctx, cancel := context.WithTimeout(s.sys.hardCtx, s.sys.cfg.dialTimeout())
		defer cancel()
		conn, err = transport.Dial(ctx, s.sys.cfg.BaseURL, s.sys.cfg.Transport)
	}})
}

// failed counts a failed connection (a dial, or one that died young;
// refused: it showed the API refusing or out of reach, see
// connpool.State), fails what waits for a connection once too many
// in a row refused (connpool.State.Unavailable), with an
// *UnavailableError, and arms the redial after a backoff that grows with
// the count of failures.
func (s *supervisor) failed(ctx actor.Context, err error, refused bool) {
	attempt := s.pool.Failed(err, refused)
	s.sys.log.Warn("sluice: connecting failed", slog.Int("failures", attempt+1), slog.String("error", errString(err)))
	if n, last, ok := s.pool.Unavailable(); ok {
		// Nothing can be sent: fail what waits rather than hang it.
		uerr := &failure.UnavailableError{Failures: n, Err: last}
		for _, ch := range s.clearRing() {
			ctx.Send(ch.pid, &grantMsg{err: uerr})
		}
	}
	delay := s.sys.cfg.Backoff.Delay(attempt, rand.Float64)
	s.timers.after(timerRedial, delay, func(gen uint64) any { return &redialMsg{gen} })
}

func (s *supervisor) dialed(ctx actor.Context, m *dialedMsg) {
	s.pool.Dialed()
	if m.err != nil {
		if s.pool.Len() == 0 {
			s.fire(fsm.DialFailed)
		}
		s.failed(ctx, m.err, true)
		return
	}
	if s.sys.hardCtx.Err() != nil || s.closing != nil {
		m.conn.Close()
		return
	}
	s.pool.Add(m.conn, s.sys.now())
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
	s.sys.workers.Go(job{f: func() {
		select {
		case <-conn.Done():
			s.sys.root.Send(s.self, &connDownMsg{conn: conn, err: conn.Err()})
		case <-s.sys.hardCtx.Done():
		}
	}})
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
	a.g.Limiter.Block(until)
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
