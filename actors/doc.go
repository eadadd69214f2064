// Package actors is the limiter's core: a supervisor actor and one bucket
// actor per major-parameter value, on github.com/asynkron/protoactor-go,
// each state a github.com/looplab/fsm machine (package fsm) that decides.
// Package sluice is its public face; this package is not meant to be used
// on its own.
//
// # Who owns what
//
// The supervisor (states disconnected, connecting, connected, global_limit:
// connected while a connection is up) owns the HTTP/2 connections, a pool
// that grows by one connection per connpool.CallsPerConn requests awaiting
// an outcome, up to Config.Connections (its policy: connpool.State), the
// global limit's pauses, the
// Cloudflare-ban breaker, the admission queue (see below) and the bucket
// actors, keyed by major parameters ("channel_id=123", "guild_id=9",
// "webhook_id=1;webhook_token=<hash>", or "" for routes without one).
//
// A bucket actor owns every rate-limit bucket of its major parameters: a
// lane per bucket (lanes.Lane) with its queue and retries (lanes.Queue), its
// count and pace (ratelimit.Bucket in lanes.Pace) and its machine
// (initial, open, exhausted, limited, idle). Discord's buckets are a hash plus the major parameters, so routes
// that may share a bucket always share their major parameters: merging two
// routes into one bucket, holding slots for a pioneer that may land in a
// known bucket, and electing one pioneer are decisions inside one actor,
// taken between two messages, never a protocol between actors. The actor
// sends its requests itself: it takes the bucket slot and the global slot
// together, and hands the request to a worker goroutine on the connection
// the supervisor published.
//
// # A request's messages
//
// The hot path is three messages: submit (caller → supervisor), enqueue
// (supervisor → bucket actor), result (worker → bucket actor). The worker
// sends the attempt and reads its answer with internal/attempt (the
// request was sealed once, at submission: System.seal), which parses and
// classifies it once (ratelimit.ParseHeaders, ratelimit.Classify); the
// worker ships the verdict with the time the headers arrived; a global 429 recognised from the headers also goes to the
// supervisor at once, before the body is read. Other messages flow only
// when something waits or changes: want/grant for admission, freed when a
// global slot frees while others wait, idle when an actor may stop, and the
// supervisor's own timers and connection events. docs/architecture.md draws
// the flow from messageFlows.
//
// # Routing
//
// A route's bucket hash is learned per route template and method
// ("POST /channels/{channel_id}/messages"), never per channel: the store's
// aliases. A request whose template is known goes straight to the lane
// routes.BucketKey(hash, major); an unknown one goes to a lane keyed by its
// route, whose machine stays initial: it sends one pioneer at a time. A
// first pioneer (its template never answered) may land in a bucket of a
// related route (the same template, its parent, a child or a sibling:
// lanes.Lane.MayShare), so it goes alone, only when every such known lane can spare a
// slot, and takes one from each (a hold); its answer reports each hold exactly once:
// Observe in the bucket it turned out to be, Refund in the others. One first
// pioneer goes at a time per template across the actors (pioneers.Turns):
// the template's other channels wait for its answer, then take their own
// bucket of that hash (adoptLearned) instead of each guessing. When the
// answer names a bucket another lane already has, the route's lane merges
// into it once (queues in submission order, in-flight counts, limits) and
// answers still on the wire follow it (lanes.Lane.Merge, MergedInto).
//
// # Admission
//
// A request needs its bucket's slot, the connection, no ban, and (unless
// it is an interaction callback) a slot of the global window. The
// supervisor publishes the connection and the ban hold (gate); a bucket
// actor reserves global slots itself while nobody waits and at least half
// the window is free (globalwin.Window.ReserveFast, internal/globalwin).
// Otherwise it sends want with the number of requests it has ready and
// its backlog, and stops asking; the supervisor puts each
// waiting actor once in the window's line, whose rule is pure code with
// time as an argument (internal/admission): earliest virtual deadline
// first (the oldest ready request's submission less eight times the
// backlog, in whole bucket windows; a bucket whose ready request is its
// pioneer goes before every known one), one grant of reserved slots each
// (an actor served in part keeps its place for the rest), slots kept for
// a bucket about to reopen, paced while a long backlog waits; the global
// part of an ETA replays that order (internal/forecast). While any actor waits, none reserves
// on its own, so a hot channel is served before
// cold ones with little to send, and waiting for the global window never
// spends a bucket window: the bucket slot is taken only when the global
// slot is in hand.
//
// # Time
//
// Every decision reads the limiter's clock; windows start from the time an
// answer's headers arrived. The worker's timestamp and the server clock
// the answers reveal (ratelimit.ServerClock: X-RateLimit-Reset minus
// Reset-After is the server's time when it counted the request) reopen a
// bucket when the server does, within an adaptive margin. The global window
// holds a slot one period from the answer's arrival: releasing it from the
// server's count time instead drew global 429s under scheduling noise
// (docs/architecture.md). No actor sleeps: timers are messages with a
// generation (timers.go, internal/timers), so a replaced timer is never
// acted on.
//
// # Invariants
//
//   - Every submitted call gets exactly one outcome (Call.Complete), also on
//     Close, crash, timeout and faults; System.live (internal/registry)
//     answers what the actors could not once they have stopped.
//   - A call is held by at most one place at a time: the supervisor's
//     mailbox, one lane's queue or retries, or the wire (Call.lane set).
//   - Every Take on a ratelimit.Bucket is reported exactly once by Observe
//     or Refund, and every global Reserve by Settle or Cancel.
//   - Only the supervisor writes the gate, the admission queue and
//     System.waiting; only a bucket actor touches its lanes and its calls.
//   - An actor stops only after telling the supervisor it is idle and the
//     supervisor has seen every enqueue it sent it answered (idleMsg).
//   - What a stopped bucket actor leaves behind is bounded by the most
//     actors alive at once: the supervisor rebuilds its child map when it
//     has shrunk (supervisor.forget), and bucket actors' ids are drawn to
//     hash into 32 of protoactor's 1,024 registry slices, whose Go maps
//     never shrink (internal/actorhost).
//   - Every incarnation of a bucket actor runs the same *bucket: the
//     supervisor hands it over with the actor's first message, and a
//     restart carries it from the crashed incarnation to the next
//     (bucketCell).
package actors
