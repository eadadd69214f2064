package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/attempt"
	"github.com/sluicehq/sluice/internal/declared"
	"github.com/sluicehq/sluice/internal/lanes"
	"github.com/sluicehq/sluice/transport"
)

// Messages between the public API, the supervisor, the bucket actors and
// the worker goroutines. Every message is a pointer to a struct; none is
// shared after sending. The hot path of a request is three messages:
// submit (caller → supervisor), enqueue (supervisor → bucket) and result
// (worker → bucket); everything else happens only when something waits
// (admission), fails or changes.

// submitMsg: API -> supervisor, a new call to route to the bucket actor
// of its major parameters.
type submitMsg struct {
	call *Call
}

// enqueueMsg: supervisor -> bucket. Only the supervisor sends it, and it
// counts what it sends (see idleMsg).
type enqueueMsg struct {
	call *Call
	// bind is set on the first message to a new bucket actor: the bucket
	// it runs (see bucketCell).
	bind *bucket
}

// resultMsg: worker -> bucket. The attempt is over (attempt.Result): the
// answer, parsed and classified once by the worker, or the error that
// ended it, or the shared count's refusal before it was sent.
type resultMsg struct {
	call *Call
	attempt.Result
}

// wantMsg: bucket -> supervisor. The bucket has want requests ready to go
// but admission is held: no connection, a global pause, a ban, the global
// window full, or other buckets already waiting for it. The supervisor
// queues the bucket (once) and answers with a grantMsg, earliest virtual
// deadline first (admission.Queue).
type wantMsg struct {
	key string        // the bucket actor's key (its major parameters)
	ask admission.Ask // what is ready, and how long its queue needs
}

// soonMsg: bucket -> supervisor. The actor's queue waits for its own
// bucket window, which reopens within the global window's period: the
// window keeps slots back for it from the actors behind it in line
// (admission.Queue.Soon). A slot handed out now comes back a period
// later; handed to a colder actor just before a hot bucket reopens, it
// left that bucket's window waiting for the next burst. A keep that wants
// nothing withdraws the actor's keep (bucket.kept).
type soonMsg struct {
	key  string
	keep admission.Keep
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
	// more: the bucket was served in part and stays in line for the rest
	// of its want (it does not ask again).
	more bool
}

// freedMsg: bucket -> supervisor. Global slots were given back unused
// (cancelled: a request never sent, a global 429, grants nothing could
// use), or one was settled while buckets wait for admission: the supervisor
// returns the cancelled ones to its pacer and recomputes when the next slot
// frees.
type freedMsg struct {
	window    Window
	cancelled int
}

// sharedWakeMsg: Shared's subscriber -> supervisor -> bucket. An answer
// another process's request got, which requests of the bucket actor of
// major wait for (SharedGrant.Notify), has come; or, with all, the shared
// count answers again after an outage (System.SharedResumed): sent to
// every bucket actor, whose lanes held by a refusal of the fallback share
// ask again at once.
type sharedWakeMsg struct {
	major string
	seq   uint64 // its number in System.wakes
	all   bool
}

// globalHitMsg: worker -> supervisor. A global 429 paused a global
// window until then (the worker blocked it already).
type globalHitMsg struct {
	window Window
	until  time.Time
}

// banMsg: bucket -> supervisor. A Cloudflare-style ban: stop everything.
type banMsg struct{ wait time.Duration }

// probeDoneMsg: bucket -> supervisor. The ban breaker's probe was answered
// (status, and whether its verdict is a ban), failed (status 0), or could
// not be sent (abandoned).
type probeDoneMsg struct {
	status    int
	banned    bool // the answer's verdict (ratelimit.Classify) is a ban
	abandoned bool
}

// pioneeredMsg: bucket -> bucket. The first pioneer of template (a route
// never answered) this actor waited for has its answer, or failed: its
// hash may be known now (bucket.adoptLearned), or another may go.
type pioneeredMsg struct {
	template string
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
type globalClearMsg struct {
	gen    uint64
	window Window
}
type globalRetryMsg struct {
	gen    uint64
	window Window
}

// closeMsg: API -> supervisor. Refuse new calls, fail queued ones.
type closeMsg struct{ err error }

// snapshotMsg asks the supervisor for its part of a Snapshot and the
// bucket actors to ask for the rest.
type snapshotMsg struct{ reply chan supervisorSnapshot }

type supervisorSnapshot struct {
	snap    Snapshot
	buckets []*actor.PID
	ring    ringKeys // the admission queues' order, for the ETAs
}

// bucketSnapshotMsg asks a bucket actor for the BucketSnapshots of its
// buckets and the ETAs of its waiting calls. The figures that count down
// (ResetIn, PausedFor, Margin) are taken at the snapshot's time, at, so that
// Snapshot.Time plus ResetIn is the window's end whenever the bucket
// actor reads the message.
type bucketSnapshotMsg struct {
	at    time.Time
	reply chan bucketSnapshot
}

type bucketSnapshot struct {
	buckets []BucketSnapshot
	queued  []laneETA
}

// Snapshot and BucketSnapshot are the actors' form of sluice.Snapshot and
// sluice.BucketSnapshot, which document every field; package sluice
// converts them (BucketSnapshot, a lane's lanes.Snapshot, must stay
// identical to its public twin).
type Snapshot struct {
	Time                                  time.Time
	State, Breaker                        string
	Pending, Waiting, Running, GlobalUsed int
	Windows                               []WindowSnapshot
	Buckets                               []BucketSnapshot
	Groups                                []declared.Snapshot
	Requests                              []RequestETA
}

type BucketSnapshot = lanes.Snapshot
