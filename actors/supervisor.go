package actors

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/supervision"
	"github.com/sluicehq/sluice/transport"
)

// supervisor owns the HTTP/2 connection, the global limit and the bucket
// actors. Its state machine is fsm.Supervisor; its Receive is the only code
// that fires it.
type supervisor struct {
	sys     *System
	self    *actor.PID
	machine *fsm.Supervisor

	// conn is the live connection; nil unless Connected or GlobalLimit.
	// Invariant: conn != nil  <=>  machine is connected or global_limit.
	conn *transport.Conn
	// children maps a bucket key (route key until the hash is learned) to
	// its actor. Invariant: at most one actor per key; the supervisor is
	// the only sender of enqueueMsg to actors in this map.
	children map[string]*child
	// pending holds dispatches waiting for the connection or the global
	// limit, in arrival order.
	pending []*dispatchMsg

	closing     error // set by closeMsg: new submits fail with it
	stopped     bool  // set on Stopping: later messages are not acted on
	dialFails   int   // consecutive failed dials
	globalUntil time.Time

	// breaker holds every request, exempt ones too (a Cloudflare ban is per
	// IP), then lets one probe through; probe is that request.
	breaker *supervision.Breaker
	probe   *Call

	tbuf    traceBuf
	current any // the message being handled; still set after a panic (see Receive)
	timers  timers
	spawned uint64
}

type child struct {
	pid       *actor.PID
	forwarded uint64 // enqueueMsgs sent by the supervisor
	major     string // the route's major parameters
	learned   bool   // keyed by its bucket hash (else by its route)
}

// maxDialFailures is how many dials in a row may fail before the
// dispatches waiting for a connection are failed with the dial error.
const maxDialFailures = 3

func newSupervisor(sys *System) actor.Actor {
	s := &supervisor{sys: sys, children: map[string]*child{},
		breaker: supervision.NewBreaker(sys.cfg.BanBackoff, ratelimit.MaxWait)}
	s.machine = fsm.NewSupervisor(func(e fsm.SupervisorEvent, from, to fsm.SupervisorState) {
		sys.supState.Store(int64(to))
		sys.transition(s, s.self, e.String(), from.String(), to.String())
	})
	return s
}

func (s *supervisor) fire(e fsm.SupervisorEvent) {
	// A stale event (e.g. a timer for a state already left) fails with
	// fsm.ErrInvalidEvent and is harmless: it is not acted on.
	_ = s.machine.Fire(context.Background(), e)
}

func (s *supervisor) traceName() string      { return "supervisor" }
func (s *supervisor) traceState() string     { return s.machine.Current().String() }
func (s *supervisor) traceKey() string       { return "" }
func (s *supervisor) traceBuffer() *traceBuf { return &s.tbuf }

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
	case *dispatchMsg:
		ctx.Send(m.bucket, &notSentMsg{call: m.call, err: fmt.Errorf("%w: the supervisor failed while dispatching", ErrActorCrashed)})
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
		s.dial()
	case *submitMsg:
		for _, c := range m.calls {
			s.submit(ctx, c, m.seen)
		}
	case *dispatchMsg:
		if s.closing != nil {
			ctx.Send(m.bucket, &notSentMsg{call: m.call, err: s.closing})
			return
		}
		s.pending = append(s.pending, m)
		s.flush(ctx)
	case *workDoneMsg:
		s.sys.running.Add(-1)
		if m.call == s.probe {
			s.probe = nil
			now := s.sys.now()
			switch {
			case m.status == 429 && !m.rateLimitHeaders:
				s.breaker.Probed(now, true)
				s.holdForBan(now)
			case m.status != 0:
				s.sys.log.Info("sluice: the ban probe passed; resuming")
				s.breaker.Probed(now, false)
			default:
				s.breaker.Abandon() // no answer: says nothing about the ban
			}
			defer s.flush(ctx)
		}
		if !m.call.globalAt.IsZero() {
			m.call.globalAt = time.Time{}
			if m.notSent || m.uncounted {
				s.sys.global.Cancel(s.sys.now())
			} else {
				// The server counted it no later than now: its global
				// slot is held for one period from here.
				s.sys.global.Settle(s.sys.now())
			}
			if len(s.pending) > 0 {
				s.flush(ctx) // the wait to the next free slot is now known
			}
		}
	case *dialedMsg:
		s.dialed(ctx, m)
	case *connDownMsg:
		if m.conn != s.conn {
			m.conn.Close() // an older connection; already replaced
			return
		}
		s.sys.log.Warn("sluice: connection died", slog.String("reason", errString(m.err)))
		s.conn.Close()
		s.conn = nil
		s.fire(fsm.Down)
		s.dial()
	case *redialMsg:
		if s.timers.current(timerRedial, m.gen) && s.machine.Current() == fsm.Disconnected {
			s.dial()
		}
	case *globalHitMsg:
		s.globalHit(m.wait)
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
		if !s.timers.current(timerGlobal, m.gen) {
			return
		}
		if s.machine.Current() == fsm.GlobalLimit {
			s.fire(fsm.GlobalClear)
		}
		s.flush(ctx)
	case *globalRetryMsg:
		if s.timers.current(timerRetry, m.gen) {
			s.flush(ctx)
		}
	case *learnedMsg:
		s.learned(ctx, m)
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
				delete(s.children, key)
			}
		}
	case *snapshotMsg:
		now := s.sys.now()
		snap := supervisorSnapshot{snap: Snapshot{
			Time: now, State: s.machine.Current().String(), Breaker: s.breaker.State(now).String(),
			Pending: len(s.pending), Running: int(s.sys.running.Load()),
		}}
		if w, ok := s.sys.global.(interface{ Count(time.Time) int }); ok {
			snap.snap.GlobalUsed = w.Count(now)
		}
		for _, ch := range s.children {
			snap.buckets = append(snap.buckets, ch.pid)
		}
		m.reply <- snap
	case *actor.Stopping:
		s.stopped = true
		s.timers.stopAll()
		for _, d := range s.pending {
			d.call.Complete(nil, ErrClosed)
		}
		s.pending = nil
		if s.conn != nil {
			s.conn.Close()
		}
	}
}

func (s *supervisor) submit(ctx actor.Context, c *Call, seen ratelimit.Headers) {
	if s.closing != nil {
		c.Complete(nil, s.closing)
		return
	}
	if c.Finished() {
		return
	}
	routeKey := c.Route.Key()
	key := routeKey
	if k, ok := s.sys.store.Alias(routeKey); ok { // the route's hash, learned earlier
		key = k
	}
	ch := s.children[key]
	if ch == nil {
		s.spawned++
		// The producer returns the same instance on every restart, so the
		// bucket's state outlives a crash of its Receive.
		b := newBucket(s.sys, key, routeKey, c.Route)
		props := actor.PropsFromProducer(func() actor.Actor { return b },
			actor.WithReceiverMiddleware(s.sys.receiveMiddleware()...),
			actor.WithSenderMiddleware(s.sys.senderMiddleware()...))
		pid, err := ctx.SpawnNamed(props, "b"+itoa(s.spawned))
		if err != nil {
			c.Complete(nil, err)
			return
		}
		ch = &child{pid: pid, major: c.Route.Major, learned: key != routeKey}
		s.children[key] = ch
		s.sys.buckets.Add(1)
	}
	ch.forwarded++
	ctx.Send(ch.pid, &enqueueMsg{calls: []*Call{c}, seen: seen})
}

// flush sends pending dispatches in order while the connection and the
// global limit allow. Global-exempt requests (interaction callbacks) pass
// while the global limit holds the others back.
func (s *supervisor) flush(ctx actor.Context) {
	now := s.sys.now()
	if err := s.sys.refusal(now); err != nil {
		for _, d := range s.pending {
			ctx.Send(d.bucket, &notSentMsg{call: d.call, err: err})
		}
		s.pending = nil
		return
	}
	if len(s.pending) == 0 {
		return
	}
	probing := false
	if s.breaker.State(now) != supervision.Closed {
		ok, probe, _ := s.breaker.Allow(now)
		if !ok {
			return // the globalClear timer (or the probe's answer) flushes again
		}
		probing = probe
	}
	kept := s.pending[:0]
	blocked := false
	for i, d := range s.pending {
		if d.call.Finished() {
			ctx.Send(d.bucket, &notSentMsg{call: d.call})
			continue
		}
		if s.conn == nil {
			kept = append(kept, s.pending[i:]...)
			break
		}
		d.call.globalAt = time.Time{}
		if !d.call.Route.GlobalExempt {
			if blocked || s.machine.Current() == fsm.GlobalLimit {
				kept = append(kept, d)
				continue
			}
			ok, wait := s.sys.global.Reserve(now)
			if !ok {
				blocked = true
				s.timers.after(timerRetry, wait, func(gen uint64) any { return &globalRetryMsg{gen} })
				kept = append(kept, d)
				continue
			}
			d.call.globalAt = now
		}
		s.send(d)
		if probing {
			s.probe = d.call // the breaker is half-open: this one goes alone
			kept = append(kept, s.pending[i+1:]...)
			break
		}
	}
	if probing && s.probe == nil {
		s.breaker.Abandon() // nothing went out to probe with
	}
	for i := len(kept); i < len(s.pending); i++ {
		s.pending[i] = nil
	}
	s.pending = kept
}

func (s *supervisor) send(d *dispatchMsg) {
	now := s.sys.now()
	c := d.call
	c.sentAt = now
	c.waitGlobal.Add(int64(now.Sub(c.dispatchAt)))
	c.sends.Add(1)
	s.sys.tel.event(c, "sent")
	conn := s.conn
	if !s.sys.goWork(func() { s.sys.work(conn, d, s.self) }) {
		d.call.Complete(nil, ErrClosed)
		return
	}
	s.sys.running.Add(1)
}

func (s *supervisor) dial() {
	if s.machine.Current() != fsm.Disconnected {
		return
	}
	s.fire(fsm.Dial)
	s.sys.goWork(func() {
		ctx, cancel := context.WithTimeout(s.sys.hardCtx, s.sys.cfg.dialTimeout())
		defer cancel()
		conn, err := transport.Dial(ctx, s.sys.cfg.BaseURL, s.sys.cfg.Transport)
		s.sys.root.Send(s.self, &dialedMsg{conn: conn, err: err})
	})
}

func (s *supervisor) dialed(ctx actor.Context, m *dialedMsg) {
	if m.err != nil {
		s.fire(fsm.DialFailed)
		s.dialFails++
		s.sys.log.Warn("sluice: connecting failed", slog.Int("attempt", s.dialFails), slog.String("error", m.err.Error()))
		if s.dialFails >= maxDialFailures {
			// Nothing can be sent: fail what waits rather than hang it.
			for _, d := range s.pending {
				ctx.Send(d.bucket, &notSentMsg{call: d.call, err: m.err})
			}
			s.pending = nil
		}
		delay := s.sys.cfg.Backoff.Delay(s.dialFails, rand.Float64)
		s.timers.after(timerRedial, delay, func(gen uint64) any { return &redialMsg{gen} })
		return
	}
	if s.sys.hardCtx.Err() != nil {
		m.conn.Close()
		return
	}
	s.dialFails = 0
	s.conn = m.conn
	s.fire(fsm.Up)
	if now := s.sys.now(); now.Before(s.globalUntil) {
		s.fire(fsm.GlobalHit)
	}
	conn := m.conn
	s.sys.goWork(func() {
		select {
		case <-conn.Done():
			s.sys.root.Send(s.self, &connDownMsg{conn: conn, err: conn.Err()})
		case <-s.sys.hardCtx.Done():
		}
	})
	s.flush(ctx)
}

func (s *supervisor) globalHit(wait time.Duration) {
	now := s.sys.now()
	until := now.Add(wait)
	if until.After(s.globalUntil) {
		s.globalUntil = until
	}
	s.sys.global.Block(s.globalUntil)
	switch s.machine.Current() {
	case fsm.Connected, fsm.GlobalLimit:
		s.fire(fsm.GlobalHit)
	}
	s.timers.after(timerGlobal, s.globalUntil.Sub(now), func(gen uint64) any { return &globalClearMsg{gen} })
}

// holdForBan arms the timer that flushes once the breaker's backoff ends,
// and pauses the global window (and the machine) for as long.
func (s *supervisor) holdForBan(now time.Time) {
	if _, _, wait := s.breaker.Allow(now); wait > 0 {
		s.globalHit(wait)
	}
}

func (s *supervisor) learned(ctx actor.Context, m *learnedMsg) {
	from := ctx.Sender()
	if !m.perToken { // webhook and interaction tokens are short-lived: not worth remembering
		s.sys.store.SetAlias(m.routeKey, m.bucketKey)
	}
	cur := s.children[m.routeKey]
	if owner, ok := s.children[m.bucketKey]; ok && owner.pid != from {
		// Another route with the same hash got there first: the newcomer
		// hands its queue over and retires once its requests finish.
		if cur != nil && cur.pid.Equal(from) {
			delete(s.children, m.routeKey)
		}
		ctx.Respond(&ownerMsg{retired: true, key: m.bucketKey})
		return
	}
	siblings := 0
	if cur != nil && cur.pid.Equal(from) {
		cur.learned = true
		if m.routeKey != m.bucketKey {
			delete(s.children, m.routeKey)
			s.children[m.bucketKey] = cur
		}
		for _, ch := range s.children {
			if !ch.learned && ch.major == cur.major {
				siblings++
			}
		}
	}
	ctx.Respond(&ownerMsg{key: m.bucketKey, siblings: siblings})
}

func (s *supervisor) idle(ctx actor.Context, m *idleMsg) {
	from := ctx.Sender()
	ch := s.children[m.key]
	if ch == nil || !ch.pid.Equal(from) {
		ctx.Poison(from) // retired after a merge: nothing else is sent to it
		return
	}
	if ch.forwarded != m.received {
		return // an enqueue is on its way; the bucket will report again
	}
	delete(s.children, m.key)
	ctx.Poison(from)
}

func (s *supervisor) close(ctx actor.Context, err error) {
	if s.closing != nil {
		return
	}
	s.closing = err
	for _, d := range s.pending {
		ctx.Send(d.bucket, &notSentMsg{call: d.call, err: err})
	}
	s.pending = nil
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
