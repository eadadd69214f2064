package sluice

import (
	"context"
	"net/http"

	"github.com/sluicehq/sluice/actors"
)

// Future is the pending outcome of a request sent with Send. It is
// completed exactly once, and any number of goroutines may wait on it.
type Future struct {
	call *actors.Call
	sys  *actors.System // nil for a request refused before submission
}

// Done is closed when the outcome is known.
func (f *Future) Done() <-chan struct{} { return f.call.Done() }

// Await returns the response or the error the request ended with. If ctx
// ends first, Await returns ctx's error and the request goes on (its own
// context, given to Send, governs it).
//
// A successful response's body is already read into memory; closing it is
// good practice but not required.
func (f *Future) Await(ctx context.Context) (*http.Response, error) {
	select {
	case <-f.call.Done():
		return f.result()
	default:
	}
	select {
	case <-f.call.Done():
		return f.result()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *Future) result() (*http.Response, error) {
	resp, err := f.call.Result()
	return resp, publicError(err)
}

// Result is the outcome of one request of a batch.
type Result struct {
	// Response is the response; nil when Err is set.
	Response *http.Response
	// Err is the error the request ended with.
	Err error
}
