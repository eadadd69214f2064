package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/routes"
)

// ProxyHeader marks every answer the proxy makes itself rather than
// relays from the API. Its value is the reason, one of the Reason
// constants: a client can tell the proxy's 429 (fail fast) from
// Discord's.
const ProxyHeader = "X-Sluice-Proxy"

// CacheHeader is set to "hit" on an answer replayed from the cache.
const CacheHeader = "X-Sluice-Cache"

// ETAHeader carries, on a max_wait refusal, the earliest time the request
// could have been sent (RFC 3339, UTC, milliseconds): the Start of its ETA
// (sluice.ETA). The JSON body repeats it as "eta", with "limit", what sets
// it ("bucket", "declared" or "global"), and "declared", the declared
// limit's name.
const ETAHeader = "X-Sluice-ETA"

// Reasons of the proxy's own answers (the ProxyHeader value), one per row
// of the table in classify.
const (
	ReasonQueueFull    = "queue_full"         // MaxQueue (or MaxTokens) reached: OverflowStatus
	ReasonMaxWait      = "max_wait"           // predicted wait over the caller's MaxWaitHeader: 429
	ReasonRateLimited  = "rate_limited"       // 429s after every retry: 429
	ReasonBudget       = "budget"             // invalid-request budget spent: 429
	ReasonUnauthorized = "unauthorized"       // the token was answered 401 recently: 401
	ReasonBanned       = "banned"             // the API answered like a Cloudflare ban: 503
	ReasonTimeout      = "timeout"            // no answer in time: 504
	ReasonUnavailable  = "unavailable"        // the API could not be reached: 502
	ReasonTooLarge     = "too_large"          // the answer was over the size bound: 502
	ReasonBadRequest   = "bad_request"        // a path, header or body the proxy cannot send: 400
	ReasonMethod       = "method_not_allowed" // a method Discord does not serve: 405
	ReasonBodyTooLarge = "body_too_large"     // a request body over Config.MaxBody: 413
	ReasonBodyTimeout  = "body_timeout"       // the body not received within Config.BodyTimeout: 408
	ReasonOverloaded   = "overloaded"         // the bodies held at once at Config.MaxBuffered: 503
	ReasonClosed       = "shutting_down"      // the proxy is shutting down: 503
	ReasonInternal     = "internal"           // a bug, recovered: 500
)

// refusal is the proxy's own answer to a request it could not relay.
type refusal struct {
	status     int
	reason     string
	retryAfter time.Duration // 0: no Retry-After
	global     bool
	scope      string // X-RateLimit-Scope on a relayed rate limit
	message    string
	code       int // Discord's JSON error code; 0 for the proxy's own
	// eta, limit and declared: a max_wait refusal's ETA (zero otherwise).
	eta             time.Time
	limit, declared string
}

// classify maps a limiter's error to the answer the caller gets: the one
// table of the proxy's failure behaviour (docs/proxy.md shows it).
func (p *Proxy) classify(err error, t *tenant) refusal {
	var (
		we *sluice.WaitError
		rl *sluice.RateLimitError
		be *sluice.BudgetError
		pe *routes.ParseError
		oe *sluice.OptionError
	)
	switch {
	case errors.Is(err, errMethod):
		return refusal{status: http.StatusMethodNotAllowed, reason: ReasonMethod, message: "405: Method Not Allowed"}
	case errors.Is(err, errBodyTooLarge):
		return refusal{status: http.StatusRequestEntityTooLarge, reason: ReasonBodyTooLarge, code: 40005, message: maxBodyMessage(p.cfg.MaxBody)}
	case errors.Is(err, errBodyTimeout):
		return refusal{status: http.StatusRequestTimeout, reason: ReasonBodyTimeout, message: err.Error()}
	case errors.Is(err, errBodyBudget):
		return refusal{status: http.StatusServiceUnavailable, reason: ReasonOverloaded, retryAfter: time.Second, message: err.Error()}
	case errors.Is(err, errBodyRead), errors.Is(err, errAuthorization), errors.Is(err, errWait),
		errors.As(err, &oe) && oe.Option == "Token": // a caller's token New refused: the input's fault
		return refusal{status: http.StatusBadRequest, reason: ReasonBadRequest, message: err.Error()}
	case errors.Is(err, errTooManyTokens), errors.Is(err, sluice.ErrQueueFull):
		return refusal{status: p.cfg.OverflowStatus, reason: ReasonQueueFull, retryAfter: p.drainTime(t), message: err.Error()}
	case errors.As(err, &we):
		by := we.By
		if we.Declared != "" {
			by += " " + we.Declared
		}
		return refusal{status: http.StatusTooManyRequests, reason: ReasonMaxWait, retryAfter: we.Wait,
			eta: we.At, limit: we.By, declared: we.Declared,
			message: "predicted wait " + we.Wait.Round(time.Millisecond).String() + " (" + by + ") exceeds the " + we.Limit.String() + " accepted (" + p.cfg.MaxWaitHeader + ")"}
	case errors.As(err, &rl):
		return refusal{status: http.StatusTooManyRequests, reason: ReasonRateLimited, retryAfter: rl.RetryAfter, global: rl.Scope == "global", scope: rl.Scope, message: "You are being rate limited."}
	case errors.As(err, &be):
		return refusal{status: http.StatusTooManyRequests, reason: ReasonBudget, retryAfter: be.RetryAfter, message: err.Error()}
	case errors.Is(err, sluice.ErrUnauthorized):
		return refusal{status: http.StatusUnauthorized, reason: ReasonUnauthorized, message: "401: Unauthorized"}
	case errors.Is(err, sluice.ErrBanned):
		return refusal{status: http.StatusServiceUnavailable, reason: ReasonBanned, retryAfter: time.Minute, message: err.Error()}
	case errors.Is(err, sluice.ErrClosed):
		return refusal{status: http.StatusServiceUnavailable, reason: ReasonClosed, retryAfter: time.Second, message: "proxy shutting down"}
	case errors.Is(err, sluice.ErrTimeout), errors.Is(err, sluice.ErrAttemptTimeout), errors.Is(err, context.DeadlineExceeded):
		return refusal{status: http.StatusGatewayTimeout, reason: ReasonTimeout, message: err.Error()}
	case errors.Is(err, sluice.ErrResponseTooLarge):
		return refusal{status: http.StatusBadGateway, reason: ReasonTooLarge, message: err.Error()}
	case errors.As(err, &pe), errors.Is(err, sluice.ErrBadRequest):
		return refusal{status: http.StatusBadRequest, reason: ReasonBadRequest, message: err.Error()}
	case errors.Is(err, sluice.ErrInternal), errors.Is(err, sluice.ErrActorCrashed):
		return refusal{status: http.StatusInternalServerError, reason: ReasonInternal, message: err.Error()}
	default: // connection died, API unreachable, anything else on the way
		return refusal{status: http.StatusBadGateway, reason: ReasonUnavailable, message: err.Error()}
	}
}

// drainTime estimates how long t's queue needs to go down: what is in
// flight over the token's global rate, at least a second.
func (p *Proxy) drainTime(t *tenant) time.Duration {
	if t == nil {
		return time.Second
	}
	p.reg.mu.Lock()
	n := t.inflight
	p.reg.mu.Unlock()
	d := time.Duration(float64(n) / float64(p.globalRate) * float64(time.Second))
	return max(d, time.Second)
}

// write sends the refusal as Discord shapes its errors: a JSON body with
// message and code, plus retry_after and global for a 429.
func (r refusal) write(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set(ProxyHeader, r.reason)
	if r.status == http.StatusMethodNotAllowed {
		h.Set("Allow", strings.Join(routes.Methods, ", "))
	}
	body := map[string]any{"message": r.message, "code": r.code}
	if r.retryAfter > 0 {
		secs := r.retryAfter.Seconds()
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(secs))))
		body["retry_after"] = math.Ceil(secs*1000) / 1000
	}
	if !r.eta.IsZero() {
		at := r.eta.UTC().Format("2006-01-02T15:04:05.000Z07:00")
		h.Set(ETAHeader, at)
		body["eta"], body["limit"] = at, r.limit
		if r.declared != "" {
			body["declared"] = r.declared
		}
	}
	if r.status == http.StatusTooManyRequests {
		body["global"] = r.global
		if r.scope != "" {
			h.Set("X-RateLimit-Scope", r.scope)
		}
		if r.global {
			h.Set("X-RateLimit-Global", "true")
		}
	}
	b, _ := json.Marshal(body)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(r.status)
	_, _ = w.Write(b)
}
