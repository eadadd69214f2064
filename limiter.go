package sluice

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
	"github.com/sluicehq/sluice/supervision"
	"github.com/sluicehq/sluice/transport"
)

// maxRequestBody bounds a request body Sluice buffers to resend it.
const maxRequestBody = 64 << 20

// Limiter sends HTTP requests to a rate-limited API as fast as its rules
// allow and never faster. Create one with New per bot token; it is safe for
// concurrent use by any number of goroutines. The zero value is not usable.
//
// Behind it run a supervisor actor holding one HTTP/2 connection and a
// bucket actor per rate-limit bucket; see the package documentation.
type Limiter struct {
	sys *actors.System
}

// New starts a limiter; it connects in the background. Close it when done.
func New(opts Options) (*Limiter, error) {
	base := opts.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("sluice: BaseURL: %w", err)
	}
	if u.Scheme != "https" && u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("sluice: BaseURL %q must be an absolute http or https URL", u.Redacted())
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("sluice: BaseURL must not carry credentials, a query or a fragment")
	}
	if opts.GlobalLimit < 0 || opts.GlobalWindow < 0 || opts.MaxWait < 0 {
		return nil, errors.New("sluice: GlobalLimit, GlobalWindow and MaxWait must not be negative")
	}
	limit, window := opts.GlobalLimit, opts.GlobalWindow
	if limit == 0 {
		limit = 50
	}
	if window == 0 {
		window = time.Second
	}
	global := opts.Global
	if global == nil {
		global = ratelimit.NewSlidingWindow(limit, window)
	}
	clock := opts.Clock
	if clock == nil {
		clock = time.Now
	}
	store := opts.Store
	if store == nil {
		store = &ratelimit.MemoryStore{Clock: clock}
	}
	retries := opts.MaxRetries
	switch {
	case retries == 0:
		retries = 3
	case retries < 0:
		retries = 0
	}
	errRetries := opts.MaxErrorRetries
	switch {
	case errRetries == 0:
		errRetries = 2
	case errRetries < 0:
		errRetries = 0
	}
	maxQueue, maxPending := orDefault(opts.MaxQueue, 10_000), orDefault(opts.MaxPending, 100_000)
	var invalid *supervision.Budget
	if n := orDefault(opts.InvalidRequestLimit, 9_000); n > 0 {
		frac := opts.InvalidRequestWarn
		if frac <= 0 || frac > 1 {
			frac = 0.5
		}
		invalid = supervision.NewBudget(n, durationOr(opts.InvalidRequestWindow, 10*time.Minute), max(1, int(frac*float64(n))))
	}
	ua := opts.UserAgent
	if ua == "" {
		ua = "DiscordBot (https://github.com/sluicehq/sluice, " + Version + ")"
	}
	auth := opts.Token
	if auth != "" && !strings.HasPrefix(auth, "Bot ") && !strings.HasPrefix(auth, "Bearer ") {
		auth = "Bot " + auth
	}
	sys, err := actors.Start(actors.Config{
		BaseURL:       u,
		Authorization: auth,
		UserAgent:     ua,
		Transport: transport.Config{
			TLSConfig: opts.TLSConfig, H2C: opts.H2C, AllowHTTP1: opts.AllowHTTP1,
			DialTimeout: opts.DialTimeout, PingInterval: opts.PingInterval, PingTimeout: opts.PingTimeout,
		},
		Global:           global,
		Store:            store,
		Clock:            clock,
		MaxWait:          opts.MaxWait,
		MaxRetries:       retries,
		MaxErrorRetries:  errRetries,
		RetryBackoff:     transport.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.5},
		MaxQueue:         maxQueue,
		BanBackoff:       durationOr(opts.BanBackoff, 60*time.Second),
		MaxPending:       maxPending,
		Invalid:          invalid,
		MaxResponseBytes: opts.MaxResponseBytes,
		IdleAfter:        opts.IdleBucketAfter,
		Backoff:          transport.Backoff{Jitter: 0.5},
		Logger:           opts.Logger,
		Trace:            traceTo(opts.Trace),
		TracerProvider:   opts.TracerProvider,
		MeterProvider:    opts.MeterProvider,
	})
	if err != nil {
		return nil, err
	}
	return &Limiter{sys: sys}, nil
}

// Send submits req and returns at once with its future. ctx governs the
// request while it is queued and in flight: if ctx ends, the future
// completes with ctx's error and the request's place goes to the next one.
// A request whose predicted wait exceeds ctx's deadline (or MaxWait) fails
// at once with a *WaitError.
//
// req's URL may be relative to Options.BaseURL ("/channels/1/messages") or
// absolute. Its body is read (and kept) so the request can be sent again
// after a 429. Every submitted request gets exactly one outcome.
func (l *Limiter) Send(ctx context.Context, req *http.Request) *Future {
	c, err := l.newCall(ctx, req)
	if err != nil {
		c.Complete(nil, err)
		return &Future{call: c}
	}
	l.sys.Submit(c)
	return &Future{call: c}
}

// traceTo adapts Options.Trace to the actors' events (nil stays nil: no
// tracing code runs).
func traceTo(f func(TraceEvent)) func(actors.TraceEvent) {
	if f == nil {
		return nil
	}
	return func(e actors.TraceEvent) { f(TraceEvent(e)) }
}

// orDefault maps 0 to def and a negative value to 0 (no bound).
func orDefault(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

func durationOr(v, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return v
}

type retrySafeKey struct{}

// WithRetrySafe returns a context that marks requests sent with it as safe
// to send twice: after a 5xx or a lost connection they are retried even if
// their method is not idempotent (for example a POST carrying Discord's
// enforce_nonce). Requests are never resent silently otherwise.
func WithRetrySafe(ctx context.Context) context.Context {
	return context.WithValue(ctx, retrySafeKey{}, true)
}

func (l *Limiter) newCall(ctx context.Context, req *http.Request) (*actors.Call, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	now := l.sys.Now()
	id := l.sys.NextID()
	if req == nil || req.URL == nil {
		return actors.NewCall(id, ctx, req, routes.Route{}, false, now), errors.New("sluice: nil request or URL")
	}
	route, err := routes.Parse(req.Method, req.URL.EscapedPath())
	if err != nil {
		return actors.NewCall(id, ctx, req, route, false, now), fmt.Errorf("sluice: %w", err)
	}
	r := req.Clone(ctx)
	if req.Body != nil && req.Body != http.NoBody && req.GetBody != nil {
		req.Body.Close() // each attempt reads a fresh body from GetBody
	} else if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(req.Body, maxRequestBody+1))
		req.Body.Close()
		if err != nil {
			return actors.NewCall(id, ctx, r, route, false, now), fmt.Errorf("sluice: reading request body: %w", err)
		}
		if len(b) > maxRequestBody {
			return actors.NewCall(id, ctx, r, route, false, now), fmt.Errorf("sluice: request body over %d bytes", maxRequestBody)
		}
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		r.ContentLength = int64(len(b))
	}
	safe, _ := ctx.Value(retrySafeKey{}).(bool)
	return actors.NewCall(id, ctx, r, route, safe, now), nil
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
func (l *Limiter) RoundTrip(req *http.Request) (*http.Response, error) {
	return l.Do(req.Context(), req)
}

// Snapshot is the limiter's state at one moment, stable enough to render.
type Snapshot struct {
	// Time is when the supervisor answered.
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
	// GlobalUsed is the number of global-limit slots held now: requests in
	// flight and answered within the window.
	GlobalUsed int
	// Buckets are the live buckets, sorted by key.
	Buckets []BucketSnapshot
}

// BucketSnapshot is one bucket's part of a Snapshot.
type BucketSnapshot struct {
	// Key is the bucket's key, with tokens hashed: the route ("POST
	// /channels/{channel_id}/messages channel_id=1") while its hash is
	// unknown, then "bucket <hash> <major parameters>".
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
// message per live bucket actor; it returns when ctx ends at the latest.
func (l *Limiter) Snapshot(ctx context.Context) (Snapshot, error) {
	s, err := l.sys.Snapshot(ctx)
	out := Snapshot{Time: s.Time, State: s.State, Breaker: s.Breaker, Pending: s.Pending, Waiting: s.Waiting,
		Running: s.Running, GlobalUsed: s.GlobalUsed, Buckets: make([]BucketSnapshot, len(s.Buckets))}
	for i, b := range s.Buckets {
		out.Buckets[i] = BucketSnapshot(b)
	}
	return out, err
}

// Close refuses new requests (they fail with ErrClosed), fails queued ones
// with ErrClosed, and lets requests already on the wire finish until ctx
// ends; then it cancels them. It returns when every actor and goroutine of
// the limiter has stopped, with an error if it had to cancel requests.
// Calling Close again does nothing and returns nil.
func (l *Limiter) Close(ctx context.Context) error { return l.sys.Close(ctx) }
