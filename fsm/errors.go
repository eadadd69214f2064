package fsm

import (
	"errors"
	"strconv"
)

// ErrInvalidEvent is returned (wrapped in an [*InvalidEventError]) when an
// event is fired in a state that has no transition for it, or when the event
// value is out of range. The machine's state is left unchanged. Test for it
// with errors.Is; use errors.As with *InvalidEventError for the details.
var ErrInvalidEvent = errors.New("fsm: invalid event")

// InvalidEventError is returned by Fire when the event is not allowed in the
// machine's current state. It wraps [ErrInvalidEvent].
type InvalidEventError struct {
	// Machine names the machine: "supervisor" or "bucket".
	Machine string
	// Event is the name of the rejected event, e.g. "reset".
	Event string
	// State is the state the machine was in (and still is), e.g. "open".
	State string
}

// Error returns a message such as
// `fsm: event "reset" inappropriate in state "open" of bucket machine`.
func (e *InvalidEventError) Error() string {
	return "fsm: event " + strconv.Quote(e.Event) +
		" inappropriate in state " + strconv.Quote(e.State) +
		" of " + e.Machine + " machine"
}

// Unwrap returns [ErrInvalidEvent], so that errors.Is(err, ErrInvalidEvent)
// holds.
func (e *InvalidEventError) Unwrap() error { return ErrInvalidEvent }
