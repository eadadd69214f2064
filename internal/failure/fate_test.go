package failure_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/internal/attempt"
	"github.com/sluicehq/sluice/internal/failure"
	"github.com/sluicehq/sluice/ratelimit"
)

// Failed: the request's own end first, then Close, then the errors it gets
// as they are; only then the outcome table's requeue or resend, else a
// failure.
func TestFailed(t *testing.T) {
	lost := errors.New("connection reset")
	tooLarge := fmt.Errorf("reading: %w", failure.ErrResponseTooLarge)
	internal := fmt.Errorf("%w: panic", failure.ErrInternal)
	notSent := &attempt.NotSentError{Err: errors.New("body")}
	for _, tc := range []struct {
		name  string
		err   error
		ended error
		next  ratelimit.Next
		fate  failure.Fate
		end   error
	}{
		{name: "its own end first", err: fmt.Errorf("x: %w", failure.ErrClosed), ended: context.Canceled, next: ratelimit.Requeue,
			fate: failure.Complete, end: context.Canceled},
		{name: "Close gave up", err: fmt.Errorf("x: %w", failure.ErrClosed), next: ratelimit.Resend,
			fate: failure.Complete, end: failure.ErrClosed},
		{name: "Close before what is returned as is", err: fmt.Errorf("%w: %w", failure.ErrInternal, failure.ErrClosed), next: ratelimit.Requeue,
			fate: failure.Complete, end: failure.ErrClosed},
		{name: "a body too large, as is", err: tooLarge, next: ratelimit.Resend, fate: failure.Complete, end: tooLarge},
		{name: "an internal error, as is", err: internal, next: ratelimit.Requeue, fate: failure.Complete, end: internal},
		{name: "an attempt not built, as is", err: notSent, next: ratelimit.Requeue, fate: failure.Complete, end: notSent},
		{name: "never sent: requeued", err: lost, next: ratelimit.Requeue, fate: failure.Requeue},
		{name: "safe to repeat: resent", err: lost, next: ratelimit.Resend, fate: failure.Resend},
		{name: "otherwise failed", err: lost, next: ratelimit.Fail, fate: failure.Fail},
		{name: "deliver, without an answer: failed", err: lost, next: ratelimit.Deliver, fate: failure.Fail},
	} {
		fate, end := failure.Failed(tc.err, tc.ended, tc.next)
		assert.Equal(t, tc.fate, fate, tc.name)
		assert.True(t, end == tc.end, "%s: %v, not %v", tc.name, end, tc.end) // the very error, not a wrapping
	}
}
