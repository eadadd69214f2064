package lanes

import (
	"time"

	"github.com/sluicehq/sluice/fsm"
)

// Place is where c goes in the lane's queue at now (pos: Queue.PlaceOf)
// and when its bucket lets it go from there (start and known: Slot). The
// queue learns of requests cancelled while they waited only at its head:
// when start is further than limit from now (limit > 0: the longest c may
// wait, forecast.MaxWait), it drops the finished ones (Queue.Compact) and
// places c again among the live ones alone, before the caller refuses c.
func (l *Lane[T, R]) Place(c T, now time.Time, limit time.Duration) (pos int, start time.Time, known bool) {
	pos = l.Line.PlaceOf(c)
	start, _, known = l.Slot(now, pos)
	if limit > 0 && start.Sub(now) > limit {
		l.Line.Compact()
		pos = l.Line.PlaceOf(c)
		start, _, known = l.Slot(now, pos)
	}
	return pos, start, known
}

// Ready reports whether the lane's head may go at now as far as its own
// bucket and the actor's pioneers are concerned (ok; otherwise wait is
// when to look again, 0: an answer will wake the actor). out is how many
// of the actor's pioneers are on the wire (requests of lanes whose limit
// is unknown), firstOut whether one of them is a first pioneer (its
// template never answered).
//
// The lane's state machine decides, synced to the count at now (Sync):
// nothing goes while the shared count holds the lane (SharedUntil); an
// unknown (initial) bucket sends one pioneer at a time, and a first
// pioneer goes alone: while another pioneer of the actor is out, nothing
// goes with it, and once none is, turn is set and ok is false: the caller
// asks the template's first pioneer turn, held across actors
// (pioneers.Turns), and, if the turn is free, FirstReady tells the rest.
// A lane that is not First waits while a first pioneer is out; a serial
// lane sends one request at a time. Then the bucket's count tells (Peek).
func (l *Lane[T, R]) Ready(now time.Time, out int, firstOut bool) (ok bool, wait time.Duration, turn bool) {
	if now.Before(l.SharedUntil) {
		return false, l.SharedUntil.Sub(now), false
	}
	l.Sync(now)
	switch l.Machine.Current() {
	case fsm.Initial:
		if l.First {
			return false, 0, out == 0
		} else if firstOut {
			return false, 0, false
		}
	default:
		if l.Serial && l.Running > 0 {
			return false, 0, false
		}
	}
	ok, wait = Peek(l.State, now)
	return ok, wait, false
}

// FirstReady is the rest of Ready for a first pioneer whose template's
// turn is free: it goes only with a slot held in every known lane of ls it
// might share (HoldsIn, in ls's order: the first that cannot spare one
// tells the wait), then as its own bucket lets it (Peek).
func (l *Lane[T, R]) FirstReady(ls []*Lane[T, R], now time.Time) (bool, time.Duration) {
	for _, k := range ls {
		if l.HoldsIn(k) {
			if ok, wait := Peek(k.State, now); !ok {
				return false, wait
			}
		}
	}
	return Peek(l.State, now)
}
