package attempt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/declared"
	"github.com/sluicehq/sluice/internal/failure"
	"github.com/sluicehq/sluice/internal/globalwin"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/transport"
)

// Bounds is what ends a request's attempts of its own: the caller's
// context and the request's Timeout, read of its call at each attempt (a
// view, not state: none of them changes once the request is submitted),
// and Slot, where the attempt on the wire keeps its cancel (what it holds
// changes with each attempt).
type Bounds struct {
	// Ctx is the caller's context.
	Ctx context.Context
	// Timeout, when positive, ends the request at TimeoutAt (wall clock)
	// with TimeoutErr.
	Timeout    time.Duration
	TimeoutAt  time.Time
	TimeoutErr error
	// Slot holds the context.CancelFunc of the attempt on the wire
	// (Scope.Context; a no-op once it ended, End): the limiter's Close
	// reaches it there when it gives up waiting. An atomic.Value holds a
	// func without allocating, where an atomic.Pointer needs one; it keeps
	// one type, so an ended attempt leaves a no-op there, not nil.
	Slot *atomic.Value
}

// Ended is the error the request's own bounds ended it with (its context,
// or its Timeout), or nil while they hold.
func (b *Bounds) Ended() error {
	if b.Ctx.Err() != nil {
		return failure.Cause(b.Ctx)
	}
	if b.Timeout > 0 && !time.Now().Before(b.TimeoutAt) {
		return b.TimeoutErr
	}
	return nil
}

// Scope is what ends every attempt of one limiter besides their requests'
// Bounds: the attempt timeout, and Close giving up. One per limiter; its
// fields do not change once it is in use.
type Scope struct {
	// Timeout bounds one attempt, from sending until the body is read (0:
	// none).
	Timeout time.Duration
	// Hard is done once Close gives up waiting: the limiter then cancels
	// the attempts on record (Bounds.Slot), and an attempt whose context
	// is made later cancels itself (Context).
	Hard context.Context
}

// Context is the context of one attempt of b's request: it ends with the
// caller's context, after Timeout (cause failure.ErrAttemptTimeout) or at
// the end of b's Timeout if that comes first (cause b.TimeoutErr), and
// when Close gives up waiting (Hard; the attempt's error is then
// failure.ErrClosed). End releases it. One context layer, kept in b.Slot
// rather than hooked on Close's context: three layers cost 8 allocations a
// request.
func (s *Scope) Context(b *Bounds) (ctx context.Context, cancel context.CancelFunc) {
	d := s.Timeout
	switch {
	case b.Timeout > 0 && (d <= 0 || time.Until(b.TimeoutAt) < d):
		ctx, cancel = context.WithDeadlineCause(b.Ctx, b.TimeoutAt, b.TimeoutErr)
	case d > 0:
		ctx, cancel = context.WithTimeoutCause(b.Ctx, d, failure.ErrAttemptTimeout)
	default:
		ctx, cancel = context.WithCancel(b.Ctx)
	}
	b.Slot.Store(cancel)
	if s.Hard.Err() != nil {
		cancel() // Close gave up before the attempt was on record
	}
	return ctx, cancel
}

// noAttempt is Bounds.Slot once its attempt ended (an atomic.Value keeps
// one type).
var noAttempt context.CancelFunc = func() {}

// End releases the attempt context Context made for b's request.
func End(b *Bounds, cancel context.CancelFunc) {
	b.Slot.Store(noAttempt)
	cancel()
}

// Ended types the end of an attempt's context ctx (Context): the caller's
// (its cause), the request's Timeout (TimeoutErr), the attempt timeout
// (failure.ErrAttemptTimeout) or Close (failure.ErrClosed).
func (s *Scope) Ended(ctx context.Context, b *Bounds) error {
	if ended := b.Ended(); ended != nil {
		return ended
	}
	if cause := context.Cause(ctx); errors.Is(cause, failure.ErrAttemptTimeout) || (b.TimeoutErr != nil && cause == b.TimeoutErr) {
		return cause
	}
	if s.Hard.Err() != nil {
		return failure.ErrClosed
	}
	return failure.Cause(ctx)
}

// Error types an error of an attempt on ctx (Context): the caller's
// context speaks for itself; Close and the attempt timeout are named by
// their cause; a dead connection is a ConnectionDiedError.
func (s *Scope) Error(ctx context.Context, b *Bounds, err error) error {
	if ctx.Err() != nil && b.Ctx.Err() == nil {
		return s.Ended(ctx, b)
	}
	return ConnectionError(ctx, err)
}

// ConnectionError types an error that came from the connection dying,
// also where net/http reports it raw (while the body streamed, or after the
// supervisor closed a connection already known dead): transport.Classify is
// the one classifier. Such requests were sent and may have been processed.
// Other errors pass unchanged.
func ConnectionError(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || errors.Is(err, transport.ErrConnectionDied) {
		return err
	}
	if transport.Classify(err) == transport.ConnectionDied {
		return &transport.ConnectionDiedError{Reason: err, Sent: true}
	}
	return err
}

// Send is one attempt for Runner.Run: what the worker was handed.
type Send struct {
	// Conn is the connection to send on, claimed for this attempt
	// (transport.Pick): Run ends the claim as it hands the request over,
	// or as it returns if it never does.
	Conn *transport.Conn
	// Req is the sealed request (see package doc).
	Req *http.Request
	// Bounds are its request's own.
	Bounds Bounds
	// Window is the global window it counts on: its shared store (if any)
	// reserves for it and hears its answer, and a global 429 blocks its
	// Limiter.
	Window *globalwin.Window
	// Shared, when set, is the reservation to take in Window.Shared before
	// sending (nil: the request is not counted with other processes).
	Shared *ratelimit.SharedRequest
	// Place is the request's place in a shared store's declared groups
	// (nil: none): told whether the reservation took a slot there.
	Place *declared.SharedPlace
	// SentAt is when the request was handed over for this attempt: the
	// round trip reported to the shared store starts there.
	SentAt time.Time
	// Route names the request in logs (routes.Route.Redacted).
	Route string
}

// Result is what one attempt hands over (Runner.Hand), exactly once.
type Result struct {
	// At is when the response headers arrived (or the attempt failed): the
	// time every window computed from this answer starts from.
	At time.Time
	// Wired is when the request's headers were written to the connection
	// (zero if it was not answered): the send time of the server clock's
	// sample.
	Wired time.Time
	// Resp is the answer, its body fully read and replaced by a buffer;
	// Headers its rate-limit headers, Verdict its classification.
	Resp    *http.Response
	Headers ratelimit.Headers
	Verdict ratelimit.Verdict
	// Err is the attempt's failure, typed (Scope.Error; failure.ErrInternal
	// for a panic; a *NotSentError before anything reached the wire).
	Err error
	// Deferred is set when the shared count (Send.Shared) refused the
	// request before it was sent: it goes back in line for the wait told.
	// WakeSeq is Runner.Wakes before the refused reservation.
	Deferred *ratelimit.SharedGrant
	WakeSeq  uint64
}

// Runner runs one limiter's attempts on its workers' goroutines: the
// shared store's reservation, the exchange, the answer reported to the
// shared store, the global 429's block, and exactly one Result handed
// over. T is what its owner knows an attempt's result goes to (the
// actors: the call and its bucket actor), passed through to Hand and
// GlobalHit. One per limiter, made before its first attempt; its fields
// do not change after (Hand and GlobalHit are made once, not per request).
type Runner[T any] struct {
	Scope
	// Exchange sends each attempt and reads its answer; its Clock is the
	// limiter's.
	Exchange *Exchange
	// ServerClock annotates the answers reported to a shared store with
	// their window's end by the server's clock.
	ServerClock *ratelimit.ServerClock
	// LastAnswer is when any connection last delivered an answer
	// (Exchange.Clock, Unix nanoseconds): Run stores each answer's At.
	LastAnswer *atomic.Int64
	// Wakes numbers the shared store's wake-ups: Run reads it before each
	// reservation, and a refused one carries it (Result.WakeSeq).
	Wakes *atomic.Uint64
	// Log receives the malformed headers' warning and the panics Run
	// recovers.
	Log *slog.Logger
	// Hand gives an attempt's Result to what acts on it (the bucket
	// actor): exactly once per Run, after the attempt's context ended.
	Hand func(to T, r Result)
	// GlobalHit tells of a global 429, once its window is blocked until
	// until and the shared store has the answer, before Hand.
	GlobalHit func(to T, until time.Time)
}

// Run sends one attempt a on a.Conn and hands its Result to Hand (for to):
// the answer parsed and classified here, once, with the time its headers
// arrived. A global 429 blocks a.Window here, before anything that Hand
// or GlobalHit tell hears of it, so no request follows it into the
// outage; GlobalHit is told too.
//
// The attempt ends with the caller's context, with Close (failure.ErrClosed) and
// after the attempt timeout (failure.ErrAttemptTimeout), whichever comes first. A
// panic here becomes this attempt's failure.ErrInternal: Hand is called exactly
// once. The attempt's context ends before Hand: once its result is
// handed over, a retry may store its own (Bounds.Slot).
//
// With a.Shared, the answer reaches the shared store once: a pioneer's
// before Hand (the store must know the bucket it reveals before anything
// acts on it), a global 429's before GlobalHit, any other after Hand.
func (x *Runner[T]) Run(to T, a Send) {
	conn := a.Conn
	claimed := true // the Claim on conn (transport.Pick), ended as the request is handed over
	defer func() {
		if claimed {
			conn.Unclaim()
		}
	}()
	win := a.Window
	reported := false
	var grant ratelimit.SharedGrant
	var shared *ratelimit.SharedAnswer // the answer to report to Shared, once the caller has it
	// toShared reports the answer to the shared store, once.
	toShared := func() {
		if sh := shared; sh != nil {
			shared = nil // once, also if Report panics
			win.Shared.Report(context.Background(), grant, *sh)
		}
	}
	// The attempt's context ends before the result is handed over: once
	// the bucket actor has it, a retry may store its own (Bounds.Slot).
	var cancel context.CancelFunc
	endAttempt := func() {
		if cancel != nil {
			End(&a.Bounds, cancel)
			cancel = nil
		}
	}
	report := func(r Result) {
		endAttempt()
		// A pioneer's answer reaches the shared store first: the bucket
		// actor pipelines as soon as it learns the bucket, and the store
		// must know it by then. Other answers only correct it: off the
		// caller's path. (A global 429 was reported already.)
		if grant.Pioneer {
			toShared()
		}
		x.Hand(to, r)
		reported = true // the bucket actor has the outcome: a panic after it sends nothing more
		toShared()
	}
	defer func() {
		if p := recover(); p != nil {
			x.Log.Error("sluice: panic while sending a request", slog.String("route", a.Route), slog.Any("panic", p))
			if !reported {
				report(Result{At: x.Exchange.Clock(), Err: fmt.Errorf("%w: %v", failure.ErrInternal, p)})
			}
		}
	}()
	var ctx context.Context
	ctx, cancel = x.Context(&a.Bounds)
	defer endAttempt()

	if sr := a.Shared; sr != nil {
		// The shared count (other processes on the token) admits it too,
		// or the bucket actor puts it back in line for the wait told.
		seq := x.Wakes.Load()
		grant = win.Shared.Reserve(ctx, *sr)
		if sh := a.Place; sh != nil {
			sh.SetTaken(grant.OK && !grant.Local)
		}
		if !grant.OK {
			refused := grant // a copy: grant stays on the stack
			report(Result{At: x.Exchange.Clock(), Deferred: &refused, WakeSeq: seq})
			return
		}
		shared = &ratelimit.SharedAnswer{Template: sr.Template, Major: sr.Major}
	}
	claimed = false
	conn.Unclaim()
	// The wire time (Answer.Wired) is when the request's headers were
	// written to the connection: the local time nearest its arrival at
	// the server, which the server clock's samples need
	// (ratelimit.ServerClock). a.SentAt, when the actor handed it over,
	// can be far earlier under load.
	ans, err := x.Exchange.Do(ctx, conn, a.Req)
	r := Result{At: ans.At, Headers: ans.Headers, Verdict: ans.Verdict, Resp: ans.Resp}
	if ans.Answered {
		r.Wired = ans.Wired // the server clock's sample needs an answer
	}
	notSent := errors.Is(err, ErrNotSent)
	if shared != nil {
		shared.Now = ans.At
		if !notSent {
			shared.Sent, shared.RoundTrip = true, ans.At.Sub(a.SentAt)
			shared.Status, shared.Headers = ans.Status, ans.Headers
		}
	}
	switch {
	case notSent:
		r.Err = err
	case !ans.Answered:
		if shared != nil && transport.Classify(err) == transport.NotSent {
			shared.Sent = false
		}
		r.Err = x.Error(ctx, &a.Bounds, err)
	default:
		x.LastAnswer.Store(ans.At.UnixNano())
		if ans.HeaderErr != nil {
			x.Log.Warn("sluice: malformed rate-limit headers", slog.String("route", a.Route), slog.String("error", ans.HeaderErr.Error()))
		}
		if err != nil {
			if !errors.Is(err, failure.ErrResponseTooLarge) {
				err = x.Error(ctx, &a.Bounds, err)
			}
			r.Err = err
			break
		}
		if shared != nil {
			shared.Verdict = ans.Verdict
			x.ServerClock.Annotate(&shared.Headers) // the window's end by the server's clock
		}
		if ratelimit.Judge(ratelimit.Attempt{Sent: true, Status: ans.Status, Headers: ans.Headers, Verdict: ans.Verdict}).Pause == ratelimit.PauseGlobal {
			// Pause every request at once: the shared window refuses
			// reservations from now on, before any actor hears of it.
			until := ans.At.Add(ans.Verdict.Wait)
			win.Limiter.Block(until)
			toShared() // and every other process's, before anything here moves
			x.GlobalHit(to, until)
		}
	}
	report(r)
}

// Direct sends sealed on rt once, outside the limits: within the attempt
// timeout and b's own bounds, its body read within the Exchange's. It
// ends with complete's call, once: the answer, or the error typed as Ended
// types it when the attempt's context ended (a body over its bound stays
// failure.ErrResponseTooLarge), or failure.ErrInternal for a panic. The
// attempt's context ends after complete (before it, after a panic).
func (x *Runner[T]) Direct(b Bounds, rt http.RoundTripper, sealed *http.Request, complete func(*http.Response, error) bool) {
	defer func() {
		if r := recover(); r != nil {
			complete(nil, fmt.Errorf("%w: %v", failure.ErrInternal, r))
		}
	}()
	ctx, cancel := x.Context(&b)
	defer End(&b, cancel)
	a, err := x.Exchange.Do(ctx, rt, sealed)
	if err != nil && !errors.Is(err, failure.ErrResponseTooLarge) && ctx.Err() != nil {
		err = x.Ended(ctx, &b) // the caller's context, the Timeout, or Close (failure.ErrClosed)
	}
	complete(a.Resp, err)
}
