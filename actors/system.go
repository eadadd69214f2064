package actors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

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
	// Transport configures the one HTTP/2 connection.
	Transport transport.Config
	// Global is the proactive global limit.
	Global ratelimit.GlobalLimiter
	// Store keeps bucket limits and route aliases outside the actors.
	Store ratelimit.BucketStore
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
	// MaxResponseBytes bounds a response body.
	MaxResponseBytes int64
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
	global ratelimit.GlobalLimiter
	store  ratelimit.BucketStore
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
	// gate and waiting are published by the supervisor for the bucket
	// actors (see supervisor.publish and supervisor.ring); only the
	// supervisor stores them.
	gate    atomic.Pointer[gate]
	waiting atomic.Int32
	// keeper and keep: the global window's fast path (reserveFast).
	keeper keeper
	keep   int
	// clock learns the server's clock from every answer (see
	// ratelimit.ServerClock); safe for concurrent use.
	clock    ratelimit.ServerClock
	supState atomic.Int64 // the supervisor's fsm.SupervisorState
	tel      *telemetry   // nil: no OpenTelemetry
	badToken atomic.Bool  // a 401 to the configured token: later calls fail fast
	stop     sync.Once

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

// Start spawns the supervisor, which starts connecting at once. It fails
// only if the MeterProvider refuses an instrument.
func Start(cfg Config) (*System, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	as := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return log.With(slog.String("component", "protoactor"))
		}),
		// protoactor starts a goroutine per dead-letter throttle period;
		// keep it short so none outlives Close by more than a moment.
		actor.WithDeadLetterThrottleInterval(time.Millisecond),
	)
	s := &System{cfg: cfg, actors: as, root: as.Root, global: cfg.Global, store: cfg.Store, log: log, crashHook: cfg.crashHook}
	if k, ok := cfg.Global.(keeper); ok {
		n, _ := k.Limit()
		s.keeper, s.keep = k, int(float64(n)*(1-fastShare))
	}
	tel, err := newTelemetry(cfg.TracerProvider, cfg.MeterProvider, s)
	if err != nil {
		as.Shutdown()
		return nil, fmt.Errorf("sluice: metrics: %w", err)
	}
	s.tel = tel
	s.hardCtx, s.hardCancel = context.WithCancel(context.Background())
	s.workCh = make(chan func())
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
	// Close sets closed under subMu's write lock before it waits on calls,
	// so no Add can race with that Wait.
	s.subMu.RLock()
	if s.closed.Load() {
		s.subMu.RUnlock()
		c.Complete(nil, ErrClosed)
		return
	}
	s.calls.Add(1)
	s.subMu.RUnlock()
	n := s.pending.Add(1)
	s.live.Store(c.ID, c)
	s.tel.start(c)
	c.arm(func() {
		s.tel.finish(c)
		s.live.Delete(c.ID)
		s.pending.Add(-1)
		s.calls.Done()
	})
	if err := s.admit(n); err != nil {
		c.Complete(nil, err)
		return
	}
	s.root.Send(s.sup, &submitMsg{calls: []*Call{c}})
}

// admit refuses a call that must not be queued: after Close, with a bad
// token, over the pending bound, or while the invalid-request budget is
// exhausted.
func (s *System) admit(pending int64) error {
	switch {
	case s.closed.Load():
		return ErrClosed
	case s.cfg.MaxPending > 0 && pending > int64(s.cfg.MaxPending):
		return fmt.Errorf("%w: %d requests pending", ErrQueueFull, pending-1)
	}
	return s.refusal(s.now())
}

// refusal is the error every queued call gets while requests are refused
// wholesale: a rejected token or an exhausted invalid-request budget.
func (s *System) refusal(now time.Time) error {
	if s.badToken.Load() {
		return ErrUnauthorized
	}
	return s.budget(now)
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
	reply := make(chan supervisorSnapshot, 1)
	s.root.Send(s.sup, &snapshotMsg{reply: reply})
	var sup supervisorSnapshot
	select {
	case sup = <-reply:
	case <-ctx.Done():
		return Snapshot{}, ctx.Err()
	}
	snap := sup.snap
	if len(sup.buckets) == 0 {
		return snap, nil
	}
	replies := make(chan []BucketSnapshot, len(sup.buckets))
	for _, pid := range sup.buckets {
		s.root.Send(pid, &bucketSnapshotMsg{reply: replies})
	}
	// A bucket stopping right now never answers: wait for the others a
	// bounded time.
	t := time.NewTimer(time.Second)
	defer t.Stop()
	for range sup.buckets {
		select {
		case b := <-replies:
			snap.Buckets = append(snap.Buckets, b...)
		case <-t.C:
			return sortBuckets(snap), nil
		case <-ctx.Done():
			return sortBuckets(snap), ctx.Err()
		}
	}
	return sortBuckets(snap), nil
}

func sortBuckets(s Snapshot) Snapshot {
	slices.SortFunc(s.Buckets, func(a, b BucketSnapshot) int { return strings.Compare(a.Key, b.Key) })
	return s
}

// Close refuses new calls and fails queued ones with ErrClosed, lets
// requests on the wire finish until ctx ends, then cancels them, stops
// every actor and goroutine, and returns ctx's error if it had to cancel.
func (s *System) Close(ctx context.Context) error {
	var err error
	s.stop.Do(func() {
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
		s.actors.Shutdown()
	})
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
		f()
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

// fastShare is the share of the global window a bucket actor may reserve
// on its own, while nobody waits; the rest is handed out by the
// supervisor's admission queue, longest backlog first, so the last slots
// of a window go where they are most needed (a hot channel) rather than to
// whoever asked first.
const fastShare = 0.5

// reserveFast reserves a global slot for a bucket actor on its own, if the
// window has more than its share free. A GlobalLimiter that cannot tell is
// reserved from freely.
func (s *System) reserveFast(now time.Time) bool {
	if s.keeper != nil {
		return s.keeper.ReserveKeeping(now, s.keep)
	}
	ok, _ := s.global.Reserve(now)
	return ok
}

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
func (s *System) work(conn *transport.Conn, c *Call, bucket *actor.PID) {
	ctx, cancel := context.WithCancel(c.Ctx)
	defer cancel()
	stop := context.AfterFunc(s.hardCtx, cancel)
	defer stop()

	req, err := s.prepare(ctx, c)
	if err != nil {
		s.root.Send(bucket, &resultMsg{call: c, at: s.now(), err: &notSentError{err}})
		return
	}
	resp, err := conn.RoundTrip(req)
	at := s.now()
	if err != nil {
		s.root.Send(bucket, &resultMsg{call: c, at: at, err: connectionError(ctx, err)})
		return
	}
	m := &resultMsg{call: c, at: at}
	h, herr := ratelimit.ParseHeaders(resp.Header, at)
	if herr != nil {
		s.log.Warn("sluice: malformed rate-limit headers", slog.String("route", c.Route.Redacted()), slog.String("error", herr.Error()))
	}
	m.headers = h
	body, err := readBody(resp.Body, s.cfg.MaxResponseBytes)
	resp.Body.Close()
	if err = connectionError(ctx, err); err != nil {
		m.err = err
		s.root.Send(bucket, m)
		return
	}
	m.verdict = ratelimit.Classify(resp.StatusCode, h, body)
	if m.verdict.Kind == ratelimit.GlobalLimit {
		// Pause every request at once: the shared window refuses
		// reservations from now on, before any actor hears of it.
		until := at.Add(m.verdict.Wait)
		s.global.Block(until)
		s.root.Send(s.sup, &globalHitMsg{until: until})
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	m.resp = resp
	s.root.Send(bucket, m)
}

// notSentError marks a request that failed before anything reached the
// wire (its body could not be rebuilt): it is not resent.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// prepare builds the request for one attempt: the target URL on the base,
// a fresh body, and the default headers.
func (s *System) prepare(ctx context.Context, c *Call) (*http.Request, error) {
	req := c.Req.Clone(ctx)
	u := *s.cfg.BaseURL
	if c.Req.URL.Host == "" {
		u.Path = joinPath(s.cfg.BaseURL.Path, c.Req.URL.Path)
		u.RawPath = ""
	} else {
		u.Path, u.RawPath = c.Req.URL.Path, c.Req.URL.RawPath
	}
	u.RawQuery = c.Req.URL.RawQuery
	req.URL = &u
	req.Host = u.Host
	if c.Req.GetBody != nil {
		b, err := c.Req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("sluice: request body: %w", err)
		}
		req.Body = b
	}
	if req.Header.Get("Authorization") == "" && s.cfg.Authorization != "" {
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

func readBody(r io.Reader, max int64) ([]byte, error) {
	if max <= 0 {
		max = 64 << 20
	}
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrResponseTooLarge, max)
	}
	return b, nil
}
