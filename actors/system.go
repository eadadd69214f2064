package actors

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/fsm"
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
	// False: they go without it unless the caller set one (see windowOf).
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
// pool grows to it by one connection per callsPerConn requests awaiting an
// outcome: a connection reset ends only the requests of one connection in
// up to 16.
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
	windows [numWindows]*globalWindow
	store   ratelimit.BucketStore
	// firsts: one first pioneer at a time per route template, across
	// the actors (firsts.go).
	firsts firstPioneers
	log    *slog.Logger

	// hardCtx ends every request on the wire when Close gives up waiting.
	hardCtx    context.Context
	hardCancel context.CancelFunc

	workers sync.WaitGroup // goroutines: requests, dials, watchers
	workMu  sync.Mutex     // guards noWork against workers.Add
	workCh  chan func()    // idle workers receive work here (unbuffered)
	noWork  bool           // set by Close: goWork starts nothing more
	calls   sync.WaitGroup // submitted calls without an outcome
	// live holds every submitted call without an outcome (id -> *Call).
	// protoactor drops user messages still in a mailbox when an actor
	// stops, so Close answers whatever is left here once every actor has
	// stopped: every call gets exactly one outcome.
	live    sync.Map
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
	supState atomic.Int64 // the supervisor's fsm.SupervisorState
	tel      *telemetry   // nil: no OpenTelemetry
	auth     authLatch    // a 401 to the configured token: later calls fail fast
	buffered atomic.Int64 // response bytes being read now (MaxBufferedBytes)
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

	// groups are the live groups of the declared limits (Call.Limits).
	groups groupSet

	// crashHook is the test seam from Config.crashHook.
	crashHook func(msg any)
}

// Restart intensity: a bucket actor that crashes more than maxCrashes times
// within crashWindow breaks: it fails its queued calls and every call that
// reaches it with ErrActorCrashed, then stops through the ordinary idle
// path (so no message is dropped); the next call for its bucket starts a
// fresh actor, with the limits kept in the store. Until then, every crash
// restarts the same instance (supervision.RestartStrategy).
const (
	maxCrashes  = 10
	crashWindow = 10 * time.Second
)

// host is the protoactor actor system every System of the process runs on:
// one process registry for all limiters (protoactor allocates about 3 MB
// for it up front, which one per token made the proxy's idle tokens cost
// 3.2 MB each). Each System spawns its own supervisor, with its own
// children, so Systems share nothing else. Made with the first System,
// shut down with the last.
//
// Its own logs are discarded: Sluice logs crashes and failures itself,
// through each System's logger, and protoactor's dead-letter lines would
// print messages (requests) verbatim.
var host struct {
	mu    sync.Mutex
	as    *actor.ActorSystem
	users int
}

func acquireHost() *actor.ActorSystem {
	host.mu.Lock()
	defer host.mu.Unlock()
	if host.users == 0 {
		host.as = actor.NewActorSystem(
			actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }),
			// protoactor starts a goroutine per dead-letter throttle period;
			// keep it short so none outlives Close by more than a moment.
			actor.WithDeadLetterThrottleInterval(time.Millisecond),
		)
	}
	host.users++
	return host.as
}

func releaseHost() {
	host.mu.Lock()
	defer host.mu.Unlock()
	host.users--
	if host.users == 0 {
		host.as.Shutdown()
		host.as = nil
	}
}

// Start spawns the supervisor, which starts connecting at once. It fails
// only if the MeterProvider refuses an instrument.
func Start(cfg Config) (*System, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	as := acquireHost()
	s := &System{cfg: cfg, actors: as, root: as.Root, store: cfg.Store, log: log, crashHook: cfg.crashHook}
	s.windows[BotWindow] = newGlobalWindow(cfg.Global, cfg.Shared)
	ipGlobal := cfg.IPGlobal
	if ipGlobal == nil {
		ipGlobal = cfg.Global
	}
	s.windows[IPWindow] = newGlobalWindow(ipGlobal, cfg.IPShared)
	tel, err := newTelemetry(cfg.TracerProvider, cfg.MeterProvider, s)
	if err != nil {
		releaseHost()
		return nil, fmt.Errorf("sluice: metrics: %w", err)
	}
	s.tel = tel
	s.hardCtx, s.hardCancel = context.WithCancel(context.Background())
	s.workCh = make(chan func())
	s.stopped = make(chan struct{})
	s.bucketProps = actor.PropsFromProducer(func() actor.Actor { return &bucketCell{sys: s} },
		actor.WithMailbox(bucketMailbox),
		actor.WithReceiverMiddleware(s.receiveMiddleware()...),
		actor.WithSenderMiddleware(s.senderMiddleware()...))
	props := actor.PropsFromProducer(func() actor.Actor { return newSupervisor(s) },
		actor.WithReceiverMiddleware(s.receiveMiddleware()...),
		actor.WithSenderMiddleware(s.senderMiddleware()...),
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
// ErrClosed at once.
func (s *System) Submit(c *Call) {
	s.classify(c)
	c.shared = s.sharedPlaceOf(c)
	n, ok := s.register(c)
	if !ok {
		return
	}
	if err := s.admit(c, n); err != nil {
		c.Complete(nil, err)
		return
	}
	s.reserveShared(c)
	s.root.Send(s.sup, &submitMsg{calls: []*Call{c}})
}

// register counts c as submitted (Close waits for its outcome) and returns
// the number of calls pending with it; false (c failed with ErrClosed)
// after Close began.
func (s *System) register(c *Call) (int64, bool) {
	// Close sets closed under subMu's write lock before it waits on calls,
	// so no Add can race with that Wait.
	s.subMu.RLock()
	if s.closed.Load() {
		s.subMu.RUnlock()
		c.Complete(nil, ErrClosed)
		return 0, false
	}
	s.calls.Add(1)
	s.subMu.RUnlock()
	n := s.pending.Add(1)
	s.live.Store(c.ID, c)
	s.tel.start(c)
	c.arm(func() {
		if len(c.Limits) > 0 {
			s.groups.release(c, s.now())
		}
		if c.authProbe.Load() {
			s.auth.probeEnded()
		}
		s.tel.finish(c)
		s.live.Delete(c.ID)
		s.pending.Add(-1)
		s.calls.Done()
	})
	return n, true
}

// SubmitDirect sends c on rt, outside the rate limits and the actors: for
// a request to another host than the API's (a redirect to a CDN), which
// Discord's limits do not cover and the API's connection cannot reach. It
// is sent once (no retry), within AttemptTimeout, its body read within
// MaxResponseBytes; Close waits for it like for any call, then cancels it.
func (s *System) SubmitDirect(c *Call, rt http.RoundTripper) {
	c.direct = true
	c.due.Store(dueNever)
	if _, ok := s.register(c); !ok {
		return
	}
	run := func() {
		defer func() {
			if r := recover(); r != nil {
				c.Complete(nil, fmt.Errorf("%w: %v", ErrInternal, r))
			}
		}()
		ctx, end := s.attemptContext(c)
		defer end()
		fail := func(err error) {
			if ctx.Err() != nil {
				err = s.attemptEnded(ctx, c)
			}
			c.Complete(nil, err)
		}
		req := c.Req.Clone(ctx)
		if c.Req.GetBody != nil {
			b, err := c.Req.GetBody()
			if err != nil {
				fail(err)
				return
			}
			req.Body = b
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			fail(err)
			return
		}
		body, err := s.readBody(resp)
		resp.Body.Close()
		if err != nil {
			if !errors.Is(err, ErrResponseTooLarge) && ctx.Err() != nil {
				err = ctxError(ctx)
			}
			c.Complete(nil, err)
			return
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		c.Complete(resp, nil)
	}
	if !s.goWork(run) {
		c.Complete(nil, ErrClosed)
	}
}

// admit refuses a call that must not be queued: after Close, with a
// rejected token (unless c is let through to check it again), over the
// pending bound, or while the invalid-request budget is exhausted.
func (s *System) admit(c *Call, pending int64) error {
	switch {
	case s.closed.Load():
		return ErrClosed
	case s.cfg.MaxPending > 0 && pending > int64(s.cfg.MaxPending):
		return fmt.Errorf("%w: %d requests pending", ErrQueueFull, pending-1)
	}
	now := s.now()
	if s.auth.refuses(c, now, s.botAuthenticated(c)) {
		return ErrUnauthorized
	}
	return s.budget(now)
}

// botAuthenticated reports whether c is sent with the configured token
// (it carries no Authorization header of its own and counts on the bot's
// window) and its route is not authenticated by a token in its path
// (webhooks, interactions): a 401 to it is about the configured token.
func (s *System) botAuthenticated(c *Call) bool {
	return s.sentWithToken(c) && !c.Route.PerToken
}

// sentWithToken reports whether prepare adds the configured token to c.
func (s *System) sentWithToken(c *Call) bool {
	return s.cfg.Authorization != "" && c.window == BotWindow && c.Req.Header.Get("Authorization") == ""
}

// budget returns a *BudgetError while the invalid-request budget is
// exhausted.
func (s *System) budget(now time.Time) error {
	if s.cfg.Invalid == nil {
		return nil
	}
	if wait, n, per := s.cfg.Invalid.Refusing(now); wait > 0 {
		return &BudgetError{Count: n, Window: per, RetryAfter: wait}
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
		return Snapshot{}, ErrClosed
	}
	reply := make(chan supervisorSnapshot, 1)
	s.root.Send(s.sup, &snapshotMsg{reply: reply})
	var sup supervisorSnapshot
	select {
	case sup = <-reply:
	case <-ctx.Done():
		return Snapshot{}, ctx.Err()
	case <-s.stopped:
		return Snapshot{}, ErrClosed
	}
	snap := sup.snap
	snap.Groups = s.groups.snapshot(s.now())
	slices.SortFunc(snap.Groups, func(a, b GroupSnapshot) int {
		return cmp.Or(strings.Compare(a.Limit, b.Limit), strings.Compare(a.Group, b.Group))
	})
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
			return done(ErrClosed)
		}
	}
	return done(nil)
}

// Close refuses new calls and fails queued ones with ErrClosed, lets
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
		s.root.Send(s.sup, &closeMsg{err: ErrClosed})
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
		s.workMu.Lock()
		s.noWork = true
		s.workMu.Unlock()
		s.workers.Wait()
		// Stopping the supervisor stops its children; both fail whatever
		// they still hold with ErrClosed.
		_ = s.root.PoisonFuture(s.sup).Wait()
		s.live.Range(func(_, v any) bool {
			v.(*Call).Complete(nil, ErrClosed)
			return true
		})
		<-allDone
		s.tel.close()
		releaseHost()
	}
	return err
}

// workerIdle is how long a worker goroutine waits for more work before it
// exits. Reusing workers spares a goroutine start per request and keeps
// their stacks grown for the HTTP/2 and TLS write path.
const workerIdle = 30 * time.Second

// goWork runs f on a worker goroutine that Close waits for: an idle one if
// there is one, else a new one. It returns false once Close has begun.
func (s *System) goWork(f func()) bool {
	s.workMu.Lock()
	defer s.workMu.Unlock()
	if s.noWork {
		return false
	}
	select {
	case s.workCh <- f: // an idle worker took it
		return true
	default:
	}
	s.workers.Add(1)
	go s.worker(f)
	return true
}

// worker runs f, then whatever work comes while it is idle for less than
// workerIdle, until Close.
func (s *System) worker(f func()) {
	defer s.workers.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		s.runGuarded(f)
		idle.Reset(workerIdle)
		select {
		case f = <-s.workCh:
		case <-idle.C:
			return
		case <-s.hardCtx.Done():
			return
		}
	}
}

// runGuarded runs f and stops a panic there from reaching the process:
// each job recovers what concerns its own call or connection (see work,
// supervisor.dial); this is the last line, which logs.
func (s *System) runGuarded(f func()) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("sluice: recovered a panic on a worker goroutine", slog.Any("panic", r))
		}
	}()
	f()
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
	g := s.windows[w].limiter
	if wait <= g.Blocked(now) {
		return // paused this long already
	}
	until := now.Add(wait)
	g.Block(until)
	s.root.Send(s.sup, &globalHitMsg{window: w, until: until})
}

// fastShare is the share of the global window a bucket actor may reserve
// on its own, while nobody waits; the rest is handed out by the
// supervisor's admission queue, longest backlog first, so the last slots
// of a window go where they are most needed (a hot channel) rather than to
// whoever asked first.
const fastShare = 0.5

// keeper is a GlobalLimiter that can keep slots free (ratelimit.SlidingWindow).
type keeper interface {
	ReserveKeeping(now time.Time, keep int) bool
	Limit() (int, time.Duration)
}

// work sends one attempt of c on conn and reports to its bucket actor in
// one resultMsg: the answer parsed and classified here, once, with the time
// its headers arrived. A global 429 blocks the shared global window here,
// before any actor hears of it, so no request follows it into the outage;
// the supervisor is told too, for its state machine and its timer.
//
// The attempt ends with the caller's context, with Close (ErrClosed) and
// after AttemptTimeout (ErrAttemptTimeout), whichever comes first. A panic
// here becomes this call's ErrInternal: exactly one resultMsg is sent.
func (s *System) work(conn *transport.Conn, c *Call, bucket *actor.PID, sr *ratelimit.SharedRequest) {
	claimed := true // gate.pick's Claim on conn, ended as the request is handed over
	defer func() {
		if claimed {
			conn.Unclaim()
		}
	}()
	win := s.windows[c.window]
	reported := false
	var grant ratelimit.SharedGrant
	var shared *ratelimit.SharedAnswer // the answer to report to Shared, once the caller has it
	// toShared reports the answer to the shared store, once.
	toShared := func() {
		if shared != nil {
			win.shared.Report(context.Background(), grant, *shared)
			shared = nil
		}
	}
	report := func(m *resultMsg) {
		reported = true
		// A pioneer's answer reaches the shared store first: the bucket
		// actor pipelines as soon as it learns the bucket, and the store
		// must know it by then. Other answers only correct it: off the
		// caller's path. (A global 429 was reported already.)
		if grant.Pioneer {
			toShared()
		}
		s.root.Send(bucket, m)
		toShared()
	}
	defer func() {
		if r := recover(); r != nil && !reported {
			s.log.Error("sluice: panic while sending a request", slog.String("route", c.Route.Redacted()), slog.Any("panic", r))
			report(&resultMsg{call: c, at: s.now(), err: fmt.Errorf("%w: %v", ErrInternal, r)})
		}
	}()
	ctx, end := s.attemptContext(c)
	defer end()
	// fail types an error of the attempt: the caller's context speaks for
	// itself; Close and the attempt timeout are named by their cause.
	fail := func(err error) error {
		if ctx.Err() != nil && c.Ctx.Err() == nil {
			return s.attemptEnded(ctx, c)
		}
		return connectionError(ctx, err)
	}

	if sr != nil {
		// The shared count (other processes on the token) admits it too,
		// or the bucket actor puts it back in line for the wait told.
		seq := s.wakes.Load()
		grant = win.shared.Reserve(ctx, *sr)
		if sh := c.shared; sh != nil {
			sh.taken.Store(grant.OK && !grant.Local)
		}
		if !grant.OK {
			report(&resultMsg{call: c, at: s.now(), deferred: &grant, wakeSeq: seq})
			return
		}
		shared = &ratelimit.SharedAnswer{Template: sr.Template, Major: sr.Major}
	}
	// wire is when the request's headers were written to the connection:
	// the local time nearest its arrival at the server, which the server
	// clock's samples need (ratelimit.ServerClock). c.sentAt, when the
	// actor handed it over, can be far earlier under load (this
	// goroutine's start, the body, the connection's write lock), and a
	// sample taken from it would have later requests counted early.
	base := s.now()
	var wire atomic.Int64 // since base, +1 so that 0 means "not written"
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() {
		wire.Store(int64(s.now().Sub(base)) + 1)
	}})
	req, err := s.prepare(ctx, c)
	if err != nil {
		if shared != nil {
			shared.Now = s.now()
		}
		report(&resultMsg{call: c, at: s.now(), err: &notSentError{err}})
		return
	}
	handed := s.now()
	claimed = false
	conn.Unclaim()
	resp, err := conn.RoundTrip(req)
	at := s.now()
	wired := handed
	if d := wire.Load(); d > 0 {
		wired = base.Add(time.Duration(d - 1))
	}
	if shared != nil {
		shared.Now, shared.Sent, shared.RoundTrip = at, true, at.Sub(c.sentAt)
	}
	if err != nil {
		if shared != nil && transport.Classify(err) == transport.NotSent {
			shared.Sent = false
		}
		report(&resultMsg{call: c, at: at, err: fail(err)})
		return
	}
	s.lastAnswer.Store(at.UnixNano())
	m := &resultMsg{call: c, at: at, wired: wired}
	h, herr := ratelimit.ParseHeaders(resp.Header, at)
	if herr != nil {
		s.log.Warn("sluice: malformed rate-limit headers", slog.String("route", c.Route.Redacted()), slog.String("error", herr.Error()))
	}
	m.headers = h
	if shared != nil {
		shared.Status, shared.Headers = resp.StatusCode, h
	}
	body, err := s.readBody(resp)
	resp.Body.Close()
	if err != nil {
		if !errors.Is(err, ErrResponseTooLarge) {
			err = fail(err)
		}
		m.err = err
		report(m)
		return
	}
	m.verdict = ratelimit.Classify(resp.StatusCode, h, body)
	if shared != nil {
		shared.Status, shared.Headers, shared.Verdict = resp.StatusCode, h, m.verdict
		s.clock.Annotate(&shared.Headers) // the window's end by the server's clock
	}
	if ratelimit.Judge(ratelimit.Attempt{Sent: true, Status: resp.StatusCode, Headers: h, Verdict: m.verdict}).Pause == ratelimit.PauseGlobal {
		// Pause every request at once: the shared window refuses
		// reservations from now on, before any actor hears of it.
		until := at.Add(m.verdict.Wait)
		win.limiter.Block(until)
		toShared() // and every other process's, before anything here moves
		s.root.Send(s.sup, &globalHitMsg{window: c.window, until: until})
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	m.resp = resp
	report(m)
}

// attemptContext is the context of one attempt of c: it ends with the
// caller's context, after AttemptTimeout (cause ErrAttemptTimeout), and
// when Close gives up waiting (stopAttempts; the attempt's error is then
// ErrClosed). end releases it. One context layer, kept on the call rather
// than hooked on Close's context: three layers cost 8 allocations a request.
func (s *System) attemptContext(c *Call) (ctx context.Context, end func()) {
	var cancel context.CancelFunc
	if d := s.cfg.AttemptTimeout; d > 0 {
		ctx, cancel = context.WithTimeoutCause(c.Ctx, d, ErrAttemptTimeout)
	} else {
		ctx, cancel = context.WithCancel(c.Ctx)
	}
	c.attempt.Store(&cancel)
	if s.hardCtx.Err() != nil {
		cancel() // Close gave up before the attempt was on record
	}
	return ctx, func() {
		c.attempt.Store(nil)
		cancel()
	}
}

// attemptEnded types the end of an attempt's context ctx: the caller's
// (its cause), the attempt timeout (ErrAttemptTimeout) or Close
// (ErrClosed).
func (s *System) attemptEnded(ctx context.Context, c *Call) error {
	if c.Ctx.Err() != nil {
		return ctxError(c.Ctx)
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrAttemptTimeout) {
		return cause
	}
	if s.hardCtx.Err() != nil {
		return ErrClosed
	}
	return ctxError(ctx)
}

// stopAttempts cancels every attempt on the wire: Close gave up waiting
// (hardCtx is done first, so an attempt recorded after this pass cancels
// itself).
func (s *System) stopAttempts() {
	s.live.Range(func(_, v any) bool {
		if cancel := v.(*Call).attempt.Load(); cancel != nil {
			(*cancel)()
		}
		return true
	})
}

// readBody reads resp's body within MaxResponseBytes, refusing at once an
// answer whose Content-Length declares more, and within the bytes all
// requests may buffer at once (MaxBufferedBytes), which it holds only while
// reading: the body then belongs to the caller.
func (s *System) readBody(resp *http.Response) ([]byte, error) {
	limit := s.cfg.MaxResponseBytes
	if limit <= 0 {
		limit = 64 << 20
	}
	if resp.ContentLength > limit {
		return nil, fmt.Errorf("%w: Content-Length %d is over %d bytes", ErrResponseTooLarge, resp.ContentLength, limit)
	}
	var held int64
	defer func() { s.buffered.Add(-held) }()
	take := func(n int64) error {
		if total := s.cfg.MaxBufferedBytes; total > 0 && s.buffered.Add(n) > total {
			s.buffered.Add(-n)
			return fmt.Errorf("%w: more than %d bytes buffered across requests", ErrResponseTooLarge, total)
		}
		held += n
		return nil
	}
	const chunk = 512 // as io.ReadAll: small answers stay small; the buffer doubles
	size := int64(chunk)
	if resp.ContentLength >= 0 {
		size = resp.ContentLength + 1 // +1 sees a body longer than declared
	}
	if err := take(size); err != nil {
		return nil, err
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			grow := int64(max(cap(buf), chunk))
			if int64(cap(buf))+grow > limit+1 {
				grow = limit + 1 - int64(cap(buf))
			}
			if grow <= 0 {
				return nil, fmt.Errorf("%w: more than %d bytes", ErrResponseTooLarge, limit)
			}
			if err := take(grow); err != nil {
				return nil, err
			}
			buf = slices.Grow(buf, int(grow))
		}
		n, err := resp.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrResponseTooLarge, limit)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// notSentError marks a request that failed before anything reached the
// wire (its body could not be rebuilt): it is not resent.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// prepare builds the request for one attempt: the target URL on the base,
// a fresh body, and the default headers. A relative path is put below the
// base path, unless it already starts with it ("/api/v10/…"). An absolute
// URL on the base's host keeps its path; one on Discord's host
// (https://discord.com/api/v9/…) keeps its path below the base's mount
// point (see mountPath), so a base of https://proxy/discord/api/v10 sends
// it to https://proxy/discord/api/v9/…. The path's escaping (%2F in an
// emoji or a name) is kept as given.
func (s *System) prepare(ctx context.Context, c *Call) (*http.Request, error) {
	req := c.Req.Clone(ctx)
	u := *s.cfg.BaseURL
	escaped := c.Req.URL.EscapedPath()
	switch base := s.cfg.BaseURL.EscapedPath(); {
	case c.Req.URL.Host == "":
		if base != "" && base != "/" && (escaped == base || strings.HasPrefix(escaped, strings.TrimSuffix(base, "/")+"/")) {
			base = ""
		}
		escaped = joinPath(base, escaped)
	case !strings.EqualFold(c.Req.URL.Host, s.cfg.BaseURL.Host):
		escaped = joinPath(mountPath(base), escaped)
	}
	p, err := url.PathUnescape(escaped)
	if err != nil {
		return nil, fmt.Errorf("sluice: request path: %w", err)
	}
	u.Path, u.RawPath = p, escaped
	u.RawQuery = c.Req.URL.RawQuery
	req.URL = &u
	req.Host = u.Host
	if req.Header == nil {
		req.Header = make(http.Header)
	}
	if c.Req.GetBody != nil {
		b, err := c.Req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("sluice: request body: %w", err)
		}
		req.Body = b
	}
	if s.sentWithToken(c) {
		req.Header.Set("Authorization", s.cfg.Authorization)
	}
	if req.Header.Get("User-Agent") == "" && s.cfg.UserAgent != "" {
		req.Header.Set("User-Agent", s.cfg.UserAgent)
	}
	if c.span != nil {
		inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	return req, nil
}

// connectionError types an error that came from the connection dying,
// also where net/http reports it raw (while the body streamed, or after the
// supervisor closed a connection already known dead): transport.Classify is
// the one classifier. Such requests were sent and may have been processed.
// Other errors pass unchanged.
func connectionError(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || errors.Is(err, transport.ErrConnectionDied) {
		return err
	}
	if transport.Classify(err) == transport.ConnectionDied {
		return &transport.ConnectionDiedError{Reason: err, Sent: true}
	}
	return err
}

// mountPath is the part of a base path before Discord's own ("/api" and
// an optional "/vN"): where the API is mounted on the base's host. It is
// "/discord" for "/discord/api/v10", and "" for "/api/v10". A base path
// without an "/api" ending is all mount point.
func mountPath(base string) string {
	base = strings.TrimSuffix(base, "/")
	i := strings.LastIndex(base, "/api")
	if i < 0 {
		return base
	}
	rest := base[i+len("/api"):]
	if rest == "" || (len(rest) > 2 && rest[:2] == "/v" && allDigits(rest[2:])) {
		return base[:i]
	}
	return base
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func joinPath(base, p string) string {
	if base == "" || base == "/" {
		return p
	}
	if len(base) > 0 && base[len(base)-1] == '/' {
		base = base[:len(base)-1]
	}
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	return base + p
}

// Load is a reading of the system taken without an actor message: the
// figures its observable metrics report (see telemetry).
type Load struct {
	Time                      time.Time
	State                     string // the supervisor's state
	Pending, Running, Buckets int
	InvalidLeft               int // -1: no invalid-request budget
	Windows                   []WindowSnapshot
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
		ws := WindowSnapshot{Name: Window(w).String(), State: "open", Used: g.used(now), PausedFor: g.limiter.Blocked(now)}
		if ws.PausedFor > 0 {
			ws.State = "global_limit"
		}
		ws.Limit, _, _ = g.limit()
		ld.Windows = append(ld.Windows, ws)
	}
	return ld
}
