package sluice

import (
	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/transport"
)

// Errors a request can end with. Compare with errors.Is and errors.As.
var (
	// ErrClosed is returned for requests submitted after Close began, and
	// for requests still queued when Close gave up on them.
	ErrClosed = actors.ErrClosed
	// ErrWaitTooLong is returned (as a *WaitError) when a request's
	// predicted wait exceeds its context deadline or Options.MaxWait.
	ErrWaitTooLong = actors.ErrWaitTooLong
	// ErrRateLimited is returned (as a *RateLimitError) when a request was
	// still answered 429 after Options.MaxRetries retries.
	ErrRateLimited = actors.ErrRateLimited
	// ErrBanned is returned (as a *RateLimitError with Scope "ban") when
	// the API answered like a Cloudflare ban: a 429 without rate-limit
	// headers or without a JSON body. Such requests are never retried at
	// once, and the limiter pauses every request for the ban's wait.
	ErrBanned = actors.ErrBanned
	// ErrResponseTooLarge is returned when a response body exceeds
	// Options.MaxResponseBytes.
	ErrResponseTooLarge = actors.ErrResponseTooLarge
	// ErrQueueFull is returned when a request would exceed Options.MaxQueue
	// or Options.MaxPending.
	ErrQueueFull = actors.ErrQueueFull
	// ErrInvalidRequestBudget is returned (as a *BudgetError) while too many
	// 401, 403 and 429 answers came back within Options.InvalidRequestWindow.
	ErrInvalidRequestBudget = actors.ErrInvalidRequestBudget
	// ErrUnauthorized is returned for every request once the API answered
	// 401 to Options.Token.
	ErrUnauthorized = actors.ErrUnauthorized
	// ErrConnectionDied is matched (errors.Is) by the error of a request
	// that was sent on a connection that died before it was answered; it
	// may have been processed. The error says why the connection died.
	ErrConnectionDied = transport.ErrConnectionDied
	// ErrActorCrashed is returned for the one request whose message made a
	// bucket actor panic; the actor restarts with its queue and limits.
	ErrActorCrashed = actors.ErrActorCrashed
)

// BudgetError reports the invalid-request count that made the limiter refuse
// a request, and when it will accept requests again.
type BudgetError = actors.BudgetError

// WaitError carries the predicted wait of a request refused with
// ErrWaitTooLong.
type WaitError = actors.WaitError

// RateLimitError describes a request that ended on a 429: its scope, the
// wait the API asked for and the attempts made.
type RateLimitError = actors.RateLimitError
