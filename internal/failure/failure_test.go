package failure_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/internal/attempt"
	"github.com/sluicehq/sluice/internal/failure"
	"github.com/sluicehq/sluice/internal/forecast"
)

// Each error type matches its sentinel with errors.Is, wrapped or not, and
// no other sentinel.
func TestErrorsMatchTheirSentinel(t *testing.T) {
	sentinels := []error{
		failure.ErrClosed, failure.ErrWaitTooLong, failure.ErrRateLimited, failure.ErrBanned,
		failure.ErrResponseTooLarge, failure.ErrQueueFull, failure.ErrInvalidRequestBudget,
		failure.ErrUnauthorized, failure.ErrUnavailable, failure.ErrAttemptTimeout,
		failure.ErrInternal, failure.ErrActorCrashed,
	}
	cases := []struct {
		err  error
		want error
	}{
		{&failure.BudgetError{Count: 3, Window: time.Second, RetryAfter: time.Second}, failure.ErrInvalidRequestBudget},
		{&failure.WaitError{Bucket: "b", Wait: time.Second, Limit: time.Millisecond}, failure.ErrWaitTooLong},
		{&failure.RateLimitError{Scope: "user", Attempts: 2, Bucket: "b"}, failure.ErrRateLimited},
		{&failure.RateLimitError{Scope: "ban", Attempts: 1, Bucket: "b"}, failure.ErrBanned},
		{&failure.UnavailableError{Failures: 3, Err: io.EOF}, failure.ErrUnavailable},
	}
	for _, c := range cases {
		for _, err := range []error{c.err, fmt.Errorf("wrapped: %w", c.err)} {
			for _, s := range sentinels {
				assert.Equal(t, s == c.want, errors.Is(err, s), "%v is %v", err, s)
			}
		}
	}
}

func TestUnwrap(t *testing.T) {
	assert.Equal(t, failure.ErrInvalidRequestBudget, (&failure.BudgetError{}).Unwrap())
	assert.Equal(t, failure.ErrWaitTooLong, (&failure.WaitError{}).Unwrap())
	assert.Equal(t, failure.ErrRateLimited, (&failure.RateLimitError{Scope: "global"}).Unwrap())
	assert.Equal(t, failure.ErrBanned, (&failure.RateLimitError{Scope: "ban"}).Unwrap())
	u := &failure.UnavailableError{Failures: 2, Err: io.ErrUnexpectedEOF}
	assert.Equal(t, []error{failure.ErrUnavailable, io.ErrUnexpectedEOF}, u.Unwrap())
	assert.ErrorIs(t, u, io.ErrUnexpectedEOF, "the last failure's cause matches too")
}

// The sentinels are distinct, and ErrResponseTooLarge is the body
// reader's own error.
func TestSentinels(t *testing.T) {
	assert.Same(t, attempt.ErrResponseTooLarge, failure.ErrResponseTooLarge)
	all := []error{
		failure.ErrClosed, failure.ErrWaitTooLong, failure.ErrRateLimited, failure.ErrBanned,
		failure.ErrQueueFull, failure.ErrInvalidRequestBudget, failure.ErrUnauthorized,
		failure.ErrUnavailable, failure.ErrAttemptTimeout, failure.ErrInternal, failure.ErrActorCrashed,
	}
	for i, a := range all {
		for j, b := range all {
			assert.Equal(t, i == j, errors.Is(a, b), "%v and %v", a, b)
		}
	}
}

func TestMessages(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&failure.BudgetError{Count: 10, Window: 10 * time.Minute, RetryAfter: 1500 * time.Microsecond},
			"sluice: 10 invalid answers (401/403/429) in 10m0s; refusing requests for 2ms to avoid a ban"},
		{&failure.WaitError{Bucket: "GET /channels/!", Wait: 1200 * time.Millisecond, Limit: time.Second},
			"sluice: predicted wait 1.2s for bucket GET /channels/! exceeds 1s"},
		{&failure.WaitError{Bucket: "GET /x", Declared: "bulk", Wait: 2 * time.Second, Limit: time.Second},
			"sluice: predicted wait 2s for declared limit bulk (GET /x) exceeds 1s"},
		{&failure.WaitError{Bucket: "GET /x", Declared: "bulk", By: forecast.BoundGlobal, Wait: 2 * time.Second, Limit: time.Second},
			"sluice: predicted wait 2s for the global limit (GET /x) exceeds 1s"},
		{&failure.RateLimitError{Scope: "user", RetryAfter: 250 * time.Millisecond, Attempts: 1, Bucket: "GET /x"},
			"sluice: user rate limit on GET /x after 1 attempt (retry after 250ms)"},
		{&failure.RateLimitError{Scope: "shared", RetryAfter: time.Second, Attempts: 3, Bucket: "GET /x"},
			"sluice: shared rate limit on GET /x after 3 attempts (retry after 1s)"},
		{&failure.UnavailableError{Failures: 4, Err: io.EOF},
			"sluice: API unreachable: 4 connections in a row failed to reach it; last: EOF"},
	} {
		assert.Equal(t, c.want, c.err.Error())
	}
}

func TestCause(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.Equal(t, context.Canceled, failure.Cause(ctx), "no custom cause: ctx.Err()")

	why := errors.New("why")
	ctx, cancelCause := context.WithCancelCause(context.Background())
	cancelCause(why)
	assert.Equal(t, why, failure.Cause(ctx), "a custom cause is kept")

	ctx, stop := context.WithTimeoutCause(context.Background(), 0, failure.ErrAttemptTimeout)
	defer stop()
	<-ctx.Done()
	assert.Equal(t, failure.ErrAttemptTimeout, failure.Cause(ctx))

	assert.NoError(t, failure.Cause(context.Background()), "a live context has none")
}
