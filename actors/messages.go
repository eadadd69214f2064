package actors

import (
	"net/http"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/transport"
)

// Messages between the public API, the supervisor, the bucket actors and
// the worker goroutines. Every message is a pointer to a struct; none is
// shared after sending. The hot path of a request is three messages:
// submit (caller → supervisor), enqueue (supervisor → bucket) and result
// (worker → bucket); everything else happens only when something waits
// (admission), fails or changes.

// submitMsg: API -> supervisor, new calls to route to the bucket actor of
// their major parameters.
type submitMsg struct {
	calls []*Call
}

// enqueueMsg: supervisor -> bucket. Only the supervisor sends it, and it
// counts what it sends (see idleMsg).
type enqueueMsg struct {
	calls []*Call
}

// resultMsg: worker -> bucket. The attempt is over: the answer, parsed and
// classified once by the worker, or the error that ended it.
type resultMsg struct {
	call *Call
	// at is when the response headers arrived (or the attempt failed): the
	// time every window computed from this answer starts from.
	at      time.Time
	resp    *http.Response // body fully read and replaced by a buffer
	headers ratelimit.Headers
	verdict ratelimit.Verdict
	// globalSent is set when the worker already paused the global window
	// for a global 429 and told the supervisor.
	globalSent bool
	err        error
}

// wantMsg: bucket -> supervisor. The bucket has want requests ready to go
// but admission is held: no connection, a global pause, a ban, the global
// window full, or other buckets already waiting for it. The supervisor
// queues the bucket (once) and answers with a grantMsg in round-robin order.
type wantMsg struct {
	key    string // the bucket actor's key (its major parameters)
	want   int    // requests ready to go
	global bool   // they need global-window slots (not exempt)
	// path is how long the actor's longest queue needs at its bucket's own
	// pace: the longer, the sooner it is served (see supervisor.admit).
	path time.Duration
}

// grantMsg: supervisor -> bucket, answering wantMsg. slots global-window
// slots are reserved for the bucket (it cancels those it cannot use);
// exempt requests need none. probe marks the one request the ban breaker
// lets through. err, when set, fails the bucket's queue (no connection
// could be made).
type grantMsg struct {
	slots int
	probe bool
	err   error
}

// freedMsg: bucket -> supervisor. Global slots were given back unused
// (cancelled: a request never sent, a global 429, grants nothing could
// use), or one was settled while buckets wait for admission: the supervisor
// returns the cancelled ones to its pacer and recomputes when the next slot
// frees.
type freedMsg struct{ cancelled int }

// globalHitMsg: worker -> supervisor. A global 429 paused the global
// window until then (the worker blocked it already).
type globalHitMsg struct{ until time.Time }

// banMsg: bucket -> supervisor. A Cloudflare-style ban: stop everything.
type banMsg struct{ wait time.Duration }

// probeDoneMsg: bucket -> supervisor. The ban breaker's probe was answered
// (status, and whether it carried rate-limit headers), failed (status 0),
// or could not be sent (abandoned).
type probeDoneMsg struct {
	status    int
	rateLimit bool
	abandoned bool
}

// idleMsg: bucket -> supervisor. Nothing queued, running or limited; the
// bucket has received `received` enqueue messages so far.
type idleMsg struct {
	key      string
	received uint64
}

// drainMsg: supervisor -> bucket on Close: fail every queued call.
type drainMsg struct{ err error }

// wakeMsg: timer -> bucket. Stale generations are ignored; retry marks
// the retry timer and idle the idle timer rather than the window timer.
type wakeMsg struct {
	gen   uint64
	retry bool
	idle  bool
}

// dialedMsg: dial goroutine -> supervisor.
type dialedMsg struct {
	conn *transport.Conn
	err  error
}

// connDownMsg: watcher goroutine -> supervisor. The connection died.
type connDownMsg struct {
	conn *transport.Conn
	err  error
}

// redialMsg, globalClearMsg, globalRetryMsg: supervisor timers.
type redialMsg struct{ gen uint64 }
type globalClearMsg struct{ gen uint64 }
type globalRetryMsg struct{ gen uint64 }

// closeMsg: API -> supervisor. Refuse new calls, fail queued ones.
type closeMsg struct{ err error }

// snapshotMsg asks the supervisor for its part of a Snapshot and the
// bucket actors to ask for the rest.
type snapshotMsg struct{ reply chan supervisorSnapshot }

type supervisorSnapshot struct {
	snap    Snapshot
	buckets []*actor.PID
}

// bucketSnapshotMsg asks a bucket actor for the BucketSnapshots of its
// buckets.
type bucketSnapshotMsg struct{ reply chan []BucketSnapshot }

// Snapshot and BucketSnapshot are the actors' form of sluice.Snapshot and
// sluice.BucketSnapshot, which document every field; package sluice
// converts them (BucketSnapshot must stay identical to its public twin).
type Snapshot struct {
	// Time is when the supervisor answered.
	Time time.Time
	// State is the supervisor's state: disconnected, connecting,
	// connected or global_limit.
	State string
	// Breaker is the ban breaker's state: closed, open or half_open.
	Breaker string
	// Pending is the number of requests ready to go but waiting for
	// admission (the connection, the global limit or a ban), as the
	// waiting buckets last reported.
	Pending int
	// Waiting is the number of bucket actors waiting for admission.
	Waiting int
	// Running is the number of requests on the wire.
	Running int
	// GlobalUsed is the number of global-limit slots held now (requests in
	// flight and answered within the window).
	GlobalUsed int
	// Buckets are the live buckets, sorted by key.
	Buckets []BucketSnapshot
}

// BucketSnapshot is one bucket's state.
type BucketSnapshot struct {
	// Key is the bucket's key (no token: tokens are hashed): the route
	// while its hash is unknown, then hash and major parameters.
	Key string
	// State is the bucket machine's state: initial, open, exhausted,
	// limited or idle.
	State string
	// Known reports whether a response revealed the limit.
	Known bool
	// Limit and Remaining are the bucket's count in its current window.
	Limit, Remaining int
	// ResetIn is the time left in the current window (0 when over).
	ResetIn time.Duration
	// PausedFor is the time left of a 429's pause (0 when none).
	PausedFor time.Duration
	// Margin is the reopening margin added to the resets the bucket
	// predicts (raised when the server reopened a window late).
	Margin time.Duration
	// Queued requests wait for the bucket; Retrying ones wait for a
	// backoff after a 5xx or a lost connection.
	Queued, Retrying int
	// Running requests are on the wire, unanswered.
	Running int
	// Serial is set when the bucket sends one request at a time (hidden
	// sublimits).
	Serial bool
}
