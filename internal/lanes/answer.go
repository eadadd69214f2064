package lanes

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// What an attempt's end does to the lanes: the counts it was charged to
// (Settle, SettleHolds), what its answer teaches the lane (Answered,
// Widen) and a 429's pause (Limited). The bucket actor calls them where an
// attempt ends (bucket.release, bucket.learn, bucket.result,
// bucket.limited), in this order, beside what reads more than the lanes:
// the declared groups, the global slot, the store's aliases, rekeying and
// the pioneers' turns.

// Settle reports to the bucket's count an attempt sent at sentAt that
// ended at at: Refund when the bucket did not count it
// (ratelimit.ChargeNone), else what its headers h tell (Observe, or
// ObserveLost as count says).
func (p *Pace) Settle(at, sentAt time.Time, h ratelimit.Headers, count ratelimit.Charge) {
	if count == ratelimit.ChargeNone {
		p.State.Refund(at)
	} else {
		observe(&p.State, at, sentAt, h, count)
		p.settledAt = max(p.settledAt, at.UnixNano())
	}
}

// SettleHolds reports the same attempt, a first pioneer's of a request of
// major, to the lanes it held a slot in (holds: the known buckets it might
// have shared, MayShare), each once, as Lane's invariant wants; each hold
// is followed to the lane that owns it now (Resolve). Each is refunded
// when the attempt was not counted; otherwise it is observed if the
// answer's bucket (h.Bucket, keyed by routes.BucketKey for major) is the
// hold's (it was this bucket's request after all), refunded if another
// bucket counted it, and kept charged (observed with no headers) while
// the answer told no bucket. The answer's key is built only when there
// are holds.
func SettleHolds[T comparable, R LaneRules[T]](holds []*Lane[T, R], major string, at, sentAt time.Time, h ratelimit.Headers, count ratelimit.Charge) {
	uncounted := count == ratelimit.ChargeNone
	target := "" // the bucket that counted it, for the holds (built only for them)
	if len(holds) > 0 && h.Has.Bucket && h.Bucket != "" {
		target = routes.BucketKey(h.Bucket, major)
	}
	for _, k := range holds {
		k = k.Resolve()
		switch {
		case uncounted:
			k.State.Refund(at)
		case target == k.Key:
			observe(&k.State, at, sentAt, h, count) // it was this bucket's request after all
		case target != "":
			k.State.Refund(at) // another bucket counted it
		default:
			observe(&k.State, at, sentAt, ratelimit.Headers{}, count) // unknown: keep it charged
		}
	}
}

// observe reports an attempt that may have been counted to st.
func observe(st *ratelimit.Bucket, at, sentAt time.Time, h ratelimit.Headers, count ratelimit.Charge) {
	if count == ratelimit.ChargeArrived {
		st.ObserveLost(at, sentAt, h)
	} else {
		st.Observe(at, sentAt, h)
	}
}

// Answered ends the lane's First turn when an answer (status, 0 without
// a response, and its headers h) shows its template was answered: a
// status below 500 other than 429, or a bucket told.
func (l *Lane[T, R]) Answered(h ratelimit.Headers, status int) {
	if status != 0 && status < 500 && status != http.StatusTooManyRequests || h.Has.Bucket {
		l.First = false
	}
}

// Widen makes an answer's Reset-After the window's length when it is
// longer than any seen (Window: the longest), unless the answer is a 429,
// whose Reset-After is its pause, not its window.
func (p *Pace) Widen(h ratelimit.Headers, status int) {
	if h.Has.ResetAfter && h.ResetAfter > p.Window && status != http.StatusTooManyRequests {
		p.Window = h.ResetAfter
	}
}

// Limited applies to the lane what a 429 answered at at, to a request
// sent at sentAt, pauses of it (o.Pause, for o.Wait): a shared or sublimit
// 429 (ratelimit.PauseSerial) makes the lane serial, a limit no header
// shows meaning no more pipelining here, and pauses it; a user 429
// (ratelimit.PauseBucket) pauses it, a window that reopened late teaching
// the margin (ratelimit.Bucket.LateReopen). A ban or a global 429 pauses
// no lane: the supervisor and the worker pause what they stop.
func (l *Lane[T, R]) Limited(o ratelimit.Outcome, at, sentAt time.Time) {
	switch o.Pause {
	case ratelimit.PauseBan, ratelimit.PauseGlobal:
	case ratelimit.PauseSerial:
		l.Serial = true // a limit no header shows: no more pipelining here
		l.State.Pause(at.Add(o.Wait))
	default: // user: pause this bucket only; a window reopened late teaches the margin
		l.State.LateReopen(at, sentAt, o.Wait)
		l.State.Pause(at.Add(o.Wait))
	}
}
