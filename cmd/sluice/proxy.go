package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/proxy"
)

// "sluice proxy": package proxy behind an http.Server, configured by flags
// or SLUICE_* environment variables, stopped gracefully by SIGTERM or
// SIGINT.

const (
	// proxyTokenEnv holds the default token. It has no flag: a command
	// line is visible to every user of the machine (ps).
	proxyTokenEnv = "SLUICE_TOKEN"
	// proxyEnvPrefix prefixes the environment variable of every flag.
	proxyEnvPrefix = "SLUICE_"
	// wireReserveMax caps the part of -grace kept for requests already
	// sent upstream when the queues are failed.
	wireReserveMax = 5 * time.Second
	// flushMin is the least time the server is given, after every
	// request has been answered, to flush the answers before its
	// connections are closed.
	flushMin = time.Second
	// redisPingTimeout bounds the check of -redis at start.
	redisPingTimeout = 5 * time.Second
	// defaultMaxConns is -max-conns' default: an open connection costs
	// about 40 KiB whatever it sends, so 4,096 stalled ones hold about
	// 170 MiB (docs/proxy-performance.md).
	defaultMaxConns = 4096
)

const proxyUsage = `Usage: sluice proxy [flags]

Serve an HTTP proxy for the Discord REST API. A bot sends its requests to
http://<listen>/api/v10/... instead of https://discord.com/api/v10/...; the
proxy relays each one upstream through the rate limiter of its token (its
Authorization header, one limiter per token), holding it until the limits
allow it, and passes the answer back as it came.

Every flag can also be given as an environment variable SLUICE_<NAME>: the
flag's name in capitals, dashes as underscores (SLUICE_LISTEN,
SLUICE_UPSTREAM, SLUICE_REDIS, SLUICE_CACHE_404, ...). A flag on the command
line wins over its variable; an empty variable counts as unset.

SLUICE_TOKEN, only from the environment (a command line shows in ps), is the
bot token of requests that come without an Authorization header ("Bot " is
added if it has no scheme). It is never printed or logged.

Declared limits, limits Discord enforces without announcing them (a guild's
member role updates, a channel's renames) or rules of your own, are applied
to every token: a default set, and those of the YAML or JSON file -limits
(see docs/declared-limits.md for its format); -no-default-limits leaves the
defaults out. A bad file stops the proxy before it starts.

Its own endpoints: /healthz (200 while it runs), /readyz (200, 503 once it
is shutting down) and /metrics (Prometheus); -metrics-listen moves /metrics
to another address, such as a private one. It logs to stderr.

Anyone who reaches the listen address can send requests with SLUICE_TOKEN:
keep it on loopback or a private network (docs/proxy.md, "Security").

With -tls-cert and -tls-key (PEM files, both or neither) the listen address
serves HTTPS instead, HTTP/2 and HTTP/1.1 (ALPN), TLS 1.2 or later; the
-metrics-listen address stays plain HTTP. The files are read once, at start:
restart the proxy to use a renewed certificate.

On SIGTERM or SIGINT /readyz answers 503; after -drain-delay (default 0: at
once) it stops accepting connections; accepted requests keep their place in
the queues until -grace is nearly over (the last half of it, at most 5 s, is
kept for requests already sent upstream); those still queued are then
answered 503 with the header X-Sluice-Proxy: shutting_down, and it exits 0.
A second signal ends it at once.
`

// proxyFlags is the parsed and checked command line and environment.
type proxyFlags struct {
	listen, upstream, caFile      string
	tlsCert, tlsKey               string // -tls-cert, -tls-key: the listener's certificate and key files
	metricsListen                 string
	redisURL, redisIPKey          string
	maxWaitHeader                 string
	priorityHeader                string
	logLevel, logFormat           string
	h2c, webhookAuth              bool
	maxTokens, maxQueue, overflow int
	maxBody, maxBuffered          int64
	maxConns                      int
	bodyTimeout                   time.Duration
	idleTimeout, grace            time.Duration
	drainDelay                    time.Duration
	cache404, cache401            time.Duration
	limitsFile                    string
	noDefaultLimits               bool   // -no-default-limits, or the file's no_default_limits
	token                         string // from SLUICE_TOKEN; never printed

	// limits are the declared limits of -limits, checked.
	limits []sluice.Limit

	level slog.Level
	// from says where each flag's value came from: its flag ("-listen")
	// or its variable ("SLUICE_LISTEN"), for error messages; flags left
	// at their defaults are named as flags.
	from map[string]string
}

// name is how errors name a flag: as the user gave it.
func (f *proxyFlags) name(flagName string) string {
	if n, ok := f.from[flagName]; ok {
		return n
	}
	return "-" + flagName
}

// proxyEnvName is the environment variable of a flag.
func proxyEnvName(flagName string) string {
	return proxyEnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// proxyFlagSet is the flag set of "sluice proxy", storing into f. It is
// also the list of its flags, and through proxyEnvName of its variables,
// that the files under deploy/ are checked against (deploy_test.go).
func proxyFlagSet(f *proxyFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "listen `address`, host:port (port 0 picks a free one; \":8080\" listens on every interface)")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "serve /metrics (and /healthz, /readyz) on this other `address` only, e.g. a private one, instead of on -listen")
	fs.StringVar(&f.upstream, "upstream", sluice.DefaultBaseURL, "API `base` the requests are relayed to: Discord's, or the API base \"sluice simulate\" prints")
	fs.BoolVar(&f.h2c, "h2c", false, "cleartext HTTP/2 to an http:// upstream (what the proxy speaks to any http:// upstream anyway: it never uses HTTP/1.1)")
	fs.StringVar(&f.caFile, "ca-file", "", "PEM `file` of a CA certificate to trust for an https upstream, beside the system's (e.g. the certificate \"sluice simulate\" writes)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM `file` of the certificate (chain) to serve HTTPS on -listen with, HTTP/2 and HTTP/1.1; needs -tls-key (read at start only)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM `file` of the private key of -tls-cert")
	fs.StringVar(&f.redisURL, "redis", "", "share every limit through the Redis at `URL` (redis://[:password@]host:port/db, rediss://..., unix:///path): run every replica with the same -redis (default: each process counts alone)")
	fs.StringVar(&f.redisIPKey, "redis-ip-key", "", "with -redis, the `name` of this process's egress IP: processes with the same name share the per-IP limit of token-less requests (default \"default\": all behind one IP)")
	fs.IntVar(&f.maxTokens, "max-tokens", proxy.DefaultMaxTokens, "tokens with a live limiter at most; the least recently used idle one makes room, else the request gets the overflow answer")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", proxy.DefaultIdleTimeout, "close a token's limiter after this long without requests")
	fs.IntVar(&f.maxQueue, "max-queue", proxy.DefaultMaxQueue, "requests of one token without an answer yet at most; more get the overflow answer at once")
	fs.IntVar(&f.overflow, "overflow-status", proxy.DefaultOverflowStatus, "`status` of the overflow answer, 400 to 599 (with Retry-After and X-Sluice-Proxy: queue_full)")
	fs.Int64Var(&f.maxBody, "max-body", proxy.DefaultMaxBody, "largest request body in `bytes`; a larger one is answered 413 (at most 67108864, the limiter's bound)")
	fs.Int64Var(&f.maxBuffered, "max-buffered", proxy.DefaultMaxBuffered, "request body `bytes` held in memory at once across every request; beyond it requests are answered 503 with Retry-After (at least 3 × -max-body)")
	fs.IntVar(&f.maxConns, "max-conns", defaultMaxConns, "client connections open at once at most; more wait in the listen backlog until one closes (0: no limit)")
	fs.DurationVar(&f.bodyTimeout, "body-timeout", proxy.DefaultBodyTimeout, "longest a client may take to send a request's body once its headers are read; a slower one is answered 408")
	fs.StringVar(&f.maxWaitHeader, "max-wait-header", proxy.DefaultMaxWaitHeader, "request `header` in which a caller gives the longest wait it accepts (\"2.5\" seconds or \"2500ms\"); a longer predicted wait is answered 429 at once")
	fs.StringVar(&f.priorityHeader, "priority-header", proxy.DefaultPriorityHeader, "request `header` in which a caller gives its request's priority: interactive, normal or bulk (docs/priorities.md)")
	fs.DurationVar(&f.cache404, "cache-404", proxy.DefaultCacheTTL()[http.StatusNotFound], "replay a 404 to the same token for the same method, path and query for this long (0: never)")
	fs.DurationVar(&f.cache401, "cache-401", proxy.DefaultCacheTTL()[http.StatusUnauthorized], "replay a 401 likewise for this long (0: never)")
	fs.StringVar(&f.limitsFile, "limits", "", "YAML or JSON `file` (.yaml, .yml, .json) of declared limits: limits Discord enforces without announcing them, or rules of your own, added to the default ones (one with a default's name replaces it); see docs/declared-limits.md")
	fs.BoolVar(&f.noDefaultLimits, "no-default-limits", false, "leave out the default declared limits (member role updates, channel renames): only those of -limits apply (also no_default_limits: true in that file)")
	fs.BoolVar(&f.webhookAuth, "webhook-auth", false, "send webhook and interaction-token routes with the caller's token, on its global limit (default: without, on the per-IP limit)")
	fs.DurationVar(&f.grace, "grace", 30*time.Second, "on SIGTERM or SIGINT, how long accepted requests may still be served before the process exits")
	fs.DurationVar(&f.drainDelay, "drain-delay", 0, "on SIGTERM or SIGINT, keep accepting requests this long while /readyz answers 503, so a load balancer (a Kubernetes Service) stops sending new ones before the listener closes; -grace starts after it")
	fs.StringVar(&f.logLevel, "log-level", "info", "`level` of the log on stderr: debug (a line per request), info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "`format` of the log: text or json")
	return fs
}

// parseProxyFlags reads the flags of "sluice proxy", then the environment
// variables of the flags not given (getenv is os.LookupEnv), and checks
// every value. done is as parseFlags returns it.
func parseProxyFlags(args []string, getenv func(string) (string, bool), stdout io.Writer) (f *proxyFlags, done bool, err error) {
	f = &proxyFlags{from: map[string]string{}}
	fs := proxyFlagSet(f)
	if done, err := parseFlags(fs, args, proxyUsage, stdout); done {
		if err != nil && strings.Contains(err.Error(), "-token") {
			err = usageErrorf("proxy", "%v (the token comes only from the environment variable %s)", err, proxyTokenEnv)
		}
		return nil, true, err
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	var envErr error
	fs.VisitAll(func(fl *flag.Flag) {
		if given[fl.Name] || envErr != nil {
			return
		}
		env := proxyEnvName(fl.Name)
		v, ok := getenv(env)
		if !ok || v == "" {
			return
		}
		if err := fs.Set(fl.Name, v); err != nil {
			envErr = usageErrorf("proxy", "invalid value %q for %s: %v", v, env, err)
			return
		}
		f.from[fl.Name] = env
	})
	if envErr != nil {
		return nil, true, envErr
	}
	if tok, ok := getenv(proxyTokenEnv); ok {
		f.token = strings.TrimSpace(tok)
	}
	if err := f.check(); err != nil {
		return nil, true, err
	}
	return f, false, nil
}

// check checks every value; nothing has started yet.
func (f *proxyFlags) check() error {
	bad := func(name, format string, args ...any) error {
		return usageErrorf("proxy", "%s "+format, append([]any{f.name(name)}, args...)...)
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return bad("listen", "%q: want host:port, e.g. 127.0.0.1:8080 or :8080", f.listen)
	}
	if _, _, err := net.SplitHostPort(f.metricsListen); f.metricsListen != "" && err != nil {
		return bad("metrics-listen", "%q: want host:port, e.g. 10.0.0.5:9090", f.metricsListen)
	}
	u, err := url.Parse(f.upstream)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return bad("upstream", "%q: want an absolute http:// or https:// API base, e.g. %s", redactURL(f.upstream), sluice.DefaultBaseURL)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return bad("upstream", "%q: must not carry credentials, a query or a fragment", u.Redacted())
	case f.h2c && u.Scheme != "http":
		return bad("h2c", "is for an http:// upstream; %s is https (HTTP/2 over TLS)", f.name("upstream"))
	case f.caFile != "" && u.Scheme != "https":
		return bad("ca-file", "is for an https upstream; %s is http", f.name("upstream"))
	case f.tlsCert != "" && f.tlsKey == "":
		return bad("tls-cert", "needs %s too, the certificate's private key: both or neither", f.name("tls-key"))
	case f.tlsKey != "" && f.tlsCert == "":
		return bad("tls-key", "needs %s too, the certificate of the key: both or neither", f.name("tls-cert"))
	}
	if f.redisURL != "" {
		if _, err := redis.ParseURL(f.redisURL); err != nil {
			msg := err.Error() // go-redis quotes the URL, password and all
			if pw := urlPassword(f.redisURL); pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
			return bad("redis", "%s: %s (want redis://host:port/db, rediss://... or unix:///path)", redactURL(f.redisURL), msg)
		}
	} else if f.redisIPKey != "" {
		return bad("redis-ip-key", "needs -redis")
	}
	switch {
	case f.maxTokens < 1:
		return bad("max-tokens", "must be 1 or more, got %d", f.maxTokens)
	case f.idleTimeout <= 0:
		return bad("idle-timeout", "must be more than 0s, got %v", f.idleTimeout)
	case f.maxQueue < 1:
		return bad("max-queue", "must be 1 or more, got %d", f.maxQueue)
	case f.maxBody < 1 || f.maxBody > sluice.MaxRequestBody:
		return bad("max-body", "must be between 1 and %d, got %d", sluice.MaxRequestBody, f.maxBody)
	case f.maxBuffered < 3*f.maxBody:
		return bad("max-buffered", "must be at least 3 × %s (%d: a JSON body and the limiter's two copies), got %d", f.name("max-body"), 3*f.maxBody, f.maxBuffered)
	case f.maxConns < 0:
		return bad("max-conns", "must be 0 (no limit) or more, got %d", f.maxConns)
	case f.bodyTimeout <= 0:
		return bad("body-timeout", "must be more than 0s, got %v", f.bodyTimeout)
	case f.overflow < 400 || f.overflow > 599:
		return bad("overflow-status", "must be between 400 and 599, got %d", f.overflow)
	case !validHeaderName(f.maxWaitHeader):
		return bad("max-wait-header", "%q is not a header name", f.maxWaitHeader)
	case !validHeaderName(f.priorityHeader):
		return bad("priority-header", "%q is not a header name", f.priorityHeader)
	case f.cache404 < 0:
		return bad("cache-404", "must be 0s or more, got %v", f.cache404)
	case f.cache401 < 0:
		return bad("cache-401", "must be 0s or more, got %v", f.cache401)
	case f.grace < 0:
		return bad("grace", "must be 0s or more, got %v", f.grace)
	case f.drainDelay < 0:
		return bad("drain-delay", "must be 0s or more, got %v", f.drainDelay)
	}
	levels := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}
	level, ok := levels[strings.ToLower(f.logLevel)]
	if !ok {
		return bad("log-level", "must be debug, info, warn or error, got %q", f.logLevel)
	}
	f.level = level
	if lf := strings.ToLower(f.logFormat); lf != "text" && lf != "json" {
		return bad("log-format", "must be text or json, got %q", f.logFormat)
	}
	if strings.ContainsFunc(f.token, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return usageErrorf("proxy", "%s contains control characters", proxyTokenEnv) // and is not repeated
	}
	return f.checkLimits()
}

// checkLimits reads -limits, if given, and checks its limits as every
// token's limiter will, so that a bad one is a usage error before anything
// starts.
func (f *proxyFlags) checkLimits() error {
	if f.limitsFile == "" {
		return nil
	}
	limits, noDefaults, err := readLimitsFile(f.limitsFile)
	if err != nil {
		return usageErrorf("proxy", "%s: %v", f.name("limits"), err)
	}
	f.limits, f.noDefaultLimits = limits, f.noDefaultLimits || noDefaults
	if err := checkLimits(f.limits, f.noDefaultLimits); err != nil {
		return f.limitsError(err)
	}
	return nil
}

// limitsError names -limits and its file in the *sluice.OptionError that
// sluice.New returns for a bad declared limit; other errors are returned
// as they are.
func (f *proxyFlags) limitsError(err error) error {
	var oe *sluice.OptionError
	if !errors.As(err, &oe) || oe.Option != "Limits" {
		return err
	}
	if oe.Value == "" {
		return usageErrorf("proxy", "%s %s: %s", f.name("limits"), f.limitsFile, oe.Reason)
	}
	return usageErrorf("proxy", "%s %s: limit %s: %s", f.name("limits"), f.limitsFile, oe.Value, oe.Reason)
}

// validHeaderName reports whether s is an HTTP field name (RFC 9110 token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// tlsConfig is the upstream TLS configuration: nil (the system's roots)
// without -ca-file.
func (f *proxyFlags) tlsConfig() (*tls.Config, error) {
	if f.caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(f.caFile)
	if err != nil {
		return nil, usageErrorf("proxy", "%s: %v", f.name("ca-file"), err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, usageErrorf("proxy", "%s %s: no PEM certificate in it", f.name("ca-file"), f.caFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// listenerTLS is the TLS configuration of the -listen address: nil (plain
// HTTP) without -tls-cert and -tls-key. The files are read here, once: a
// renewed certificate takes a restart, which -drain-delay and -grace make
// harmless behind a load balancer, and a file that is missing, not PEM or
// not a pair is a usage error before anything listens.
func (f *proxyFlags) listenerTLS() (*tls.Config, error) {
	if f.tlsCert == "" {
		return nil, nil // check made sure -tls-key is empty too
	}
	certPEM, err := os.ReadFile(f.tlsCert)
	if err != nil {
		return nil, usageErrorf("proxy", "%s: %v", f.name("tls-cert"), err)
	}
	keyPEM, err := os.ReadFile(f.tlsKey)
	if err != nil {
		return nil, usageErrorf("proxy", "%s: %v", f.name("tls-key"), err)
	}
	// crypto/tls's errors name the input at fault ("certificate input",
	// "key input", "does not match") and never quote the key.
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, usageErrorf("proxy", "%s %s, %s %s: %v", f.name("tls-cert"), f.tlsCert, f.name("tls-key"), f.tlsKey, err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"}, // HTTP/2 first, as a client asking for both prefers
	}, nil
}

// logger is the process's log on stderr.
func (f *proxyFlags) logger(stderr io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: f.level}
	if strings.ToLower(f.logFormat) == "json" {
		opts.ReplaceAttr = secondsAttr
		return slog.New(slog.NewJSONHandler(stderr, opts))
	}
	return slog.New(slog.NewTextHandler(stderr, opts))
}

// secondsAttr writes a duration as seconds (a number) in the JSON log:
// slog's JSON handler writes nanoseconds, which no reader expects.
func secondsAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key, a.Value.Duration().Seconds())
	}
	return a
}

// cacheTTL is Config.CacheTTL: never nil, so that both caches off is an
// empty map (nil would be the defaults).
func (f *proxyFlags) cacheTTL() map[int]time.Duration {
	ttl := map[int]time.Duration{}
	if f.cache404 > 0 {
		ttl[http.StatusNotFound] = f.cache404
	}
	if f.cache401 > 0 {
		ttl[http.StatusUnauthorized] = f.cache401
	}
	return ttl
}

// limiterOptions is Config.Limiter, the template of every token's
// limiter.
func (f *proxyFlags) limiterOptions(tlsConfig *tls.Config) sluice.Options {
	return sluice.Options{
		TLSConfig: tlsConfig, H2C: f.h2c, RedisIPKey: f.redisIPKey,
		Limits: f.limits, NoDefaultLimits: f.noDefaultLimits,
	}
}

// redisLogger sends go-redis's own lines (failed dials while Redis is
// down, which the limiters count and report) to the log at debug level.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, args ...any) {
	r.l.DebugContext(ctx, "redis: "+fmt.Sprintf(format, args...))
}

// proxyCommand runs "sluice proxy" until ctx ends, then shuts it down
// gracefully and returns nil.
func proxyCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, done, err := parseProxyFlags(args, os.LookupEnv, stdout)
	if done {
		return err
	}
	tlsConfig, err := f.tlsConfig()
	if err != nil {
		return err
	}
	listenTLS, err := f.listenerTLS()
	if err != nil {
		return err
	}
	log := f.logger(stderr)
	cfg := proxy.Config{
		Upstream:         f.upstream,
		DefaultToken:     f.token,
		WebhookAuth:      f.webhookAuth,
		Limiter:          f.limiterOptions(tlsConfig),
		MaxTokens:        f.maxTokens,
		IdleTimeout:      f.idleTimeout,
		MaxQueue:         f.maxQueue,
		OverflowStatus:   f.overflow,
		MaxWaitHeader:    f.maxWaitHeader,
		PriorityHeader:   f.priorityHeader,
		MaxBody:          f.maxBody,
		MetricsElsewhere: f.metricsListen != "",
		MaxBuffered:      f.maxBuffered,
		BodyTimeout:      f.bodyTimeout,
		CacheTTL:         f.cacheTTL(),
		Logger:           log,
	}
	redisDesc := ""
	if f.redisURL != "" {
		opt, err := redis.ParseURL(f.redisURL)
		if err != nil {
			return err // checked already
		}
		redis.SetLogger(redisLogger{log})
		rdb := redis.NewClient(opt)
		defer rdb.Close() // after the proxy's Close: deferred first
		pingCtx, cancel := context.WithTimeout(ctx, redisPingTimeout)
		err = rdb.Ping(pingCtx).Err()
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("Redis at %s (%s) does not answer: %w", redactURL(f.redisURL), f.name("redis"), err)
		}
		cfg.Redis = rdb
		redisDesc = redactURL(f.redisURL)
	}
	p, err := proxy.New(cfg)
	if err != nil {
		return proxyConfigError(f, err)
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		closeProxy(p, log, 0)
		return fmt.Errorf("%s: %w", f.name("listen"), err)
	}
	ln = newLimitListener(ln, f.maxConns)
	// HTTP/1.1, and HTTP/2 for many requests on one connection: over TLS
	// when the listener has it (chosen by ALPN), else cleartext for clients
	// that speak it with prior knowledge.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	if listenTLS != nil {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	srv := &http.Server{
		Handler: p,
		// Also bounds the TLS handshake.
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10, // Discord's requests need a few KiB
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		Protocols:         &protocols,
		TLSConfig:         listenTLS, // nil: plain HTTP
	}
	front := "http://" + ln.Addr().String()
	if listenTLS != nil {
		front = "https://" + ln.Addr().String()
	}
	upstream := strings.TrimSuffix(f.upstream, "/")
	var mln net.Listener
	if f.metricsListen != "" {
		if mln, err = net.Listen("tcp", f.metricsListen); err != nil {
			ln.Close()
			closeProxy(p, log, 0)
			return fmt.Errorf("%s: %w", f.name("metrics-listen"), err)
		}
	}
	fmt.Fprintf(stdout, "sluice proxy listening on %s → %s\n", front, upstream)
	if mln != nil {
		// The metrics on their own listener: /metrics there only (the
		// proxy answers it 404), /healthz and /readyz on both. It stays
		// plain HTTP with -tls-cert: it is meant for a private address,
		// where scrapers and probes need no certificate.
		mux := http.NewServeMux()
		mux.Handle(proxy.MetricsPath, p.MetricsHandler())
		mux.Handle(proxy.HealthPath, p)
		mux.Handle(proxy.ReadyPath, p)
		msrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		go func() { _ = msrv.Serve(mln) }()
		defer msrv.Close() // after the proxy has stopped: scrapes see the shutdown
		fmt.Fprintf(stdout, "sluice proxy metrics on http://%s%s\n", mln.Addr(), proxy.MetricsPath)
	}
	log.Info("sluice proxy listening",
		slog.String("listen", ln.Addr().String()), slog.Bool("tls", listenTLS != nil), slog.String("tls_cert", f.tlsCert),
		slog.String("metrics_listen", f.metricsListen), slog.String("upstream", upstream),
		slog.Bool("h2c", f.h2c), slog.String("ca_file", f.caFile),
		slog.String("redis", redisDesc), slog.String("redis_ip_key", f.redisIPKey),
		slog.Int("max_tokens", f.maxTokens), slog.Duration("idle_timeout", f.idleTimeout),
		slog.Int("max_queue", f.maxQueue), slog.Int("overflow_status", f.overflow),
		slog.Int("max_conns", f.maxConns), slog.Int64("max_body", f.maxBody), slog.Int64("max_buffered", f.maxBuffered), slog.Duration("body_timeout", f.bodyTimeout),
		slog.String("max_wait_header", http.CanonicalHeaderKey(f.maxWaitHeader)),
		slog.String("priority_header", http.CanonicalHeaderKey(f.priorityHeader)),
		slog.Duration("cache_404", f.cache404), slog.Duration("cache_401", f.cache401),
		slog.String("limits_file", f.limitsFile), slog.Int("limits", len(f.limits)), slog.Bool("no_default_limits", f.noDefaultLimits),
		slog.Bool("webhook_auth", f.webhookAuth), slog.Duration("grace", f.grace), slog.Duration("drain_delay", f.drainDelay),
		slog.Bool("default_token", f.token != ""), slog.String("version", sluice.Version))
	if listenTLS != nil {
		if leaf := listenTLS.Certificates[0].Leaf; leaf != nil && time.Now().After(leaf.NotAfter) {
			// Served anyway: refusing to start would turn an expired
			// certificate into an outage of every client, not only of
			// those that check it.
			log.Warn("sluice proxy: the certificate of "+f.name("tls-cert")+" has expired", slog.String("tls_cert", f.tlsCert), slog.Time("not_after", leaf.NotAfter))
		}
	}
	return serveProxy(ctx, srv, ln, p, f.drainDelay, f.grace, log)
}

// proxyConfigError names the flag behind a configuration proxy.New
// refused. The flags are checked first, so this is a backstop.
func proxyConfigError(f *proxyFlags, err error) error {
	var ce *proxy.ConfigError
	if errors.As(err, &ce) {
		name := map[string]string{
			"Upstream": "upstream", "MaxTokens": "max-tokens", "IdleTimeout": "idle-timeout", "MaxQueue": "max-queue",
			"OverflowStatus": "overflow-status", "MaxWaitHeader": "max-wait-header", "PriorityHeader": "priority-header", "CacheTTL": "cache-404",
			"MaxBody": "max-body", "MaxBuffered": "max-buffered", "BodyTimeout": "body-timeout",
		}[ce.Field]
		if name != "" {
			return usageErrorf("proxy", "%s: %s", f.name(name), ce.Reason)
		}
	}
	var oe *sluice.OptionError
	if errors.As(err, &oe) && oe.Option == "Token" {
		return usageErrorf("proxy", "%s: %s", proxyTokenEnv, oe.Reason)
	}
	if errors.As(err, &oe) && oe.Option == "Limits" {
		return f.limitsError(err)
	}
	return err
}

// serveProxy serves until ctx ends, then shuts down: /readyz answers 503,
// requests are still accepted for drainDelay, then the listener closes;
// accepted requests keep their place in
// the queues until the last wireReserve of grace, when the proxy is
// closed (queued requests are answered 503 shutting_down; those on the
// wire have until grace is over); then the answers are flushed and every
// connection closed. It returns nil after a graceful shutdown. srv serves
// HTTPS when its TLSConfig is set (with the certificate in it).
func serveProxy(ctx context.Context, srv *http.Server, ln net.Listener, p *proxy.Proxy, drainDelay, grace time.Duration, log *slog.Logger) error {
	served := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			served <- srv.ServeTLS(ln, "", "") // the certificate is in TLSConfig
			return
		}
		served <- srv.Serve(ln)
	}()
	select {
	case err := <-served: // the listener failed
		closeProxy(p, log, grace)
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	p.Drain()
	if drainDelay > 0 {
		log.Info("sluice proxy draining: /readyz answers 503, requests still accepted", slog.String("cause", context.Cause(ctx).Error()), slog.Duration("for", drainDelay))
		delay := time.NewTimer(drainDelay)
		select {
		case <-delay.C:
		case err := <-served: // the listener failed
			delay.Stop()
			closeProxy(p, log, grace)
			return fmt.Errorf("serving: %w", err)
		}
	}
	start := time.Now()
	deadline := start.Add(grace)
	wireReserve := min(grace/2, wireReserveMax)
	log.Info("sluice proxy shutting down", slog.String("cause", context.Cause(ctx).Error()), slog.Duration("grace", grace))
	shutCtx, stopShutdown := context.WithCancel(context.Background())
	defer stopShutdown()
	shutdown := make(chan error, 1)
	// Shutdown closes the listener and idle connections, and returns once
	// every connection has gone idle or closed: every answer flushed.
	go func() { shutdown <- srv.Shutdown(shutCtx) }()
	queueTimer := time.NewTimer(grace - wireReserve)
	defer queueTimer.Stop()
	finished := false
	select {
	case <-shutdown: // every request answered in time
		finished = true
	case <-queueTimer.C:
		log.Info("sluice proxy: grace over, answering the requests still queued 503", slog.Duration("after", time.Since(start).Round(time.Millisecond)))
	}
	closeProxy(p, log, time.Until(deadline))
	if !finished {
		flush := time.NewTimer(max(time.Until(deadline), flushMin))
		select {
		case <-shutdown:
		case <-flush.C:
			// Every request has its answer: what is left are connections
			// without a request (a client's spare ones, which Shutdown
			// waits 5 s for) or clients slow to read.
			log.Info("sluice proxy: closing the connections still open")
			stopShutdown()
			_ = srv.Close()
			<-shutdown
		}
		flush.Stop()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("sluice proxy: serving", slog.String("error", err.Error()))
	}
	log.Info("sluice proxy stopped", slog.Duration("took", time.Since(start).Round(time.Millisecond)))
	return nil
}

// closeProxy closes p: queued requests are answered 503 at once, those
// on the wire may finish within wire. It returns once every request has
// been answered.
func closeProxy(p *proxy.Proxy, log *slog.Logger, wire time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), max(wire, 0))
	defer cancel()
	if err := p.Close(ctx); err != nil {
		log.Warn("sluice proxy: closing", slog.String("error", err.Error()))
	}
}
