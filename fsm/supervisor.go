package fsm

import (
	"context"
	"strconv"
)

// SupervisorState is a state of the supervisor actor's connection machine.
// The zero value is Disconnected, the initial state.
type SupervisorState uint8

// Supervisor states.
const (
	// Disconnected: there is no usable HTTP/2 connection; requests wait.
	Disconnected SupervisorState = iota
	// Connecting: a dial is in progress.
	Connecting
	// Connected: the connection is up and requests may be dispatched.
	Connected
	// GlobalLimit: the connection is up but a global 429 paused all
	// dispatching until its retry-after elapses.
	GlobalLimit

	numSupervisorStates = iota
)

var supervisorStateNames = [numSupervisorStates]string{
	Disconnected: "disconnected",
	Connecting:   "connecting",
	Connected:    "connected",
	GlobalLimit:  "global_limit",
}

// String returns the state's name, e.g. "global_limit", or
// "SupervisorState(n)" for a value out of range.
func (s SupervisorState) String() string {
	if int(s) < len(supervisorStateNames) {
		return supervisorStateNames[s]
	}
	return "SupervisorState(" + strconv.Itoa(int(s)) + ")"
}

// SupervisorEvent is an event fed to the supervisor machine by the
// supervisor actor.
type SupervisorEvent uint8

// Supervisor events.
const (
	// Dial fires when the supervisor starts dialing: disconnected → connecting.
	Dial SupervisorEvent = iota
	// Up fires when the dial succeeded: connecting → connected.
	Up
	// DialFailed fires when the dial failed: connecting → disconnected.
	DialFailed
	// GlobalHit fires on a 429 with global scope: connected → global_limit;
	// a further global 429 while paused extends the pause (a self-loop).
	GlobalHit
	// GlobalClear fires when the global retry-after elapsed:
	// global_limit → connected.
	GlobalClear
	// Down fires when the connection died (GOAWAY, read error, closed):
	// connecting, connected or global_limit → disconnected.
	Down

	numSupervisorEvents = iota
)

var supervisorEventNames = [numSupervisorEvents]string{
	Dial:        "dial",
	Up:          "up",
	DialFailed:  "dial_failed",
	GlobalHit:   "global_hit",
	GlobalClear: "global_clear",
	Down:        "down",
}

// String returns the event's name, e.g. "dial_failed", or
// "SupervisorEvent(n)" for a value out of range.
func (e SupervisorEvent) String() string {
	if int(e) < len(supervisorEventNames) {
		return supervisorEventNames[e]
	}
	return "SupervisorEvent(" + strconv.Itoa(int(e)) + ")"
}

// supervisorSpec is the supervisor's transition table, defined once.
var supervisorSpec = newSpec("supervisor", Disconnected, numSupervisorStates, numSupervisorEvents,
	[]transition[SupervisorState, SupervisorEvent]{
		{Dial, []SupervisorState{Disconnected}, Connecting},
		{Up, []SupervisorState{Connecting}, Connected},
		{DialFailed, []SupervisorState{Connecting}, Disconnected},
		{GlobalHit, []SupervisorState{Connected, GlobalLimit}, GlobalLimit},
		{GlobalClear, []SupervisorState{GlobalLimit}, Connected},
		{Down, []SupervisorState{Connecting, Connected, GlobalLimit}, Disconnected},
	})

// Supervisor is the supervisor actor's connection state machine. It starts
// in Disconnected. Create one with [NewSupervisor]; the zero value is not
// usable.
//
// Fire is meant to be called only from the owning actor's Receive. Current
// and Can are safe to call from any goroutine, e.g. to take a snapshot.
type Supervisor struct {
	m machine[SupervisorState, SupervisorEvent]
}

// NewSupervisor returns a supervisor machine in the Disconnected state.
//
// If onTransition is not nil, it is called after every successful Fire,
// self-loops included, with the event and the states before and after. It
// runs after the transition has completed and no lock is held, so it may call
// Current and Can. It must not call Fire: to chain an event, send the actor a
// message. A nil onTransition means no hook.
func NewSupervisor(onTransition func(event SupervisorEvent, from, to SupervisorState)) *Supervisor {
	b := &Supervisor{}
	b.m.init(supervisorSpec, onTransition)
	return b
}

// Fire applies event e. It returns nil if the transition happened, including
// a self-loop (GlobalHit in GlobalLimit). If e is not allowed in the current
// state it returns an [*InvalidEventError] wrapping [ErrInvalidEvent] and the
// state is unchanged.
//
// ctx must not be nil. Its values are kept but its cancellation is ignored:
// an event records something that already happened.
func (s *Supervisor) Fire(ctx context.Context, e SupervisorEvent) error {
	return s.m.fire(ctx, e)
}

// Current returns the current state.
func (s *Supervisor) Current() SupervisorState { return s.m.current() }

// Can reports whether event e is allowed in the current state.
func (s *Supervisor) Can(e SupervisorEvent) bool { return s.m.can(e) }

// SupervisorMermaid returns the supervisor machine as a Mermaid
// stateDiagram-v2, one line per (source, event, destination) in declaration
// order. The output is deterministic.
func SupervisorMermaid() string { return supervisorSpec.mermaid }
