package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/failure"
	"github.com/sluicehq/sluice/transport"
)

// Errors a request can end with. Compare with errors.Is and errors.As.
var (
	// ErrClosed is returned for requests submitted after Close began, and
	// for requests still queued when Close gave up on them.
	ErrClosed = failure.ErrClosed
	// ErrWaitTooLong is returned (as a *WaitError) when a request's
	// predicted wait exceeds its context deadline or Options.MaxWait.
	ErrWaitTooLong = failure.ErrWaitTooLong
	// ErrRateLimited is returned (as a *RateLimitError) when a request was
	// still answered 429 after Options.MaxRetries retries.
	ErrRateLimited = failure.ErrRateLimited
	// ErrBanned is returned (as a *RateLimitError with Scope "ban") when
	// the API answered like a Cloudflare ban: a 429 without any
	// X-RateLimit-* header and without a JSON body carrying retry_after (a
	// 429 with rate-limit headers is Discord's, whatever its body). Such
	// requests are never retried at once, and the limiter pauses every
	// request for the ban's wait.
	ErrBanned = failure.ErrBanned
	// ErrResponseTooLarge is returned when a response body exceeds
	// Options.MaxResponseBytes.
	ErrResponseTooLarge = failure.ErrResponseTooLarge
	// ErrQueueFull is returned when a request would exceed Options.MaxQueue
	// or Options.MaxPending.
	ErrQueueFull = failure.ErrQueueFull
	// ErrInvalidRequestBudget is returned (as a *BudgetError) while too many
	// 401, 403 and 429 answers came back within Options.InvalidRequestWindow.
	ErrInvalidRequestBudget = failure.ErrInvalidRequestBudget
	// ErrUnauthorized is returned for every request once the API answered
	// 401 to Options.Token.
	ErrUnauthorized = failure.ErrUnauthorized
	// ErrConnectionDied is matched (errors.Is) by the error of a request
	// that was sent on a connection that died before it was answered; it
	// may have been processed. The error says why the connection died.
	ErrConnectionDied = transport.ErrConnectionDied
	// ErrTimeout is matched (errors.Is) by the *TimeoutError of a request
	// that reached Options.Timeout, the deadline given to requests whose
	// context has none.
	ErrTimeout = errors.New("sluice: request timed out (Options.Timeout)")
	// ErrAttemptTimeout is returned (wrapped) when an attempt got no
	// complete answer within Options.AttemptTimeout and the request was
	// not safe to send again: it may have been processed.
	ErrAttemptTimeout = failure.ErrAttemptTimeout
	// ErrUnavailable is matched (errors.Is) by the *UnavailableError of a
	// request that waited for a connection while several in a row failed.
	ErrUnavailable = failure.ErrUnavailable
	// ErrInternal is returned (wrapped, with the panic's value) for a
	// request whose handling hit a bug in the library. The panic was
	// recovered: that request failed, nothing else is affected.
	ErrInternal = failure.ErrInternal
	// ErrBadRequest is matched (errors.Is) by the error of a request the
	// limiter cannot send as given: a nil request or URL, a body over
	// 64 MiB, a body that could not be read. A path the router cannot
	// parse fails with a *routes.ParseError instead.
	ErrBadRequest = errors.New("sluice: bad request")
	// ErrOtherHost is matched (errors.Is) by the error of a request to a
	// host other than the API's (a CDN, a third party) when
	// Options.RefuseOtherHosts is set. The error names the host.
	ErrOtherHost = errors.New("sluice: request to a host other than the API's")
	// ErrActorCrashed is returned for the one request whose message made a
	// bucket actor panic; the actor restarts with its queue and limits.
	ErrActorCrashed = failure.ErrActorCrashed
)

// BudgetError is returned while the invalid-request budget is exhausted
// (Options.InvalidRequestLimit): the limiter refuses requests rather than
// risk a Cloudflare ban. It matches ErrInvalidRequestBudget with errors.Is.
type BudgetError struct {
	// Count is the number of invalid answers (401, 403, non-shared 429) in
	// the window.
	Count int
	// Window is the budget's window (Options.InvalidRequestWindow).
	Window time.Duration
	// RetryAfter is when the oldest counted answer leaves the window and
	// requests are accepted again.
	RetryAfter time.Duration
}

func (e *BudgetError) Error() string { return (*failure.BudgetError)(e).Error() }

// Unwrap returns ErrInvalidRequestBudget.
func (e *BudgetError) Unwrap() error { return ErrInvalidRequestBudget }

// WaitError is returned when a request's predicted wait exceeds its
// context's deadline or Options.MaxWait; the request was never sent. It
// matches ErrWaitTooLong with errors.Is.
type WaitError struct {
	// Bucket is the route of the bucket the request would wait for, with
	// tokens redacted.
	Bucket string
	// Declared names the declared limit (Options.Limits) the request would
	// wait for; empty when it is the bucket's own.
	Declared string
	// By is what the request would wait for: "bucket" (its bucket's
	// windows or 429 pause), "declared" (the declared limit Declared) or
	// "global" (a global 429's pause); see ETA.Limit.
	By string
	// Wait is the predicted wait: the earliest the request could be sent
	// (its ETA's Start), less the time it was submitted.
	Wait time.Duration
	// Limit is the wait that was allowed: MaxWait or the time left before
	// the context's deadline, whichever is shorter.
	Limit time.Duration
	// At is when the request could be sent at the earliest (ETA.Start),
	// on the limiter's clock.
	At time.Time
}

func (e *WaitError) Error() string { return (*failure.WaitError)(e).Error() }

// Unwrap returns ErrWaitTooLong.
func (e *WaitError) Unwrap() error { return ErrWaitTooLong }

// RateLimitError is returned when a request still met a 429 after
// Options.MaxRetries retries, or met a Cloudflare ban. It matches
// ErrRateLimited (ErrBanned for a ban) with errors.Is.
type RateLimitError struct {
	// Scope is the 429's scope: "user" (the route's bucket), "global" (the
	// bot's global limit), "shared" (a limit shared by every user of a
	// resource), "sublimit" (a limit no header announces, such as channel
	// renames) or "ban" (a Cloudflare ban: a 429 without rate-limit headers
	// or JSON).
	Scope string
	// RetryAfter is the wait the API asked for.
	RetryAfter time.Duration
	// Attempts is the number of times the request was sent.
	Attempts int
	// Bucket is the request's route with tokens redacted.
	Bucket string
}

func (e *RateLimitError) Error() string { return (*failure.RateLimitError)(e).Error() }

// Unwrap returns ErrBanned for a ban and ErrRateLimited otherwise.
func (e *RateLimitError) Unwrap() error { return (*failure.RateLimitError)(e).Unwrap() }

// TimeoutError is the error of a request that reached Options.Timeout: its
// context had no deadline, so the limiter gave it one. It matches
// ErrTimeout and context.DeadlineExceeded with errors.Is.
type TimeoutError struct {
	// Timeout is Options.Timeout.
	Timeout time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("sluice: request timed out after %s (Options.Timeout; give the request a context with a deadline to choose another)", e.Timeout)
}

// Is reports whether target is ErrTimeout or context.DeadlineExceeded.
func (e *TimeoutError) Is(target error) bool {
	return target == ErrTimeout || target == context.DeadlineExceeded
}

// UnavailableError is the error of requests that waited for a connection
// while Failures connections in a row failed to reach the API: dials that
// failed, or connections that died before answering anything without the
// server accepting them (an HTTP/2 server that closes before its SETTINGS
// frame) or in a GOAWAY. A connection the server accepted and then dropped
// shows the API reachable and does not count: the requests it carried are
// resent within their own retry budgets. The limiter keeps trying with a
// growing backoff; requests submitted later wait for it. It matches
// ErrUnavailable and, through Err, the last failure's error.
type UnavailableError struct {
	// Failures is the number of connections in a row that failed to
	// reach the API.
	Failures int
	// Err is the last failure's error.
	Err error
}

func (e *UnavailableError) Error() string { return (*failure.UnavailableError)(e).Error() }

// Unwrap returns ErrUnavailable and Err.
func (e *UnavailableError) Unwrap() []error { return (*failure.UnavailableError)(e).Unwrap() }

// publicError gives the caller the error types of this package: the actors
// build those of internal/failure, with the same fields, and every outcome
// passes here.
func publicError(err error) error {
	switch e := err.(type) {
	case *failure.RateLimitError:
		return (*RateLimitError)(e)
	case *failure.WaitError:
		return (*WaitError)(e)
	case *failure.BudgetError:
		return (*BudgetError)(e)
	case *failure.UnavailableError:
		return (*UnavailableError)(e)
	}
	return err
}
