package sluice

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/supervision"
	"github.com/sluicehq/sluice/transport"
)

// Defaults of Options: the one place they are set. Each field's comment in
// Options names its default too.
const (
	// DefaultGlobalLimit is Options.GlobalLimit's default: Discord's 50
	// requests per DefaultGlobalWindow per token.
	DefaultGlobalLimit   = 50
	defaultIPGlobalLimit = 50
	defaultRedisIPKey    = "default"
	// DefaultGlobalWindow is Options.GlobalWindow's default.
	DefaultGlobalWindow      = time.Second
	defaultMaxRetries        = 3
	defaultMaxErrorRetries   = 4
	defaultMaxQueue          = 10_000
	defaultMaxPending        = 100_000
	defaultInvalidLimit      = 9_000
	defaultInvalidWindow     = 10 * time.Minute
	defaultInvalidWarn       = 0.5
	defaultBanBackoff        = 60 * time.Second
	defaultMaxResponseBytes  = 64 << 20
	defaultTimeout           = 5 * time.Minute
	defaultAttemptTimeout    = 30 * time.Second
	defaultUnauthorizedProbe = time.Minute
	// maxRetriesBound caps MaxRetries and MaxErrorRetries: more is a typo,
	// and each retry can cost an invalid request.
	maxRetriesBound = 100
	// maxConnections caps Options.Connections.
	maxConnections = 64
	// maxClockOffset is how far Options.Clock may be from the real time:
	// a bucket's times must lie within 292 years of the process's start.
	maxClockOffset = 200 * 365 * 24 * time.Hour
)

// OptionError is returned by New for an option it cannot accept. Nothing
// was started.
type OptionError struct {
	// Option is the field's name, e.g. "GlobalLimit".
	Option string
	// Value is the value given, formatted; tokens are never included.
	Value string
	// Reason says what is allowed.
	Reason string
}

func (e *OptionError) Error() string {
	if e.Value == "" {
		return "sluice: Options." + e.Option + ": " + e.Reason
	}
	return "sluice: Options." + e.Option + " = " + e.Value + ": " + e.Reason
}

// config turns Options into the actors' configuration: defaults applied,
// every field checked.
func (opts Options) config() (actors.Config, error) {
	bad := func(opt string, v any, reason string) (actors.Config, error) {
		val := ""
		if v != nil {
			val = fmt.Sprint(v)
		}
		return actors.Config{}, &OptionError{Option: opt, Value: val, Reason: reason}
	}
	base := opts.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil {
		return bad("BaseURL", nil, "not a URL: "+err.Error())
	}
	if u.Scheme != "https" && u.Scheme != "http" || u.Host == "" {
		return bad("BaseURL", u.Redacted(), "must be an absolute http or https URL")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return bad("BaseURL", nil, "must not carry credentials, a query or a fragment")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = strings.TrimSuffix(u.RawPath, "/")
	durations := []struct {
		name string
		d    time.Duration
	}{
		{"GlobalWindow", opts.GlobalWindow}, {"MaxWait", opts.MaxWait}, {"InvalidRequestWindow", opts.InvalidRequestWindow},
		{"BanBackoff", opts.BanBackoff}, {"IdleBucketAfter", opts.IdleBucketAfter}, {"DialTimeout", opts.DialTimeout},
		{"PingTimeout", opts.PingTimeout}, {"UnauthorizedProbe", opts.UnauthorizedProbe},
	}
	for _, d := range durations {
		if d.d < 0 {
			return bad(d.name, d.d, "must not be negative")
		}
	}
	if opts.GlobalWindow > ratelimit.MaxWait {
		return bad("GlobalWindow", opts.GlobalWindow, fmt.Sprintf("must be at most %s", ratelimit.MaxWait))
	}
	if opts.GlobalLimit < 0 || opts.GlobalLimit > ratelimit.MaxGlobalLimit {
		return bad("GlobalLimit", opts.GlobalLimit, fmt.Sprintf("must be in [1, %d] (0: default %d)", ratelimit.MaxGlobalLimit, DefaultGlobalLimit))
	}
	if opts.IPGlobalLimit < 0 || opts.IPGlobalLimit > ratelimit.MaxGlobalLimit {
		return bad("IPGlobalLimit", opts.IPGlobalLimit, fmt.Sprintf("must be in [1, %d] (0: default %d)", ratelimit.MaxGlobalLimit, defaultIPGlobalLimit))
	}
	if opts.MaxRetries > maxRetriesBound {
		return bad("MaxRetries", opts.MaxRetries, fmt.Sprintf("must be at most %d (negative: none)", maxRetriesBound))
	}
	if opts.MaxErrorRetries > maxRetriesBound {
		return bad("MaxErrorRetries", opts.MaxErrorRetries, fmt.Sprintf("must be at most %d (negative: none)", maxRetriesBound))
	}
	if w := opts.InvalidRequestWarn; w < 0 || w > 1 || w != w {
		return bad("InvalidRequestWarn", w, "must be a fraction in (0, 1] (0: default 0.5)")
	}
	if opts.Connections < 0 || opts.Connections > maxConnections {
		return bad("Connections", opts.Connections, fmt.Sprintf("must be in [1, %d] (0: default %d)", maxConnections, actors.DefaultConnections))
	}
	if opts.MaxResponseBytes < 0 {
		return bad("MaxResponseBytes", opts.MaxResponseBytes, "must not be negative")
	}
	if opts.MaxBufferedBytes < 0 {
		return bad("MaxBufferedBytes", opts.MaxBufferedBytes, "must not be negative")
	}
	if opts.RedisTimeout < 0 {
		return bad("RedisTimeout", opts.RedisTimeout, fmt.Sprintf("must not be negative (0: %v)", redisstore.DefaultTimeout))
	}
	if f := opts.RedisFallbackShare; f < 0 || f > 1 || f != f {
		return bad("RedisFallbackShare", f, "must be a fraction in (0, 1] (0: 1/N of the processes seen)")
	}
	if strings.ContainsFunc(opts.Token, isCtl) || strings.TrimSpace(opts.Token) != opts.Token {
		return bad("Token", nil, "contains spaces or control characters")
	}
	if strings.ContainsFunc(opts.UserAgent, isCtl) {
		return bad("UserAgent", nil, "contains control characters")
	}
	if opts.Clock != nil {
		// Buckets keep their times as offsets from the process's start,
		// which reach 292 years either way (ratelimit.Bucket).
		if now := opts.Clock(); now.IsZero() || now.Sub(time.Now()).Abs() > maxClockOffset {
			return bad("Clock", now.Format(time.RFC3339), fmt.Sprintf("must tell times within %d years of now", maxClockOffset/(365*24*time.Hour)))
		}
	}

	limit := cmpOr(opts.GlobalLimit, DefaultGlobalLimit)
	window := cmpOr(opts.GlobalWindow, DefaultGlobalWindow)
	global := opts.Global
	if global == nil {
		global = ratelimit.NewSlidingWindow(limit, window)
	}
	ipGlobal := opts.IPGlobal
	if ipGlobal == nil {
		ipGlobal = ratelimit.NewSlidingWindow(cmpOr(opts.IPGlobalLimit, defaultIPGlobalLimit), window)
	}
	clock := opts.Clock
	if clock == nil {
		clock = time.Now
	}
	store := opts.Store
	if store == nil {
		store = &ratelimit.MemoryStore{Clock: clock}
	}
	var invalid *supervision.Budget
	if n := orDefault(opts.InvalidRequestLimit, defaultInvalidLimit); n > 0 {
		frac := cmpOr(opts.InvalidRequestWarn, defaultInvalidWarn)
		invalid = supervision.NewBudget(n, cmpOr(opts.InvalidRequestWindow, defaultInvalidWindow), max(1, int(frac*float64(n))))
	}
	ua := cmpOr(opts.UserAgent, "DiscordBot (https://github.com/sluicehq/sluice, "+Version+")")
	auth := opts.Token
	if auth != "" && !strings.HasPrefix(auth, "Bot ") && !strings.HasPrefix(auth, "Bearer ") {
		auth = "Bot " + auth
	}
	maxResp := cmpOr(opts.MaxResponseBytes, defaultMaxResponseBytes)
	return actors.Config{
		BaseURL:       u,
		Authorization: auth,
		UserAgent:     ua,
		Transport: transport.Config{
			TLSConfig: opts.TLSConfig, H2C: opts.H2C, AllowHTTP1: opts.AllowHTTP1,
			DialTimeout: opts.DialTimeout, PingInterval: opts.PingInterval, PingTimeout: opts.PingTimeout,
		},
		Connections:       opts.Connections,
		Global:            global,
		IPGlobal:          ipGlobal,
		WebhookAuth:       opts.WebhookAuth,
		Store:             store,
		Clock:             clock,
		MaxWait:           opts.MaxWait,
		MaxRetries:        max(0, orDefault(opts.MaxRetries, defaultMaxRetries)),
		MaxErrorRetries:   max(0, orDefault(opts.MaxErrorRetries, defaultMaxErrorRetries)),
		RetryBackoff:      transport.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.5},
		MaxQueue:          orDefault(opts.MaxQueue, defaultMaxQueue),
		MaxPending:        orDefault(opts.MaxPending, defaultMaxPending),
		BanBackoff:        cmpOr(opts.BanBackoff, defaultBanBackoff),
		Invalid:           invalid,
		MaxResponseBytes:  maxResp,
		MaxBufferedBytes:  cmpOr(opts.MaxBufferedBytes, 4*maxResp),
		AttemptTimeout:    orDefault(opts.AttemptTimeout, defaultAttemptTimeout),
		UnauthorizedProbe: cmpOr(opts.UnauthorizedProbe, defaultUnauthorizedProbe),
		IdleAfter:         opts.IdleBucketAfter,
		Backoff:           transport.Backoff{Jitter: 0.5},
		Logger:            opts.Logger,
		Trace:             traceTo(opts.Trace),
		TracerProvider:    opts.TracerProvider,
		MeterProvider:     opts.MeterProvider,
	}, nil
}

// timeout is the deadline given to a request whose context has none.
func (opts Options) timeout() time.Duration { return orDefault(opts.Timeout, defaultTimeout) }

// cmpOr returns v, or def for the zero value.
func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// orDefault maps 0 to def and a negative value to 0 (no bound / none).
func orDefault[T int | int64 | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

func isCtl(r rune) bool { return r < 0x20 || r == 0x7f }
