package ratelimit

import (
	"context"
	"time"
)

// Shared is the seam for limits that several processes count together: one
// bot token's buckets, global window and invalid-request budget, kept in a
// store all of them reach (package redisstore keeps them in Redis).
//
// BucketStore and GlobalLimiter do not fit this: they read, decide and write
// back in separate calls (Load, then Save), which is exactly the recipe that
// overshoots when processes interleave, and they run inside the actors,
// where a network round trip must not block. A Shared limiter instead takes
// one request's slots atomically, in one call made from the goroutine that
// is about to send the request, and corrects the shared state from the
// answer in another, off the caller's path. The process keeps its own
// Bucket and SlidingWindow in front of it: a request goes only when both its
// process's view and the shared count admit it, so the shared count is what
// bounds all processes together, and the local one what paces each.
//
// Every Reserve that grants must be followed by exactly one Report. Times in
// SharedRequest and SharedAnswer are the caller's clock; an implementation
// may keep its own (Redis's) and exchange only durations. Implementations
// are safe for concurrent use; they never panic and never block longer than
// their own timeout: when the shared store cannot be reached they decide
// from local state (see redisstore's fallback) and say so in the grant.
type Shared interface {
	// Reserve takes one request's slots (its bucket's, and a global one if
	// r.Global) in the shared count, or tells how long to wait.
	Reserve(ctx context.Context, r SharedRequest) SharedGrant
	// Report corrects the shared state from the answer to a granted
	// request (or releases its slots if it was never sent).
	Report(ctx context.Context, g SharedGrant, a SharedAnswer)
}

// SharedRequest describes one request to reserve for.
type SharedRequest struct {
	// Now is the caller's clock at the reservation.
	Now time.Time
	// Route is the request's route key (routes.Route.Key); Template its
	// "METHOD /template", by which hashes are learned; Major its major
	// parameters (the bucket actor's key).
	Route, Template, Major string
	// Hash is the X-RateLimit-Bucket the caller knows for Template ("" if
	// none): the shared store learns it too if it had not.
	Hash string
	// Global asks for a slot of the token's global window too.
	Global bool
	// Local is the caller's own view of the bucket: a Known bucket seeds a
	// shared one that is missing (the store was emptied), so no pioneer
	// and no full window are spent on what the process already knows.
	Local Bucket
	// Window is the longest Reset-After the caller has seen for the bucket
	// (0: unknown).
	Window time.Duration
	// Margin is how long after a window's estimated end it reopens
	// (Bucket.Margin).
	Margin time.Duration
	// Serial asks for one request in flight at a time in the bucket,
	// across processes: a route with a hidden sublimit (channel renames)
	// or a bucket that met a shared or sublimit 429. The shared store also
	// remembers the latter for every process.
	Serial bool
	// Groups are the declared groups the request counts in, when the
	// store counts them (SharedGroups), and GroupID its id there: the
	// request goes only inside the window it reserved in each
	// (SharedGroups.ReserveGroups; one is reserved now if it has none)
	// and with a slot free in each group's guard, taken with the others.
	Groups  []SharedGroup
	GroupID string
	// GroupClass is the request's class in its groups, as ReserveGroups
	// takes it: used when the request has no reservation yet (the store
	// could not be reached when it was submitted).
	GroupClass int8
}

// SharedGroup is one group of a declared limit (a Group) counted in a
// shared store: Count requests per Window for every process together.
type SharedGroup struct {
	// Key names the group: the limit and its group key ("member_roles|
	// guild_id=1"). Processes that share a limit name it alike.
	Key    string
	Count  int
	Window time.Duration
}

// SharedGroups is implemented by a Shared store that also counts declared
// group limits (Group) across processes: each group's schedule of windows
// and its guard live in the store, so a request reserves its exact
// (window, place) among every process's requests when it is submitted,
// and Reserve takes its guard slot atomically with the bucket's and the
// global one (SharedRequest.Groups). Report settles them (SharedGrant
// carries the groups).
//
// The methods take the caller's clock; the store exchanges durations
// only. ReserveGroups and EstimateGroups block for at most the store's
// timeout and return an error when it cannot be reached (the caller then
// treats the request as unscheduled: Reserve still guards it, from a local
// share when the store is down). ReleaseGroups never blocks.
type SharedGroups interface {
	// ReserveGroups schedules request id of class class (-1 bulk, 0
	// normal, 1 interactive: Group.ReserveClass) in each group (keeping a
	// reservation it has, and its class, unless its window is over) and
	// returns its slot in each, in order.
	ReserveGroups(ctx context.Context, now time.Time, id string, class int8, groups []SharedGroup) ([]Slot, error)
	// EstimateGroups returns request id's slot in each group now (a
	// window that is over is reserved again); ok is false for a group
	// where it has no reservation.
	EstimateGroups(ctx context.Context, now time.Time, id string, groups []SharedGroup) ([]Slot, []bool, error)
	// ReleaseGroups drops request id's reservations that are not taken
	// (the request has its outcome), in the background.
	ReleaseGroups(id string, groups []SharedGroup)
}

// SharedGroupStates is implemented by a SharedGroups store that can also
// tell how busy its groups are, every process's requests together (a
// limiter's Snapshot reads it). It is optional: a store without it leaves
// its groups out of the snapshot.
type SharedGroupStates interface {
	// GroupStates reads the state of each group, in order, in one round
	// trip and without changing any. It blocks for at most the store's
	// timeout (or until ctx ends) and returns an error when the store
	// cannot be read.
	GroupStates(ctx context.Context, groups []SharedGroup) ([]SharedGroupState, error)
}

// SharedGroupState is a group's state in a shared store, every process's
// requests together.
type SharedGroupState struct {
	// Waiting is the number of requests with a place in the group's
	// schedule that have not taken a slot of its guard yet.
	Waiting int
	// Held is the number of the guard's slots held now: requests in
	// flight, and answered within the last Window.
	Held int
}

// SharedGrant is the outcome of Reserve.
type SharedGrant struct {
	// OK reports that the request may be sent.
	OK bool
	// Wait is, when !OK, how long until a Reserve may succeed: an upper
	// bound when Notify is set.
	Wait time.Duration
	// Notify reports that the wait ends with an answer to another
	// process's request (the bucket's pioneer); the implementation calls
	// its wake function for Major when it comes.
	Notify bool
	// Scope names what refused: "bucket", "global" (a global 429's pause
	// or the window full), "budget" (the shared invalid-request budget
	// is spent), "declared" (a group of SharedRequest.Groups: its window
	// has not begun, or its guard is full; Wait is until it may be).
	// Empty when OK.
	Scope string
	// Hash is the bucket hash the shared store knows for the request's
	// template ("" if none): another process learned it.
	Hash string
	// Pioneer reports a granted request elected as its bucket's only
	// pioneer (the shared store knew no limit for it): report its answer
	// before acting on it, so that the bucket it reveals is known in the
	// store before any request relies on it.
	Pioneer bool
	// Local reports that the grant was decided (also) from local state: the
	// fallback share applied.
	Local bool
	// Lease identifies the reservation for Report (opaque).
	Lease string
	// Key is the shared bucket key the slot was taken from (opaque).
	Key string
	// Window is the bucket's window as the caller knew it when it
	// reserved (SharedRequest.Window and Margin; 0: unknown): a report
	// that finds the shared record gone (evicted) counts the bucket full
	// for that long.
	Window time.Duration
	// Global reports that a global slot was taken.
	Global bool
	// Groups and GroupID are the request's (SharedRequest) when granted:
	// a slot of each group's guard was taken.
	Groups  []SharedGroup
	GroupID string
}

// SharedAnswer is what a granted request met.
type SharedAnswer struct {
	// Now is the caller's clock when the answer (or the error) came.
	Now time.Time
	// Sent is false when the request never reached the wire: its slots
	// are given back.
	Sent bool
	// Status is the HTTP status (0: no answer: a lost connection, a
	// timeout).
	Status int
	// Headers are the answer's rate-limit headers, annotated with Reopen
	// (ServerClock.Annotate) when the caller can.
	Headers Headers
	// Verdict classifies a 429.
	Verdict Verdict
	// RoundTrip is how long the request took, send to headers.
	RoundTrip time.Duration
	// Template and Major are the request's (see SharedRequest).
	Template, Major string
}

// Outcome judges the answer for the shared count (Judge): what its bucket,
// its global slot and its declared groups count, what pauses, and whether
// it counts against the invalid-request limit. The request's fate
// (Outcome.Next) is its caller's to decide, with the retry budgets a
// SharedAnswer does not carry.
func (a SharedAnswer) Outcome() Outcome {
	return Judge(Attempt{Sent: a.Sent, Status: a.Status, Headers: a.Headers, Verdict: a.Verdict})
}
