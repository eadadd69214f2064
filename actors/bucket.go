package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/attribute"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
	"github.com/sluicehq/sluice/supervision"
	"github.com/sluicehq/sluice/transport"
)

// bucket is the actor of one real bucket: a route key until the pioneer's
// headers reveal the hash, then hash + major parameters. It owns the queue
// and decides, from the bucket state, when each request may go.
type bucket struct {
	sys      *System
	self     *actor.PID
	key      string // the key the supervisor knows this actor by
	routeKey string // the route that created it
	machine  *fsm.Bucket

	// state is the bucket's limits; it lives in the store between actor
	// lives so a restarted or re-spawned actor keeps them.
	state ratelimit.Bucket
	// window is the longest Reset-After seen: the window length used to
	// predict waits.
	window time.Duration

	// queue holds calls not yet dispatched, FIFO. Finished calls (context
	// ended) are skipped lazily.
	queue []*Call
	// running: admitted by state.Take and dispatched (handed to the
	// supervisor or the wire), no response headers yet. inflight: headers
	// received and observed, body streaming.
	// Invariants: a call is in at most one of queue, running, inflight;
	// every call in running is reported to state exactly once (Observe or
	// Refund) when it leaves running; len(running) == state.InFlight().
	// While the bucket is unknown, state.Take admits one pioneer at a time.
	running  map[uint64]*Call
	inflight map[uint64]*Call
	// unobserved holds the headers of in-flight 429s without bucket
	// headers, reported to state once the body shows their kind.
	unobserved map[uint64]ratelimit.Headers

	// retries wait for their backoff (5xx, lost connection) without
	// holding the queue; due ones go back to its front, in order.
	retries []*Call

	// serial sends one request at a time: set for routes with hidden
	// sublimits (channel name and topic edits) and after any shared or
	// sublimit 429, so at most one request meets an unseen limit.
	serial bool
	// perToken buckets (webhook and interaction tokens) are not saved to the
	// store: they are many and short-lived.
	perToken bool

	received       uint64 // enqueueMsgs from the supervisor
	awaitingOwner  bool   // learned a hash; waits for the supervisor's answer
	lastHeaders    ratelimit.Headers
	held           int   // slots held for siblings (see ownerMsg)
	firstRemaining int   // Remaining in the headers that made the bucket known
	retired        bool  // another actor owns our hash: new calls go back to the supervisor
	draining       error // set on Close
	idleSent       bool
	timers         timers

	// current is the message being handled; it is cleared when the handler
	// returns normally, so after a panic it names the message that failed.
	// The actor's producer hands the same *bucket to every incarnation, so
	// a restart keeps the queue, the maps and the limits.
	current any
	tbuf    traceBuf
	crashes *supervision.Intensity
	broken  error // set past the restart intensity
}

func newBucket(sys *System, key, routeKey string, route routes.Route) *bucket {
	b := &bucket{
		sys: sys, key: key, routeKey: routeKey, serial: route.HiddenSublimit, perToken: route.PerToken,
	}
	if st, ok := sys.store.Load(key); ok {
		b.state = st
	}
	b.machine = fsm.NewBucket(func(e fsm.BucketEvent, from, to fsm.BucketState) {
		sys.transition(b, b.self, e.String(), from.String(), to.String())
	})
	if b.state.Known {
		b.fire(fsm.Discovered)
	}
	return b
}

func (b *bucket) fire(e fsm.BucketEvent) {
	if b.machine.Can(e) {
		_ = b.machine.Fire(context.Background(), e)
	}
}

func (b *bucket) traceName() string      { return "bucket" }
func (b *bucket) traceState() string     { return b.machine.Current().String() }
func (b *bucket) traceKey() string       { return b.key }
func (b *bucket) traceBuffer() *traceBuf { return &b.tbuf }

// Receive handles one message at a time.
func (b *bucket) Receive(ctx actor.Context) {
	msg := ctx.Message()
	if _, ok := msg.(*actor.Restarting); ok {
		b.recoverCrash()
		return
	}
	b.current = msg
	if h := b.sys.crashHook; h != nil {
		h(msg)
	}
	b.receive(ctx, msg)
	b.current = nil
}

// recoverCrash runs in the restarting incarnation: the calls carried by the
// message that panicked get ErrActorCrashed, and their bookkeeping is
// undone; everything else stays.
func (b *bucket) recoverCrash() {
	m := b.current
	b.current = nil
	now := b.sys.now()
	if b.crashes == nil {
		b.crashes = supervision.NewIntensity(maxCrashes, crashWindow)
	}
	recent, exceeded := b.crashes.Crash(now)
	b.sys.log.Error("sluice: bucket actor crashed; restarting it with its queue and limits",
		slog.String("bucket", b.key), slog.String("message", fmt.Sprintf("%T", m)), slog.Int("recent_crashes", recent))
	if exceeded && b.broken == nil {
		b.broken = fmt.Errorf("%w: %d crashes within %s; the bucket's actor is stopping", ErrActorCrashed, recent, crashWindow)
		b.sys.log.Error("sluice: bucket actor crashes too often; failing its requests and stopping it", slog.String("bucket", b.key))
		b.failQueued(b.broken)
	}
	fail := func(c *Call) {
		if _, ok := b.running[c.ID]; ok {
			delete(b.running, c.ID)
			b.state.Observe(now, c.sentAt, ratelimit.Headers{})
		}
		if hh, ok := b.unobserved[c.ID]; ok {
			delete(b.unobserved, c.ID)
			b.state.Observe(now, c.sentAt, hh)
		}
		delete(b.inflight, c.ID)
		c.Complete(nil, fmt.Errorf("%w while handling %s", ErrActorCrashed, c.Route.Redacted()))
	}
	switch m := m.(type) {
	case *enqueueMsg:
		for _, c := range m.calls {
			fail(c)
		}
	case *headersMsg:
		fail(m.call)
	case *resultMsg:
		fail(m.call)
	case *notSentMsg:
		fail(m.call)
	}
}

func (b *bucket) receive(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case *actor.Started:
		if b.self == nil { // the first start: the first enqueue is on its way
			b.self = ctx.Self()
			b.timers = timers{sys: b.sys, pid: b.self}
			return
		}
		b.pump(ctx) // after a restart (timers stay armed): carry on
	case *enqueueMsg:
		b.received++
		if m.seen.Has.Remaining {
			// A route that shares our hash hands over what its pioneer saw.
			now := b.sys.now()
			if b.held > 0 {
				b.held--
				if m.seen.Remaining > b.firstRemaining {
					// Its pioneer reached the server before ours: our first
					// headers counted it already, so its hold is released.
					b.state.Unhold(now, 1)
				}
			}
			b.state.Lower(now, m.seen)
		}
		b.idleSent = false
		for _, c := range m.calls {
			b.enqueue(ctx, c)
		}
		b.pump(ctx)
	case *wakeMsg:
		kind := timerWake
		if m.retry {
			kind = timerRetry
		}
		if b.timers.current(kind, m.gen) {
			b.pump(ctx)
		}
	case *headersMsg:
		b.headers(ctx, m)
	case *resultMsg:
		b.result(ctx, m)
	case *notSentMsg:
		if _, ok := b.running[m.call.ID]; ok {
			delete(b.running, m.call.ID)
			b.state.Refund(b.sys.now())
		}
		if m.err != nil {
			m.call.Complete(nil, m.err)
		} else if !m.call.Finished() {
			b.requeueFront(m.call, b.sys.now())
		}
		b.pump(ctx)
	case *ownerMsg:
		b.awaitingOwner = false
		b.key = m.key
		if m.siblings > 0 && !m.retired {
			// Unknown routes with our major parameters may share our hash:
			// each may spend one request of this window before it learns.
			b.state.Hold(b.sys.now(), m.siblings)
			b.held = m.siblings
		}
		if m.retired {
			b.retired = true
			ctx.Send(b.sys.sup, &submitMsg{calls: b.queue, seen: b.lastHeaders})
			b.queue = nil
		}
		b.pump(ctx)
	case *bucketSnapshotMsg:
		now := b.sys.now()
		m.reply <- BucketSnapshot{
			Key: b.key, State: b.machine.Current().String(), Known: b.state.Known,
			Limit: b.state.Limit, Remaining: b.state.Remaining,
			ResetIn: max(0, b.state.ResetAt.Sub(now)), PausedFor: max(0, b.state.PausedUntil.Sub(now)),
			Queued: len(b.queue), Retrying: len(b.retries), Running: len(b.running), InFlight: len(b.inflight),
			Serial: b.serial,
		}
	case *drainMsg:
		b.draining = m.err
		b.failQueued(m.err)
		b.maybeIdle(ctx)
	case *actor.Stopping:
		b.timers.stopAll()
		b.save()
		err := ErrClosed
		if b.broken != nil {
			err = b.broken
		}
		b.failQueued(err)
		for _, c := range b.running {
			c.Complete(nil, err)
		}
		for _, c := range b.inflight {
			c.Complete(nil, err)
		}
		b.queue = nil
	}
}

func (b *bucket) enqueue(ctx actor.Context, c *Call) {
	if c.Finished() {
		return
	}
	if b.retired {
		ctx.Send(b.sys.sup, &submitMsg{calls: []*Call{c}})
		return
	}
	if b.draining != nil {
		c.Complete(nil, b.draining)
		return
	}
	if b.broken != nil {
		c.Complete(nil, b.broken)
		return
	}
	if max := b.sys.cfg.MaxQueue; max > 0 && len(b.queue) >= max {
		c.Complete(nil, fmt.Errorf("%w: %d requests queued for %s", ErrQueueFull, len(b.queue), c.Route.Redacted()))
		return
	}
	now := b.sys.now()
	if wait := b.predictWait(now, len(b.queue)); wait > 0 {
		limit := b.sys.cfg.MaxWait
		if dl, ok := c.Ctx.Deadline(); ok && (limit == 0 || dl.Sub(now) < limit) {
			limit = dl.Sub(now)
		}
		if limit > 0 && wait > limit {
			c.Complete(nil, &WaitError{Bucket: c.Route.Redacted(), Wait: wait, Limit: limit})
			return
		}
	}
	c.queuedAt = now
	b.sys.tel.event(c, "queued", attribute.String("sluice.bucket", b.key))
	b.queue = append(b.queue, c)
}

// predictWait estimates when the request at queue position pos would be
// sent: the job queue's estimate, nextWindowStart + floor(waiting/perWindow)*window.
func (b *bucket) predictWait(now time.Time, pos int) time.Duration {
	if !b.state.Known || b.state.Limit <= 0 {
		return 0
	}
	var first time.Duration
	remaining := b.state.Remaining
	if now.Before(b.state.ResetAt) {
		first = b.state.ResetAt.Sub(now)
	} else {
		remaining = b.state.Limit
	}
	if pause := b.state.PausedUntil.Sub(now); pause > first {
		first, remaining = pause, b.state.Limit
	}
	if pos < remaining {
		return 0
	}
	window := b.window
	if window <= 0 {
		window = first
	}
	return first + time.Duration((pos-remaining)/b.state.Limit)*window
}

// pump dispatches queued calls while the bucket allows. It is the only
// place that takes from the bucket.
func (b *bucket) pump(ctx actor.Context) {
	if b.awaitingOwner || b.retired {
		return
	}
	now := b.sys.now()
	if err := b.sys.refusal(now); err != nil {
		b.failQueued(err)
		return
	}
	if b.broken != nil {
		b.failQueued(b.broken)
		b.maybeIdle(ctx)
		return
	}
	b.dueRetries(now)
	for len(b.queue) > 0 {
		c := b.queue[0]
		if c.Finished() {
			b.queue[0] = nil
			b.queue = b.queue[1:]
			continue
		}
		if b.serial && len(b.running)+len(b.inflight) > 0 {
			return // the response in flight will pump again
		}
		ok, wait := b.state.Take(now)
		if !ok {
			switch {
			case now.Before(b.state.PausedUntil):
				b.fire(fsm.RateLimited)
			case b.state.Known:
				b.fire(fsm.Drained)
			}
			b.timers.after(timerWake, wait, func(gen uint64) any { return &wakeMsg{gen: gen} })
			return
		}
		if b.state.Known {
			b.fire(fsm.Wake)
			b.fire(fsm.Reset)
		}
		b.queue[0] = nil
		b.queue = b.queue[1:]
		if b.running == nil {
			b.running = make(map[uint64]*Call, 1)
		}
		b.running[c.ID] = c
		c.dispatchAt = now
		c.waitBucket.Add(int64(now.Sub(c.queuedAt)))
		b.sys.tel.event(c, "dispatched")
		ctx.Send(b.sys.sup, &dispatchMsg{call: c, bucket: b.self})
	}
	b.maybeIdle(ctx)
	b.compact()
}

func (b *bucket) headers(ctx actor.Context, m *headersMsg) {
	c := m.call
	if _, ok := b.running[c.ID]; !ok {
		return
	}
	delete(b.running, c.ID)
	if b.inflight == nil {
		b.inflight = make(map[uint64]*Call, 1)
	}
	b.inflight[c.ID] = c
	now := b.sys.now()
	b.sys.tel.event(c, "headers", attribute.Int("http.response.status_code", m.status))
	h, err := ratelimit.ParseHeaders(m.header, now)
	if err != nil {
		b.sys.log.Warn("sluice: malformed rate-limit headers", slog.String("route", c.Route.Redacted()), slog.String("error", err.Error()))
	}
	if m.status == 429 && !h.Has.Remaining {
		// Probably a global 429 or a ban, which the bucket did not count;
		// the body (in resultMsg) decides between Refund and Observe.
		if b.unobserved == nil {
			b.unobserved = make(map[uint64]ratelimit.Headers, 1)
		}
		b.unobserved[c.ID] = h
		b.pump(ctx)
		return
	}
	wasKnown := b.state.Known
	b.state.Observe(now, c.sentAt, h)
	b.lastHeaders = h
	if h.Has.ResetAfter && h.ResetAfter > b.window && m.status != 429 {
		b.window = h.ResetAfter
	}
	if !wasKnown && b.state.Known {
		b.firstRemaining = h.Remaining
		b.fire(fsm.Discovered)
	}
	if h.Has.Bucket && h.Bucket != "" && b.key == b.routeKey && !b.awaitingOwner {
		if bucketKey := routes.BucketKey(h.Bucket, c.Route.Major); bucketKey != b.key {
			b.awaitingOwner = true
			ctx.Request(b.sys.sup, &learnedMsg{routeKey: b.routeKey, bucketKey: bucketKey, perToken: c.Route.PerToken})
		}
	}
	b.pump(ctx)
}

func (b *bucket) result(ctx actor.Context, m *resultMsg) {
	c := m.call
	_, unreported := b.running[c.ID]
	if hh, ok := b.unobserved[c.ID]; ok && m.err != nil {
		// The body of a 429 never arrived: report what the headers said.
		delete(b.unobserved, c.ID)
		b.state.Observe(b.sys.now(), c.sentAt, hh)
	}
	delete(b.running, c.ID)
	delete(b.inflight, c.ID)
	now := b.sys.now()
	c.waitNetwork.Add(int64(now.Sub(c.sentAt)))
	if m.err != nil {
		if unreported {
			// No headers came back. A request that never reached the
			// server gives its slot back; one that may have reached it
			// only releases its slot (no information).
			if transport.Classify(m.err) == transport.NotSent {
				b.state.Refund(now)
			} else {
				b.state.Observe(now, c.sentAt, ratelimit.Headers{})
			}
		}
		b.failed(ctx, c, m)
		b.pump(ctx)
		return
	}
	status := m.resp.StatusCode
	h, _ := ratelimit.ParseHeaders(m.resp.Header, now)
	v := ratelimit.Classify(status, h, m.body)
	if hh, ok := b.unobserved[c.ID]; ok {
		delete(b.unobserved, c.ID)
		if v.Kind == ratelimit.GlobalLimit || v.Kind == ratelimit.CloudflareBan {
			b.state.Refund(now) // refused before the bucket: not counted there
		} else {
			b.state.Observe(now, c.sentAt, hh)
		}
	}
	if ratelimit.CountsAsInvalid(status, v) {
		b.sys.countInvalid(now)
	}
	scope := ""
	if status == 429 {
		scope = v.Kind.String()
	}
	b.sys.tel.response(status, scope)
	switch {
	case status == 429:
		b.limited(ctx, c, v, now)
	case status == 401 && c.Req.Header.Get("Authorization") == "" && b.sys.cfg.Authorization != "":
		// Our token was rejected: every later request would be a 401 too.
		if b.sys.badToken.CompareAndSwap(false, true) {
			b.sys.log.Error("sluice: the API rejected the token (401); failing every request from now on")
		}
		c.Complete(m.resp, nil)
	case status >= 500 && !h.Has.RateLimit && c.safe() && c.errAttempts < b.sys.cfg.MaxErrorRetries:
		b.sys.log.Warn("sluice: retrying after a server error", slog.Int("status", status), slog.String("route", c.Route.Redacted()))
		b.retryLater(now, c)
	default:
		c.Complete(m.resp, nil)
	}
	b.pump(ctx)
}

// limited handles a 429 by its shape.
func (b *bucket) limited(ctx actor.Context, c *Call, v ratelimit.Verdict, now time.Time) {
	scope := v.Kind.String()
	switch v.Kind {
	case ratelimit.CloudflareBan:
		ctx.Send(b.sys.sup, &banMsg{wait: v.Wait})
		c.Complete(nil, &RateLimitError{Scope: "ban", RetryAfter: v.Wait, Attempts: c.attempts + 1, Bucket: c.Route.Redacted()})
		return
	case ratelimit.GlobalLimit:
		ctx.Send(b.sys.sup, &globalHitMsg{wait: v.Wait})
	case ratelimit.SharedLimit, ratelimit.Sublimit:
		b.serial = true // a limit no header shows: no more pipelining here
		b.state.Pause(now.Add(v.Wait))
		b.fire(fsm.RateLimited)
	default: // user: pause this bucket only
		b.state.Pause(now.Add(v.Wait))
		b.fire(fsm.RateLimited)
	}
	b.sys.log.Warn("sluice: 429", slog.String("scope", scope), slog.String("route", c.Route.Redacted()), slog.Duration("retry_after", v.Wait))
	c.attempts++
	if c.attempts > b.sys.cfg.MaxRetries {
		c.Complete(nil, &RateLimitError{Scope: scope, RetryAfter: v.Wait, Attempts: c.attempts, Bucket: c.Route.Redacted()})
		return
	}
	b.requeueFront(c, now)
}

// failed handles a request that got no complete response.
func (b *bucket) failed(ctx actor.Context, c *Call, m *resultMsg) {
	if c.Finished() {
		return
	}
	if c.Ctx.Err() != nil {
		c.Complete(nil, ctxError(c.Ctx))
		return
	}
	if errors.Is(m.err, ErrResponseTooLarge) {
		c.Complete(nil, m.err)
		return
	}
	switch transport.Classify(m.err) {
	case transport.NotSent:
		// Never reached the server: it goes again when the supervisor has
		// a connection.
		b.requeueFront(c, b.sys.now())
	default:
		// It may have been processed: only a request that is safe to
		// repeat is sent again.
		if c.safe() && c.errAttempts < b.sys.cfg.MaxErrorRetries {
			b.sys.log.Warn("sluice: retrying after a transport error", slog.String("route", c.Route.Redacted()), slog.String("error", m.err.Error()))
			b.retryLater(b.sys.now(), c)
			return
		}
		c.Complete(nil, fmt.Errorf("sluice: %s: %w", c.Route.Redacted(), m.err))
	}
}

// requeueFront puts c back at the head of the queue: it was in line first.
func (b *bucket) requeueFront(c *Call, now time.Time) {
	c.queuedAt = now
	b.queue = append([]*Call{c}, b.queue...)
}

// retryLater sends c again after a backoff, without holding the queue.
func (b *bucket) retryLater(now time.Time, c *Call) {
	c.notBefore = now.Add(b.sys.cfg.RetryBackoff.Delay(c.errAttempts, rand.Float64))
	c.errAttempts++
	b.retries = append(b.retries, c)
}

// dueRetries moves the retries whose backoff is over to the front of the
// queue, in the order they failed, and arms a timer for the next one.
func (b *bucket) dueRetries(now time.Time) {
	if len(b.retries) == 0 {
		return
	}
	var due, keep []*Call
	var next time.Time
	for _, c := range b.retries {
		switch {
		case c.Finished():
		case !now.Before(c.notBefore):
			due = append(due, c)
		default:
			keep = append(keep, c)
			if next.IsZero() || c.notBefore.Before(next) {
				next = c.notBefore
			}
		}
	}
	b.retries = keep
	if len(due) > 0 {
		for _, c := range due {
			c.queuedAt = now
			b.sys.tel.event(c, "retry")
		}
		b.queue = append(due, b.queue...)
	}
	if !next.IsZero() {
		b.timers.after(timerRetry, next.Sub(now), func(gen uint64) any { return &wakeMsg{gen: gen, retry: true} })
	}
}

// failQueued fails every call waiting in the queue or for a retry.
func (b *bucket) failQueued(err error) {
	for _, c := range b.queue {
		c.Complete(nil, err)
	}
	for _, c := range b.retries {
		c.Complete(nil, err)
	}
	b.queue, b.retries = nil, nil
}

// compact drops the maps that emptied: a bucket between requests keeps
// nothing it does not need (memory per live bucket is a measured target).
func (b *bucket) compact() {
	if len(b.running) == 0 {
		b.running = nil
	}
	if len(b.inflight) == 0 {
		b.inflight = nil
	}
	if len(b.unobserved) == 0 {
		b.unobserved = nil
	}
	if len(b.queue) == 0 {
		b.queue = nil
	}
}

// maybeIdle tells the supervisor when the bucket has nothing to do and its
// window is over, so the actor can stop and memory follows the working set.
func (b *bucket) maybeIdle(ctx actor.Context) {
	if len(b.queue) > 0 || len(b.retries) > 0 || len(b.running) > 0 || len(b.inflight) > 0 || b.awaitingOwner || b.idleSent {
		return
	}
	now := b.sys.now()
	end := b.state.ResetAt
	if b.state.PausedUntil.After(end) {
		end = b.state.PausedUntil
	}
	end = end.Add(b.sys.cfg.IdleAfter)
	if now.Before(end) {
		b.timers.after(timerWake, end.Sub(now), func(gen uint64) any { return &wakeMsg{gen: gen} })
		return
	}
	b.fire(fsm.Reset) // the window (or pause) is over
	b.fire(fsm.Quiet)
	b.save()
	b.idleSent = true
	ctx.Request(b.sys.sup, &idleMsg{key: b.key, received: b.received})
}

func (b *bucket) save() {
	if b.state.Known && !b.perToken {
		b.sys.store.Save(b.key, b.state)
	}
}
