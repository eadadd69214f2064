// Package fsm holds Sluice's three state machines, typed wrappers around
// github.com/looplab/fsm.
//
// # The machines
//
// [Supervisor] tracks the supervisor actor's HTTP/2 connection. It starts
// disconnected, dials (connecting), and is connected once the dial succeeds
// or back to disconnected if it failed. A 429 with global scope pauses all
// dispatching (global_limit) until the retry-after elapses. A connection that
// dies (down) returns it to disconnected from any state but disconnected.
// A second global 429 while in global_limit is a self-loop (global_hit): it
// extends the pause and Fire returns nil.
//
// [Bucket] tracks one bucket actor's view of its rate limit: initial (limits
// unknown, the pioneer request goes alone), open (calls remain, dispatch
// concurrently), exhausted (remaining is 0, wait for the reset), limited
// (paused by a 429 until retry-after; a further 429 is a self-loop) and idle
// (nothing to do, the actor may stop). A bucket that must rediscover its
// limits is a new actor, which starts in initial.
//
// The transition tables are defined once, as data, and drive both the
// looplab machines and the Mermaid diagrams returned by [SupervisorMermaid],
// [BucketMermaid] and [WindowMermaid]. docs/state-machines.md embeds those diagrams; a test
// fails when they drift (regenerate with
// go test ./fsm -run TestDocsDiagramsCurrent -update).
//
// # Concurrency
//
// A machine is driven only from its owning actor's Receive, one message at a
// time: call Fire there and nowhere else. Current and Can are safe from any
// goroutine (for snapshots and metrics); they never block on a hook.
//
// Timer messages can go stale: a reset timer may arrive after the bucket
// went idle, for example. Check Can before firing, or treat [ErrInvalidEvent] as "ignore
// this message"; the machine's state is unchanged either way.
//
// # Transition hook
//
// NewSupervisor and NewBucket take an optional hook, called after every
// successful Fire, self-loops included, for tracing. It runs once the
// transition is complete and no lock is held, so reading Current or Can from
// it is safe. It must not call Fire: to chain events, send the actor a
// message, as with any other follow-up work.
//
// # looplab/fsm traps avoided
//
//   - looplab reports a self-loop as a NoTransitionError value. Fire treats it
//     as success and calls the hook; callers never see it.
//   - Calling Event or Can from a before_ or leave_ callback deadlocks, and a
//     misspelled callback key is silently ignored. This package registers no
//     looplab callbacks at all: the hook is called by Fire itself, after
//     looplab's Event has returned.
//   - A repeated (event, source) pair in looplab's event list silently
//     overrides the earlier one. The tables are checked when the package is
//     initialized, along with state and event names, which all come from
//     String methods rather than string literals.
//   - looplab drops a real transition when the context is canceled but still
//     accepts a self-loop. Fire ignores cancellation (keeping context values)
//     because an event records something that has already happened.
//   - looplab reports an inappropriate event and an unknown one with two
//     different value-type errors about string states. Fire returns one typed
//     [*InvalidEventError] wrapping [ErrInvalidEvent] for both.
package fsm
