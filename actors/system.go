package actors

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/ratelimit"
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
	// MaxResponseBytes bounds a response body.
	MaxResponseBytes int64
	// IdleAfter is how long a bucket actor lives on after its window ended
	// with nothing to do.
	IdleAfter time.Duration
	// Backoff spaces reconnection attempts.
	Backoff transport.Backoff
	// Logger receives warnings and, at debug level, the message trace.
	Logger *slog.Logger
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
	noWork  bool           // set by Close: goWork starts nothing more
	calls   sync.WaitGroup // submitted calls without an outcome
	// live holds every submitted call without an outcome (id -> *Call).
	// protoactor drops user messages still in a mailbox when an actor
	// stops, so Close answers whatever is left here once every actor has
	// stopped: every call gets exactly one outcome.
	live   sync.Map
	closed atomic.Bool
	ids    atomic.Uint64
	stop   sync.Once
}

// Start spawns the supervisor, which starts connecting at once.
func Start(cfg Config) *System {
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
	s := &System{cfg: cfg, actors: as, root: as.Root, global: cfg.Global, store: cfg.Store, log: log}
	s.hardCtx, s.hardCancel = context.WithCancel(context.Background())
	props := actor.PropsFromProducer(func() actor.Actor { return newSupervisor(s) },
		actor.WithReceiverMiddleware(s.receiveMiddleware()...))
	s.sup = s.root.Spawn(props)
	return s
}

func (s *System) now() time.Time { return s.cfg.Clock() }

// NextID returns a fresh call id.
func (s *System) NextID() uint64 { return s.ids.Add(1) }

// Now reads the system's clock.
func (s *System) Now() time.Time { return s.now() }

// Submit hands c to the supervisor. After Close began, c fails with
// ErrClosed at once.
func (s *System) Submit(c *Call) {
	s.calls.Add(1)
	s.live.Store(c.ID, c)
	c.arm(func() {
		s.live.Delete(c.ID)
		s.calls.Done()
	})
	if s.closed.Load() {
		c.Complete(nil, ErrClosed)
		return
	}
	s.root.Send(s.sup, &submitMsg{calls: []*Call{c}})
}

// Snapshot asks the supervisor for its state.
func (s *System) Snapshot(ctx context.Context) (Snapshot, error) {
	reply := make(chan Snapshot, 1)
	s.root.Send(s.sup, &snapshotMsg{reply: reply})
	select {
	case snap := <-reply:
		return snap, nil
	case <-ctx.Done():
		return Snapshot{}, ctx.Err()
	}
}

// Close refuses new calls and fails queued ones with ErrClosed, lets
// requests on the wire finish until ctx ends, then cancels them, stops
// every actor and goroutine, and returns ctx's error if it had to cancel.
func (s *System) Close(ctx context.Context) error {
	var err error
	s.stop.Do(func() {
		s.closed.Store(true)
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
		s.actors.Shutdown()
	})
	return err
}

// goWork runs f on a goroutine that Close waits for.
func (s *System) goWork(f func()) bool {
	s.workMu.Lock()
	defer s.workMu.Unlock()
	if s.noWork {
		return false
	}
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		f()
	}()
	return true
}

// work sends one request on conn and reports to the bucket: headers as soon
// as they arrive, then the result with the whole body.
func (s *System) work(conn *transport.Conn, d *dispatchMsg, sup *actor.PID) {
	c := d.call
	ctx, cancel := context.WithCancel(c.Ctx)
	defer cancel()
	stop := context.AfterFunc(s.hardCtx, cancel)
	defer stop()

	req, err := s.prepare(ctx, c)
	if err != nil {
		s.root.Send(sup, &workDoneMsg{call: c, notSent: true})
		s.root.Send(d.bucket, &resultMsg{call: c, err: err, conn: conn})
		return
	}
	resp, err := conn.RoundTrip(req)
	s.root.Send(sup, &workDoneMsg{call: c, notSent: err != nil && transport.Classify(err) == transport.NotSent})
	if err != nil {
		s.root.Send(d.bucket, &resultMsg{call: c, err: err, conn: conn})
		return
	}
	s.root.Send(d.bucket, &headersMsg{call: c, status: resp.StatusCode, header: resp.Header, at: s.now()})
	body, err := readBody(resp.Body, s.cfg.MaxResponseBytes)
	resp.Body.Close()
	if err != nil {
		s.root.Send(d.bucket, &resultMsg{call: c, err: err, conn: conn})
		return
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	s.root.Send(d.bucket, &resultMsg{call: c, resp: resp, body: body, conn: conn})
}

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
	return req, nil
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

// trace logs one actor event at debug level; free when debug is off.
func (s *System) trace(pid *actor.PID, what string, attrs ...slog.Attr) {
	if !s.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	id := ""
	if pid != nil {
		id = pid.Id
	}
	s.log.LogAttrs(context.Background(), slog.LevelDebug, "sluice: "+what, append([]slog.Attr{slog.String("actor", id)}, attrs...)...)
}

// receiveMiddleware is the receiver middleware of every actor: with debug
// logging on, one trace line per message received.
func (s *System) receiveMiddleware() []actor.ReceiverMiddleware {
	if !s.log.Enabled(context.Background(), slog.LevelDebug) {
		return nil
	}
	return []actor.ReceiverMiddleware{func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			s.trace(c.Self(), "receive", slog.String("message", fmt.Sprintf("%T", env.Message)))
			next(c, env)
		}
	}}
}
