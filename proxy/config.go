package proxy

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/routes"
)

// Defaults of Config, in one place. Each field's comment names its
// default; these are the values.
const (
	// DefaultMaxTokens is Config.MaxTokens' default.
	DefaultMaxTokens = 1024
	// DefaultIdleTimeout is Config.IdleTimeout's default.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultMaxQueue is Config.MaxQueue's default.
	DefaultMaxQueue = 5000
	// DefaultOverflowStatus is Config.OverflowStatus' default.
	DefaultOverflowStatus = http.StatusServiceUnavailable
	// DefaultMaxWaitHeader is Config.MaxWaitHeader's default.
	DefaultMaxWaitHeader = "X-Sluice-Max-Wait"
	// DefaultPriorityHeader is Config.PriorityHeader's default.
	DefaultPriorityHeader = "X-Sluice-Priority"
	// DefaultCacheSize is Config.CacheSize's default.
	DefaultCacheSize = 10000
	// DefaultMaxCachedBody is the largest body the cache keeps; a larger
	// answer is passed on uncached.
	DefaultMaxCachedBody = 64 << 10
	// DefaultMaxBody is Config.MaxBody's default: 25 MiB, the largest
	// request Discord accepts for a message in a guild without boosts.
	DefaultMaxBody = 25 << 20
	// DefaultMaxBuffered is Config.MaxBuffered's default (256 MiB).
	DefaultMaxBuffered = 256 << 20
	// DefaultBodyTimeout is Config.BodyTimeout's default.
	DefaultBodyTimeout = time.Minute
)

// DefaultCacheTTL returns Config.CacheTTL's default, a new map each time:
// 404 for 30 s and 401 for 5 s, as Xenon's proxy caches them.
func DefaultCacheTTL() map[int]time.Duration {
	return map[int]time.Duration{http.StatusNotFound: 30 * time.Second, http.StatusUnauthorized: 5 * time.Second}
}

// Config configures a Proxy. Every field is optional; the comment on each
// gives the default its zero value means. New checks every field and
// returns a *ConfigError for a value out of range.
type Config struct {
	// Upstream is the API base requests are sent to, such as
	// "https://discord.com/api/v10" or the API base "sluice simulate"
	// prints. Its path gives the API version of requests whose path has
	// none; a request's own version (/api/v9/...) is kept. Default
	// sluice.DefaultBaseURL.
	Upstream string
	// DefaultToken is used for requests that come without an
	// Authorization header ("Bot " is added if it has no scheme). Default
	// none: such requests are sent without a token and count on the per-IP
	// global limit. It is never logged.
	DefaultToken string
	// WebhookAuth, when true, sends webhook and interaction-token routes
	// (/webhooks/{id}/{token}/..., /interactions/{id}/{token}/...) with the
	// caller's token, on that token's global limit. Default false: they
	// are sent without Authorization and count on the per-IP global limit,
	// a second 50 per second beside each bot's, as Discord allows.
	WebhookAuth bool
	// Redis, when set, shares every limit (each token's and the per-IP
	// ones) with every process using the same Redis: run several proxies
	// with it and any of them can serve any request. The proxy does not
	// close the client. Default nil: the limits are this process's.
	Redis redis.UniversalClient
	// Limiter is the template of each token's limiter (see sluice.Options);
	// the proxy sets its Token, BaseURL, Redis, WebhookAuth, MaxPending
	// (from MaxQueue), Logger (unless set) and H2C for an http:// Upstream
	// (unless Limiter.AllowHTTP1 is set). Only the token-less limiter sends
	// requests without a token, so the per-IP limit lives in it alone.
	Limiter sluice.Options
	// MaxTokens caps the tokens with a live limiter. At the cap, the
	// least recently used token with nothing in flight is closed to make
	// room; if every one is busy the request gets the overflow answer.
	// Default DefaultMaxTokens (1,024).
	MaxTokens int
	// IdleTimeout closes a token's limiter after this long without
	// requests (its learned limits go with it unless Redis keeps them).
	// Default DefaultIdleTimeout (10 minutes).
	IdleTimeout time.Duration
	// MaxQueue bounds the requests of one token without an answer yet;
	// beyond it requests get the overflow answer at once. Default
	// DefaultMaxQueue (5,000).
	MaxQueue int
	// OverflowStatus is the status of the overflow answer (a JSON body
	// and Retry-After). Default DefaultOverflowStatus (503). Must be 4xx
	// or 5xx.
	OverflowStatus int
	// MaxWaitHeader names the request header in which a caller states the
	// longest wait it accepts, in seconds ("2.5") or as a Go duration
	// ("2500ms"). A request whose predicted wait is longer is answered at
	// once with the proxy's own 429 (see docs/proxy.md). The header is not
	// sent upstream. Default DefaultMaxWaitHeader ("X-Sluice-Max-Wait").
	MaxWaitHeader string
	// PriorityHeader names the request header in which a caller gives its
	// request's priority: "interactive", "normal" (the default, as without
	// the header) or "bulk" (sluice.Priority; docs/priorities.md). Another
	// value is answered 400 (reason bad_request). The header is not sent
	// upstream. Priorities order the requests of one token: a caller can
	// move its requests ahead of the same token's other requests, never
	// past another token's. Default DefaultPriorityHeader
	// ("X-Sluice-Priority").
	PriorityHeader string
	// MaxBody is the largest request body accepted, in bytes; a larger one
	// is answered 413 (reason body_too_large, Discord's code 40005), before
	// a byte of it is read when its Content-Length says so. Default
	// DefaultMaxBody (25 MiB); at most sluice.MaxRequestBody (64 MiB).
	MaxBody int64
	// MaxBuffered bounds the bytes of request bodies held in memory at
	// once, across every request: a body is read in full before its token's
	// limiter is taken (so a stalled upload holds no token's place), and
	// one that would go over the bound is answered 503 (reason overloaded)
	// with Retry-After. Memory is taken in chunks as the bytes arrive (4
	// KiB, then twice the last, up to 64 KiB), so a stalled upload holds
	// at most about twice what it sent; a JSON body counts three times
	// once read, for the copies the limiter makes of a message creation's
	// to add its nonce (sluice.JSONBody). Default DefaultMaxBuffered (256
	// MiB); at least 3 × MaxBody.
	MaxBuffered int64
	// BodyTimeout bounds the time a client may take to send a request's
	// body, from when its headers have been read; a slower one is answered
	// 408 (reason body_timeout). Default DefaultBodyTimeout (1 minute).
	BodyTimeout time.Duration
	// CacheTTL maps a status to how long an answer with it is kept and
	// replayed to the same token for the same method, path and query.
	// Only 4xx and 5xx statuses are accepted: a 2xx is never cached.
	// Default (nil) DefaultCacheTTL: 404 for 30 s, 401 for 5 s. An empty
	// non-nil map caches nothing.
	CacheTTL map[int]time.Duration
	// CacheSize caps the cached answers; the oldest go first. Default
	// DefaultCacheSize (10,000).
	CacheSize int
	// Logger receives one line per request at debug level and the
	// proxy's own refusals at warn. Tokens appear only as a short hash.
	// Default: nothing is logged.
	Logger *slog.Logger
	// MetricsElsewhere, when true, makes ServeHTTP answer MetricsPath 404:
	// the metrics are served only where the embedder mounts
	// MetricsHandler, such as a listener on a private address ("sluice
	// proxy -metrics-listen"). Default false: ServeHTTP serves them.
	MetricsElsewhere bool
	// Registry receives the proxy's metrics, served at /metrics. Default:
	// a new registry with the Go and process collectors.
	Registry *prometheus.Registry
	// Clock is the time source of the cache and the idle timeout. Default
	// time.Now.
	Clock func() time.Time
}

// ConfigError is returned by New for a Config field it cannot accept.
type ConfigError struct {
	// Field is the field's name, e.g. "MaxQueue".
	Field string
	// Reason says what is allowed.
	Reason string
}

func (e *ConfigError) Error() string { return "proxy: Config." + e.Field + ": " + e.Reason }

// settings is a Config with its defaults applied and checked.
type settings struct {
	Config
	upstream *url.URL
	version  string // the upstream's API version, "" if its path has none
}

func (c Config) settings() (settings, error) {
	bad := func(field, format string, args ...any) (settings, error) {
		return settings{}, &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if c.Upstream == "" {
		c.Upstream = sluice.DefaultBaseURL
	}
	u, err := url.Parse(c.Upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return bad("Upstream", "must be an absolute http or https URL without credentials, query or fragment")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	if c.MaxTokens == 0 {
		c.MaxTokens = DefaultMaxTokens
	}
	if c.MaxTokens < 1 {
		return bad("MaxTokens", "must be positive")
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.IdleTimeout < 0 {
		return bad("IdleTimeout", "must be positive")
	}
	if c.MaxQueue == 0 {
		c.MaxQueue = DefaultMaxQueue
	}
	if c.MaxQueue < 1 {
		return bad("MaxQueue", "must be positive")
	}
	if c.OverflowStatus == 0 {
		c.OverflowStatus = DefaultOverflowStatus
	}
	if c.OverflowStatus < 400 || c.OverflowStatus > 599 {
		return bad("OverflowStatus", "must be 4xx or 5xx, not %d", c.OverflowStatus)
	}
	if c.MaxWaitHeader == "" {
		c.MaxWaitHeader = DefaultMaxWaitHeader
	}
	c.MaxWaitHeader = http.CanonicalHeaderKey(c.MaxWaitHeader)
	if c.PriorityHeader == "" {
		c.PriorityHeader = DefaultPriorityHeader
	}
	c.PriorityHeader = http.CanonicalHeaderKey(c.PriorityHeader)
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.MaxBody < 1 || c.MaxBody > sluice.MaxRequestBody {
		return bad("MaxBody", "must be between 1 and %d bytes (sluice.MaxRequestBody), not %d", sluice.MaxRequestBody, c.MaxBody)
	}
	if c.MaxBuffered == 0 {
		c.MaxBuffered = max(DefaultMaxBuffered, 3*c.MaxBody)
	}
	if c.MaxBuffered < 3*c.MaxBody {
		return bad("MaxBuffered", "must be at least 3 × MaxBody (%d bytes: a JSON body and the limiter's two copies of it), not %d", 3*c.MaxBody, c.MaxBuffered)
	}
	if c.BodyTimeout == 0 {
		c.BodyTimeout = DefaultBodyTimeout
	}
	if c.BodyTimeout < 0 {
		return bad("BodyTimeout", "must be positive")
	}
	if c.CacheTTL == nil {
		c.CacheTTL = DefaultCacheTTL()
	}
	for status, ttl := range c.CacheTTL {
		if status < 400 || status > 599 {
			return bad("CacheTTL", "only 4xx and 5xx answers may be cached, not %d", status)
		}
		if ttl <= 0 {
			return bad("CacheTTL", "the time for %d must be positive", status)
		}
	}
	if c.CacheSize == 0 {
		c.CacheSize = DefaultCacheSize
	}
	if c.CacheSize < 1 {
		return bad("CacheSize", "must be positive")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
		c.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return settings{Config: c, upstream: u, version: routes.BaseVersion(u.Path)}, nil
}
