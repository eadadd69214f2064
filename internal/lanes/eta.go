package lanes

import (
	"iter"
	"time"

	"github.com/sluicehq/sluice/internal/forecast"
)

// The part of a request's ETA its bucket tells (forecast.Part): where the
// request is in its lane's line and when the lane's pace lets it go. The
// bucket actor asks its lanes in turn (Part), for a Snapshot every queued
// request (Live, Queued) and each lane's figures (Lane.Snapshot), and
// adds what a lane does not know: whether the actor holds a global slot
// for the request (forecast.Part.Granted), a request on the wire, the
// lane's key.

// Live yields the queue's requests that are not finished, in order, each
// with its position among them: the position Pace.Slot reads.
func (q *Queue[T, R]) Live() iter.Seq2[int, T] {
	return func(yield func(int, T) bool) {
		var r R
		pos := 0
		for _, c := range q.items {
			if r.Finished(c) {
				continue
			}
			if !yield(pos, c) {
				return
			}
			pos++
		}
	}
}

// Queued is the part of the ETA of the request at position pos of the
// queue's live requests at now: its bucket's window (Slot) and how early
// it may turn out to go (Earliest).
func (p *Pace) Queued(now time.Time, pos int) forecast.Part {
	out := forecast.Part{Stage: forecast.StageQueued, Pos: pos}
	out.Start, out.End, out.Known = p.Slot(now, pos)
	out.Early = p.Earliest(now, pos, out.Start)
	return out
}

// Retrying is the part of the ETA of a request waiting for its retry's
// backoff, which ends at notBefore: it goes back to the front of the
// queue then (behind a request the share promoted there, if one still is
// then: not known now, so counted as the head), and then waits for its
// bucket like a head. Retry is set when the backoff's end is the start.
func (p *Pace) Retrying(now, notBefore time.Time) forecast.Part {
	out := forecast.Part{Stage: forecast.StageRetrying}
	at := later(now, notBefore)
	out.Start, out.End, out.Known = p.Slot(at, 0)
	out.Early = p.Earliest(at, 0, out.Start)
	out.Retry = !out.Start.After(notBefore)
	return out
}

// Part is the part of c's ETA the lane tells at now, if c is in its queue
// (Queued, at its position among the live requests ahead of it) or its
// retries (Retrying); ok is false when c is in neither. O(the queue).
func (l *Lane[T, R]) Part(c T, now time.Time) (p forecast.Part, ok bool) {
	var r R
	pos := 0
	for _, q := range l.Line.Items() {
		if q == c {
			return l.Queued(now, pos), true
		}
		if !r.Finished(q) {
			pos++
		}
	}
	for _, q := range l.Line.Retries() {
		if q == c {
			return l.Retrying(now, r.NotBefore(c)), true
		}
	}
	return forecast.Part{}, false
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Snapshot is a lane's part of a Snapshot (sluice.BucketSnapshot, which
// documents every field; the two must stay identical: package sluice
// converts one to the other, and the actors name it BucketSnapshot).
type Snapshot struct {
	Key              string
	State            string
	Known            bool
	Limit, Remaining int
	ResetIn          time.Duration
	PausedFor        time.Duration
	Margin           time.Duration
	Queued, Retrying int
	Running          int
	Serial           bool
}

// Snapshot is the lane's Snapshot at at: its key, its machine's state, its
// count, what counts down (its window's reset, its pause, its margin) as
// at at (none passed: 0), its queue, retries and requests on the wire,
// and whether it is serial.
func (l *Lane[T, R]) Snapshot(at time.Time) Snapshot {
	st := &l.State
	return Snapshot{
		Key: l.Key, State: l.Machine.Current().String(), Known: st.Known,
		Limit: st.Limit, Remaining: st.Remaining,
		ResetIn: max(0, st.ResetAt.Sub(at)), PausedFor: max(0, st.PausedUntil.Sub(at)),
		Margin: st.Margin(at), Queued: l.Line.Len(), Retrying: len(l.Line.Retries()), Running: int(l.Running),
		Serial: l.Serial,
	}
}
