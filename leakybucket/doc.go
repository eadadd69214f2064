// Package leakybucket is a server-side rate limiter for your own HTTP API:
// the leaky bucket of Sharkey's SkRateLimiterService (the seed), in memory
// or shared by any number of nodes through Redis, with the seed's rate-limit
// headers, the IETF draft's RateLimit fields, and net/http middleware.
//
// Sluice's other packages limit what a client sends to Discord; this one
// limits what clients send to you. It tolerates human bursts (a full burst
// at once, then a steady drip), tells clients exactly when to come back,
// and never admits more across nodes than one bucket would.
//
// # Pieces
//
//   - [Limit] is a bucket: Size calls, DripSize of them dripping away every
//     DripRate. [Legacy] is the seed's older "Max per Duration, optional
//     MinInterval" form; Translate turns it into the bucket the seed uses.
//   - [Bucket] is one bucket's state and the model every store implements:
//     Check takes the time as an argument, reads no clock, and returns a
//     [Result] (Blocked, Remaining, RetryAfter, ClearAfter, ...). Being over
//     the limit is Blocked, never an error.
//   - Calls may cost n units: [Bucket.CheckN], [Memory.CheckN] and
//     [Redis.CheckN] admit a call if every bucket of it has room for n,
//     and charge n to each or to none; the Results count in units.
//   - [Store] checks calls by key. [Memory] keeps buckets in a sharded map
//     (0 allocations per check, idle buckets forgotten without a
//     goroutine); [Redis] keeps them in Redis, one Lua script per check on
//     Redis's clock. Both check several limits at once, atomically.
//   - [Memory.Peek] and [Redis.Peek] show a key's buckets (the quota left)
//     without charging anything; [Memory.Reset] and [Redis.Reset] empty
//     them (lifting a limit after a support request); [Memory.Set] and
//     [Redis.Set] set their level (a penalty, a grant). On Redis each is
//     one script on Redis's clock, atomic for every bucket of the call and
//     bounded by the Timeout, like a check.
//   - [SetHeaders] writes the seed's X-RateLimit-Remaining, -Clear, -Reset
//     and Retry-After, and optionally the draft's RateLimit-Policy and
//     RateLimit.
//   - [NewMiddleware] limits an http.Handler: keyed by client address
//     ([IPKey], trusted-proxy aware) or any function of the request, several
//     limits per route, 429 with an application/problem+json body, and a
//     metrics hook.
//
// # The model
//
// A bucket holds a level of calls. Every DripRate, counted from the last
// drip, DripSize calls drip away. A call finding the level below Size is
// admitted and raises it by one; a call finding it at Size is blocked and
// changes nothing. A call admitted into an empty bucket restarts the drip
// clock, so the bucket drips DripRate after it. See [Bucket] for the exact
// arithmetic and the bound it guarantees: no interval of length w admits
// more than Size + floor(w/DripRate) calls with DripSize 1 (the model is
// then exactly GCRA), or Size - 1 + min(DripSize, Size)·(floor(w/DripRate)
// + 1) with a larger DripSize.
//
// The seed's pseudocode moves its timestamp only by the drips it applied,
// so after an idle spell each call drips the previous one away and an
// instant can admit more than Size (TestSeedPseudocodeOveradmits shows 15
// in one instant for a bucket of 10); its code moves the timestamp DripSize
// times too far when DripSize > 1. This package follows the seed's model,
// its Legacy translation and its header meanings, without those slips; the
// differences are listed in docs/leaky-bucket.md.
//
// # Time
//
// Every decision depends on time, and the core takes it as an argument:
// [Bucket.Check], [Memory.CheckAt] and [Memory.CheckAllAt] take now, so the
// same inputs always give the same result and tests never sleep.
// [Memory.Check] reads Memory.Clock (the monotonic clock by default); [Redis] reads
// Redis's TIME inside the script, so nodes with skewed clocks still share
// one clock. A time earlier than a bucket's last drip counts as no time
// passed, and a Memory shard's time never runs backwards.
//
// # Several nodes
//
// [Redis] runs one script per check, which reads TIME, drips, checks and
// charges every bucket of the call. Redis executes scripts one at a time,
// so the checks of all nodes form one sequence on one clock, exactly as if
// one [Bucket] had received them: no node can read a level another is
// about to change (the read-then-increment race of limiters that use GET
// and INCR), and the bound above holds across nodes.
// TestRedisManyProcesses hammers one key from 4 processes × 50 goroutines
// and checks every interval against the bound and every instant against
// the in-memory store.
//
// # Failure modes
//
//   - Redis unreachable, slow, or answering with an error: the check ends
//     within RedisOptions.Timeout (100 ms by default, enforced even while
//     go-redis waits for a connection's handshake or a silent connection's
//     answer, without a goroutine per check) with an
//     [*UnavailableError] wrapping [ErrUnavailable], and the results of
//     RedisOptions.OnUnavailable: [FailClosed] (the default: blocked, the
//     middleware answers 503 with Retry-After), [FailOpen] (admitted,
//     served without rate-limit headers) or [FailLocal] (decided by a local
//     [Memory] with each limit divided by FallbackShare). Nothing panics;
//     the Observe hook sees every such error. When Redis comes back, the
//     next check uses it.
//   - A check cut by Timeout may still run in Redis and be charged: the
//     client was refused (or decided locally) and its bucket is one call
//     fuller, which only errs on the strict side.
//   - Redis restarted empty: every bucket starts empty again (the script is
//     sent again once, with EVAL).
//   - A flood of new keys (addresses sprayed by a client): IPKey keys IPv6
//     clients by /64; Memory bounds its buckets with MaxKeys, evicting the
//     one that would drain first among a few examined; Redis keys expire
//     when their bucket has drained.
//   - An invalid limit is a configuration error: [ErrInvalidLimit], from
//     NewMiddleware at start-up, or from a check before any bucket changes.
//
// # Concurrency and zero values
//
// [Memory] and [Redis] are safe for concurrent use; [Bucket] is not. The
// zero Bucket is empty, the zero Memory is ready to use with its defaults,
// the zero RedisOptions and MiddlewareOptions fields take the documented
// defaults, and the zero Limit is invalid (Size 0).
package leakybucket
