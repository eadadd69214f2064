package leakybucket

import "time"

// Result is the outcome of one check of one limit. Being over the limit is
// not an error: it is Blocked.
type Result struct {
	// Limit is the limit checked.
	Limit Limit
	// Cost is the units the call asked for: 1 for Check and CheckAll, n
	// for CheckN (0 to look without taking anything).
	Cost int
	// At is when the check was decided: the time given to the check (for
	// Memory, the shard's time if that is later; see Memory.CheckAt), or
	// Redis's TIME, or the local clock when a Redis policy decided.
	At time.Time
	// Blocked reports that this limit's bucket was full: the call was
	// refused and added nothing. In a check of several limits the call is
	// admitted only if no limit is Blocked; when one is, the others are not
	// charged either, and their Results describe their buckets without the
	// call.
	Blocked bool
	// Remaining is how many more units (calls of cost 1) the bucket admits
	// right now: Size - Level, 0 if this call filled the bucket (the seed's
	// X-RateLimit-Remaining, the draft's r). A call of cost 1 that was
	// blocked leaves 0; a blocked call of cost n leaves fewer than n.
	Remaining int
	// Level is how many calls the bucket holds after the check (the seed's
	// counter); Remaining is Size - Level, or 0.
	Level int
	// RetryAfter is how long after At until the bucket admits the next
	// call of the same Cost: 0 if it admits one now. It is positive
	// whenever Blocked (the seed's resetMs: X-RateLimit-Reset and
	// Retry-After).
	RetryAfter time.Duration
	// ClearAfter is how long after At until the bucket is empty: 0 if it
	// is empty now (the seed's fullResetMs: X-RateLimit-Clear).
	ClearAfter time.Duration
	// NextDrip is how long after At until the bucket next drips: 0 if it
	// is empty (the draft RateLimit field's t).
	NextDrip time.Duration
}

// Bucket is the state of one leaky bucket: the model every store
// implements. It holds a level (the calls in the bucket) and the time of
// its last drip. Check takes the time as an argument and reads no clock,
// so a Bucket is deterministic and is tested without sleeping.
//
// The model, for a Limit of size S dripping D every R:
//
//   - Drip: if the bucket holds L > 0 calls and k = floor((now - anchor)/R)
//     drips have come due since its last drip (anchor), it holds
//     max(L - k*D, 0) and the anchor moves to anchor + k*R.
//   - Check: the call is blocked if the bucket holds S or more; otherwise
//     it is admitted and adds 1. A call admitted into an empty bucket sets
//     the anchor to now, so that it drips R later, not at the phase of an
//     old drip (the seed's "edge case", applied to every empty bucket).
//
// With D = 1 this is exactly GCRA with emission interval R and burst S, and
// no interval of length w ever admits more than S + floor(w/R) calls. With
// D > 1 an interval of length w admits at most S - 1 + min(D, S) *
// (floor(w/R) + 1) calls: a drip that falls just inside the interval frees
// D at once. Both bounds are tight and are the ones the tests check.
//
// If now is earlier than the anchor (a clock stepped back), no drip is
// due: time never runs backwards for a bucket, which is only stricter.
//
// The zero value is an empty bucket. A Bucket is not safe for concurrent
// use; Memory and Redis are.
type Bucket struct {
	level  int64     // calls in the bucket; >= 0 (<= Size while one Limit is used)
	anchor time.Time // time of the last drip, or of the admission that filled an empty bucket; meaningful only when level > 0
}

// Check checks one call against the bucket under lim at now, adding it if
// it is admitted. It returns an error only for an invalid limit. It is
// CheckN with a cost of 1.
func (b *Bucket) Check(lim Limit, now time.Time) (Result, error) {
	return b.CheckN(lim, 1, now)
}

// CheckN checks a call of cost n (n units, such as the bytes of an upload
// under a limit of bytes) against the bucket under lim at now: it is
// admitted if the bucket holds at most Size - n, and then adds n. A call
// of cost 0 is always admitted and changes nothing. It returns an error for
// an invalid limit, or a cost below 0 or above lim.Size (ErrInvalidCost),
// and then changes nothing.
func (b *Bucket) CheckN(lim Limit, n int, now time.Time) (r Result, err error) {
	p, err := lim.params()
	if err != nil {
		return Result{}, err
	}
	if err := checkCost(lim, p, n); err != nil {
		return Result{}, err
	}
	var elapsed int64
	if b.level > 0 {
		elapsed = int64(now.Sub(b.anchor))
	}
	// A blocked call keeps the drips it found due too (a change of
	// representation only), so that a later call at an earlier time (a
	// clock stepped back) finds them done, as the stores do.
	level, elapsed, blocked := step(p, b.level, elapsed, int64(n), true)
	b.level = level
	b.anchor = now.Add(-time.Duration(elapsed))
	fillResult(&r, lim, p, now, level, elapsed, int64(n), blocked)
	return r, nil
}

// checkCost returns an error wrapping ErrInvalidCost unless 0 <= n <= the
// size of p (lim's params).
func checkCost(lim Limit, p params, n int) error {
	if n < 0 || int64(n) > p.size {
		return &CostError{Cost: n, Limit: lim}
	}
	return nil
}

// step is the model's arithmetic, on one bucket of p holding level calls
// whose last drip was elapsed nanoseconds ago (negative if the clock is
// behind it). It drips what is due, then checks a call of cost n (blocked
// if the level would pass the size) and, if charge is set and the call is
// admitted, adds n. It returns the new level, the new time since the last
// drip and whether the call is blocked.
//
// Every store runs this function (Redis runs its Lua twin, redisScript, and
// its results go through result below), so all compute the same results.
func step(p params, level, elapsed, n int64, charge bool) (newLevel, newElapsed int64, blocked bool) {
	if level > 0 && elapsed >= p.interval {
		k := elapsed / p.interval
		if k >= p.drips(level) {
			level = 0
		} else {
			level -= k * p.drip
			elapsed -= k * p.interval
		}
	}
	if level <= 0 {
		level, elapsed = 0, 0
	}
	if level+n > p.size {
		return level, elapsed, true
	}
	if charge {
		level += n
	}
	return level, elapsed, false
}

// result builds the Result of a check of cost n decided at now that left
// the bucket at level, elapsed nanoseconds after its last drip.
func result(lim Limit, p params, now time.Time, level, elapsed, n int64, blocked bool) Result {
	var r Result
	fillResult(&r, lim, p, now, level, elapsed, n, blocked)
	return r
}

// fillResult sets *r to result's Result, in place: a Result is 120 bytes,
// and on the in-memory check's path each copy of it costs more than the
// arithmetic.
func fillResult(r *Result, lim Limit, p params, now time.Time, level, elapsed, n int64, blocked bool) {
	r.Limit, r.Cost, r.At, r.Blocked, r.Level = lim, int(n), now, blocked, int(level)
	r.Remaining, r.RetryAfter, r.ClearAfter, r.NextDrip = 0, 0, 0, 0
	if level < p.size {
		r.Remaining = int(p.size - level)
	}
	if level+n > p.size {
		// The next call of cost n waits until enough drips bring the
		// level to Size - n.
		r.RetryAfter = time.Duration(p.drips(level+n-p.size)*p.interval - elapsed)
	}
	if level > 0 {
		r.ClearAfter = time.Duration(p.drips(level)*p.interval - elapsed)
		r.NextDrip = time.Duration(p.interval - elapsed)
	}
}
