package forecast

import "time"

// A request joining its bucket's queue is refused at once (a
// failure.WaitError) when its predicted wait is longer than it may wait:
// MaxWait is how long that is, Waits.Weigh the wait and whether to
// refuse. Its bucket actor gathers the parts (bucket.enqueue: its lane's
// window, lanes.Lane.Place; its declared groups' reservation; its global
// window's pause) and builds the error.

// MaxWait is the longest a request may wait in line at now: the smaller of
// the configured limit (Config.MaxWait) and its own (the call's MaxWait),
// 0 meaning none for either, and of the time left until its deadline, when
// it has one (hasDeadline: its context's, or its Timeout's end). Not
// positive: no limit (a deadline already passed gives one; the request's
// end answers it).
func MaxWait(configured, own time.Duration, deadline time.Time, hasDeadline bool, now time.Time) time.Duration {
	limit := configured
	if own > 0 && (limit == 0 || own < limit) {
		limit = own
	}
	if hasDeadline && (limit == 0 || deadline.Sub(now) < limit) {
		limit = deadline.Sub(now)
	}
	return limit
}

// Waits are the parts of a request's predicted wait as it joins its
// bucket's queue, and how long it may wait (Weigh weighs them).
//
// The wait MaxWait weighs is what is certain: the bucket's windows (its
// pause included), the declared groups' reserved window and the global
// window's pause, not the global forecast, which counts other buckets'
// calls that admission may well serve later.
type Waits struct {
	// Bucket is the wait for the request's window in its bucket
	// (lanes.Lane.Place's start, less now), and Known whether the bucket's
	// limit is known (otherwise Bucket is a lower bound).
	Bucket time.Duration
	Known  bool
	// Declared is the wait for the window its declared groups reserved
	// it (declared.Groups.Reserve; 0: none).
	Declared time.Duration
	// Global is its global window's pause (a global 429's), unless Exempt:
	// the request needs no global slot, and the pause does not count.
	Global time.Duration
	Exempt bool
	// Limit is how long it may wait (MaxWait; not positive: no limit).
	Limit time.Duration
}

// Weigh returns the request's predicted wait, the longest of its parts,
// and the bound that sets it (by: BoundBucket, BoundDeclared or
// BoundGlobal; on a tie the first of them); whether the wait is a
// forecast (known: the bucket's limit is known, or a declared window sets
// it, which is a forecast too); and whether to refuse the request (refuse:
// its wait is longer than a positive Limit).
func (w Waits) Weigh() (wait time.Duration, by string, known, refuse bool) {
	wait, by = w.Bucket, BoundBucket
	if w.Declared > wait {
		wait, by = w.Declared, BoundDeclared
	}
	if !w.Exempt && w.Global > wait {
		wait, by = w.Global, BoundGlobal
	}
	known = w.Known || by == BoundDeclared
	refuse = w.Limit > 0 && wait > w.Limit
	return wait, by, known, refuse
}
