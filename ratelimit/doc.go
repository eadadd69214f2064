// Package ratelimit is the arithmetic of Sluice's limiter: it parses
// Discord's rate-limit headers, classifies 429s, and keeps the state of a
// bucket and of the global limit. It does no I/O and reads no clock: every
// function that depends on time takes it as an argument (as
// golang.org/x/time/rate's AllowN does), so the same inputs always give the
// same answer and tests never sleep.
//
// # Pieces
//
//   - [ParseHeaders] turns an http.Header into [Headers]: X-RateLimit-Limit,
//     -Remaining, -Reset-After (kept to the nanosecond, never truncated to
//     whole seconds), -Reset, -Bucket, -Global, -Scope and Retry-After.
//     Hostile values are clamped or ignored by documented rules and reported
//     as [*HeaderError]; every duration is within [0, MaxWait].
//   - [Classify] turns a status, headers and body into a [Verdict]: OK,
//     UserLimit, GlobalLimit (recognised from any of its three signals, even
//     without bucket headers, which is the shape Discord documents),
//     SharedLimit, Sublimit or CloudflareBan, with how long to wait.
//     [CountsAsInvalid] says which responses count against the 10,000
//     invalid requests per 10 minutes that lead to a Cloudflare ban.
//   - [Bucket] is one bucket's state, owned by one actor: Take before a
//     request, Observe its response, Refund it if it was never sent, Pause
//     it after a 429.
//   - [SlidingWindow] is the proactive global limit (50 per second by
//     default), sliding rather than fixed so it never bursts to 2n across a
//     boundary.
//   - [BucketStore] and [GlobalLimiter] are the seams for sharing state
//     between processes; [MemoryStore] and [SlidingWindow] are the
//     in-memory implementations.
//
// # Inner workings
//
// A bucket starts unknown and admits a single pioneer. Its response reveals
// the limit, the remaining count and the window; from then on the bucket
// pipelines up to Remaining requests without waiting for responses. Responses
// may arrive in any order, so a response can only lower Remaining within a
// window, never raise it. The window's end is taken as the receive time plus
// X-RateLimit-Reset-After, which is never earlier than Discord's reset
// (Discord measured it earlier), so the limiter's clock never runs ahead of
// Discord's and no absolute X-RateLimit-Reset is trusted.
//
// When the window ends, Take refills Remaining to Limit minus the requests
// still in flight: those may land in Discord's new window. The new window's
// end is a guess (the longest Reset-After seen) until the first response
// sent in it confirms it, and the bucket will not refill a second time on a
// guess while requests are in flight.
//
// # Failure modes
//
//   - Malformed headers never make the limiter faster: a negative Remaining
//     reads as 0, Remaining above Limit as Limit, and an unparseable value is
//     ignored as if absent. A header with no usable rate-limit information
//     leaves a known bucket as it was and keeps an unknown one to one
//     request at a time.
//   - A 429 without X-RateLimit-* headers or a JSON retry_after, or with a
//     body that is not JSON, is a CloudflareBan, never retried at once.
//   - If the caller loses a request (neither Observe nor Refund), the bucket
//     stops waiting for it after PioneerTimeout.
//
// # Debugging
//
// [Bucket] exports its state (Limit, Remaining, ResetAt, PausedUntil, Known,
// Hash) and [Bucket.InFlight]; [Kind], [Scope] and [HeaderError] print
// readably. Feed a recorded sequence of Take/Observe calls with their times
// to a fresh Bucket to replay a production incident exactly.
package ratelimit
