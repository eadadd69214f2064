package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/routes"
)

// The proxy's own endpoints. Discord's API has no resource at these
// paths.
const (
	HealthPath  = "/healthz" // 200 while the process serves
	ReadyPath   = "/readyz"  // 200 until Drain or Close, then 503
	MetricsPath = "/metrics" // Prometheus text format
)

// Proxy is an http.Handler that relays Discord API requests through one
// sluice.Limiter per token. Its zero value is not usable: call New. All
// methods are safe for concurrent use. Close it when done.
type Proxy struct {
	cfg        settings
	reg        *registry
	cache      *answerCache
	body       bodyBudget // request bodies held at once (MaxBuffered)
	m          *metrics
	lm         *limiterMetrics // the limiters' side of /metrics
	metricsH   http.Handler
	globalRate float64 // one token's global limit per second (drainTime)

	draining atomic.Bool

	mu       sync.Mutex // guards closed and active.Add
	closed   bool
	active   sync.WaitGroup // requests inside ServeHTTP
	stop     chan struct{}  // ends the sweeper
	swept    chan struct{}  // closed when the sweeper has returned
	closeMu  sync.Mutex     // one Close at a time
	closeErr error
}

// New starts a proxy: it checks cfg, makes the limiter of the default
// token (or the token-less one) so the upstream connection is warm, and
// starts the sweeper of idle tokens. It returns a *ConfigError or the
// limiter's *sluice.OptionError for a bad configuration.
func New(cfg Config) (*Proxy, error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	limit, window := cmpOr(s.Limiter.GlobalLimit, sluice.DefaultGlobalLimit), cmpOr(s.Limiter.GlobalWindow, sluice.DefaultGlobalWindow)
	p := &Proxy{cfg: s, globalRate: float64(limit) / window.Seconds(), stop: make(chan struct{}), swept: make(chan struct{})}
	p.cache = newAnswerCache(s.CacheTTL, s.CacheSize)
	p.body.max = s.MaxBuffered
	if p.m, err = newMetrics(s.Registry, func() float64 { return float64(p.cache.len()) }); err != nil {
		return nil, &ConfigError{Field: "Registry", Reason: err.Error()}
	}
	if p.lm, err = newLimiterMetrics(p, s.Registry); err != nil {
		return nil, &ConfigError{Field: "Registry", Reason: err.Error()}
	}
	p.metricsH = promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{})
	// The default token's limiter and the token-less one are pinned: never
	// closed for idleness or to make room, and not counted in MaxTokens,
	// so no flood of made-up tokens can refuse them.
	p.reg = newRegistry(s.MaxTokens, s.IdleTimeout, s.Clock, p.newLimiter, []string{"", normToken(s.DefaultToken)}, p.lm.retire, func(live int, evicted string) {
		p.m.tokens.Set(float64(live))
		if evicted != "" {
			p.m.evictions.WithLabelValues(evicted).Inc()
		}
	})
	t, err := p.reg.acquire(context.Background(), normToken(s.DefaultToken))
	if err != nil {
		_ = p.reg.close(context.Background())
		return nil, err
	}
	p.reg.release(t)
	go p.sweep()
	return p, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// newLimiter makes one token's limiter from the template.
func (p *Proxy) newLimiter(token string) (*sluice.Limiter, error) {
	o := p.cfg.Limiter
	o.Token = token
	o.BaseURL = p.cfg.upstream.String()
	o.Redis = p.cfg.Redis
	o.MaxPending = p.cfg.MaxQueue
	o.WebhookAuth = p.cfg.WebhookAuth
	if o.MeterProvider == nil {
		o.MeterProvider = p.lm.provider
	}
	if o.Logger == nil {
		o.Logger = p.cfg.Logger.With(slog.String("token", tokenName(token)))
	}
	if p.cfg.upstream.Scheme == "http" && !o.AllowHTTP1 {
		o.H2C = true
	}
	return sluice.New(o)
}

// normToken is the Authorization value a token is sent with: "Bot " is
// added to a bare token, as sluice.Options.Token does, and the scheme is
// spelled as the limiter expects it, so "abc", "Bot abc" and "bot abc"
// share one limiter (and one set of Redis keys).
func normToken(token string) string {
	token = strings.TrimSpace(token)
	if token == "" {
		return ""
	}
	if i := strings.IndexByte(token, ' '); i > 0 {
		rest := strings.TrimSpace(token[i+1:])
		switch scheme := token[:i]; {
		case strings.EqualFold(scheme, "Bot"):
			return "Bot " + rest
		case strings.EqualFold(scheme, "Bearer"):
			return "Bearer " + rest
		}
	}
	return "Bot " + token
}

// sweep closes idle tokens' limiters until Close.
func (p *Proxy) sweep() {
	defer close(p.swept)
	t := time.NewTimer(p.cfg.IdleTimeout)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			t.Reset(max(p.reg.sweep(), time.Second))
		}
	}
}

// Drain makes ReadyPath answer 503 so a load balancer stops sending new
// requests; the proxy still serves what reaches it. Call it before
// http.Server.Shutdown.
func (p *Proxy) Drain() { p.draining.Store(true) }

// Close refuses new requests (503, reason shutting_down), fails queued
// ones the same way, lets requests on the wire finish until ctx ends (then
// they fail with 504 or 502), and returns when every limiter has stopped
// and every request accepted by ServeHTTP has been answered — or, for
// answers still being written to a client that does not read, when ctx
// ends (closing the server's connections then ends those writes). Call it
// after http.Server.Shutdown returns, whether or not that finished in
// time. Later calls return the first one's result.
func (p *Proxy) Close(ctx context.Context) error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return p.closeErr
	}
	p.closed = true
	p.mu.Unlock()
	p.draining.Store(true)
	close(p.stop)
	<-p.swept
	err := p.reg.close(ctx)
	err = errors.Join(err, p.lm.close())
	written := make(chan struct{})
	go func() { p.active.Wait(); close(written) }()
	select {
	case <-written:
	case <-ctx.Done():
		select {
		case <-written:
		default:
			err = errors.Join(err, fmt.Errorf("proxy: close: %w with answers still being written", ctx.Err()))
		}
	}
	p.closeErr = err
	return err
}

// enter counts a request in; it reports false once Close has begun.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.active.Add(1)
	return true
}

// ServeHTTP answers the proxy's endpoints (HealthPath, ReadyPath,
// MetricsPath) and relays every other request to the upstream through the
// limiter of its token. Every request gets exactly one answer: the
// upstream's (byte for byte, with its rate-limit headers), a cached one
// (CacheHeader "hit") or the proxy's own (ProxyHeader set).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case HealthPath:
		writeStatus(w, http.StatusOK, map[string]any{"status": "ok"})
		return
	case ReadyPath:
		p.ready(w, r)
		return
	case MetricsPath:
		if p.cfg.MetricsElsewhere {
			writeStatus(w, http.StatusNotFound, map[string]any{"message": "404: Not Found", "code": 0})
		} else {
			p.metricsH.ServeHTTP(w, r)
		}
		return
	}
	start := time.Now()
	id := requestID(r.Header.Get(RequestIDHeader))
	if auth := r.Header.Get("Authorization"); len(id) >= 8 && strings.Contains(auth, id) {
		id = requestID("") // a caller's token is never a request ID
	}
	w.Header().Set(RequestIDHeader, id)
	r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
	if r.ProtoMajor == 1 && (r.ContentLength != 0 || len(r.TransferEncoding) > 0) {
		// Until its body has been read in full, an answer closes the
		// HTTP/1 connection: net/http would otherwise read the rest of
		// the body first, with no deadline, from a client that may never
		// send it. relay lifts this once the body is read (see there).
		w.Header().Set("Connection", "close")
	}
	if !p.enter() {
		p.refuse(w, r, nil, "", p.classify(sluice.ErrClosed, nil), start)
		return
	}
	defer p.active.Done()
	p.m.inFlight.Inc()
	defer p.m.inFlight.Dec()
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			p.cfg.Logger.Error("sluice proxy: panic", slog.Any("panic", v), slog.String("request_id", id))
			p.refuse(w, r, nil, "", refusal{status: http.StatusInternalServerError, reason: ReasonInternal, message: fmt.Sprintf("proxy: internal error: %v", v)}, start)
		}
	}()
	p.relay(w, r, start)
}

// MetricsHandler serves the proxy's metrics in the Prometheus text
// format, as MetricsPath does unless Config.MetricsElsewhere.
func (p *Proxy) MetricsHandler() http.Handler { return p.metricsH }

// ready answers ReadyPath: 200 while this replica takes requests, 503
// once Drain or Close began. The body says more without changing the
// status: "upstream" is the connection state of the default token's
// limiter (or the token-less one): "connected", "connecting",
// "disconnected" or "global_limit", and "redis" whether Redis answers.
// An unreachable upstream or Redis does not make a replica unready: every
// replica shares them, so a load balancer taking replicas out would only
// turn the proxy's clear 502s and fallback shares into refused
// connections. Alert on the metrics instead (sluice_limiter_state,
// sluice_limiter_redis_mode).
func (p *Proxy) ready(w http.ResponseWriter, r *http.Request) {
	body := map[string]any{"status": "ready"}
	status := http.StatusOK
	if p.draining.Load() {
		status, body["status"] = http.StatusServiceUnavailable, "draining"
	}
	if lim := p.reg.peek(normToken(p.cfg.DefaultToken)); lim != nil {
		body["upstream"] = lim.Load().State
	}
	if p.cfg.Redis != nil {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := p.cfg.Redis.Ping(ctx).Err(); err != nil {
			body["redis"] = "unreachable: limits fall back to this process's share"
		} else {
			body["redis"] = "ok"
		}
	}
	writeStatus(w, status, body)
}

func writeStatus(w http.ResponseWriter, status int, body any) {
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// errMethod refuses a method Discord does not serve (routes.Methods).
var errMethod = errors.New("proxy: method not allowed")

// errAuthorization refuses an Authorization value no token can have.
var errAuthorization = errors.New("proxy: Authorization: want a token of printable ASCII (\"Bot <token>\", \"Bearer <token>\" or the bare token), at most 512 bytes")

// maxAuthorization is the longest Authorization value accepted; Discord's
// bot tokens are about 72 bytes.
const maxAuthorization = 512

// checkAuthorization checks a normalised Authorization value (normToken):
// "" or a scheme, one space and printable ASCII.
func checkAuthorization(v string) error {
	if len(v) > maxAuthorization {
		return errAuthorization
	}
	_, tok, _ := strings.Cut(v, " ")
	for i := 0; i < len(tok); i++ {
		if tok[i] <= ' ' || tok[i] >= 0x7f {
			return errAuthorization
		}
	}
	return nil
}

// relay sends r upstream through its token's limiter and copies the
// answer back. The order is the one of the package doc: the cheap checks
// first, the body read before a limiter is taken.
func (p *Proxy) relay(w http.ResponseWriter, r *http.Request, start time.Time) {
	if routes.MethodLabel(r.Method) == routes.OtherLabel { // CONNECT, TRACE and junk too
		p.refuse(w, r, nil, "", p.classify(errMethod, nil), start)
		return
	}
	target, route, err := p.target(r)
	if err != nil {
		p.refuse(w, r, nil, "", p.classify(err, nil), start)
		return
	}
	label := route.Label()
	token := normToken(r.Header.Get("Authorization"))
	if err := checkAuthorization(token); err != nil {
		p.refuse(w, r, nil, label, p.classify(err, nil), start)
		return
	}
	switch {
	case route.PerToken && !p.cfg.WebhookAuth:
		token = "" // the token is in the path: per-IP limit
	case token == "":
		token = normToken(p.cfg.DefaultToken)
	}
	maxWait, err := parseWait(r.Header.Get(p.cfg.MaxWaitHeader))
	if err != nil {
		p.refuse(w, r, nil, label, p.classify(fmt.Errorf("%s: %w", p.cfg.MaxWaitHeader, err), nil), start)
		return
	}
	priority, err := sluice.ParsePriority(r.Header.Get(p.cfg.PriorityHeader))
	if err != nil {
		p.refuse(w, r, nil, label, p.classify(fmt.Errorf("%s: %w", p.cfg.PriorityHeader, err), nil), start)
		return
	}
	key := token + "\x00" + route.Method + " " + target.EscapedPath() + "?" + target.RawQuery
	if a, ok := p.cache.get(key, p.cfg.Clock()); ok {
		h := w.Header()
		copyHeader(h, a.header)
		h.Set(RequestIDHeader, idOf(r))
		h.Set(CacheHeader, "hit")
		h.Set("Age", strconv.Itoa(int(p.cfg.Clock().Sub(a.stored).Seconds())))
		w.WriteHeader(a.status)
		_, _ = w.Write(a.body)
		p.done(r, route, label, a.status, sourceCache, tokenName(token), start)
		return
	}
	body, held, err := p.readBody(w, r)
	if err != nil {
		// net/http cancels the request's context on any read error, the
		// body timeout's included: only an unreadable body may mean the
		// caller left. A slow one is told why.
		if errors.Is(err, errBodyRead) && r.Context().Err() != nil { // the caller left: nobody to answer
			p.m.requests.WithLabelValues(route.Method, p.m.route(label), "499", sourceProxy).Inc()
			return
		}
		p.refuse(w, r, nil, label, p.classify(err, nil), start)
		return
	}
	defer p.body.give(held)
	if len(r.TransferEncoding) == 0 {
		// The body is read: the connection may carry the next request.
		// Not after a chunked one: net/http drops a Content-Length sent
		// beside Transfer-Encoding before a handler sees it, so an
		// ambiguous request (RFC 9112 §6.1, a smuggling attempt) cannot be
		// told from a chunked one, and the connection closes after every
		// chunked request.
		w.Header().Del("Connection")
	}
	ctx := sluice.WithPriority(sluice.WithMaxWait(r.Context(), maxWait), priority)
	t, err := p.reg.acquire(ctx, token)
	if err != nil {
		p.refuse(w, r, nil, label, p.classify(err, nil), start)
		return
	}
	defer p.reg.release(t)
	out, err := http.NewRequestWithContext(ctx, route.Method, "/", nil)
	if err != nil {
		p.refuse(w, r, t, label, p.classify(fmt.Errorf("%w: %v", sluice.ErrBadRequest, err), t), start)
		return
	}
	out.URL = target
	copyHeader(out.Header, r.Header, "Authorization", "Host", "Content-Length", p.cfg.MaxWaitHeader, p.cfg.PriorityHeader)
	if body != nil && body.n > 0 {
		out.Body, out.ContentLength = body.reader(), body.n
		out.GetBody = func() (io.ReadCloser, error) { return body.reader(), nil }
	}
	resp, err := t.lim.Do(ctx, out)
	if err != nil {
		if r.Context().Err() != nil { // the caller left: nobody to answer
			p.m.requests.WithLabelValues(route.Method, p.m.route(label), "499", sourceProxy).Inc()
			return
		}
		p.refuse(w, r, t, label, p.classify(err, t), start)
		return
	}
	defer resp.Body.Close()
	h := w.Header()
	copyHeader(h, resp.Header)
	h.Set(RequestIDHeader, idOf(r))
	if p.cache.cacheable(resp.StatusCode) {
		body, err := io.ReadAll(io.LimitReader(resp.Body, DefaultMaxCachedBody+1))
		if err == nil && len(body) <= DefaultMaxCachedBody {
			p.cache.put(key, resp.StatusCode, resp.Header.Clone(), body, p.cfg.Clock())
		}
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
	p.done(r, route, label, resp.StatusCode, sourceUpstream, t.name, start)
}

// refuse writes the proxy's own answer and records it.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, t *tenant, label string, a refusal, start time.Time) {
	a.write(w)
	p.m.refused.WithLabelValues(a.reason).Inc()
	if label == "" {
		label = labelInvalid
	}
	name := ""
	if t != nil {
		name = t.name
	}
	method := routes.MethodLabel(r.Method)
	p.m.answered(method, label, a.status, sourceProxy, time.Since(start).Seconds())
	level := slog.LevelWarn
	switch a.reason {
	case ReasonMaxWait, ReasonClosed, ReasonQueueFull: // asked for, or counted in metrics: one line each would flood
		level = slog.LevelDebug
	}
	p.cfg.Logger.Log(r.Context(), level, "sluice proxy: refused", slog.String("method", method), slog.String("route", label),
		slog.Int("status", a.status), slog.String("reason", a.reason), slog.String("token", name), slog.String("error", a.message),
		slog.String("request_id", idOf(r)))
}

// done records a relayed or cached answer.
func (p *Proxy) done(r *http.Request, route routes.Route, label string, status int, source, name string, start time.Time) {
	took := time.Since(start)
	p.m.answered(route.Method, label, status, source, took.Seconds())
	p.cfg.Logger.Debug("sluice proxy", slog.String("method", route.Method), slog.String("route", route.Redacted()),
		slog.Int("status", status), slog.String("source", source), slog.String("token", name), slog.Duration("took", took),
		slog.String("request_id", idOf(r)))
}

// errWait is a MaxWaitHeader value that is neither seconds nor a duration.
var errWait = errors.New(`want seconds ("2.5") or a Go duration ("2500ms"), at most 1,000,000 s`)

// maxWaitLimit is the longest wait a caller may state (11.6 days).
const maxWaitLimit = 1e6 * time.Second

// parseWait reads a MaxWaitHeader value: "" is no limit. The grammar is
// strict, so one value cannot mean two things: decimal seconds (digits,
// optionally a point and digits: "2", "2.5") or a Go duration made of
// numbers and units ("2500ms", "1m30s"); no sign, exponent, underscore,
// hexadecimal, Inf or NaN.
func parseWait(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	if v[0] < '0' || v[0] > '9' || len(v) > 32 {
		return 0, errWait
	}
	var d time.Duration
	if decimal(v) {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil || secs > maxWaitLimit.Seconds() {
			return 0, errWait
		}
		d = time.Duration(secs * float64(time.Second))
	} else {
		if strings.ContainsFunc(v, func(r rune) bool { return !strings.ContainsRune("0123456789.nuµmsh", r) }) {
			return 0, errWait
		}
		var err error
		if d, err = time.ParseDuration(v); err != nil || d > maxWaitLimit {
			return 0, errWait
		}
	}
	return max(d, time.Nanosecond), nil
}

// decimal reports digits with at most one point between digits.
func decimal(s string) bool {
	point := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
		case c == '.' && !point && i > 0 && i < len(s)-1:
			point = true
		default:
			return false
		}
	}
	return true
}
