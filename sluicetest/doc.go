// Package sluicetest is a Discord-faithful, rate-limited REST API simulator:
// the referee for Sluice's own tests and for yours, in the spirit of
// net/http/httptest.
//
// # Purpose
//
// Every claim a rate limiter makes ("no 429s", "as fast as the rules
// allow") needs an upstream that enforces the real rules strictly and
// counts every violation. Testing against the live API risks a Cloudflare
// ban; this package gives the same rules on loopback.
//
// # What it simulates
//
//   - Routes under /api/v10/, /api/v9/ and /api/ with Discord's templates
//     and major parameters (channel_id, guild_id, webhook_id +
//     webhook_token, interaction_id); see DefaultRules.
//   - Buckets: a rule maps a method and route template to a bucket hash, a
//     limit and a window. Rules may share a hash; the real bucket is the
//     hash plus the major parameters (and the token or IP). A window starts
//     with the first request into an empty bucket.
//   - Headers exactly as Discord sends them: X-RateLimit-Limit, -Remaining,
//     -Reset (epoch seconds, milliseconds), -Reset-After (seconds,
//     milliseconds, rounded up), -Bucket; on 429s also -Scope, -Global,
//     Retry-After (whole seconds, rounded up) and the JSON body
//     {message, retry_after, global, code?}.
//   - The global limit per token (default 50 per second, as a strict
//     sliding window), a separate one per IP for requests without a token
//     (webhooks), and interaction callbacks exempt.
//   - Hidden sublimits (channel renames: 2 per 10 minutes) answered with a
//     shared-scope 429 while the headers still show calls remaining.
//   - Limits that change from one window to the next (Rule.LimitCycle),
//     reported in each window's headers.
//   - Message creation (Rule.CreatesMessage) with Discord's nonce
//     deduplication: "nonce" plus "enforce_nonce": true returns the message
//     the same author created in that channel within NonceWindow instead of
//     a new one. Stats counts messages created, deduplicated and created
//     twice (AssertNoDuplicateMessages).
//   - The invalid-request limit: more than 10,000 401, 403 and non-shared
//     429 answers in 10 minutes ban the IP, which then gets Cloudflare's
//     HTML 429 without rate-limit headers.
//   - Faults: latency with jitter, 5xx without rate-limit headers, abrupt
//     connection close, HTTP/2 GOAWAY, an external consumer eating the
//     global limit at a chosen time, and bucket windows that reopen later
//     than their headers announced (Faults.LateReset).
//
// # Inner workings
//
// Engine holds the rules and all counters; Engine.Handle takes the current
// time as an argument, so its tests drive a fake clock and never sleep.
// Server puts an Engine behind a real HTTP/2 server (TLS with a fresh
// self-signed certificate, HTTP/1.1 fallback, or h2c) and adds faults.
// The simulator shares no parsing or bucketing code with the limiter it
// judges, so a misunderstanding of Discord's rules cannot hide in both.
//
// # Accounting
//
// Stats reports requests, statuses, 429s by scope (injected global ones
// apart), the most requests admitted in one bucket window and in any
// global window, per-bucket timelines, sublimit windows and bans.
// Stats.Violations and AssertNoViolations turn them into a verdict: a
// client that never exceeded a limit it could have known has none. The
// same numbers are served as JSON at GET /_sluice/stats.
//
// Tokens never appear in stats, keys or errors: a token is reported as
// the first 8 hex digits of its SHA-256.
package sluicetest
