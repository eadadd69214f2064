package actors

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/attempt"
	"github.com/sluicehq/sluice/internal/declared"
	"github.com/sluicehq/sluice/internal/failure"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/routes"
)

// Call is one submitted request and its single outcome. The public API
// creates it; the actors move it through queues; exactly one Complete wins.
//
// Invariant: done is closed exactly once, after resp and err are set, and
// neither changes afterwards. The other fields are of three kinds, each
// marked where it is declared: set before submission (by the caller, or by
// System.Submit before the call is shared) and never changed after; owned
// by whichever bucket actor currently holds the call (never two at once),
// and handed to a worker with the attempt (sentAt, read by the worker
// before its result message); or atomic, for the goroutines that read them
// (the completion hook, the forecasts, other actors, the worker).
type Call struct {
	// ID is unique per limiter, in submission order.
	ID uint64
	// Req is the request, with a replayable body (GetBody set): the
	// limiter's own copy, which System.Submit seals (its URL on the base,
	// the token, the User-Agent) before any actor sees it; every attempt
	// sends a shallow copy of it (attempt.Exchange). Nothing writes it
	// after the seal.
	Req *http.Request
	// Ctx is the caller's context: honoured while queued and in flight.
	Ctx context.Context
	// Route is the parsed route: template, major parameters, exemption.
	Route routes.Route
	// Safe marks a request that may be sent twice when its answer was
	// lost: its route's resend policy (routes.Route.Resend) says so, or
	// the caller does (sluice.WithRetrySafe). Decided once, when the call
	// is made; the one rule the actors read.
	Safe bool
	// Submitted is when the call was submitted (limiter clock).
	Submitted time.Time
	// MaxWait, when positive, fails the call at once with a *WaitError if
	// its predicted bucket wait exceeds it (with Config.MaxWait, the
	// smaller applies). Set before submission.
	MaxWait time.Duration
	// Limits are the declared limits the call is under (sluice.Limit),
	// each with its group. Set before submission; never changed after.
	Limits []declared.Ref
	// Class is the call's priority class (sluice.WithPriority): a higher
	// class goes first in its bucket's queue and in the global window's
	// line (admission.Class). Set before submission; never changed after.
	Class admission.Class

	// Owned by the bucket actor that holds the call.
	attempts    int         // 429 retries so far
	errAttempts int         // retries after a 5xx or a lost connection
	notBefore   time.Time   // a retry waits until then
	sentAt      time.Time   // when the current attempt was handed to the wire
	queuedAt    time.Time   // when it last joined its bucket's queue
	readyAt     time.Time   // when its bucket would have sent it but admission held it
	lane        *lane       // the bucket that admitted the current attempt (nil: not on the wire)
	holds       []*lane     // known buckets holding a slot for this pioneer (see lanes.Lane.MayShare)
	window      Window      // the global window it counts on (set by System.classify)
	global      bool        // the attempt holds a slot of its window
	pioneer     bool        // the attempt is a pioneer: its bucket's limit was unknown
	first       bool        // a first pioneer: its template had never been answered
	probe       bool        // the attempt is the ban breaker's probe
	authProbe   atomic.Bool // the call checks a rejected token again (authLatch)
	authSlot    atomic.Bool // it holds authLatch's probe slot until released, once
	withToken   bool        // sent with the configured token (set by System.classify)
	sealed      [2]string   // the Authorization and User-Agent values System.seal gives Req
	span        trace.Span  // nil without a TracerProvider; set before submission

	// due is when its bucket and declared groups would let it go, in Unix
	// nanoseconds of the limiter's clock, as its bucket actor last
	// estimated it; forecast.DueUnset before it is queued,
	// forecast.DueNever on the wire or outside the limits. Read by the
	// global forecasts of other calls' ETAs (forecast.Assemble, through
	// System.finish), on any goroutine.
	due atomic.Int64
	// guess is set while due is only a lower bound: its bucket's limit is
	// not known (it waits for its lane's pioneer). Stamped with due.
	guess atomic.Bool
	// reprobe is set when its bucket's next window holds for a probe
	// (ratelimit.Bucket.ProbesReopening). Stamped with due.
	reprobe atomic.Bool
	// holding is set while a global slot granted to its bucket actor is
	// meant for it (bucket.markHolders, lanes.Holders): the global
	// forecast counts it as served, not as a call still to serve.
	holding atomic.Bool
	// pace is its bucket's window with the margin (ns; 0 while unknown),
	// and limit its bucket's count per window (0 while unknown), stamped
	// with due.
	pace  atomic.Int64
	limit atomic.Int32
	// direct is set for a call sent outside the limits (SubmitDirect).
	// Set before submission.
	direct bool
	// place is where the call waits in its declared groups
	// (declared.Place: its window in this process's groups, or its place
	// in a shared store's). System.Submit sets it before the call is
	// registered, so the completion hook (System.finished), which may run
	// on another goroutine as soon as it is, reads it without a race;
	// then its window is the bucket actor's (declared.Place's invariant).
	place declared.Place

	// Read by the outcome hook, which may run on another goroutine.
	sends       atomic.Int64 // attempts put on the wire
	waitBucket  atomic.Int64 // nanoseconds waiting for the bucket, all attempts
	waitGlobal  atomic.Int64 // nanoseconds waiting for the global limit and the connection
	waitNetwork atomic.Int64 // nanoseconds on the wire
	// firstWire is set while the call is on the wire as its template's
	// first pioneer: other actors read it (pioneers.Turns).
	firstWire atomic.Bool
	stopCtx   atomic.Value // func() bool: unregisters the context watch (arm)
	// attempt holds the context.CancelFunc of the attempt on the wire
	// (attempt.Scope.Context; a no-op once it ended): Close reaches it
	// through System.live when it gives up waiting. An atomic.Value holds
	// a func without allocating, where an atomic.Pointer needs one.
	attempt atomic.Value
	owner   *System // set by arm: its bookkeeping (System.finished) runs once with the outcome
	// Timeout, when positive, fails the call with TimeoutErr once it has
	// gone that long without an outcome, queued or on the wire: the public
	// API's default for a context without a deadline. A timer, not a
	// context layer (which cost about ten allocations a request). Set
	// before submission.
	Timeout    time.Duration
	TimeoutErr error                      // nil: context.DeadlineExceeded
	timeoutAt  time.Time                  // when Timeout ends (wall clock); set by arm
	timer      atomic.Pointer[time.Timer] // Timeout's timer, stopped with the outcome

	once sync.Once
	done chan struct{}
	resp *http.Response
	err  error
	fin  atomic.Bool
}

// NewCall returns a call ready to submit.
func NewCall(id uint64, ctx context.Context, req *http.Request, route routes.Route, safe bool, now time.Time) *Call {
	return &Call{ID: id, Req: req, Ctx: ctx, Route: route, Safe: safe, Submitted: now, done: make(chan struct{})}
}

// decl is what package declared reads of c (declared.Request): its
// Limits, ID and Class, its outcome and its place.
func (c *Call) decl() declared.Request {
	return declared.Request{Refs: c.Limits, ID: c.ID, Class: c.Class, Req: c, Place: &c.place}
}

// arm makes s the owner whose bookkeeping runs with the outcome, and sets
// the end of the call's Timeout. watch, once the call is in s.live, starts
// what ends it early.
func (c *Call) arm(s *System) {
	c.owner = s
	if c.Timeout > 0 {
		if c.TimeoutErr == nil {
			c.TimeoutErr = context.DeadlineExceeded
		}
		c.timeoutAt = time.Now().Add(c.Timeout)
	}
}

// watch watches the context and the Timeout: if either ends before the call
// is answered, the call completes with its error at once; the actors notice
// and skip it, freeing its place for the next request. The call must be in
// s.live already: the timer finds it there (a Timeout of a few
// microseconds left after the body was read fires at once).
func (c *Call) watch(s *System) {
	if c.Finished() {
		return // Close came first: nothing to watch
	}
	if c.Ctx.Done() != nil { // a context that never ends needs no watch
		c.stopCtx.Store(context.AfterFunc(c.Ctx, func() { c.Complete(nil, failure.Cause(c.Ctx)) }))
	}
	if c.Timeout > 0 {
		// The timer finds the call by its id: a stopped timer can stay in
		// the runtime's heap for a while, and through a closure over c it
		// kept the call, its request and its answer alive (1 in 6 calls
		// of a 10,000-bucket fill).
		id := c.ID
		c.timer.Store(time.AfterFunc(time.Until(c.timeoutAt), func() {
			if c, ok := s.live.Get(id); ok {
				c.Complete(nil, c.TimeoutErr)
			}
		}))
	}
	if c.Finished() {
		// Close completed it as the watchers were being set, after its
		// outcome stopped what it found: stop them here (a context's
		// hook would keep the call until that context ends).
		c.unwatch()
	}
}

// unwatch stops what watch started, as far as it has: at the outcome, and
// again by watch if the outcome came while it was starting them.
func (c *Call) unwatch() {
	if stop, ok := c.stopCtx.Load().(func() bool); ok {
		stop()
	}
	if t := c.timer.Load(); t != nil {
		t.Stop()
	}
}

// deadline is when the call gives up: its context's deadline, else the
// end of its Timeout; false if neither.
func (c *Call) deadline() (time.Time, bool) {
	if dl, ok := c.Ctx.Deadline(); ok {
		return dl, true
	}
	return c.timeoutAt, c.Timeout > 0
}

// ended is the error the call's own limits ended it with (its context,
// or its Timeout), or nil while they hold (attempt.Bounds.Ended).
func (c *Call) ended() error {
	b := c.bounds()
	return b.Ended()
}

// bounds is what ends c's attempts of its own (attempt.Bounds): its
// context, its Timeout, and the slot of its attempt on the wire.
func (c *Call) bounds() attempt.Bounds {
	return attempt.Bounds{Ctx: c.Ctx, Timeout: c.Timeout, TimeoutAt: c.timeoutAt, TimeoutErr: c.TimeoutErr, Slot: &c.attempt}
}

// Complete records the outcome if none was recorded yet and reports whether
// this call did it. A response that loses the race is closed.
func (c *Call) Complete(resp *http.Response, err error) bool {
	won := false
	c.once.Do(func() {
		won = true
		c.resp, c.err = resp, err
		c.fin.Store(true)
		c.unwatch()
		c.runOnDone() // before done: a waiter sees the bookkeeping (span, counts) finished
		close(c.done)
	})
	if !won && resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	return won
}

func (c *Call) runOnDone() {
	if s := c.owner; s != nil {
		c.owner = nil
		s.finished(c)
	}
}

// Done is closed when the call has its outcome.
func (c *Call) Done() <-chan struct{} { return c.done }

// outcome is what telemetry records of the call's end: its result, where
// its time went, its sends, class and window.
func (c *Call) outcome() telemetry.Outcome {
	return telemetry.Outcome{Resp: c.resp, Err: c.err,
		Bucket: time.Duration(c.waitBucket.Load()), Global: time.Duration(c.waitGlobal.Load()), Network: time.Duration(c.waitNetwork.Load()),
		Sends: c.sends.Load(), Priority: c.Class.String(), Window: c.window.String()}
}

// onWire reports whether the call is on the wire as a first pioneer; safe
// from any goroutine.
func (c *Call) onWire() bool { return c.firstWire.Load() }

// Finished reports whether the call has its outcome, without blocking.
func (c *Call) Finished() bool { return c.fin.Load() }

// Result returns the outcome; valid once Done is closed.
func (c *Call) Result() (*http.Response, error) { return c.resp, c.err }
