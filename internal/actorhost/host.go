package actorhost

import (
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// host is the protoactor actor system every System of the process runs on:
// one process registry for all limiters (protoactor allocates about 3 MB
// for it up front, which one per token made the proxy's idle tokens cost
// 3.2 MB each). Each System spawns its own supervisor, with its own
// children, so Systems share nothing else. Made with the first System,
// shut down with the last.
//
// Its own logs are discarded: Sluice logs crashes and failures itself,
// through each System's logger, and protoactor's dead-letter lines would
// print messages (requests) verbatim.
//
// Invariant: as is non-nil exactly while users > 0; both change only
// under mu.
var host struct {
	mu    sync.Mutex
	as    *actor.ActorSystem
	users int
}

// Acquire returns the process's actor system, making it if no one holds
// it. Every Acquire must be matched by one Release, once the caller's
// actors have stopped. Safe for concurrent use.
func Acquire() *actor.ActorSystem {
	host.mu.Lock()
	defer host.mu.Unlock()
	if host.users == 0 {
		host.as = actor.NewActorSystem(
			actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }),
			// protoactor starts a goroutine per dead-letter throttle period;
			// keep it short so none outlives Close by more than a moment.
			actor.WithDeadLetterThrottleInterval(time.Millisecond),
		)
	}
	host.users++
	return host.as
}

// Release gives back one Acquire; the last one shuts the actor system
// down. Safe for concurrent use.
func Release() {
	host.mu.Lock()
	defer host.mu.Unlock()
	host.users--
	if host.users == 0 {
		host.as.Shutdown()
		host.as = nil
	}
}
