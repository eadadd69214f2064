package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	gentimers "github.com/sluicehq/sluice/internal/timers"
)

// timerKind names one of an actor's timers. Each kind has a generation:
// arming a timer again makes earlier messages of that kind stale, so an
// actor never acts on a timer it has replaced (internal/timers: plain
// time.AfterFunc, here sending a message carrying the generation).
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

// timerSlot is one kind's latest timer and its generation
// (internal/timers).
type timerSlot = gentimers.Slot

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

// timerDelivery is what a timer delivers: mk(gen) to pid.
type timerDelivery struct {
	sys *System
	pid *actor.PID
	mk  func(gen uint64) any
}

// Fire delivers d's message of generation gen (a timers.Firing).
func (d timerDelivery) Fire(gen uint64) { d.sys.root.Send(d.pid, d.mk(gen)) }

// after arms the timer of kind to deliver mk(gen) to the actor in d,
// replacing any earlier one of that kind.
func (t timers) after(kind timerKind, d time.Duration, mk func(gen uint64) any) {
	gentimers.Arm(&t.slots[kind], d, timerDelivery{t.sys, t.pid, mk})
}

// within arms the timer of kind to deliver mk(gen) to the actor in d,
// unless the pending one fires no later (internal/timers.Within): for a
// deadline whose handler checks it again when the timer fires.
func (t timers) within(kind timerKind, d time.Duration, mk func(gen uint64) any) {
	gentimers.Within(&t.slots[kind], d, timerDelivery{t.sys, t.pid, mk})
}

// fired reports whether gen is the latest arming of kind and, if so,
// counts it as fired (internal/timers.Slot.Fired); where the actor
// handles the timer's message.
func (t timers) fired(kind timerKind, gen uint64) bool { return t.slots[kind].Fired(gen) }

// current reports whether gen is the latest arming of kind.
func (t timers) current(kind timerKind, gen uint64) bool { return t.slots[kind].Current(gen) }

// stopAll stops every timer; used on Stopping.
func (t timers) stopAll() { gentimers.StopAll(t.slots) }
