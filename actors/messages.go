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
// shared after sending.

// submitMsg: API -> supervisor, a new call to route to its bucket; or
// retired bucket -> supervisor, its queue to route to the bucket that owns
// its hash, with the headers its pioneer saw.
type submitMsg struct {
	calls []*Call
	seen  ratelimit.Headers
}

// enqueueMsg: supervisor -> bucket. Only the supervisor sends it, and it
// counts what it sends (see idleMsg).
type enqueueMsg struct {
	calls []*Call
	seen  ratelimit.Headers
}

// dispatchMsg: bucket -> supervisor. The bucket granted the call a slot;
// the supervisor sends it when connected and the global limit allows.
type dispatchMsg struct {
	call   *Call
	bucket *actor.PID
}

// notSentMsg: supervisor -> bucket. The call never reached the wire
// (cancelled, closing, or the connection refused it before sending): its
// bucket slot is refunded and, unless finished, it goes back to the front.
type notSentMsg struct {
	call *Call
	err  error // why; nil when it only waits for a new connection
}

// headersMsg: worker -> bucket. Response headers arrived; the body follows.
type headersMsg struct {
	call   *Call
	status int
	header http.Header
	at     time.Time
}

// resultMsg: worker -> bucket. The attempt is over: a full response or an
// error.
type resultMsg struct {
	call *Call
	resp *http.Response // body fully read and replaced by a buffer
	body []byte
	err  error
}

// globalHitMsg: bucket -> supervisor. A global 429 asked to wait.
type globalHitMsg struct{ wait time.Duration }

// banMsg: bucket -> supervisor. A Cloudflare-style ban: stop everything
// for wait.
type banMsg struct{ wait time.Duration }

// learnedMsg: bucket -> supervisor. The pioneer revealed the bucket hash.
type learnedMsg struct {
	routeKey  string
	bucketKey string
	perToken  bool // keyed by a webhook or interaction token
}

// ownerMsg: supervisor -> bucket, answering learnedMsg. retired is set
// when another actor owns the hash already: the bucket hands its queue back
// to the supervisor and stops once its requests in flight are answered.
type ownerMsg struct {
	retired bool
	key     string // the bucket key the receiver is now known by
	// siblings is the number of other routes with the same major
	// parameters whose hash is still unknown: they may share this bucket.
	siblings int
}

// workDoneMsg: worker -> supervisor. The request was answered (headers
// arrived) or failed; notSent says it provably never reached the server.
type workDoneMsg struct {
	call    *Call
	notSent bool
	// status and rateLimitHeaders describe the answer (status 0: none);
	// the ban breaker reads them to judge its probe.
	status           int
	rateLimitHeaders bool
	uncounted        bool // a global 429 or a ban: the API counted nothing
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
// the retry timer rather than the window timer.
type wakeMsg struct {
	gen   uint64
	retry bool
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

// bucketSnapshotMsg asks a bucket actor for its BucketSnapshot.
type bucketSnapshotMsg struct{ reply chan BucketSnapshot }

// Snapshot is the limiter's state at one moment, stable enough to render.
type Snapshot struct {
	// Time is when the supervisor answered.
	Time time.Time
	// State is the supervisor's state: disconnected, connecting,
	// connected or global_limit.
	State string
	// Breaker is the ban breaker's state: closed, open or half_open.
	Breaker string
	// Pending is the number of dispatches held back by the supervisor
	// (waiting for the connection or the global limit).
	Pending int
	// Running is the number of requests on the wire.
	Running int
	// GlobalUsed is the number of global-limit slots held now (requests in
	// flight and answered within the window).
	GlobalUsed int
	// Buckets are the live bucket actors, sorted by key.
	Buckets []BucketSnapshot
}

// BucketSnapshot is one bucket actor's state.
type BucketSnapshot struct {
	// Key is the bucket's key (no token: tokens are hashed).
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
	// Queued requests wait for the bucket; Retrying ones wait for a
	// backoff after a 5xx or a lost connection.
	Queued, Retrying int
	// Running requests are dispatched and unanswered; InFlight ones have
	// their headers and are reading their body.
	Running, InFlight int
	// Serial is set when the bucket sends one request at a time (hidden
	// sublimits).
	Serial bool
}
