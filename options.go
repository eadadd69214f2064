package sluice

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/ratelimit"
)

// DefaultBaseURL is the API base used when Options.BaseURL is empty.
const DefaultBaseURL = "https://discord.com/api/v10"

// Version is this library's version, sent in the default User-Agent and
// printed by the sluice command's "version"; it is the only version string.
const Version = "0.1.0"

// Options configure a Limiter. Every field is optional; the comment on each
// gives the default its zero value means, as httputil.ReverseProxy does.
// New checks every field and returns an *OptionError for a value out of
// range rather than guessing.
type Options struct {
	// BaseURL is the API base. Requests with a relative URL
	// ("/channels/1/messages") are sent below it; requests with an absolute
	// URL keep their path but go to BaseURL's scheme and host, so a library
	// that builds https://discord.com/... URLs can be pointed at a proxy or
	// the simulator. Default DefaultBaseURL.
	BaseURL string
	// Token is the bot token, sent as "Authorization: Bot <token>" on
	// requests that carry no Authorization header. A value that already
	// starts with "Bot " or "Bearer " is sent as is. Default: none.
	// One Limiter counts one token's global limit.
	Token string
	// GlobalLimit is the number of requests per GlobalWindow sent with an
	// Authorization header (the token's global limit), across all routes
	// except interaction callbacks. Default 50 (Discord's).
	GlobalLimit int
	// GlobalWindow is the sliding window of both global limits (GlobalLimit
	// and IPGlobalLimit). Default 1 s.
	GlobalWindow time.Duration
	// IPGlobalLimit is the number of requests per GlobalWindow sent without
	// an Authorization header, which Discord counts per IP rather than per
	// token: webhook executions and their message edits and deletes, and
	// interaction follow-ups (see WebhookAuth), and every request when
	// Token is empty. A global 429 on one window never pauses the other.
	// Default 50 (Discord's).
	IPGlobalLimit int
	// WebhookAuth, when true, sends the routes that carry their own token in
	// the path (/webhooks/{id}/{token}/..., /interactions/{id}/{token}/...)
	// with the bot's Authorization header too, so they count on the
	// token's global limit. Default false: they go without it, as Discord
	// allows, unless the request sets its own Authorization header, and
	// count on the per-IP global limit (IPGlobalLimit): a second 50 per
	// second beside the bot's. Their buckets are the IP's, apart from the
	// same webhook's buckets under a token.
	WebhookAuth bool
	// MaxWait fails a request at once, with a *WaitError, when its
	// predicted wait exceeds it: the certain part of its ETA (its bucket's
	// windows and pause, its declared limits' windows, a global 429's
	// pause; see ETA). Default 0: no limit other than the request
	// context's deadline, which is always honoured the same way.
	MaxWait time.Duration
	// Limits declares limits the API enforces without announcing them, or
	// rules of your own (see Limit). They are added to DefaultLimits; a
	// Limit with a default's Name replaces that default.
	Limits []Limit
	// NoDefaultLimits leaves DefaultLimits out: only Limits apply.
	NoDefaultLimits bool
	// MaxRetries is how many times a request answered 429 is sent again
	// after the wait the API asked for. Default 3; negative means none.
	MaxRetries int
	// MaxErrorRetries is how many times a request that is safe to repeat
	// is sent again after a 5xx answer without rate-limit headers, a lost
	// connection or an attempt timeout, with jittered exponential backoff.
	// Safe is decided by one table (routes.Route.Resend, shown in
	// docs/failure-modes.md): reads, PUT, PATCH and DELETE; a message
	// creation carrying nonce and enforce_nonce (which Sluice adds to a
	// JSON body without a nonce); or a context from WithRetrySafe. Other
	// POSTs that may have been processed are never resent. A request that
	// provably never reached the server is always sent again. Default 4
	// (backoff from 100 ms, doubling: at most 1.5 s in all): a connection
	// reset ends every request in flight on its connection, so under a
	// fault rate that ends one attempt in ten, 2 retries leave about one
	// request in a thousand with an error; 4, one in 100,000. Negative
	// means none.
	MaxErrorRetries int
	// MaxQueue bounds the requests queued for one bucket; more fail with
	// ErrQueueFull. Default 10,000; negative means no bound.
	MaxQueue int
	// MaxPending bounds the requests without an outcome in the whole
	// limiter; more fail with ErrQueueFull. Default 100,000; negative means
	// no bound.
	MaxPending int
	// InvalidRequestLimit is how many 401, 403 and non-shared 429 answers
	// within InvalidRequestWindow make the limiter refuse new requests
	// (with a *BudgetError) until the count drops, before Discord bans the
	// IP at 10,000 per 10 minutes. Default 9,000; negative disables it.
	InvalidRequestLimit int
	// InvalidRequestWindow is the window of that count. Default 10 min.
	InvalidRequestWindow time.Duration
	// InvalidRequestWarn is the fraction of InvalidRequestLimit at which a
	// warning is logged (once). Default 0.5.
	InvalidRequestWarn float64
	// BanBackoff is how long every request is held after the API answers
	// like a Cloudflare ban (a 429 with neither rate-limit headers nor a
	// JSON body),
	// before a single probe request is let through; it doubles, up to an
	// hour, while probes meet the ban. Default 60 s.
	BanBackoff time.Duration
	// MaxResponseBytes bounds a response body; a larger one fails the
	// request with ErrResponseTooLarge. An answer whose Content-Length
	// declares more is refused before any byte of its body is read.
	// Default 64 MiB.
	MaxResponseBytes int64
	// MaxBufferedBytes bounds the response bytes being read at once across
	// all requests; an answer that would take more fails with
	// ErrResponseTooLarge. Default 4 × MaxResponseBytes (256 MiB).
	MaxBufferedBytes int64
	// Timeout is the deadline of a request whose context has none: from
	// Send until its outcome, queueing and retries included. The request
	// then fails with a *TimeoutError (errors.Is ErrTimeout and
	// context.DeadlineExceeded). A context with its own deadline keeps it,
	// even a later one: the caller's context always wins. Default 5
	// minutes; negative means none (a request may then wait as long as
	// its rules make it).
	Timeout time.Duration
	// AttemptTimeout bounds one attempt on the wire: from handing the
	// request to the connection until its whole body has been read, so a
	// server that never answers, or a body that never ends, cannot hold a
	// request. An attempt that runs out is treated like a connection lost
	// after sending: resent only if it is safe to resend (see
	// docs/failure-modes.md), else the request fails with ErrAttemptTimeout.
	// Default 30 s; negative means none.
	AttemptTimeout time.Duration
	// UnauthorizedProbe is how long the limiter refuses every request with
	// ErrUnauthorized after the API answered 401 to Options.Token, before
	// it lets a single request through to check the token again: if that
	// one is not answered 401, the latch clears. A 401 on a route that
	// carries its own token (webhooks, interaction follow-ups) or on a
	// request with its own Authorization header never latches. Default 1
	// minute.
	UnauthorizedProbe time.Duration
	// IdleBucketAfter is how long a bucket actor lives on once its window
	// ended and nothing is queued. Its learned limits stay in the Store.
	// Default 0: it stops as soon as its window ends, as nostrum's do.
	IdleBucketAfter time.Duration
	// RefuseOtherHosts makes requests to hosts other than the API's fail
	// at once with ErrOtherHost. Default false: they are sent directly to
	// their host, once, outside the rate limits, and never carry the bot's
	// token (an "Authorization: Bot …" header, or the one Token makes, is
	// removed), so a library's CDN download through the same http.Client
	// works. The API's hosts are BaseURL's and Discord's (discord.com,
	// discordapp.com and their canary, ptb and www names).
	RefuseOtherHosts bool
	// TLSConfig is used for https base URLs, and for requests to other
	// hosts. Default: system roots.
	TLSConfig *tls.Config
	// H2C speaks cleartext HTTP/2 to http:// base URLs. Default false.
	H2C bool
	// Connections is how many HTTP/2 connections the limiter keeps to the
	// API at most. Requests go to the one carrying the fewest (counting
	// those picked for it and not yet sent, so requests sent together
	// spread over the pool), so a connection reset ends only the requests
	// on that one (docs/failure-modes.md has the figures). The first is
	// opened when the limiter starts; the pool grows, one dial after
	// another, to one connection per 4 requests awaiting an outcome
	// (queued, waiting or on the wire), unless connections fail: a bot that
	// sends a request now and then keeps one, a burst of 50 spreads over 13.
	// A lost connection is replaced only while requests wait. Default 16;
	// at most 64.
	Connections int
	// AllowHTTP1 accepts an HTTP/1.1 connection when the server does not
	// offer HTTP/2 (one request at a time). Default false: HTTP/2 only.
	AllowHTTP1 bool
	// DialTimeout bounds connecting. Default 10 s.
	DialTimeout time.Duration
	// PingInterval and PingTimeout detect a silent connection with HTTP/2
	// pings. Defaults 15 s and 5 s.
	PingInterval, PingTimeout time.Duration
	// UserAgent is set on requests that carry none. Default
	// "DiscordBot (https://github.com/sluicehq/sluice, <Version>)", the
	// form Discord requires.
	UserAgent string
	// Logger receives warnings (429s, connection deaths) and, at debug
	// level, a trace of actor messages and state transitions. Default:
	// nothing is logged. Tokens are never logged.
	Logger *slog.Logger
	// Trace receives a TraceEvent for every message each actor receives
	// and sends and for every state transition, in the order each actor
	// sees them, on the actor's goroutine: keep it fast. Default nil: no
	// trace, and no tracing code runs. Tokens never appear in events.
	Trace func(TraceEvent)
	// TracerProvider receives a span per request, a child of the span in
	// the request's context, with events queued, dispatched, sent,
	// headers and done, and attributes saying how long it waited for its
	// bucket (sluice.wait.bucket), for the global limit and the connection
	// (sluice.wait.global) and on the network (sluice.wait.network). If
	// the application set a propagator (otel.SetTextMapPropagator), the
	// trace context is also sent upstream. Default nil: no spans.
	TracerProvider trace.TracerProvider
	// MeterProvider receives the limiter's metrics: sluice.responses (by
	// status and 429 scope), sluice.requests (by outcome), sluice.wait (a
	// histogram by kind: bucket, global, network), sluice.transitions (by
	// machine and event) and the gauges sluice.requests.pending,
	// sluice.requests.running, sluice.buckets.live,
	// sluice.connection.state and sluice.invalid_requests.budget. Default
	// nil: no metrics.
	MeterProvider metric.MeterProvider
	// Clock is the time source of every rate-limit decision. Default
	// time.Now. Tests may pass a fake clock; timers still run on real time.
	// Its times must lie within 200 years of the real time (not the zero
	// Time's year 1): New refuses another clock.
	Clock func() time.Time
	// Store keeps bucket limits and the bucket hash learned for each route
	// template outside the actors. Default: a ratelimit.MemoryStore on
	// Clock, whose learned state expires 10 minutes after its window (at
	// most 100,000 buckets), so memory returns to its baseline after a
	// burst over many channels.
	Store ratelimit.BucketStore
	// Global is the proactive global limit of the token. Default: an
	// in-memory sliding window of GlobalLimit per GlobalWindow.
	Global ratelimit.GlobalLimiter
	// IPGlobal is the proactive global limit of requests sent without a
	// token (see IPGlobalLimit). Default: an in-memory sliding window of
	// IPGlobalLimit per GlobalWindow. Limiters of one process that send
	// from one IP (several tokens) should share one IPGlobal, made with
	// ratelimit.NewSlidingWindow.
	IPGlobal ratelimit.GlobalLimiter
	// Redis, when set, shares this token's limits with every process that
	// uses the same token and Redis: the buckets (a window opens at the
	// first request into an empty one), the global window, one pioneer per
	// unknown bucket, the pauses after 429s and the invalid-request
	// budget, each request reserved atomically in one round trip before it
	// is sent (package redisstore; docs/scale-out.md). Keys are below
	// "{sluice:<hash of Token>}" and all expire; the token itself is never
	// written. Every process must use the same GlobalLimit, GlobalWindow
	// and InvalidRequestLimit. The limiter does not close the client.
	// Default nil: limits are this process's alone.
	Redis redis.UniversalClient
	// RedisIPKey names the egress IP for Redis: processes with the same
	// Redis and RedisIPKey share the per-IP global limit (IPGlobalLimit)
	// and the buckets of requests sent without a token, under keys below
	// "{sluice:ip:<hash of RedisIPKey>}". Give processes behind different
	// IPs different keys. Default "default": every process using the Redis
	// is taken to be behind one IP, which can only be slower than needed,
	// never over Discord's limit.
	RedisIPKey string
	// RedisTimeout bounds each call to Redis (the wait for a connection of
	// the client's pool included): one that fails or takes longer counts
	// as Redis being unreachable (RedisFallbackShare), until Redis answers
	// again. Raise it for a Redis far away or heavily loaded; a call that
	// waits longer holds its request that long. Every call ends by it,
	// also on a connection that went silent: a client without
	// ContextTimeoutEnabled (go-redis's default, whose commands wait for
	// ReadTimeout whatever their context) is used through a copy with it
	// set, which the limiter closes (redisstore.New). Default 0: 250 ms
	// (redisstore.DefaultTimeout).
	RedisTimeout time.Duration
	// RedisFallbackOnRefusal makes New start the shared limits on their
	// fallback share when Redis refuses the client (NOAUTH, a wrong
	// password, an ACL that forbids EVALSHA), as when Redis cannot be
	// reached. Default false: New fails with an error wrapping
	// redisstore.ErrRefused, since a limiter that can never count in Redis
	// would run on its share of every limit for good.
	RedisFallbackOnRefusal bool
	// RedisRefuseEviction makes New fail (redisstore.ErrEviction) when
	// Redis may evict the shared limits' keys: a maxmemory with a policy
	// other than noeviction (every Sluice key expires, so the volatile-*
	// policies evict them too). Default false: New logs a warning, and
	// state found evicted counts as full until known again
	// (docs/scale-out.md, "When Redis loses state").
	RedisRefuseEviction bool
	// RedisFallbackShare is the fraction of every limit this process uses
	// while Redis is unreachable (or slower than RedisTimeout), in (0, 1]: the
	// limiter never fails open. Default 0: 1/N, N the number of processes
	// last seen sharing the token in Redis (1/4 if none was ever seen).
	RedisFallbackShare float64
}
