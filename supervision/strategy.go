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
