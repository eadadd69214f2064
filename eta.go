package sluice

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/internal/forecast"
)

// Stage is where a request is on its way to its outcome.
type Stage int32

// The stages of a request, in order. A request answered by a 429 or a
// lost connection goes back to StageQueued (or StageRetrying) and on.
const (
	// StagePending: submitted, on its way to its bucket's queue.
	StagePending Stage = iota
	// StageQueued: in its bucket's queue.
	StageQueued
	// StageRetrying: waiting for the backoff before its next attempt
	// after a 5xx or a lost connection (100 ms, doubling, up to 5 s).
	StageRetrying
	// StageSent: on the wire, waiting for its answer.
	StageSent
	// StageDone: it has its outcome (Future.Done is closed).
	StageDone
)

// String returns "pending", "queued", "retrying", "sent" or "done".
func (s Stage) String() string { return forecast.Stage(s).String() }

// What sets an ETA's Start (ETA.Limit, WaitError.By).
const (
	// LimitBucket: the request's bucket (its windows, its place in the
	// bucket's queue, a 429's pause).
	LimitBucket = forecast.BoundBucket
	// LimitDeclared: a declared limit (Options.Limits), named in
	// ETA.Declared.
	LimitDeclared = forecast.BoundDeclared
	// LimitGlobal: the global limit (its window shared with every
	// bucket's requests, or a global 429's pause).
	LimitGlobal = forecast.BoundGlobal
	// LimitRetry: the backoff before a retry.
	LimitRetry = forecast.BoundRetry
)

// ETA is where a request stands and when it is expected to be sent: the
// window [Start, End) in which it should go, from every limit it is under.
// Each limit tells a window:
//
//   - its bucket: the job queue's estimate, the next window start plus
//     floor(requests ahead / limit) windows, from its Position in the
//     bucket's queue and the bucket's count, reset and pause;
//   - each declared limit (Options.Limits): the window its group reserved
//     for it, in submission order;
//   - its global limit: the window serves the requests waiting for it in
//     submission order, counting only those their own buckets let go no
//     later, Options.GlobalLimit per Options.GlobalWindow.
//
// The latest window wins; Limit says whose it is. An ETA is a forecast at
// one moment (ask again for a fresh one: it moves as windows pass and
// answers arrive): a request is never sent before its bucket and declared
// limits allow, but the global part assumes the waiting requests keep
// their order, and a bucket whose limit is not known yet (Known false)
// tells only a lower bound. docs/eta.md shows how accurate it is.
type ETA struct {
	// Stage is where the request is. Start, End, Position and Limit are
	// set for StagePending, StageQueued and StageRetrying; for StageSent
	// Start and End are when it was sent.
	Stage Stage
	// Position is the number of requests ahead of it in its bucket's
	// queue (0: the next to go).
	Position int
	// Start and End bound the window in which it is expected to be sent,
	// on the limiter's clock (Options.Clock): not before Start, and
	// before End. End equals Start when the limit that sets Start tells
	// no window (an unknown bucket, a retry's backoff).
	Start, End time.Time
	// Limit is what sets Start: LimitBucket, LimitDeclared, LimitGlobal
	// or LimitRetry.
	Limit string
	// Declared is the declared limit's Name when Limit is LimitDeclared.
	Declared string
	// Known is false while the request's bucket has not told its limit
	// (no answer yet): Start is then a lower bound.
	Known bool
}

// Wait returns how long from now until Start (0 if Start has passed).
func (e ETA) Wait(now time.Time) time.Duration { return max(0, e.Start.Sub(now)) }

// ETA tells where the request stands and when it is expected to be sent.
// It asks the actor that holds the request (two messages) and counts the
// requests waiting for the same global limit (O(n log n) in them), so it
// is cheap enough to ask once a second for every request a user watches,
// not in a tight loop. It returns ctx's error if ctx ends first; once the
// request has its outcome it returns an ETA of StageDone at once. Safe
// for concurrent use.
func (f *Future) ETA(ctx context.Context) (ETA, error) {
	if f.sys == nil || f.call.Finished() {
		return ETA{Stage: StageDone}, nil
	}
	e, err := f.sys.ETA(ctx, f.call)
	return publicETA(e), err
}

func publicETA(e forecast.ETA) ETA {
	return ETA{Stage: Stage(e.Stage), Position: e.Position, Start: e.Start, End: e.End,
		Limit: e.Limit, Declared: e.Declared, Known: e.Known}
}

// RequestSnapshot is one waiting request in a Snapshot.
type RequestSnapshot struct {
	// ID is the request's number, in submission order.
	ID uint64
	// Route is the request's route with tokens redacted
	// ("POST /channels/1/messages").
	Route string
	// Bucket is the key of the bucket whose queue it is in (see
	// BucketSnapshot.Key).
	Bucket string
	// ETA is its place and expected send time.
	ETA ETA
	// Priority is the priority it was sent with (WithPriority).
	Priority Priority
}
