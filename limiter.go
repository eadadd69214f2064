package sluice

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/attempt"
	decl "github.com/sluicehq/sluice/internal/declared"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/routes"
)

// MaxRequestBody is the largest request body a Limiter accepts (64 MiB):
// it holds a body in memory to resend it, and refuses a larger one with
// ErrBadRequest, before reading it when its Content-Length says so.
// Discord's own limit is lower (25 MiB per request without boosts).
const MaxRequestBody = 64 << 20

// Limiter sends HTTP requests to a rate-limited API as fast as its rules
// allow and never faster. Create one with New per bot token; it is safe for
// concurrent use by any number of goroutines. The zero value is not usable.
//
// Behind it run a supervisor actor holding a small pool of HTTP/2
// connections (Options.Connections) and a
// bucket actor per rate-limit bucket; see the package documentation.
type Limiter struct {
	sys    *actors.System
	shared *redisstore.Store // nil without Options.Redis
	// ipShared counts requests sent without a token (nil without Redis).
	ipShared *redisstore.Store
	timeout  time.Duration // Options.Timeout resolved (0: none)
	// timeoutErr is the error of a request that reached timeout: one
	// value for them all.
	timeoutErr error
	base       *url.URL        // Options.BaseURL resolved
	direct     *http.Transport // requests to other hosts (see onSite)
	// refuse is Options.RefuseOtherHosts; auth the Authorization header
	// Options.Token makes, removed from requests to other hosts.
	refuse bool
	auth   string
	limits *limitTable // Options.Limits and DefaultLimits
}

// New starts a limiter; it connects in the background. Close it when done.
// It returns an *OptionError, and starts nothing, if an option is out of
// range.
func New(opts Options) (*Limiter, error) {
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	limits, err := compileLimits(opts)
	if err != nil {
		return nil, err
	}
	// The shared stores call back into the system, which starts after them.
	var sysp atomic.Pointer[actors.System]
	var shared, ipShared *redisstore.Store
	if opts.Redis != nil {
		if shared, err = newShared(opts, cfg, &sysp, actors.BotWindow); err != nil {
			return nil, err
		}
		if ipShared, err = newShared(opts, cfg, &sysp, actors.IPWindow); err != nil {
			shared.Close()
			return nil, err
		}
		cfg.Shared, cfg.IPShared = shared, ipShared
	}
	sys, err := actors.Start(cfg)
	if err != nil {
		if shared != nil {
			shared.Close()
			ipShared.Close()
		}
		return nil, err
	}
	sysp.Store(sys)
	direct := &http.Transport{
		Proxy: http.ProxyFromEnvironment, TLSClientConfig: opts.TLSConfig.Clone(), ForceAttemptHTTP2: true,
		IdleConnTimeout: 30 * time.Second, TLSHandshakeTimeout: 10 * time.Second, MaxIdleConnsPerHost: 4,
	}
	return &Limiter{
		sys: sys, shared: shared, ipShared: ipShared, timeout: opts.timeout(), timeoutErr: &TimeoutError{Timeout: opts.timeout()},
		base: cfg.BaseURL, direct: direct,
		refuse: opts.RefuseOtherHosts, auth: cfg.Authorization, limits: limits,
	}, nil
}

// newShared opens the Redis store of one global window: the token's
// (keys below the token's hash), or the egress IP's for requests sent
// without a token (keys below RedisIPKey's hash).
func newShared(opts Options, cfg actors.Config, sysp *atomic.Pointer[actors.System], w actors.Window) (*redisstore.Store, error) {
	sc := redisstore.Config{
		Namespace:         redisstore.Namespace(opts.Token),
		GlobalLimit:       cmpOr(opts.GlobalLimit, DefaultGlobalLimit),
		GlobalPeriod:      cmpOr(opts.GlobalWindow, DefaultGlobalWindow),
		LeaseTTL:          cfg.AttemptTimeout + 10*time.Second,
		Share:             opts.RedisFallbackShare,
		FallbackOnRefusal: opts.RedisFallbackOnRefusal,
		RefuseEviction:    opts.RedisRefuseEviction,
		Timeout:           opts.RedisTimeout,
		Logger:            cfg.Logger,
		Clock:             cfg.Clock,
		Wake: func(major string) {
			if s := sysp.Load(); s != nil {
				s.SharedWake(major)
			}
		},
		GlobalBlocked: func(wait time.Duration) {
			if s := sysp.Load(); s != nil {
				s.SharedGlobalBlocked(w, wait)
			}
		},
		ModeChanged: func(from, to redisstore.Mode) {
			if from == redisstore.Fallback || to == redisstore.Shared {
				if s := sysp.Load(); s != nil {
					s.SharedResumed()
				}
			}
		},
	}
	if w == actors.IPWindow {
		sc.Namespace = redisstore.IPNamespace(cmpOr(opts.RedisIPKey, defaultRedisIPKey))
		sc.GlobalLimit = cmpOr(opts.IPGlobalLimit, defaultIPGlobalLimit)
	}
	if cfg.AttemptTimeout <= 0 {
		sc.LeaseTTL = 0 // the store's default
	}
	if inv := cfg.Invalid; inv != nil {
		_, sc.InvalidLimit, sc.InvalidWindow = inv.Refusing(time.Time{})
	}
	return redisstore.New(opts.Redis, sc)
}

// Send submits req and returns its future once req's body is buffered (at
// once for a body with GetBody or none), or when ctx ends first. ctx
// governs the request while it is queued and in flight: if ctx ends, the
// future completes with ctx's error and the request's place goes to the
// next one. A ctx without a deadline gets Options.Timeout. A request whose
// predicted wait exceeds ctx's deadline (or MaxWait) fails at once with a
// *WaitError.
//
// req's URL may be relative to Options.BaseURL ("/channels/1/messages", or
// with the base's own path, "/api/v10/channels/1/messages") or absolute;
// an absolute URL on another host than the API's (a CDN, or one a redirect
// points to) is sent there directly, once, outside the rate limits and
// without the bot's token (see Options.RefuseOtherHosts). Its body is read
// (and kept) so the request can be sent again after a 429. A JSON message
// creation without a nonce gets one, with enforce_nonce, so it can be
// resent safely (docs/failure-modes.md lists what is resent). Every
// submitted request gets exactly one outcome.
func (l *Limiter) Send(ctx context.Context, req *http.Request) *Future {
	c, direct, err := l.newCall(ctx, req)
	switch {
	case err != nil:
		c.Complete(nil, err)
		return &Future{call: c}
	case direct:
		l.sys.SubmitDirect(c, l.direct)
	default:
		l.sys.Submit(c)
	}
	return &Future{call: c, sys: l.sys}
}

// traceTo adapts Options.Trace to the actors' events (nil stays nil: no
// tracing code runs).
func traceTo(f func(TraceEvent)) func(actors.TraceEvent) {
	if f == nil {
		return nil
	}
	return func(e actors.TraceEvent) { f(TraceEvent(e)) }
}

type retrySafeKey struct{}

// WithRetrySafe returns a context that marks requests sent with it as safe
// to send twice: after a 5xx or a lost connection they are retried even if
// their method is not idempotent (for example a POST carrying Discord's
// enforce_nonce). Requests are never resent silently otherwise.
func WithRetrySafe(ctx context.Context) context.Context {
	return context.WithValue(ctx, retrySafeKey{}, true)
}

type maxWaitKey struct{}

// WithMaxWait returns a context whose requests fail at once, with a
// *WaitError carrying the predicted wait, when the wait predicted for
// their bucket when they are submitted exceeds d: Options.MaxWait for one
// request. The smaller of d and Options.MaxWait applies; d <= 0 leaves
// the context as it is. Unlike a deadline, d does not bound the request
// once it is admitted: a request predicted to wait 1 s may still take
// longer on the wire (Options.Timeout and ctx's deadline bound that).
func WithMaxWait(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	return context.WithValue(ctx, maxWaitKey{}, d)
}

// newCall checks req and builds its call: the default deadline, a copy of
// the request with a replayable body, its route and whether it may be
// resent (routes.Route.Resend, with a nonce added to message creations).
// direct is set for a request to another host than the API's. On error the
// call is returned too, for the error to complete it.
func (l *Limiter) newCall(ctx context.Context, req *http.Request) (c *actors.Call, direct bool, err error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var timeout time.Duration // Options.Timeout, for a context without a deadline
	var began time.Time
	if _, ok := ctx.Deadline(); !ok && l.timeout > 0 {
		timeout, began = l.timeout, time.Now()
	}
	now := l.sys.Now()
	id := l.sys.NextID()
	fail := func(r *http.Request, route routes.Route, err error) (*actors.Call, bool, error) {
		return actors.NewCall(id, ctx, r, route, false, now), false, err
	}
	// failEarly fails req before its body was read: the body is closed,
	// as a RoundTripper must.
	failEarly := func(route routes.Route, err error) (*actors.Call, bool, error) {
		if req != nil && req.Body != nil {
			req.Body.Close()
		}
		return fail(req, route, err)
	}
	if req == nil || req.URL == nil {
		return failEarly(routes.Route{}, fmt.Errorf("%w: nil request or URL", ErrBadRequest))
	}
	direct = !l.APIHost(req.URL)
	var route routes.Route
	if direct {
		if l.refuse {
			return failEarly(route, fmt.Errorf("%w: %s", ErrOtherHost, req.URL.Host))
		}
	} else if route, err = routes.Parse(req.Method, req.URL.EscapedPath()); err != nil {
		return failEarly(route, fmt.Errorf("sluice: %w", err))
	}
	priority := PriorityFrom(ctx)
	if !priority.Valid() {
		return failEarly(route, fmt.Errorf("%w: %v is not a priority (WithPriority)", ErrBadRequest, priority))
	}
	r := cloneRequest(ctx, req)
	if direct {
		// Not sealed (only the API's requests are put on the base): the
		// URL is the caller's, whom the copy must not share it with.
		u := *req.URL
		r.URL = &u
	}
	if direct && l.isBotAuth(r.Header.Get("Authorization")) {
		r.Header.Del("Authorization") // a bot token is for the API only
	}
	policy := route.Resend()
	nonce := policy == routes.ResendWithNonce && JSONBody(r.Header.Get("Content-Type"))
	body, err := l.buffer(ctx, req, nonce || !direct && l.limits.needsBody(route), timeout)
	if err != nil {
		return fail(r, route, err)
	}
	var limits []decl.Ref
	if !direct {
		if limits, err = l.limits.match(route, r, body); err != nil {
			return fail(r, route, err)
		}
	}
	if body != nil {
		safe := false
		if policy == routes.ResendWithNonce {
			body, safe = withNonce(r.Header.Get("Content-Type"), body, now)
		}
		b := body
		// Each attempt reads its body from GetBody (attempt.Exchange);
		// Body itself is never read again.
		r.Body = http.NoBody
		r.GetBody = func() (io.ReadCloser, error) { return attempt.BodyOf(b), nil }
		r.ContentLength = int64(len(b))
		if safe {
			policy = routes.ResendSafe
		}
	}
	if req.Body == nil || req.Body == http.NoBody {
		r.Body, r.GetBody = nil, nil
	}
	marked, _ := ctx.Value(retrySafeKey{}).(bool)
	c = actors.NewCall(id, ctx, r, route, marked || policy == routes.ResendSafe, now)
	c.MaxWait, _ = ctx.Value(maxWaitKey{}).(time.Duration)
	c.Class = admission.Class(priority)
	c.Limits = limits
	if timeout > 0 {
		// The deadline counts from Send: the time the body took is spent.
		if timeout -= time.Since(began); timeout <= 0 {
			return c, direct, l.timeoutErr
		}
		c.Timeout, c.TimeoutErr = timeout, l.timeoutErr
	}
	return c, direct, nil
}

// buffer returns req's body read into memory, or nil when there is none
// or when it can be read again through GetBody (unless always). A body
// whose Content-Length exceeds MaxRequestBody is refused before reading;
// reading ends with ctx, or after timeout when positive (the request's
// Options.Timeout; the body is then closed to stop the reader).
// req.Body is always closed.
func (l *Limiter) buffer(ctx context.Context, req *http.Request, always bool, timeout time.Duration) ([]byte, error) {
	rc := req.Body
	if rc == nil || rc == http.NoBody {
		return nil, nil
	}
	defer rc.Close()
	if req.ContentLength > MaxRequestBody {
		return nil, fmt.Errorf("%w: request body of %d bytes is over %d", ErrBadRequest, req.ContentLength, MaxRequestBody)
	}
	if req.GetBody != nil {
		if !always {
			return nil, nil // each attempt reads a fresh body from GetBody
		}
		var err error
		if rc, err = req.GetBody(); err != nil {
			return nil, fmt.Errorf("%w: request body: %w", ErrBadRequest, err)
		}
		defer rc.Close()
	}
	readAll := func() ([]byte, error) {
		b, err := io.ReadAll(io.LimitReader(rc, MaxRequestBody+1))
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: reading request body: %w", ErrBadRequest, err)
		case len(b) > MaxRequestBody:
			return nil, fmt.Errorf("%w: request body over %d bytes", ErrBadRequest, MaxRequestBody)
		}
		return b, nil
	}
	if req.GetBody != nil {
		// net/http sets GetBody for in-memory bodies: reading cannot block.
		return readAll()
	}
	if timeout > 0 { // Options.Timeout bounds the read too
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, l.timeoutErr)
		defer cancel()
	}
	type read struct {
		b   []byte
		err error
	}
	done := make(chan read, 1)
	go func() {
		b, err := readAll()
		done <- read{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		rc.Close() // unblocks a reader that honours Close (pipes, files, net/http bodies)
		return nil, context.Cause(ctx)
	}
}

// APIHost reports whether a request to u goes to the API, through the
// rate limits: u is relative, or its host is Options.BaseURL's or one of
// Discord's API hosts (discord.com, discordapp.com, and their canary, ptb
// and www names). Requests to other hosts are sent directly (see
// Options.RefuseOtherHosts). It is for code that wraps the limiter and
// must tell the two apart as the limiter does.
func (l *Limiter) APIHost(u *url.URL) bool {
	return u != nil && (u.Host == "" || l.onSite(u))
}

// onSite reports whether u goes to the API: its host is the base URL's or
// one of Discord's API hosts. Such requests are sent to Options.BaseURL's
// scheme and host, so code that builds https://discord.com/... URLs can be
// pointed at a proxy or the simulator.
func (l *Limiter) onSite(u *url.URL) bool {
	if hostPort(u) == hostPort(l.base) {
		return true
	}
	switch strings.ToLower(u.Hostname()) {
	case "discord.com", "discordapp.com", "canary.discord.com", "ptb.discord.com", "www.discord.com":
		return true
	}
	return false
}

// isBotAuth reports whether an Authorization header carries a bot token:
// "Bot …", or the header Options.Token makes (a "Bearer …" token given as
// Token included).
func (l *Limiter) isBotAuth(v string) bool {
	v = strings.TrimSpace(v)
	return v != "" && (v == l.auth || (len(v) > 4 && strings.EqualFold(v[:4], "bot ")))
}

// hostPort is u's lower-cased host with its port, the scheme's default
// port made explicit.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[strings.ToLower(u.Scheme)]
	}
	return strings.ToLower(u.Hostname()) + ":" + port
}

// Do sends req and waits for its outcome; see Send.
func (l *Limiter) Do(ctx context.Context, req *http.Request) (*http.Response, error) {
	return l.Send(ctx, req).Await(context.Background())
}

// SendBatch submits every request in order and returns their futures in
// the same order. Requests to one bucket are dispatched in submission order.
func (l *Limiter) SendBatch(ctx context.Context, reqs []*http.Request) []*Future {
	fs := make([]*Future, len(reqs))
	for i, r := range reqs {
		fs[i] = l.Send(ctx, r)
	}
	return fs
}

// DoBatch submits every request, waits for all of them and returns their
// outcomes in submission order, one error per item.
func (l *Limiter) DoBatch(ctx context.Context, reqs []*http.Request) []Result {
	fs := l.SendBatch(ctx, reqs)
	out := make([]Result, len(fs))
	for i, f := range fs {
		out[i].Response, out[i].Err = f.Await(context.Background())
	}
	return out
}

// RoundTrip implements http.RoundTripper, so &http.Client{Transport: l}
// sends through the limiter, with req.Context() as the request's context.
// It always closes req.Body, also when it returns an error.
//
// An http.Client's Timeout covers the whole call, the time the request
// waits in its bucket's queue included: with a busy bucket it fails
// requests that would have been sent a moment later. Leave it zero and
// bound the two separately: Options.Timeout (or the request context's
// deadline) for the whole call, Options.MaxWait or WithMaxWait for the
// predicted wait, which fails at once rather than after waiting.
func (l *Limiter) RoundTrip(req *http.Request) (*http.Response, error) {
	return l.Do(req.Context(), req)
}

// Snapshot is the limiter's state at one moment, stable enough to render.
type Snapshot struct {
	// Time is when the supervisor answered. The buckets' figures that count
	// down (ResetIn, PausedFor, Margin) are taken at Time too, so Time plus
	// ResetIn is a window's end.
	Time time.Time
	// State is the supervisor's state: "disconnected", "connecting",
	// "connected" or "global_limit" (a global 429's pause).
	State string
	// Breaker is the ban breaker's state: "closed", "open" (every request
	// held after a Cloudflare ban) or "half_open" (one probe let through).
	Breaker string
	// Pending is the number of requests ready to go but waiting for
	// admission: the connection, the global limit or a ban.
	Pending int
	// Waiting is the number of bucket actors waiting for admission.
	Waiting int
	// Running is the number of requests on the wire.
	Running int
	// GlobalUsed is the number of the token's global-limit slots held now:
	// requests in flight and answered within the window (Windows[0].Used).
	GlobalUsed int
	// Windows are the two global limits: [0] the token's ("bot"), [1] the
	// egress IP's ("ip", requests sent without a token; see
	// Options.IPGlobalLimit).
	Windows []WindowSnapshot
	// Buckets are the live buckets, sorted by key.
	Buckets []BucketSnapshot
	// Limits are the live groups of the declared limits (Options.Limits),
	// sorted by limit and group: those with a request waiting or a slot
	// held (see LimitSnapshot).
	//
	// With Options.Redis the groups live in Redis, and Limits lists the
	// live ones among the groups this process reserved in lately: each
	// while one of its requests has a place there and for the group's
	// Window plus a minute after the last ended, 256 at most (the least
	// recently used are forgotten first). A group only other processes
	// use is not listed. The counts of all are read from Redis in one
	// round trip (one per Redis namespace: a group whose requests went
	// both with and without the token is counted in two, and listed once
	// with their sum), bounded by Options.RedisTimeout and ctx.
	//
	// If that read fails or times out, Snapshot still succeeds, and
	// Limits is the local view: the groups counted in this process's
	// memory, which with Redis are none, so Limits is empty. A failure
	// other than ctx's end counts in Shared.Errors and changes nothing
	// else (the requests' own calls decide when Redis is unreachable);
	// while Shared.Mode is "fallback", Redis is not asked and Limits is
	// empty too.
	Limits []LimitSnapshot
	// Requests are the requests waiting in a bucket's queue or for a
	// retry, in submission order, each with its ETA (see Future.ETA);
	// requests on the wire are counted in Running.
	Requests []RequestSnapshot
	// Shared is the state of the limits shared through Options.Redis (nil
	// without it); IPShared that of the requests sent without a token,
	// shared by the processes of one Options.RedisIPKey.
	Shared, IPShared *redisstore.Stats
}

// WindowSnapshot is one global limit's part of a Snapshot.
type WindowSnapshot struct {
	// Name is "bot" (requests with an Authorization header, counted per
	// token) or "ip" (requests without, counted per IP).
	Name string
	// State is "open", or "global_limit" while a global 429 on one of its
	// requests pauses it (the other window goes on).
	State string
	// Limit is the window's limit per Options.GlobalWindow (0: not told by
	// a custom Options.Global or IPGlobal); Used the slots held now.
	Limit, Used int
	// PausedFor is the time left of a global 429's pause (0: none).
	PausedFor time.Duration
}

// BucketSnapshot is one bucket's part of a Snapshot.
type BucketSnapshot struct {
	// Key is the bucket's key, with tokens hashed: the route ("POST
	// /channels/{channel_id}/messages channel_id=1") while its hash is
	// unknown, then "bucket <hash> <major parameters>". The major
	// parameters of a request sent without a token (counted per IP, see
	// Options.IPGlobalLimit) start with "ip", as in "ip;webhook_id=1;…".
	Key string
	// State is the bucket's state: "initial" (limit unknown: one pioneer
	// at a time), "open", "exhausted" (nothing left before the reset),
	// "limited" (paused by a 429) or "idle".
	State string
	// Known reports whether a response revealed the limit.
	Known bool
	// Limit and Remaining are the bucket's count in its current window.
	Limit, Remaining int
	// ResetIn is the time left in the current window (0 when over).
	ResetIn time.Duration
	// PausedFor is the time left of a 429's pause (0 when none).
	PausedFor time.Duration
	// Margin is the reopening margin added to the resets the bucket
	// predicts; it rises when the server reopened a window late.
	Margin time.Duration
	// Queued requests wait for the bucket; Retrying ones wait for a
	// backoff after a 5xx or a lost connection.
	Queued, Retrying int
	// Running requests are on the wire, unanswered.
	Running int
	// Serial is set when the bucket sends one request at a time (hidden
	// sublimits).
	Serial bool
}

// TraceEvent is one step of the limiter's inner life, given to
// Options.Trace: a message an actor received or sent, or a transition of
// the supervisor's or a bucket's state machine. It never carries a token.
type TraceEvent struct {
	// Time is when the event happened (the limiter's clock).
	Time time.Time
	// Kind is "receive", "send" or "transition".
	Kind string
	// Actor is "supervisor" or "bucket"; ActorID the actor's process id.
	Actor, ActorID string
	// Bucket is the key of the bucket the event concerns (see
	// BucketSnapshot.Key), or the bucket actor's major parameters; empty
	// for the supervisor.
	Bucket string
	// Message is the message type ("submit", "enqueue", "result", "want",
	// "grant", …) for receive and send events; docs/architecture.md
	// lists them.
	Message string
	// To is the receiving actor's id, for send events.
	To string
	// Event is the state machine event, for transitions ("dial",
	// "discovered", …).
	Event string
	// StateBefore and StateAfter are the actor's state (for a bucket
	// actor, the state of the bucket the message concerns) before and
	// after a received message, or a transition's source and destination.
	StateBefore, StateAfter string
	// RequestID identifies the request the message is about (0: none).
	RequestID uint64
	// Route is the request's route with tokens redacted, when there is one.
	Route string
	// Status is the HTTP status carried by a result message.
	Status int
	// Took is how long the actor spent handling a received message.
	Took time.Duration
}

// Snapshot gathers the limiter's state. It asks every actor, so it costs a
// message per live bucket actor; it returns when ctx ends at the latest,
// and with ErrClosed once Close has begun.
func (l *Limiter) Snapshot(ctx context.Context) (Snapshot, error) {
	s, err := l.sys.Snapshot(ctx)
	out := Snapshot{Time: s.Time, State: s.State, Breaker: s.Breaker, Pending: s.Pending, Waiting: s.Waiting,
		Running: s.Running, GlobalUsed: s.GlobalUsed, Buckets: make([]BucketSnapshot, len(s.Buckets))}
	for _, w := range s.Windows {
		out.Windows = append(out.Windows, WindowSnapshot(w))
	}
	for i, b := range s.Buckets {
		out.Buckets[i] = BucketSnapshot(b)
	}
	groups := s.Groups
	if l.shared != nil && err == nil {
		// On a failed read, the local view (see Snapshot.Limits); the
		// failure shows in Shared.Errors.
		groups, _ = l.sys.SharedGroups(ctx, groups)
	}
	for _, g := range groups {
		out.Limits = append(out.Limits, LimitSnapshot(g))
	}
	if len(s.Requests) > 0 {
		out.Requests = make([]RequestSnapshot, len(s.Requests))
		for i, r := range s.Requests {
			out.Requests[i] = RequestSnapshot{ID: r.ID, Route: r.Route, Bucket: r.Bucket, ETA: publicETA(r.ETA), Priority: Priority(r.Class)}
		}
	}
	if l.shared != nil && err == nil {
		st, ip := l.shared.Stats(), l.ipShared.Stats()
		out.Shared, out.IPShared = &st, &ip
	}
	return out, err
}

// Close refuses new requests (they fail with ErrClosed), fails queued ones
// with ErrClosed, and lets requests already on the wire finish until ctx
// ends; then it cancels them. It returns when every actor and goroutine of
// the limiter has stopped, with an error if it had to cancel requests.
// A Close called while another runs waits for it to finish, or for its
// own ctx (then it returns ctx's error); after that, Close returns nil.
func (l *Limiter) Close(ctx context.Context) error {
	err := l.sys.Close(ctx)
	l.direct.CloseIdleConnections()
	if l.shared != nil {
		l.ipShared.Close()
		l.shared.Close() // after every worker, so every request reported to it
	}
	return err
}

// cloneRequest is the limiter's own copy of req, on ctx: what the actors
// own and seal (the caller keeps req). Unlike http.Request.Clone it leaves
// the URL shared (the seal replaces it; a direct request, which is not
// sealed, gets a copy in newCall) and gives
// the header room for the two the seal may add (Authorization,
// User-Agent), so neither copy is made twice.
func cloneRequest(ctx context.Context, req *http.Request) *http.Request {
	r := req.WithContext(ctx)
	h := make(http.Header, len(req.Header)+2)
	n := 0
	for _, vv := range req.Header {
		n += len(vv)
	}
	values := make([]string, n) // one array for every value, as Header.Clone
	for k, vv := range req.Header {
		if vv == nil {
			h[k] = nil // as Header.Clone: a nil value stays nil
			continue
		}
		m := copy(values, vv)
		h[k] = values[:m:m]
		values = values[m:]
	}
	r.Header = h
	if req.Trailer != nil {
		r.Trailer = req.Trailer.Clone()
	}
	if req.TransferEncoding != nil {
		r.TransferEncoding = append([]string(nil), req.TransferEncoding...)
	}
	return r
}
