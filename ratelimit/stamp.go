package ratelimit

import "time"

// A stamp is an instant in 8 bytes rather than a time.Time's 24: a
// Bucket keeps ten of them, and a live limiter a Bucket per bucket (twice,
// with its copy in a MemoryStore). It counts nanoseconds from epoch, on
// the monotonic clock when the time it was made from has a monotonic
// reading (time.Now values) and on the wall clock when it has none (a fake
// clock's), so stamp.time gives back an instant that compares and
// subtracts with times of the same form as the original did. Stamps of
// times of one form order as their instants do; the zero stamp is the zero
// Time, before every other.
//
// Two forms in one comparison would be off by the steps of the wall clock
// since the process started, where time.Time compares them by their wall
// clocks: a time that may come from elsewhere (a ResetAt written from
// outside, a store's) is taken in the frame of the caller's now (stampIn).
//
// Every instant 292 years or more before epoch is the stamp just after the
// zero one, and every one as far after it the last stamp: a Bucket's times
// must lie within that range of the process's start (see Bucket).
type stamp uint64

// epoch is the instant stamps count from: this process's start, with its
// monotonic reading.
var epoch = time.Now()

// stampBias maps the time since epoch, from math.MinInt64 (the zero Time,
// whose distance from epoch time.Time.Sub saturates) up, onto stamps from 0.
const stampBias = 1 << 63

// stampOf returns t's stamp.
func stampOf(t time.Time) stamp {
	if t.IsZero() {
		return 0
	}
	if s := stamp(uint64(t.Sub(epoch)) + stampBias); s != 0 {
		return s
	}
	return 1
}

// stampIn returns t's stamp in the frame of ref, a time of the caller's
// clock: ref's stamp moved by t.Sub(ref), which time.Time takes on the
// wall clocks when one of the two has no monotonic reading.
func stampIn(t, ref time.Time) stamp {
	if t.IsZero() || ref.IsZero() {
		return stampOf(t)
	}
	if s := stampOf(ref) + stamp(t.Sub(ref)); s != 0 {
		return s
	}
	return 1
}

// time returns the instant s stands for: with a monotonic reading, which
// time.Time's comparisons use against another time that has one, and the
// wall time of the instant it was made from when that one had none.
func (s stamp) time() time.Time {
	if s == 0 {
		return time.Time{}
	}
	return epoch.Add(time.Duration(uint64(s) - stampBias))
}

// at returns the instant s stands for as ref moved by their distance: in
// ref's location, with a monotonic reading if ref has one. A time a Bucket
// exports (ResetAt) is made this way from the caller's own, so it keeps the
// form of the caller's times (a stamp made from a time without a
// monotonic reading gives back that very time).
func (s stamp) at(ref time.Time) time.Time {
	if s == 0 || ref.IsZero() {
		return s.time()
	}
	return ref.Add(time.Duration(s - stampOf(ref)))
}

// isZero reports whether s is the zero Time's stamp.
func (s stamp) isZero() bool { return s == 0 }
