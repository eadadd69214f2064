// Package supervision holds the policies that keep Sluice working when
// things go wrong, as small state machines that take the time as an
// argument (like golang.org/x/time/rate), so they are tested without
// clocks or sleeps. The actors own one of each and consult them; none of
// them starts a goroutine or reads a clock.
//
//   - Intensity bounds how often a crashing actor is restarted: past Max
//     crashes within Window, the actor stops taking work (it fails its
//     queue with a typed error and leaves through its ordinary idle path,
//     so no message is dropped by protoactor's Stop).
//   - Breaker is the Cloudflare-ban circuit breaker: when the API answers
//     like a ban, every request is held for a backoff, then a single probe
//     goes alone; the backoff doubles while probes meet the ban, and the
//     breaker closes on the first probe that does not.
//   - Budget counts invalid answers (401, 403, non-shared 429) in a
//     sliding window, warns once at a threshold and refuses new requests
//     at a ceiling, before Discord's own limit (10,000 per 10 minutes)
//     bans the IP.
//   - RestartStrategy is the protoactor strategy for bucket actors: always
//     restart (the same instance, so state survives), leaving the
//     intensity decision to Intensity. ResumeStrategy is the guardian's
//     strategy for the supervisor: resume after a panic, so a supervisor
//     bug never takes its children down with it.
//
// None of these types is safe for concurrent use except Budget; each
// belongs to one actor.
package supervision
