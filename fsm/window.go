package fsm

import (
	"context"
	"strconv"
)

// WindowState is a state of a global window's machine. The zero value is
// WindowOpen, the initial state.
type WindowState uint8

// Window states.
const (
	// WindowOpen: the window hands out its slots.
	WindowOpen WindowState = iota
	// WindowPaused: a global 429 (or a ban's hold) paused every request
	// counted on this window until its retry-after elapses; the other
	// window goes on.
	WindowPaused

	numWindowStates = iota
)

var windowStateNames = [numWindowStates]string{
	WindowOpen:   "open",
	WindowPaused: "global_limit",
}

// String returns the state's name, "open" or "global_limit", or
// "WindowState(n)" for a value out of range.
func (s WindowState) String() string {
	if int(s) < len(windowStateNames) {
		return windowStateNames[s]
	}
	return "WindowState(" + strconv.Itoa(int(s)) + ")"
}

// WindowEvent is an event fed to a window machine by the supervisor actor.
type WindowEvent uint8

// Window events.
const (
	// WindowHit fires on a 429 with global scope counted on this window:
	// open → global_limit; a further one while paused extends the pause
	// (a self-loop).
	WindowHit WindowEvent = iota
	// WindowClear fires when the pause elapsed: global_limit → open.
	WindowClear

	numWindowEvents = iota
)

var windowEventNames = [numWindowEvents]string{
	WindowHit:   "global_hit",
	WindowClear: "global_clear",
}

// String returns the event's name, e.g. "global_hit", or
// "WindowEvent(n)" for a value out of range.
func (e WindowEvent) String() string {
	if int(e) < len(windowEventNames) {
		return windowEventNames[e]
	}
	return "WindowEvent(" + strconv.Itoa(int(e)) + ")"
}

// windowSpec is a global window's transition table, defined once.
var windowSpec = newSpec("window", WindowOpen, numWindowStates, numWindowEvents,
	[]transition[WindowState, WindowEvent]{
		{WindowHit, []WindowState{WindowOpen, WindowPaused}, WindowPaused},
		{WindowClear, []WindowState{WindowPaused}, WindowOpen},
	})

// Window is the state machine of one of the supervisor's global windows
// (the bot token's, or the egress IP's for requests without a token). It
// starts in WindowOpen. Create one with [NewWindow]; the zero value is not
// usable.
//
// Fire is meant to be called only from the owning actor's Receive. Current
// and Can are safe to call from any goroutine, e.g. to take a snapshot.
type Window struct {
	m machine[WindowState, WindowEvent]
}

// NewWindow returns a window machine in the WindowOpen state. The hook is
// as for [NewSupervisor]: called after every successful Fire, self-loops
// included; it must not call Fire. A nil onTransition means no hook.
func NewWindow(onTransition func(event WindowEvent, from, to WindowState)) *Window {
	w := &Window{}
	w.m.init(windowSpec, onTransition)
	return w
}

// Fire applies event e. It returns nil if the transition happened, including
// a self-loop (WindowHit in WindowPaused). If e is not allowed in the
// current state it returns an [*InvalidEventError] wrapping
// [ErrInvalidEvent] and the state is unchanged. ctx must not be nil; its
// cancellation is ignored.
func (w *Window) Fire(ctx context.Context, e WindowEvent) error {
	return w.m.fire(ctx, e)
}

// Current returns the current state.
func (w *Window) Current() WindowState { return w.m.current() }

// Can reports whether event e is allowed in the current state.
func (w *Window) Can(e WindowEvent) bool { return w.m.can(e) }

// WindowMermaid returns the window machine as a Mermaid stateDiagram-v2,
// one line per (source, event, destination) in declaration order. The
// output is deterministic.
func WindowMermaid() string { return windowSpec.mermaid }
