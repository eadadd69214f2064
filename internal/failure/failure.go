// Package failure is the vocabulary of a request's failures, shared by
// the actors that decide them and package sluice that hands them to the
// caller: the sentinel errors (ErrClosed, ErrWaitTooLong, ...) and the
// error types carrying a failure's numbers (BudgetError, WaitError,
// RateLimitError, UnavailableError); and the fate of a request whose
// attempt got no complete response, which error ends it or whether it
// goes again (Failed, fate.go: the bucket actor's bucket.failed acts on
// it).
//
// Package sluice re-exports every sentinel as is (sluice.ErrClosed is
// failure.ErrClosed: errors.Is matches either name) and has a public twin
// of each error type, with the same fields and its own documentation: it
// converts an error of this package, field for field, before a caller sees
// it (sluice's publicError), and its Error methods call these (its Unwrap
// methods return the same sentinels). So the messages are written once,
// here, and each error matches the same sentinel under either name.
//
// Invariants: every error type's Unwrap returns a sentinel of this
// package (and UnavailableError's also its cause), so errors.Is matches
// the same sentinel before and after the conversion; ErrResponseTooLarge
// and ErrNotSent are attempt.ErrResponseTooLarge and attempt.ErrNotSent,
// the errors the body reader and the exchange return (that package names
// these: it runs an attempt with this vocabulary).
package failure

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/forecast"
)

// Sentinel errors. Each is returned (possibly wrapped) as documented.
var (
	// ErrClosed is returned for requests submitted after Close began, and
	// for requests still queued when Close gave up on them.
	ErrClosed = errors.New("sluice: limiter closed")
	// ErrWaitTooLong is returned when a request's predicted wait exceeds
	// its context deadline or the configured maximum wait; the error is a
	// *WaitError carrying the wait.
	ErrWaitTooLong = errors.New("sluice: predicted wait too long")
	// ErrRateLimited is returned when a request was still answered 429
	// after the configured number of retries; the error is a
	// *RateLimitError.
	ErrRateLimited = errors.New("sluice: rate limited")
	// ErrBanned is returned when the API answered like a Cloudflare ban (a
	// 429 with neither rate-limit headers nor a JSON body). Such requests
	// are never retried at once.
	ErrBanned = errors.New("sluice: upstream ban (Cloudflare)")
	// ErrResponseTooLarge is returned when a response body exceeds the
	// configured maximum.
	ErrResponseTooLarge = errors.New("sluice: response body too large")
	// ErrNotSent is matched (errors.Is) by an attempt that could not be
	// built or put on the wire (attempt.NotSentError): it was never sent.
	ErrNotSent = errors.New("sluice: request not sent")
	// ErrQueueFull is returned when a request would exceed the bound on
	// queued requests of its bucket or of the whole limiter.
	ErrQueueFull = errors.New("sluice: queue full")
	// ErrInvalidRequestBudget is returned (as a *BudgetError) while the
	// limiter refuses requests because too many 401, 403 and 429 answers
	// came back recently: sending more would risk a Cloudflare ban.
	ErrInvalidRequestBudget = errors.New("sluice: invalid-request budget exhausted")
	// ErrUnauthorized is returned for every request once the API answered
	// 401 to the limiter's token: the token is bad and retrying it only
	// spends the invalid-request budget.
	ErrUnauthorized = errors.New("sluice: token rejected (401)")
	// ErrUnavailable is matched (errors.Is) by the *UnavailableError of a
	// request that waited for a connection while several in a row failed.
	ErrUnavailable = errors.New("sluice: API unreachable")
	// ErrAttemptTimeout is returned (wrapped) when an attempt got no
	// complete answer within the attempt timeout and could not be resent
	// safely: it may have been processed.
	ErrAttemptTimeout = errors.New("sluice: no complete answer within the attempt timeout; the request may have been processed")
	// ErrInternal is returned (wrapped, with the panic's value) for a
	// request whose handling hit a bug in the library: the panic was
	// recovered, the request failed, and nothing else is affected.
	ErrInternal = errors.New("sluice: internal error")
	// ErrActorCrashed is returned for the request whose message made a
	// bucket actor panic. The actor restarts with its queue and limits;
	// nothing else is lost.
	ErrActorCrashed = errors.New("sluice: bucket actor crashed")
)

// BudgetError is the internal form of sluice.BudgetError (documented
// there): package sluice converts it, field for field, before a caller
// sees it. It matches ErrInvalidRequestBudget.
type BudgetError struct {
	Count      int
	Window     time.Duration
	RetryAfter time.Duration
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("sluice: %d invalid answers (401/403/429) in %s; refusing requests for %s to avoid a ban",
		e.Count, e.Window, e.RetryAfter.Round(time.Millisecond))
}

// Unwrap returns ErrInvalidRequestBudget.
func (e *BudgetError) Unwrap() error { return ErrInvalidRequestBudget }

// WaitError is the internal form of sluice.WaitError (documented there). It
// matches ErrWaitTooLong with errors.Is.
type WaitError struct {
	Bucket      string
	Declared    string
	By          string
	Wait, Limit time.Duration
	At          time.Time
}

func (e *WaitError) Error() string {
	if e.By == forecast.BoundGlobal {
		return fmt.Sprintf("sluice: predicted wait %s for the global limit (%s) exceeds %s", e.Wait.Round(time.Millisecond), e.Bucket, e.Limit.Round(time.Millisecond))
	}
	if e.Declared != "" {
		return fmt.Sprintf("sluice: predicted wait %s for declared limit %s (%s) exceeds %s", e.Wait.Round(time.Millisecond), e.Declared, e.Bucket, e.Limit.Round(time.Millisecond))
	}
	return fmt.Sprintf("sluice: predicted wait %s for bucket %s exceeds %s", e.Wait.Round(time.Millisecond), e.Bucket, e.Limit.Round(time.Millisecond))
}

// Unwrap returns ErrWaitTooLong.
func (e *WaitError) Unwrap() error { return ErrWaitTooLong }

// RateLimitError is the internal form of sluice.RateLimitError (documented
// there). It matches ErrRateLimited (or ErrBanned) with errors.Is.
type RateLimitError struct {
	Scope      string
	RetryAfter time.Duration
	Attempts   int
	Bucket     string
}

func (e *RateLimitError) Error() string {
	attempts := "attempts"
	if e.Attempts == 1 {
		attempts = "attempt"
	}
	return fmt.Sprintf("sluice: %s rate limit on %s after %d %s (retry after %s)", e.Scope, e.Bucket, e.Attempts, attempts, e.RetryAfter.Round(time.Millisecond))
}

// Unwrap returns ErrBanned for a ban and ErrRateLimited otherwise.
func (e *RateLimitError) Unwrap() error {
	if e.Scope == "ban" {
		return ErrBanned
	}
	return ErrRateLimited
}

// Cause is ctx's cause, so callers can tell cancellation from a deadline
// and see custom causes: context.Cause, or ctx.Err() when it has none.
func Cause(ctx context.Context) error {
	if c := context.Cause(ctx); c != nil {
		return c
	}
	return ctx.Err()
}

// UnavailableError is the internal form of sluice.UnavailableError
// (documented there). It matches ErrUnavailable and its cause.
type UnavailableError struct {
	Failures int
	Err      error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("sluice: API unreachable: %d connections in a row failed to reach it; last: %v", e.Failures, e.Err)
}

// Unwrap returns ErrUnavailable and the last connection's error.
func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }
