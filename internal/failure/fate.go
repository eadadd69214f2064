package failure

import (
	"errors"

	"github.com/sluicehq/sluice/ratelimit"
)

// Fate is what becomes of a request whose attempt got no complete
// response (Failed decides it).
type Fate uint8

// The fates of a request whose attempt failed.
const (
	// Complete: the request ends with the error Failed returns with it.
	Complete Fate = iota
	// Requeue: it never reached the server; it goes back to the head of
	// its queue, and again once admitted (on a new connection if this
	// one is gone).
	Requeue
	// Resend: it may have been processed, and is safe to repeat: it is
	// sent again after a backoff.
	Resend
	// Fail: it ends with the attempt's error, wrapped with its route (the
	// caller's to name).
	Fail
)

// Failed decides the fate of a request whose attempt ended with err, no
// complete response: ended is the error its own limits ended it with (its
// context, or its Timeout; nil while they hold), next what the outcome
// table decided for the attempt (ratelimit.Judge's Outcome.Next). In
// order, what the caller did and what the limiter did come first:
//
//  1. the request's own end: it gets ended;
//  2. ErrClosed (Close gave up waiting for the answer): it gets ErrClosed;
//  3. a body too large (ErrResponseTooLarge), a bug (ErrInternal), an
//     attempt that could not be built (ErrNotSent): it gets err
//     as it is;
//  4. then next: Requeue and Resend as said, else Fail.
func Failed(err, ended error, next ratelimit.Next) (Fate, error) {
	switch {
	case ended != nil:
		return Complete, ended
	case errors.Is(err, ErrClosed):
		return Complete, ErrClosed
	case errors.Is(err, ErrResponseTooLarge), errors.Is(err, ErrInternal), errors.Is(err, ErrNotSent):
		return Complete, err
	case next == ratelimit.Requeue:
		return Requeue, nil
	case next == ratelimit.Resend:
		return Resend, nil
	}
	return Fail, nil
}
