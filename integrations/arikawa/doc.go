// Package sluicearikawa sends the REST calls of
// github.com/diamondburned/arikawa/v3 (v3.6.0) through a Sluice limiter.
//
// # Wiring
//
//	lim, err := sluice.New(sluice.Options{Token: token})
//	defer lim.Close(ctx)
//	client := sluicearikawa.NewClient("Bot "+token, lim) // *api.Client
//
// or, for a session or state made by arikawa's own constructors, before any
// request is made:
//
//	s := state.New("Bot " + token)
//	sluicearikawa.Apply(s.Client, lim)
//
// Webhook clients (package api/webhook) send no Authorization header; make
// them with NewWebhookClient (or ApplyWebhook) so their executions stay
// token-less and count on the per-IP global limit, not the bot's.
//
// # What is switched off, and why
//
// arikawa's httputil.Client runs every request through its OnRequest and
// OnResponse hooks. The hooks api.NewClient installs do three things:
// Authorization and User-Agent headers, then the Acquire of arikawa's own
// rate limiter (package api/rate), released by OnResponse. That limiter
// locks a bucket per URL path from Acquire until the answer's headers have
// been read, so arikawa never has more than one request of a path on the
// wire: Sluice could not pipeline a busy channel (several requests of one
// bucket in flight while its window has calls left), and messages to one
// channel would go one round trip after the other. Its buckets are keyed
// by path, so routes Discord puts in one bucket (adding and removing a
// reaction) are counted apart, and it adds 250 ms to every reset it reads.
// The integration keeps the headers and drops the limiter: Sluice owns
// the limits (per bucket, global, per IP, invalid requests).
//
// httputil.Client also resends a request whose Do failed, or that was
// answered 429 or 5xx, up to Retries times (5 by default). Through Sluice,
// that would undo what Sluice guarantees: Sluice already resends what is
// safe to resend (429s after their wait; 5xx and lost answers for reads,
// PUT, PATCH, DELETE and message creations, which it gives a nonce with
// enforce_nonce), and an error from Sluice means it decided not to resend
// (a webhook execution or file upload that may have been processed, a 429
// after Options.MaxRetries, a wait beyond the deadline). arikawa would send
// those again, up to four more times. So Retries is 1: one attempt per call.
//
// httputil.Client.Timeout and http.Client.Timeout are left at zero. Both
// would count the time a request waits in Sluice's queue for its bucket,
// failing requests that Sluice would have sent a moment later. Bound the
// wait instead with sluice.Options.MaxWait or sluice.WithMaxWait (a
// request predicted to wait longer fails at once with a *sluice.WaitError),
// sluice.Options.Timeout (the deadline of requests without one), or a
// context deadline given with the client's WithContext.
//
// # Errors
//
// An error from Sluice reaches the caller of an api.Client method as
// arikawa's httputil.RequestError wrapping net/http's *url.Error wrapping
// Sluice's error. Both wrappers implement Unwrap, so errors.As and
// errors.Is see Sluice's error:
//
//	var rl *sluice.RateLimitError
//	if errors.As(err, &rl) { ... rl.Scope, rl.RetryAfter ... }
//	var we *sluice.WaitError
//	if errors.As(err, &we) { ... }
//	if errors.Is(err, sluice.ErrConnectionDied) { ... }
//	var re httputil.RequestError // arikawa's own type, a value
//	errors.As(err, &re)
//
// An answer Sluice passes on (a 4xx, or a 5xx it did not or could no
// longer resend) is arikawa's *httputil.HTTPError as usual, with Status,
// Code and Message from Discord's body. Sluice never passes a 429 on.
//
// # URLs, tokens and other hosts
//
// arikawa builds absolute https://discord.com/api/v9/... URLs. Sluice sends
// them to its Options.BaseURL's scheme and host with their path, so the
// same client reaches the real API, a proxy or sluicetest's simulator
// (which serves /api/v9 too). Requests to other hosts (a CDN) go directly
// there, outside the limits, without the bot's Authorization header, which
// Sluice removes: fetching an attachment with the client's
// httputil.Client, or with an http.Client whose Transport is the limiter,
// works and leaks no token.
package sluicearikawa
