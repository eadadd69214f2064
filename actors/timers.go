package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// timerKind names one of an actor's timers. Each kind has a generation:
// arming a timer again makes earlier messages of that kind stale, so an
// actor never acts on a timer it has replaced (protoactor's own
// SetReceiveTimeout races, so timers are plain time.AfterFunc that send a
// message carrying the generation).
type timerKind int

// A bucket actor's kinds come first: it keeps slots for them only
// (bucketTimers), the supervisor for all (numTimers).
const (
	timerRetry    timerKind = iota // a retry (bucket); the bot window's next slot (supervisor)
	timerWake                      // a bucket's next send
	timerIdle                      // a bucket's end of life
	timerRedial                    // the supervisor's next dial
	timerGlobal                    // the bot window's pause (supervisor); see windowAdmission
	timerGlobalIP                  // the IP window's pause
	timerRetryIP                   // the IP window's next slot
	numTimers
)

// bucketTimers is the number of a bucket actor's kinds: the first three.
const bucketTimers = timerIdle + 1

// timerSlot is one kind's latest timer and its generation.
type timerSlot struct {
	gen uint64
	t   *time.Timer
}

// timers belong to one actor and are used only from its Receive. slots
// has one slot per kind the actor uses, indexed by kind: an array in the
// actor's own struct, so that a live bucket pays for its three kinds
// only. A timers value is a view of those slots: copies act on the same
// timers (a bucket makes one per use, see bucket.timers).
type timers struct {
	sys   *System
	pid   *actor.PID
	slots []timerSlot
}

// after arms the timer of kind to deliver mk(gen) to the actor in d,
// replacing any earlier one of that kind.
func (t timers) after(kind timerKind, d time.Duration, mk func(gen uint64) any) {
	s := &t.slots[kind]
	s.gen++
	gen := s.gen
	if s.t != nil {
		s.t.Stop()
	}
	if d < 0 {
		d = 0
	}
	sys, pid := t.sys, t.pid
	s.t = time.AfterFunc(d, func() { sys.root.Send(pid, mk(gen)) })
}

// current reports whether gen is the latest arming of kind.
func (t timers) current(kind timerKind, gen uint64) bool { return t.slots[kind].gen == gen }

// stopAll stops every timer; used on Stopping.
func (t timers) stopAll() {
	for i := range t.slots {
		s := &t.slots[i]
		if s.t != nil {
			s.t.Stop()
			s.t = nil
		}
		s.gen++
	}
}

func itoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
