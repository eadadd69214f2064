package supervision

import (
	"math"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// RestartStrategy returns the protoactor supervisor strategy for actors
// whose state lives outside the actor instance: always restart. protoactor's
// own restart limit would stop the actor, and Stop drops the messages still
// in its mailbox; the actor applies Intensity itself instead and leaves
// through a path that drops nothing.
func RestartStrategy() actor.SupervisorStrategy {
	return actor.NewOneForOneStrategy(math.MaxInt32, time.Second, func(any) actor.Directive {
		return actor.RestartDirective
	})
}

// ResumeStrategy returns the strategy for the actor at the top: after a
// panic it goes on with the same instance (Resume), because restarting a
// parent stops all its children, and stopping drops their mailboxes. The
// actor answers the message that failed itself.
//
// It is one value for the whole process: protoactor keeps a guardian per
// strategy value for the life of its actor system, which limiters share.
func ResumeStrategy() actor.SupervisorStrategy { return resume }

var resume = actor.NewOneForOneStrategy(0, time.Second, func(any) actor.Directive {
	return actor.ResumeDirective
})
