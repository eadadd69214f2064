package leakybucket

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// Problem types of the middleware's responses (RFC 9457).
const (
	// ProblemQuotaExceeded is the type of the 429 body: the problem type
	// draft-ietf-httpapi-ratelimit-headers defines, with the extension
	// member "violated-policies" naming the limits that blocked.
	ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// ProblemTemporaryReducedCapacity is the type of the 503 body of
	// WriteError when the store is unavailable: the problem type the same
	// draft defines for requests refused because the server's capacity is
	// temporarily reduced, not because the client exceeded its quota.
	ProblemTemporaryReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// MiddlewareOptions configures NewMiddleware. Only Limits is required.
type MiddlewareOptions struct {
	// Limits are checked together for every request: a request is admitted
	// only if none of them blocks it, and only then charged to each (see
	// Store). Several limits per route are several entries, such as a
	// burst of 10 per second and 1,000 per hour. At least one, with
	// distinct names.
	Limits []Limit

	// Key returns the key whose buckets a request is charged to. nil means
	// IPKey{}.Key: the connection's peer address, no proxy trusted, IPv6
	// by /64. Use an IPKey with TrustedProxies behind a load balancer, or
	// key authenticated requests by user (see the examples).
	Key func(*http.Request) string

	// DraftHeaders adds the IETF draft's RateLimit-Policy and RateLimit
	// fields to the seed's headers (see SetHeaders). false means the seed's
	// headers only.
	DraftHeaders bool

	// LimitHeader adds X-RateLimit-Limit, the Size of the limit whose
	// Remaining X-RateLimit-Remaining reports (see HeaderOptions.Limit).
	// false leaves it out, as the seed does.
	LimitHeader bool

	// OnBlocked writes the response to a blocked request; the rate-limit
	// headers are already set on w. nil means WriteBlocked: a 429 with an
	// application/problem+json body.
	OnBlocked func(w http.ResponseWriter, r *http.Request, results []Result)

	// OnError writes the response when the store returned no decision: an
	// *UnavailableError under FailClosed, an invalid limit, or the
	// request's context ending. nil means WriteError: 503 with Retry-After
	// for ErrUnavailable, nothing if the request's context is done, 500
	// otherwise. (Under FailOpen and FailLocal an unavailable store still
	// decides: FailOpen serves the request without rate-limit headers,
	// FailLocal as the local store decides. Observe sees the error either
	// way.)
	OnError func(w http.ResponseWriter, r *http.Request, err error)

	// Observe, if set, is called once per request after its check: the
	// hook for metrics (admitted and blocked counts per limit, store
	// errors, store latency). It runs on the request's goroutine before
	// the response is written, so it must be quick.
	Observe func(Event)
}

// Event describes one check of the middleware, for MiddlewareOptions.Observe.
type Event struct {
	// Request is the request checked.
	Request *http.Request
	// Key is its key.
	Key string
	// Results are the store's results, one per limit, or none if the store
	// gave no decision. The slice is reused after Observe returns: copy it
	// to keep it.
	Results []Result
	// Blocked reports that the request was refused: a limit blocked it, or
	// the store gave no decision (Err is set).
	Blocked bool
	// Err is the store's error, or nil. An *UnavailableError here under
	// FailOpen or FailLocal comes with a decision (Results).
	Err error
	// Duration is how long the store took to decide.
	Duration time.Duration
}

// NewMiddleware returns net/http middleware that checks every request
// against opts.Limits in store, sets the rate-limit headers (SetHeaders) on
// every response it decides, and answers blocked requests with
// opts.OnBlocked instead of calling the next handler. It returns an error
// wrapping ErrInvalidLimit if a limit is invalid, there is none, or two
// share a name.
func NewMiddleware(store Store, opts MiddlewareOptions) (func(http.Handler) http.Handler, error) {
	if store == nil {
		return nil, errors.New("leakybucket: NewMiddleware: nil store")
	}
	if len(opts.Limits) == 0 {
		return nil, &LimitError{Reason: "NewMiddleware needs at least one limit"}
	}
	for i, lim := range opts.Limits {
		if err := lim.Validate(); err != nil {
			return nil, err
		}
		for _, prev := range opts.Limits[:i] {
			if prev.name() == lim.name() {
				return nil, &LimitError{Name: lim.Name, Reason: "two limits share the name " + lim.name()}
			}
		}
	}
	m := &middleware{store: store, opts: opts, headers: HeaderOptions{Draft: opts.DraftHeaders, Limit: opts.LimitHeader}}
	m.opts.Limits = append([]Limit(nil), opts.Limits...)
	if m.opts.Key == nil {
		m.opts.Key = IPKey{}.Key
	}
	if m.opts.OnBlocked == nil {
		m.opts.OnBlocked = WriteBlocked
	}
	if m.opts.OnError == nil {
		m.opts.OnError = WriteError
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
	}, nil
}

type middleware struct {
	store   Store
	opts    MiddlewareOptions
	headers HeaderOptions
}

func (m *middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	key := m.opts.Key(r)
	began := time.Now()
	results, err := m.store.CheckAll(r.Context(), key, m.opts.Limits, make([]Result, 0, len(m.opts.Limits)))
	took := time.Since(began)

	var uerr *UnavailableError
	decided := len(results) == len(m.opts.Limits) &&
		(err == nil || errors.As(err, &uerr) && uerr.Policy != FailClosed)
	blocked := !decided
	if decided {
		for _, res := range results {
			blocked = blocked || res.Blocked
		}
	}
	if m.opts.Observe != nil {
		ev := Event{Request: r, Key: key, Blocked: blocked, Err: err, Duration: took}
		if decided {
			ev.Results = results
		}
		m.opts.Observe(ev)
	}
	switch {
	case !decided:
		m.opts.OnError(w, r, err)
	case uerr != nil && uerr.Policy == FailOpen:
		next.ServeHTTP(w, r) // nothing was counted: no headers to tell
	case blocked:
		m.headers.Set(w.Header(), results...)
		m.opts.OnBlocked(w, r, results)
	default:
		m.headers.Set(w.Header(), results...)
		next.ServeHTTP(w, r)
	}
}

// problem is an RFC 9457 problem details object.
type problem struct {
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Status     int      `json:"status"`
	Detail     string   `json:"detail,omitempty"`
	Violated   []string `json:"violated-policies,omitempty"`
	RetryAfter *float64 `json:"retry-after,omitempty"`
}

func writeProblem(w http.ResponseWriter, p problem) {
	body, err := json.Marshal(p)
	if err != nil { // cannot happen: strings, ints and floats
		http.Error(w, p.Title, p.Status)
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// WriteBlocked is the default MiddlewareOptions.OnBlocked: a 429 Too Many
// Requests with an application/problem+json body of type
// ProblemQuotaExceeded, naming the blocked limits in "violated-policies"
// and the seconds to wait in "retry-after" (X-RateLimit-Reset's value):
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title":"Request cannot be satisfied as assigned quota has been exceeded",
//	 "status":429,"detail":"rate limit \"api\" exceeded: retry in 0.755 s",
//	 "violated-policies":["api"],"retry-after":0.755}
func WriteBlocked(w http.ResponseWriter, _ *http.Request, results []Result) {
	var violated []string
	var retry time.Duration
	for _, res := range results {
		if res.Blocked {
			violated = append(violated, res.Limit.name())
			retry = max(retry, res.RetryAfter)
		}
	}
	secs := float64(ceilMillis(retry)) / 1000
	detail := "rate limit exceeded: retry in " + formatSeconds(retry) + " s"
	if len(violated) == 1 {
		detail = "rate limit " + strconv.Quote(violated[0]) + " exceeded: retry in " + formatSeconds(retry) + " s"
	}
	writeProblem(w, problem{
		Type:       ProblemQuotaExceeded,
		Title:      "Request cannot be satisfied as assigned quota has been exceeded",
		Status:     http.StatusTooManyRequests,
		Detail:     detail,
		Violated:   violated,
		RetryAfter: &secs,
	})
}

// WriteError is the default MiddlewareOptions.OnError. For an error
// wrapping ErrUnavailable it answers 503 Service Unavailable with the
// error's RetryAfter as Retry-After (rounded up to whole seconds) and a
// problem body of type ProblemTemporaryReducedCapacity (the client did
// nothing wrong: the limiter cannot decide), with "retry-after" in
// seconds; if the request's context is done (the client left, the
// server is shutting down) it writes nothing; otherwise it answers 500
// Internal Server Error with a problem body that does not reveal err.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	var uerr *UnavailableError
	switch {
	case errors.As(err, &uerr):
		if uerr.RetryAfter > 0 {
			w.Header().Set(HeaderRetryAfter, strconv.FormatInt(ceilSeconds(uerr.RetryAfter), 10))
		}
		p := problem{
			Type:   ProblemTemporaryReducedCapacity,
			Title:  "Request cannot be satisfied due to temporary server capacity constraints",
			Status: http.StatusServiceUnavailable,
			Detail: "Service Unavailable: the rate limiter cannot decide right now; retry later",
		}
		if uerr.RetryAfter > 0 {
			secs := float64(ceilMillis(uerr.RetryAfter)) / 1000
			p.RetryAfter = &secs
		}
		writeProblem(w, p)
	case r.Context().Err() != nil:
	default:
		writeProblem(w, problem{
			Type:   "about:blank",
			Title:  http.StatusText(http.StatusInternalServerError),
			Status: http.StatusInternalServerError,
			Detail: "the rate limiter failed",
		})
	}
}
