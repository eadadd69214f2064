package actors

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/internal/actorhost"
	"github.com/sluicehq/sluice/internal/attempt"
	"github.com/sluicehq/sluice/internal/declared"
	"github.com/sluicehq/sluice/internal/failure"
	"github.com/sluicehq/sluice/internal/forecast"
	"github.com/sluicehq/sluice/internal/globalwin"
	"github.com/sluicehq/sluice/internal/pioneers"
	"github.com/sluicehq/sluice/internal/registry"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/internal/tracing"
	"github.com/sluicehq/sluice/internal/workers"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/supervision"
	"github.com/sluicehq/sluice/transport"
)

// Config configures a System. The public package fills every field.
type Config struct {
	// BaseURL is the API base, e.g. https://discord.com/api/v10.
	BaseURL *url.URL
	// Authorization is set on requests that carry none ("Bot <token>").
	Authorization string
	// UserAgent is set on requests that carry none.
	UserAgent string
	// Transport configures the HTTP/2 connections.
	Transport transport.Config
	// Connections is how many HTTP/2 connections the pool holds at most
	// (0: DefaultConnections).
	Connections int
	// Global is the proactive global limit of the token: requests sent
	// with an Authorization header (BotWindow).
	Global ratelimit.GlobalLimiter
	// IPGlobal is the proactive global limit of the egress IP: requests
	// sent without an Authorization header (IPWindow). Nil: they count on
	// Global too.
	IPGlobal ratelimit.GlobalLimiter
	// WebhookAuth sends routes that carry their own token in the path
	// (webhooks, interactions) with Authorization too, counted on Global.
	// False: they go without it unless the caller set one (globalwin.Classify).
	WebhookAuth bool
	// Store keeps bucket limits and route aliases outside the actors.
	Store ratelimit.BucketStore
	// Shared, when set, counts the limits this process shares with others
	// (redisstore): each request is reserved there too, by its worker,
	// before it is sent, and the answer reported after (nil: limits are
	// this process's alone). IPShared does the same for requests sent
	// without a token (IPWindow), shared by the processes behind one
	// egress IP (nil: this process's alone).
	Shared, IPShared ratelimit.Shared
	// Clock is the time source of every decision.
	Clock func() time.Time
	// MaxWait fails a request at once when its predicted wait exceeds it
	// (0: no limit besides the context's deadline).
	MaxWait time.Duration
	// MaxRetries bounds how often a 429'd request is sent again.
	MaxRetries int
	// MaxErrorRetries bounds how often a request that is safe to repeat is
	// sent again after a 5xx or a lost connection.
	MaxErrorRetries int
	// RetryBackoff spaces those retries.
	RetryBackoff transport.Backoff
	// BanBackoff is the first wait of the ban breaker; it doubles while
	// probes meet the ban.
	BanBackoff time.Duration
	// MaxQueue bounds the queue of one bucket; MaxPending the calls of the
	// whole system without an outcome (0: no bound).
	MaxQueue, MaxPending int
	// Invalid counts 401, 403 and non-shared 429 answers and refuses
	// requests at its ceiling (nil: no budget).
	Invalid *supervision.Budget
	// MaxResponseBytes bounds a response body; an answer declaring more
	// in Content-Length is refused before its body is read.
	MaxResponseBytes int64
	// MaxBufferedBytes bounds the response bytes being read at once across
	// all requests (0: no bound).
	MaxBufferedBytes int64
	// AttemptTimeout bounds one attempt, from sending until the body is
	// read (0: none).
	AttemptTimeout time.Duration
	// UnauthorizedProbe is how long a rejected token refuses every request
	// before one request is let through to check it again.
	UnauthorizedProbe time.Duration
	// IdleAfter is how long a bucket actor lives on after its window ended
	// with nothing to do.
	IdleAfter time.Duration
	// Backoff spaces reconnection attempts.
	Backoff transport.Backoff
	// Logger receives warnings and, at debug level, the message trace.
	Logger *slog.Logger
	// Trace, when set, receives every TraceEvent (nil: no trace, and no
	// middleware is installed).
	Trace func(TraceEvent)
	// crashHook, when set (only by this package's tests), sees every
	// message the supervisor and the bucket actors receive and may panic
	// to simulate a bug.
	crashHook func(msg any)
	// TracerProvider and MeterProvider, when set, receive a span per
	// request and the limiter's metrics (nil: none, at no cost).
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// DefaultConnections is the pool's size when Config.Connections is 0. The
// pool grows to it by one connection per connpool.CallsPerConn requests
// awaiting an outcome: a connection reset ends only the requests of one
// connection in up to 16.
const DefaultConnections = 16

func (c *Config) connections() int {
	if c.Connections > 0 {
		return c.Connections
	}
	return DefaultConnections
}

func (c *Config) dialTimeout() time.Duration {
	if c.Transport.DialTimeout > 0 {
		return c.Transport.DialTimeout
	}
	return 10 * time.Second
}

// System is a running supervisor with its bucket actors.
type System struct {
	cfg    Config
	actors *actor.ActorSystem
	root   *actor.RootContext
	sup    *actor.PID
	// bucketProps spawns every bucket actor (bucketCell); restarted
	// carries a crashed bucket actor's bucket (actor id -> *bucket) from
	// its Restarting to its next incarnation's Started.
	bucketProps *actor.Props
	restarted   sync.Map
	// windows are the two global windows (Config.Global, Config.IPGlobal).
	windows [numWindows]*globalwin.Window
	store   ratelimit.BucketStore
	// firsts: one first pioneer at a time per route template, across
	// the actors (internal/pioneers).
	firsts pioneers.Turns[*Call, *lane, *actor.PID, callRules]
	log    *slog.Logger

	// hardCtx ends every request on the wire when Close gives up waiting.
	hardCtx    context.Context
	hardCancel context.CancelFunc

	workers *workers.Pool[job] // goroutines: requests, dials, watchers (internal/workers)
	calls   sync.WaitGroup     // submitted calls without an outcome
	// live holds every submitted call without an outcome, by id
	// (registry.Sharded): Close answers whatever is left there once every
	// actor has stopped, as protoactor drops the messages still in a
	// stopping actor's mailbox, so every call gets exactly one outcome.
	live    registry.Sharded[*Call]
	closed  atomic.Bool
	subMu   sync.RWMutex // orders Submit's calls.Add before Close's calls.Wait
	ids     atomic.Uint64
	pending atomic.Int64 // calls without an outcome
	running atomic.Int64 // requests on the wire (kept by the bucket actors)
	buckets atomic.Int64 // live bucket actors (kept by the supervisor)
	// gate is published by the supervisor for the bucket actors (see
	// supervisor.publish); only the supervisor stores it.
	gate atomic.Pointer[gate]
	// turn is where gate.pick starts looking among the connections.
	turn atomic.Uint32
	// clock learns the server's clock from every answer (see
	// ratelimit.ServerClock); safe for concurrent use.
	clock    ratelimit.ServerClock
	supState atomic.Int64         // the supervisor's fsm.SupervisorState
	tel      *telemetry.Telemetry // nil: no OpenTelemetry
	sink     tracing.Sink         // the message trace: Config.Trace, and the logger at debug level
	auth     authLatch            // a 401 to the configured token: later calls fail fast
	// exch sends one attempt and reads its answer, body within reader's
	// bounds (MaxResponseBytes, MaxBufferedBytes).
	exch   attempt.Exchange
	reader attempt.Reader
	// run runs each attempt around exch (attempt.Runner): the attempt's
	// context, the shared store, the global 429's block, one result.
	run attempt.Runner[dest]
	// lastAnswer is when any connection last delivered an answer (limiter
	// clock, Unix nanoseconds): a connection that dies before answering
	// counts as a failed one only while the API answers nothing at all.
	lastAnswer atomic.Int64
	// rtt is the round trip of the answers so far (ns, see observeRTT),
	// for the global forecast: how long a pioneer's answer takes, and a
	// global slot stays held after a send.
	rtt atomic.Int64
	// wakes numbers the shared store's wake-ups (SharedWake), so that a
	// bucket actor can tell one that came before a refusal it hears of
	// later (see bucket.deferred).
	wakes atomic.Uint64
	// closing elects the Close that does the work (sync.Once would make
	// the others wait for it, ignoring their ctx); stopped is closed when
	// it has finished, for other Close and Snapshot calls.
	closing atomic.Bool
	stopped chan struct{}

	// groups are the live groups of the declared limits (Call.Limits),
	// and the shared stores' ones this process reserved in lately.
	groups declared.Groups[Window]

	// crashHook is the test seam from Config.crashHook.
	crashHook func(msg any)
}

// Restart intensity: a bucket actor that crashes more than maxCrashes times
// within crashWindow breaks: it fails its queued calls and every call that
// reaches it with failure.ErrActorCrashed, then stops through the ordinary idle
// path (so no message is dropped); the next call for its bucket starts a
// fresh actor, with the limits kept in the store. Until then, every crash
// restarts the same instance (supervision.RestartStrategy).
const (
	maxCrashes  = 10
	crashWindow = 10 * time.Second
)

// Start spawns the supervisor, which starts connecting at once. It fails
// only if the MeterProvider refuses an instrument.
func Start(cfg Config) (*System, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	as := actorhost.Acquire()
	s := &System{cfg: cfg, actors: as, root: as.Root, store: cfg.Store, log: log, crashHook: cfg.crashHook}
	s.windows[BotWindow] = globalwin.New(cfg.Global, cfg.Shared)
	ipGlobal := cfg.IPGlobal
	if ipGlobal == nil {
		ipGlobal = cfg.Global
	}
	s.windows[IPWindow] = globalwin.New(ipGlobal, cfg.IPShared)
	tel, err := telemetry.New(cfg.TracerProvider, cfg.MeterProvider, s.gauges)
	if err != nil {
		actorhost.Release()
		return nil, fmt.Errorf("sluice: metrics: %w", err)
	}
	s.tel = tel
	s.reader = attempt.Reader{MaxBytes: cfg.MaxResponseBytes, MaxBuffered: cfg.MaxBufferedBytes}
	s.exch = attempt.Exchange{Clock: s.now, Body: &s.reader}
	s.sink = tracing.Sink{Callback: cfg.Trace, Log: log, Clock: s.now, Describe: describe}
	s.hardCtx, s.hardCancel = context.WithCancel(context.Background())
	s.run = attempt.Runner[dest]{Scope: attempt.Scope{Timeout: cfg.AttemptTimeout, Hard: s.hardCtx},
		Exchange: &s.exch, ServerClock: &s.clock, LastAnswer: &s.lastAnswer, Wakes: &s.wakes, Log: log,
		Hand: s.hand, GlobalHit: s.globalHit}
	s.workers = workers.New(func(j job) { j.run(s) }, func(r any) {
		s.log.Error("sluice: recovered a panic on a worker goroutine", slog.Any("panic", r))
	}, workers.DefaultIdle, s.hardCtx.Done())
	s.stopped = make(chan struct{})
	s.bucketProps = actor.PropsFromProducer(func() actor.Actor { return &bucketCell{sys: s} },
		actor.WithMailbox(actorhost.Mailbox), actor.WithDispatcher(dispatcher{s}),
		actor.WithReceiverMiddleware(s.sink.ReceiveMiddleware()...),
		actor.WithSenderMiddleware(s.sink.SenderMiddleware()...))
	props := actor.PropsFromProducer(func() actor.Actor { return newSupervisor(s) },
		actor.WithDispatcher(dispatcher{s}),
		actor.WithReceiverMiddleware(s.sink.ReceiveMiddleware()...),
		actor.WithSenderMiddleware(s.sink.SenderMiddleware()...),
		actor.WithSupervisor(supervision.RestartStrategy()),
		actor.WithGuardian(supervision.ResumeStrategy()))
	s.sup = s.root.Spawn(props)
	return s, nil
}

func (s *System) now() time.Time { return s.cfg.Clock() }

// NextID returns a fresh call id.
func (s *System) NextID() uint64 { return s.ids.Add(1) }

// Now reads the system's clock.
func (s *System) Now() time.Time { return s.now() }

// Submit hands c to the supervisor. After Close began, c fails with
// failure.ErrClosed at once.
func (s *System) Submit(c *Call) {
	s.classify(c)
	c.place = s.placeOf(c)
	n, ok := s.register(c)
	if !ok {
		return
	}
	if err := s.seal(c); err != nil {
		c.Complete(nil, err)
		return
	}
	if err := s.admit(c, n); err != nil {
		c.Complete(nil, err)
		return
	}
	// Its place in the shared store's declared groups, if any, on the
	// caller's goroutine: in the order of submission across processes.
	s.groups.ReserveShared(c.Ctx, c.decl(), c.window, s.cfg.Clock)
	s.root.Send(s.sup, &submitMsg{call: c})
}

// placeOf returns c's place in its declared groups, not reserved yet:
// in the shared store of its window when that store counts declared
// groups and c is in some (declared.NewPlace).
func (s *System) placeOf(c *Call) declared.Place {
	var store ratelimit.SharedGroups
	if len(c.Limits) > 0 {
		store, _ = s.windows[c.window].Shared.(ratelimit.SharedGroups)
	}
	return declared.NewPlace(c.ID, c.Limits, store)
}

// register counts c as submitted (Close waits for its outcome) and returns
// the number of calls pending with it; false (c failed with failure.ErrClosed)
// after Close began.
func (s *System) register(c *Call) (int64, bool) {
	// Close sets closed under subMu's write lock before it waits on calls,
	// so no Add can race with that Wait.
	s.subMu.RLock()
	if s.closed.Load() {
		s.subMu.RUnlock()
		c.Complete(nil, failure.ErrClosed)
		return 0, false
	}
	s.calls.Add(1)
	s.subMu.RUnlock()
	n := s.pending.Add(1)
	if s.tel != nil { // nil: no span, the context as it is
		c.Ctx, c.span = s.tel.Start(c.Ctx, &c.Route, c.window.String(), c.ID)
	}
	c.arm(s)
	// In live only once armed: Close completes what it finds there, and
	// the outcome's bookkeeping (System.finished) needs the owner. Watched
	// only once in live: its Timeout's timer finds it there. A call that
	// ended meanwhile (Close, or its context was over) is not left there.
	s.live.Add(c.ID, c)
	c.watch(s)
	if c.Finished() {
		s.live.Remove(c.ID)
	}
	return n, true
}

// finished is the bookkeeping of a registered call's outcome, once
// (Call.Complete runs it before a waiter sees the outcome).
func (s *System) finished(c *Call) {
	if len(c.Limits) > 0 {
		s.groups.Release(c.decl(), c.window, c.resp != nil, s.now())
	}
	s.auth.release(c)
	if s.tel != nil { // nil: nothing to record, the outcome not even read
		s.tel.Finish(c.span, c.outcome())
	}
	s.live.Remove(c.ID)
	s.pending.Add(-1)
	s.calls.Done()
}

// SubmitDirect sends c on rt, outside the rate limits and the actors: for
// a request to another host than the API's (a redirect to a CDN), which
// Discord's limits do not cover and the API's connection cannot reach. It
// is sent once (no retry), within AttemptTimeout, its body read within
// MaxResponseBytes; Close waits for it like for any call, then cancels it.
func (s *System) SubmitDirect(c *Call, rt http.RoundTripper) {
	c.direct = true
	c.due.Store(forecast.DueNever)
	if _, ok := s.register(c); !ok {
		return
	}
	run := func() { s.run.Direct(c.bounds(), rt, c.Req, c.Complete) }
	if !s.workers.Go(job{f: run}) {
		c.Complete(nil, failure.ErrClosed)
	}
}

// admit refuses a call that must not be queued: after Close, with a
// rejected token (unless c is let through to check it again), over the
// pending bound, or while the invalid-request budget is exhausted.
func (s *System) admit(c *Call, pending int64) error {
	switch {
	case s.closed.Load():
		return failure.ErrClosed
	case s.cfg.MaxPending > 0 && pending > int64(s.cfg.MaxPending):
		return fmt.Errorf("%w: %d requests pending", failure.ErrQueueFull, pending-1)
	}
	now := s.now()
	if s.auth.refuses(c, now, s.botAuthenticated(c)) {
		return failure.ErrUnauthorized
	}
	return s.budget(now)
}

// botAuthenticated reports whether c is sent with the configured token
// (it carries no Authorization header of its own and counts on the bot's
// window) and its route is not authenticated by a token in its path
// (webhooks, interactions): a 401 to it is about the configured token.
func (s *System) botAuthenticated(c *Call) bool {
	return c.withToken && !c.Route.PerToken
}

// seal makes c.Req the request every attempt sends (attempt.Exchange
// copies it with the attempt's context and a fresh body): its URL on the
// base (attempt.Resolve), the configured token when c is sent with it,
// the default User-Agent, and the trace context of c's span. It runs once,
// after register (the span) and before any actor sees c; nothing writes
// c.Req afterwards.
func (s *System) seal(c *Call) error {
	req := c.Req
	u, err := attempt.Resolve(s.cfg.BaseURL, req.URL)
	if err != nil {
		return fmt.Errorf("sluice: %w", err)
	}
	req.URL, req.Host = u, u.Host
	if req.Header == nil {
		req.Header = make(http.Header)
	}
	// The two values live in the call (no allocation), each request its
	// own: a caller that writes resp.Request's header in place changes
	// its own request only, never the token of the next.
	if c.withToken {
		c.sealed[0] = s.cfg.Authorization
		req.Header["Authorization"] = c.sealed[0:1:1]
	}
	if s.cfg.UserAgent != "" && req.Header.Get("User-Agent") == "" {
		c.sealed[1] = s.cfg.UserAgent
		req.Header["User-Agent"] = c.sealed[1:2:2]
	}
	if c.span != nil {
		telemetry.Inject(c.Ctx, req.Header)
	}
	return nil
}

// budget returns a *BudgetError while the invalid-request budget is
// exhausted.
func (s *System) budget(now time.Time) error {
	if s.cfg.Invalid == nil {
		return nil
	}
	if wait, n, per := s.cfg.Invalid.Refusing(now); wait > 0 {
		return &failure.BudgetError{Count: n, Window: per, RetryAfter: wait}
	}
	return nil
}

// countInvalid records one 401, 403 or non-shared 429 answer.
func (s *System) countInvalid(now time.Time) {
	if s.cfg.Invalid == nil {
		return
	}
	n, level := s.cfg.Invalid.Record(now)
	switch level {
	case supervision.Exhausted:
		s.log.Error("sluice: invalid-request budget exhausted; refusing requests until it recovers", slog.Int("count", n))
	case supervision.Warn:
		s.log.Warn("sluice: many invalid requests (401/403/429); Discord bans an IP at 10,000 per 10 minutes", slog.Int("count", n))
	}
}

// Snapshot gathers the supervisor's state and every live bucket's. A
// bucket that stops meanwhile is left out; Snapshot returns when ctx ends at
// the latest.
func (s *System) Snapshot(ctx context.Context) (Snapshot, error) {
	if s.closed.Load() {
		return Snapshot{}, failure.ErrClosed
	}
	reply := make(chan supervisorSnapshot, 1)
	s.root.Send(s.sup, &snapshotMsg{reply: reply})
	var sup supervisorSnapshot
	select {
	case sup = <-reply:
	case <-ctx.Done():
		return Snapshot{}, ctx.Err()
	case <-s.stopped:
		return Snapshot{}, failure.ErrClosed
	}
	snap := sup.snap
	snap.Groups = declared.Sum(s.groups.Snapshot(s.now()))
	if len(sup.buckets) == 0 {
		return snap, nil
	}
	replies := make(chan bucketSnapshot, len(sup.buckets))
	for _, pid := range sup.buckets {
		s.root.Send(pid, &bucketSnapshotMsg{at: snap.Time, reply: replies})
	}
	// A bucket stopping right now never answers: wait for the others a
	// bounded time.
	t := time.NewTimer(time.Second)
	defer t.Stop()
	var queued []laneETA
	done := func(err error) (Snapshot, error) {
		slices.SortFunc(snap.Buckets, func(a, b BucketSnapshot) int { return strings.Compare(a.Key, b.Key) })
		snap.Requests = s.requests(queued, s.now(), &sup.ring)
		return snap, err
	}
	for range sup.buckets {
		select {
		case b := <-replies:
			snap.Buckets = append(snap.Buckets, b.buckets...)
			queued = append(queued, b.queued...)
		case <-t.C:
			return done(nil)
		case <-ctx.Done():
			return done(ctx.Err())
		case <-s.stopped:
			return done(failure.ErrClosed)
		}
	}
	return done(nil)
}

// Close refuses new calls and fails queued ones with failure.ErrClosed, lets
// requests on the wire finish until ctx ends, then cancels them, stops
// every actor and goroutine, and returns ctx's error if it had to cancel.
// A Close called while another runs waits for it, or for its own ctx.
func (s *System) Close(ctx context.Context) error {
	if s.closing.CompareAndSwap(false, true) {
		return s.close(ctx)
	}
	select {
	case <-s.stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sluice: close: %w while another Close was still stopping the limiter", ctx.Err())
	}
}

func (s *System) close(ctx context.Context) error {
	defer close(s.stopped)
	var err error
	{
		s.subMu.Lock()
		s.closed.Store(true)
		s.subMu.Unlock()
		s.root.Send(s.sup, &closeMsg{err: failure.ErrClosed})
		allDone := make(chan struct{})
		go func() { s.calls.Wait(); close(allDone) }()
		select {
		case <-allDone:
		case <-ctx.Done():
			err = fmt.Errorf("sluice: close: %w; requests still on the wire were cancelled", ctx.Err())
		}
		s.hardCancel()
		s.stopAttempts()
		// Requests on the wire end with the cancellation and report to
		// their (still running) buckets; no new goroutine starts.
		s.workers.Stop()
		s.workers.Wait()
		// Stopping the supervisor stops its children; both fail whatever
		// they still hold with failure.ErrClosed.
		_ = s.root.PoisonFuture(s.sup).Wait()
		s.live.Each(func(c *Call) bool {
			c.Complete(nil, failure.ErrClosed)
			return true
		})
		<-allDone
		s.tel.Close()
		actorhost.Release()
	}
	return err
}

// job is a worker's work (System.workers, a workers.Pool): f, or else one
// attempt (System.work) with its arguments, which travel by value (a
// closure over them cost an allocation a request).
type job struct {
	f      func()
	conn   *transport.Conn
	call   *Call
	bucket *actor.PID
	sr     *ratelimit.SharedRequest
}

// dispatcher runs the System's mailboxes (the supervisor's and every
// bucket actor's) on an idle worker of its pool when one waits (an
// actor.Dispatcher): protoactor's default starts a goroutine each time an
// idle mailbox gets a message, and that goroutine's stack grows again, by
// copying, on the way down a bucket actor's Receive (7% of the CPU under
// 64 callers, BenchmarkDo); a worker kept from an earlier job has its
// stack grown already. When no worker waits, or once the pool is stopped
// (Close, before the actors stop), a mailbox runs on a goroutine of its
// own, as protoactor's default does: a mailbox's run is short, and a
// worker started for it would stay for the pool's idle timeout (a burst
// of new buckets left one per bucket, 170 B of heap each).
type dispatcher struct{ s *System }

// Schedule runs fn, a mailbox's run, on an idle worker or on its own.
func (d dispatcher) Schedule(fn func()) {
	if !d.s.workers.Lend(job{f: fn}) {
		go fn()
	}
}

// Throughput is how many messages a mailbox run takes before it yields
// (protoactor's default).
func (dispatcher) Throughput() int { return 300 }

func (j job) run(s *System) {
	if j.f != nil {
		j.f()
		return
	}
	s.work(j.conn, j.call, j.bucket, j.sr)
}

// SharedWake tells the bucket actor of major that an answer its requests
// wait for in the shared count has come (see Config.Shared): they try
// again at once. Safe to call from any goroutine, also after Close.
func (s *System) SharedWake(major string) {
	s.subMu.RLock() // Close sets closed under the write lock
	defer s.subMu.RUnlock()
	if s.closed.Load() {
		return
	}
	s.root.Send(s.sup, &sharedWakeMsg{major: major, seq: s.wakes.Add(1)})
}

// SharedResumed tells every bucket actor that the shared count answers
// again after an outage: lanes held by a refusal of the fallback share
// (SharedGrant.Local) ask again at once rather than at the end of its
// wait, which counted what Redis no longer hides. Safe to call from any
// goroutine, also after Close.
func (s *System) SharedResumed() {
	s.subMu.RLock()
	defer s.subMu.RUnlock()
	if s.closed.Load() {
		return
	}
	s.root.Send(s.sup, &sharedWakeMsg{all: true})
}

// SharedGlobalBlocked pauses global window w for wait: another process
// sharing it (the token, or the egress IP) met a global 429. Safe to call
// from any goroutine.
func (s *System) SharedGlobalBlocked(w Window, wait time.Duration) {
	s.subMu.RLock()
	defer s.subMu.RUnlock()
	if s.closed.Load() || w >= numWindows {
		return
	}
	now := s.now()
	g := s.windows[w].Limiter
	if wait <= g.Blocked(now) {
		return // paused this long already
	}
	until := now.Add(wait)
	g.Block(until)
	s.root.Send(s.sup, &globalHitMsg{window: w, until: until})
}

// work sends one attempt of c on conn and reports to its bucket actor in
// one resultMsg (System.hand): attempt.Runner.Run does the attempt, with
// the shared store's reservation and report and the global 429's block
// (told to the supervisor, System.globalHit), and hands over exactly one
// result.
func (s *System) work(conn *transport.Conn, c *Call, bucket *actor.PID, sr *ratelimit.SharedRequest) {
	s.run.Run(dest{call: c, bucket: bucket}, attempt.Send{Conn: conn, Req: c.Req, Bounds: c.bounds(),
		Window: s.windows[c.window], Shared: sr, Place: c.place.Shared(), SentAt: c.sentAt, Route: c.Route.Redacted()})
}

// dest is where an attempt's result goes (attempt.Runner's T): its call,
// to its bucket actor.
type dest struct {
	call   *Call
	bucket *actor.PID
}

// hand sends an attempt's result to its bucket actor (attempt.Runner.Hand).
func (s *System) hand(d dest, r attempt.Result) {
	s.root.Send(d.bucket, &resultMsg{call: d.call, Result: r})
}

// globalHit tells the supervisor of a global 429, for its state machine
// and its timer (attempt.Runner.GlobalHit): the window is paused already.
func (s *System) globalHit(d dest, until time.Time) {
	s.root.Send(s.sup, &globalHitMsg{window: d.call.window, until: until})
}

// stopAttempts cancels every attempt on the wire: Close gave up waiting
// (hardCtx is done first, so an attempt recorded after this pass cancels
// itself).
func (s *System) stopAttempts() {
	s.live.Each(func(c *Call) bool {
		if cancel, ok := c.attempt.Load().(context.CancelFunc); ok {
			cancel()
		}
		return true
	})
}

// Load is a reading of the system taken without an actor message: the
// figures its observable metrics report (see gauges).
type Load struct {
	Time                      time.Time
	State                     string // the supervisor's state
	Pending, Running, Buckets int
	InvalidLeft               int // -1: no invalid-request budget
	Windows                   []WindowSnapshot
}

// gauges is the reading the observable metrics report
// (telemetry.Gauges), taken at each metric collection, on the SDK's
// goroutine: the same counters and windows as Load.
func (s *System) gauges() telemetry.Gauges {
	now := s.now()
	g := telemetry.Gauges{Pending: s.pending.Load(), Running: s.running.Load(), Buckets: s.buckets.Load(),
		State: s.supState.Load(), InvalidLeft: -1}
	if s.cfg.Invalid != nil {
		g.InvalidLeft = int64(s.cfg.Invalid.Left(now))
	}
	g.Windows = make([]telemetry.WindowGauge, 0, len(s.windows))
	for w, gw := range s.windows {
		g.Windows = append(g.Windows, telemetry.WindowGauge{Name: Window(w).String(), Used: int64(gw.Count(now)), Paused: gw.Limiter.Blocked(now)})
	}
	return g
}

// Load reads the system's counters and global windows. It is safe to
// call from any goroutine at any time, also after Close.
func (s *System) Load() Load {
	now := s.now()
	ld := Load{Time: now, State: fsm.SupervisorState(s.supState.Load()).String(),
		Pending: int(s.pending.Load()), Running: int(s.running.Load()), Buckets: int(s.buckets.Load()), InvalidLeft: -1}
	if s.cfg.Invalid != nil {
		ld.InvalidLeft = s.cfg.Invalid.Left(now)
	}
	for w, g := range s.windows {
		ws := WindowSnapshot{Name: Window(w).String(), State: "open", Used: g.Count(now), PausedFor: g.Limiter.Blocked(now)}
		if ws.PausedFor > 0 {
			ws.State = "global_limit"
		}
		ws.Limit, _, _ = g.Limit()
		ld.Windows = append(ld.Windows, ws)
	}
	return ld
}
