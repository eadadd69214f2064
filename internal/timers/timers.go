// Package timers is an actor's timers as generations: each kind of timer
// an actor keeps has one Slot, holding its latest timer and the number of
// times it was armed (its generation). Arming a slot again stops the timer
// it held and makes every earlier generation stale, so the actor, which
// receives the generation with the timer's message, never acts on a timer
// it has replaced (Slot.Current). protoactor's own SetReceiveTimeout
// races, so the timers are plain time.AfterFunc.
//
// It sends nothing and knows no actor: a timer calls the Firing it was
// armed with, on the timer's goroutine, with the generation; the actors
// (package actors, timers.go) pass one that sends the actor its timer
// message, and keep the kinds and their slots. A Slot is its actor's:
// Arm, Within, Current, Fired and Stop are called from the actor's
// Receive only, never concurrently; the firing reads nothing of the Slot.
//
// Within is for a deadline that moves later at nearly every message (a
// bucket actor's end of life): it keeps the pending timer while that one
// fires no later than asked, and the handler of the early firing checks
// the deadline again and arms for the rest, so a busy actor arms about
// one timer per deadline rather than one per message.
//
// Arming costs what time.AfterFunc does and one closure (the Firing's
// value and the generation): Arm takes the Firing as a type parameter, by
// value, rather than a closure over it, so that no second closure wraps
// the first (a function and its argument passed apart cost no more
// allocations, but a closure 16 bytes larger: the function and the
// generic code's dictionary).
package timers

import (
	"math"
	"time"
)

// Slot is one kind's latest timer and its generation. The zero Slot is
// ready: never armed, generation 0.
type Slot struct {
	gen uint64      // the latest arming's generation; bumped by Arm and Stop
	t   *time.Timer // the latest arming's timer; nil before the first and after Stop or Fired
	// due is when t fires, on the monotonic clock timers run on (since
	// epoch); unknown when Arm armed it, or t is not pending (Fired, Stop).
	due time.Duration
}

// epoch is where Slot.due counts from: time.Since reads the monotonic
// clock, as the runtime's timers do, so a step of the wall clock (or a
// caller's clock running apart) cannot make a kept timer late.
var epoch = time.Now()

// unknown is Slot.due when no firing time is known: 292 years before
// epoch, which no due comes near, so it stands apart from every real one.
const unknown = time.Duration(math.MinInt64)

// Firing is what a timer does when it fires: Fire(gen), on the timer's
// goroutine, with gen the generation of the arming that armed it.
type Firing interface{ Fire(gen uint64) }

// Arm arms s to call f.Fire(gen) in d (at once when d is negative), with
// gen the arming's generation, and stops any earlier timer of s: from now
// on, only gen is Current.
func Arm[F Firing](s *Slot, d time.Duration, f F) {
	s.gen++
	gen := s.gen
	if s.t != nil {
		s.t.Stop()
	}
	if d < 0 {
		d = 0
	}
	s.t = time.AfterFunc(d, func() { f.Fire(gen) })
	s.due = unknown
}

// Within makes s fire f within d: it keeps the pending arming of s if
// that one fires no later than d from now, and otherwise arms anew as
// Arm does. It is for a deadline that moves later at every call and whose
// handler, when the timer fires, checks what is due and arms again for
// the rest (a bucket actor's end of life): an early firing costs that
// check, where arming again at every call cost a timer. A pending arming
// counts only until its firing is handled (Fired).
func Within[F Firing](s *Slot, d time.Duration, f F) {
	due := time.Since(epoch) + max(d, 0)
	if s.t != nil && s.due != unknown && s.due <= due {
		return
	}
	Arm(s, d, f)
	s.due = due
}

// Current reports whether gen is s's latest arming.
func (s *Slot) Current(gen uint64) bool { return s.gen == gen }

// Fired reports whether gen is s's latest arming, as Current does, and
// if so counts that arming as fired: no longer pending, so a later Within
// arms anew. Called where the actor handles the timer's message.
func (s *Slot) Fired(gen uint64) bool {
	if s.gen != gen {
		return false
	}
	s.t, s.due = nil, unknown
	return true
}

// Stop stops s's timer, if any, and makes every arming so far stale.
func (s *Slot) Stop() {
	if s.t != nil {
		s.t.Stop()
		s.t = nil
	}
	s.gen, s.due = s.gen+1, unknown
}

// StopAll stops every slot of slots (an actor's, on Stopping).
func StopAll(slots []Slot) {
	for i := range slots {
		slots[i].Stop()
	}
}
