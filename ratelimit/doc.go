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
//     request, Observe its response (ObserveLost when the server can no
//     longer count it: a 5xx, a connection the server closed), Refund it
//     if it was never sent, Pause it after a 429, and LateReopen after a
//     user 429 so that it learns a server that reopens windows late.
//   - [ServerClock] learns from X-RateLimit-Reset minus -Reset-After how
//     far the server's clock reads ahead of the local send time when it
//     counts a request, and so turns a server reset time into the local
//     time a request may be sent (Headers.Reopen); one serves a whole API
//     host.
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
// window, never raise it.
//
// Each response estimates when its window reopens, in local send time: the
// receive time of its headers plus X-RateLimit-Reset-After (never early, as
// Discord measured it earlier, but late by the return trip), or, earlier,
// Headers.Reopen from the [ServerClock] plus ReopenMargin. The clock never
// compares X-RateLimit-Reset with the local clock directly: it learns the
// offset, plus the fastest forward trip, from Reset - Reset-After, the
// server's time when it counted a request, less that request's send time,
// and takes the minimum over the last 64 answers (once it has 16), less
// how much those differ among themselves but never below what no trip can
// break (the same less the round trip), so that a converted time is early
// only for a request faster than all of those by more than their range
// (which ReopenMargin covers). Of the responses of one window (same X-RateLimit-Reset) the
// earliest estimate wins. TestReopenStepByStep shows one reopening with
// numbers.
//
// When the window ends, Take refills Remaining to Limit minus the requests
// still in flight: those may land in Discord's new window. The new window's
// end is a guess (the longest Reset-After seen) until the first response
// sent in it confirms it; only while the window length itself is a guess
// does the bucket wait for a response before refilling a second time on a
// guess with requests in flight.
//
// A bucket's limit may change from one window to the next, and a window's
// headers tell only its own. A refilled window admits no more than the
// smallest limit seen over the last 16 to 32 windows until one of its
// answers shows its own limit, then the rest; only an answer of the current
// window raises the limit, and a lower one lowers Remaining by the
// difference. Near a window's end the bucket keeps no more in flight than
// that smallest limit, since they may be counted in the next window.
//
// Discord is reported to reopen some windows 250-400 ms after it says. A
// bucket tries its first reopening, and each one at a shorter delay than
// already found on time, with a single probe request; a user 429 on a
// window the bucket reopened itself (Bucket.LateReopen) teaches it a margin
// that covers the lateness, kept for MarginHalfLife and then halved step by
// step, each step probed again. A server that keeps reopening late costs one
// 429 per bucket per MarginHalfLife.
//
// # Failure modes
//
//   - Malformed headers never make the limiter faster: a negative Remaining
//     reads as 0, Remaining above Limit as Limit, and an unparseable value is
//     ignored as if absent. A header with no usable rate-limit information
//     leaves a known bucket as it was and keeps an unknown one to one
//     request at a time.
//   - A 429 with neither an X-RateLimit-* header nor a JSON retry_after is a
//     CloudflareBan, never retried at once. A 429 with such a header is
//     Discord's, classified by its headers whatever its body (plain text,
//     HTML, empty, truncated).
//   - If the caller loses a request (neither Observe nor Refund), the bucket
//     stops waiting for it after PioneerTimeout, a pioneer and a probe alike.
//   - An implausible X-RateLimit-Reset (further than an hour from the local
//     clock) is not a ServerClock sample, and a Reopen earlier than the send
//     time plus Reset-After is ignored: the limiter falls back to the
//     receive time, which is late but never early.
//   - A user 429 wrongly taken for late reopening (another client using the
//     same bucket) teaches at most MaxLateMargin, for MarginHalfLife.
//
// # Debugging
//
// [Bucket] exports its state (Limit, Remaining, ResetAt, PausedUntil, Known,
// Hash), [Bucket.InFlight], [Bucket.Margin], [Bucket.ResetSlack] (how much
// earlier ResetAt may still move) and [Bucket.Probing];
// [ServerClock.Lead] tells the learned lead; [Kind], [Scope] and
// [HeaderError] print readably. Feed a recorded sequence of Take/Observe calls with their times
// to a fresh Bucket to replay a production incident exactly.
package ratelimit
