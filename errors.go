package sluice

import "github.com/sluicehq/sluice/actors"

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
)

// WaitError carries the predicted wait of a request refused with
// ErrWaitTooLong.
type WaitError = actors.WaitError

// RateLimitError describes a request that ended on a 429: its scope, the
// wait the API asked for and the attempts made.
type RateLimitError = actors.RateLimitError
