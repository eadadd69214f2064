// Package sluice sends HTTP requests to rate-limited REST APIs, Discord's
// first, as fast as the API's rules allow and never faster.
//
// # Purpose
//
// Discord limits every route per bucket, every bot globally (50 requests
// per second), every IP globally for requests without a token (another 50
// per second: webhook executions need none), and every IP by the number of
// invalid requests; it answers
// excess with 429s and, past 10,000 invalid requests in ten minutes, with a
// Cloudflare ban. Sluice sends each request at the earliest moment the rules
// allow, several at once when a bucket has calls left, and none early.
//
// # Usage
//
//	lim, err := sluice.New(sluice.Options{Token: token})
//	defer lim.Close(ctx)
//	resp, err := lim.Do(ctx, req)             // synchronous
//	fut := lim.Send(ctx, req)                 // asynchronous: fut.Await(ctx), fut.Done()
//	results := lim.DoBatch(ctx, reqs)         // many at once, results in order
//	client := &http.Client{Transport: lim}    // any library that takes an http.Client
//
// A Limiter is safe for concurrent use. Every submitted request gets exactly
// one outcome: a response, or an error that says why (see the Err
// variables, *WaitError and *RateLimitError).
//
// # Inner workings
//
// A supervisor actor (github.com/asynkron/protoactor-go) owns the pool of
// HTTP/2 connections (one after a first request, one more per four
// requests awaiting an answer, up to Options.Connections, 16 by default),
// the global limit's pauses, the Cloudflare-ban breaker and the admission
// queue. Its state machine (package fsm, on
// github.com/looplab/fsm) has the states disconnected, connecting, connected
// and global_limit. It keeps two global windows, each with its own
// admission queue and pause (a machine each: open, global_limit): the
// token's, for requests sent with an Authorization header, and the egress
// IP's, for requests without. Routes that carry their token in the path
// (webhooks, interaction follow-ups) are sent without the bot's token unless
// the caller set one (Options.WebhookAuth), so they count on the IP's window
// and in buckets of their own; a global 429 pauses only the window its
// request counted on.
//
// A bucket actor per major parameter (a channel, a guild, a webhook) owns
// every rate-limit bucket of it, each with its FIFO queue, its count and its
// state machine (initial, open, exhausted, limited, idle). A route's bucket
// hash is learned per route template, for every channel at once; until a
// bucket's limit is known it sends one pioneer at a time, and a route never
// answered goes alone, holding a slot in each known bucket of the channel it
// might share (those of related routes: the same path, its parent, a child
// or a sibling), and one at a time across channels: the others learn its
// bucket from its answer. While calls remain in a window the actor sends several
// requests at once (pipelining), never more than remaining; answers that
// arrive out of order never raise remaining within a window (package
// ratelimit). Each request takes its bucket slot and its global slot
// together: waiting for the global limit never spends a bucket window. When
// the global window is full, actors queue at the supervisor once each and
// are served longest backlog first, so a hot channel is not starved by a
// thousand cold ones. A request crosses three actor messages.
//
// A request sent with WithPriority goes ahead of lower priorities wherever
// requests wait: in its bucket's queue (behind its own class and higher
// ones) and in the supervisor's line (an actor asks with the highest class
// it has ready). While a lower class waits it keeps one slot in eight
// (docs/priorities.md). The rule lives in internal/admission (Class,
// Share), which both places use. A declared limit's schedule passes lower
// classes too, each request at most seven windows (ratelimit.Group's
// ReserveClass, which the Redis scripts follow).
//
// Windows are computed from the time an answer's headers arrived, and the
// server clock the answers reveal (X-RateLimit-Reset minus Reset-After)
// reopens a bucket when the server does, with a margin that grows if the
// server reopens late. The proactive global window is a sliding window
// whose slots are held from reservation until one period after each
// answer: latency jitter cannot crowd more than the limit into any window at
// the server.
//
// Every 429 is classified once, by its shape: global (X-RateLimit-Global,
// scope global or body global:true, even with no bucket headers) pauses
// every route but interaction callbacks for exactly the time given, from the
// moment the answer arrives; user and shared 429s pause their bucket; a 429
// while headers show calls remaining is a hidden sublimit, after which the
// bucket sends one request at a time; a 429 with neither rate-limit headers
// nor a JSON body is a Cloudflare ban and is never retried at once. A 429'd request was
// not processed and is sent again after the wait, at most Options.MaxRetries
// times. Bucket actors stop once their windows are over and their queues
// empty, so memory follows the working set; their learned limits stay in
// the Store, which expires them.
//
// Limits the API never announces (a channel's renames, a guild's role
// updates, rules of your own) are declared (Limit, Options.Limits,
// DefaultLimits) and kept before anything is sent: each group of a
// declared limit schedules its requests into windows in order (the ETA
// MaxWait uses) and holds each send's place until one window after its
// answer, so the API never sees more than the limit in one window.
// docs/declared-limits.md explains both.
//
// Every request can tell where it stands (Future.ETA): its Stage, its
// Position in its bucket's queue, and the window [Start, End) in which it
// is expected to be sent — the latest of what its bucket (the next window
// start plus one window per Limit requests ahead), its declared limits
// (the window each group reserved for it) and its global limit (a FIFO
// forecast of the global window over the requests waiting for it) tell.
// Snapshot.Requests lists every waiting request's ETA. docs/eta.md shows
// how it is computed and how accurate it is.
//
// # Failure modes
//
//   - A caller's context ends: the request fails with the context's error at
//     once, and its slot goes to the next request if it was not yet sent.
//   - A request would wait past its deadline or Options.MaxWait, for its
//     bucket, a declared limit or a global 429's pause: it fails at once
//     with a *WaitError carrying the predicted wait, what it waits for and
//     when it could go (and the declared limit's name).
//   - The connection dies: requests that provably never reached the server
//     stay queued and go out after the supervisor reconnects (with backoff);
//     requests that may have been processed fail with an error wrapping
//     transport.ErrConnectionDied.
//   - Connections fail to reach the API three times in a row (a failed
//     dial, a connection closed before the server's HTTP/2 SETTINGS, a
//     GOAWAY before any answer): requests waiting for a connection fail
//     with an *UnavailableError instead of hanging. A connection the
//     server accepted and then dropped does not count: its requests are
//     resent within their own retry budgets.
//   - Close: new requests fail with ErrClosed, queued ones too; requests on
//     the wire finish until Close's context ends, then are cancelled. No
//     actor or goroutine outlives Close.
//
// # Debugging
//
// Give Options.Logger a logger at debug level to see one line per actor
// message received and per state transition of either machine; warnings
// (429s, connection deaths, malformed headers) are logged at warn level.
// Tokens never appear: routes are logged with webhook and interaction tokens
// redacted, and the Authorization header is never logged. Limiter.Snapshot
// reports the supervisor's state and the live bucket count.
//
// docs/architecture.md draws the actors and the message flow;
// docs/state-machines.md the two machines, generated from the code.
package sluice
