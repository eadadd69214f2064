package fsm

import (
	"context"
	"strconv"
)

// BucketState is a state of a bucket actor's machine. The zero value is
// Initial, the initial state.
type BucketState uint8

// Bucket states.
const (
	// Initial: limits unknown; the pioneer request goes alone.
	Initial BucketState = iota
	// Open: limits known and calls remain; requests dispatch concurrently.
	Open
	// Exhausted: remaining is 0; waiting for the reset timer.
	Exhausted
	// Limited: paused by a 429 (user, shared or hidden sublimit) until its
	// retry-after elapses.
	Limited
	// Idle: the window is over, the queue is empty and nothing is in flight;
	// the actor may stop.
	Idle

	numBucketStates = iota
)

var bucketStateNames = [numBucketStates]string{
	Initial:   "initial",
	Open:      "open",
	Exhausted: "exhausted",
	Limited:   "limited",
	Idle:      "idle",
}

// String returns the state's name, e.g. "exhausted", or "BucketState(n)" for
// a value out of range.
func (s BucketState) String() string {
	if int(s) < len(bucketStateNames) {
		return bucketStateNames[s]
	}
	return "BucketState(" + strconv.Itoa(int(s)) + ")"
}

// BucketEvent is an event fed to a bucket machine by its bucket actor.
type BucketEvent uint8

// Bucket events.
const (
	// Discovered fires when the pioneer's headers show calls remaining:
	// initial → open.
	Discovered BucketEvent = iota
	// Drained fires when remaining reached 0: initial or open → exhausted.
	Drained
	// Reset fires when the reset timer or the retry-after elapsed:
	// exhausted or limited → open.
	Reset
	// RateLimited fires on a non-global 429: initial, open, exhausted or
	// limited → limited (limited → limited is a self-loop).
	RateLimited
	// Quiet fires when the window is over with an empty queue and nothing in
	// flight: open → idle.
	Quiet
	// Wake fires when a request arrives for an idle bucket whose limits are
	// known: idle → open.
	Wake

	numBucketEvents = iota
)

var bucketEventNames = [numBucketEvents]string{
	Discovered:  "discovered",
	Drained:     "drained",
	Reset:       "reset",
	RateLimited: "rate_limited",
	Quiet:       "quiet",
	Wake:        "wake",
}

// String returns the event's name, e.g. "rate_limited", or "BucketEvent(n)"
// for a value out of range.
func (e BucketEvent) String() string {
	if int(e) < len(bucketEventNames) {
		return bucketEventNames[e]
	}
	return "BucketEvent(" + strconv.Itoa(int(e)) + ")"
}

// bucketSpec is the bucket's transition table, defined once.
var bucketSpec = newSpec("bucket", Initial, numBucketStates, numBucketEvents,
	[]transition[BucketState, BucketEvent]{
		{Discovered, []BucketState{Initial}, Open},
		{Drained, []BucketState{Initial, Open}, Exhausted},
		{Reset, []BucketState{Exhausted, Limited}, Open},
		{RateLimited, []BucketState{Initial, Open, Exhausted, Limited}, Limited},
		{Quiet, []BucketState{Open}, Idle},
		{Wake, []BucketState{Idle}, Open},
	})

// Bucket is a bucket actor's state machine. It starts in Initial. Create one
// with [NewBucket]; the zero value is not usable.
//
// Fire is meant to be called only from the owning actor's Receive. Current
// and Can are safe to call from any goroutine, e.g. to take a snapshot.
type Bucket struct {
	m machine[BucketState, BucketEvent]
}

// NewBucket returns a bucket machine in the Initial state.
//
// If onTransition is not nil, it is called after every successful Fire,
// self-loops included, with the event and the states before and after. It
// runs after the transition has completed and no lock is held, so it may call
// Current and Can. It must not call Fire: to chain an event, send the actor a
// message. A nil onTransition means no hook.
func NewBucket(onTransition func(event BucketEvent, from, to BucketState)) *Bucket {
	b := &Bucket{}
	b.m.init(bucketSpec, onTransition)
	return b
}

// Fire applies event e. It returns nil if the transition happened, including
// a self-loop (RateLimited in Limited). If e is not allowed in the current
// state it returns an [*InvalidEventError] wrapping [ErrInvalidEvent] and the
// state is unchanged.
//
// ctx must not be nil. Its values are kept but its cancellation is ignored:
// an event records something that already happened.
func (b *Bucket) Fire(ctx context.Context, e BucketEvent) error {
	return b.m.fire(ctx, e)
}

// Current returns the current state.
func (b *Bucket) Current() BucketState { return b.m.current() }

// Can reports whether event e is allowed in the current state.
func (b *Bucket) Can(e BucketEvent) bool { return b.m.can(e) }

// BucketMermaid returns the bucket machine as a Mermaid stateDiagram-v2, one
// line per (source, event, destination) in declaration order. The output is
// deterministic.
func BucketMermaid() string { return bucketSpec.mermaid }
