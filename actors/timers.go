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

const (
	timerRedial   timerKind = iota
	timerGlobal             // the bot window's pause (supervisor); see windowAdmission
	timerGlobalIP           // the IP window's pause
	timerRetry              // a retry (bucket); the bot window's next slot (supervisor)
	timerRetryIP            // the IP window's next slot
	timerWake
	timerIdle
	numTimers
)

// timers belong to one actor and are used only from its Receive.
type timers struct {
	sys  *System
	pid  *actor.PID
	gens [numTimers]uint64
	t    [numTimers]*time.Timer
}

// after arms the timer of kind to deliver mk(gen) to the actor in d,
// replacing any earlier one of that kind.
func (t *timers) after(kind timerKind, d time.Duration, mk func(gen uint64) any) {
	t.gens[kind]++
	gen := t.gens[kind]
	if t.t[kind] != nil {
		t.t[kind].Stop()
	}
	if d < 0 {
		d = 0
	}
	sys, pid := t.sys, t.pid
	t.t[kind] = time.AfterFunc(d, func() { sys.root.Send(pid, mk(gen)) })
}

// current reports whether gen is the latest arming of kind.
func (t *timers) current(kind timerKind, gen uint64) bool { return t.gens[kind] == gen }

// stopAll stops every timer; used on Stopping.
func (t *timers) stopAll() {
	for i, tm := range t.t {
		if tm != nil {
			tm.Stop()
			t.t[i] = nil
		}
		t.gens[i]++
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
