// Package sluicediscordgo sends the REST calls of a discordgo session
// (github.com/bwmarrin/discordgo v0.29) through a Sluice limiter, with
// discordgo's own retries switched off and its rate limiter made inert, so
// Sluice pipelines each bucket as it would alone.
//
// # Wiring
//
//	lim, err := sluice.New(sluice.Options{Token: token}) // one limiter per bot token
//	defer lim.Close(context.Background())
//	session, err := discordgo.New("Bot " + token)
//	sluicediscordgo.Apply(session, lim)
//
// Every method of the session (ChannelMessageSend, MessageReactionAdd,
// WebhookExecute, uploads, UserAvatarDecode...) then goes through the
// limiter. Keep discordgo's endpoint variables as they are: the limiter
// sends https://discord.com/api/v9/... to its Options.BaseURL's host, and
// URLs on other hosts (cdn.discordapp.com) directly to them, outside the
// limits and without the bot's Authorization header. Webhook executions
// and interaction follow-ups (routes that carry their own token) go without
// the bot token discordgo puts on every request, and count on the per-IP
// global limit, as through the other integrations.
//
// # What Apply switches off, and why
//
//   - Session.MaxRestRetries = 0. discordgo sends again any request
//     answered 502, message creations and webhook executions included,
//     with nothing that lets Discord recognise the second one: a 502 from
//     a proxy after Discord processed the request posts the message twice.
//     Sluice resends only what is safe to send twice (reads, PUT, PATCH,
//     DELETE, and message creations, to which it adds a nonce with
//     enforce_nonce), after a 5xx or a lost connection.
//   - Session.ShouldRetryOnRateLimit = false. Sluice never returns a 429: it
//     waits out and resends 429s itself (Options.MaxRetries) and reports one
//     it gave up on as a *sluice.RateLimitError. This only makes it explicit.
//   - Session.Client gets no Timeout. An http.Client's Timeout counts the
//     time a request waits in its bucket's queue in Sluice, so a busy bucket
//     would fail requests that were about to go. Bound the wait with
//     sluice.Options.MaxWait or sluice.WithMaxWait (a *sluice.WaitError at
//     once when the predicted wait is longer) and the whole call with
//     sluice.Options.Timeout or a context given with discordgo.WithContext.
//
// # discordgo's own rate limiter
//
// Session.Ratelimiter is a concrete *discordgo.RateLimiter that every REST
// call goes through, and it has no switch. It locks a bucket (keyed by the
// URL, or by a coarser id for some routes: all messages sent to a channel
// share one) from before the request is sent until its response headers
// are back, so with a plain &http.Client{Transport: lim} a channel's
// requests go one at a time and Sluice cannot pipeline them. It also sleeps
// on its own reading of the X-RateLimit-* headers.
//
// Apply installs a Transport that answers discordgo as soon as the request
// is queued in the limiter, with a response whose status, headers and body
// are filled in when the body is first read. discordgo releases its bucket
// at that point, before reading the body, and sees no rate-limit header,
// so its limiter neither serialises nor sleeps; it then reads the body and
// looks at the status, by then the real ones. A goroutine that makes one
// call after another still waits for each answer. The one limit of
// discordgo's left is its reaction rule (one reaction request per 200 ms
// per channel), looser than Discord's one per 250 ms, which Sluice keeps.
//
// Responses for the API's URLs are therefore incomplete until their body
// is read: code of your own that uses Session.Client for API requests must
// read the body before looking at the status (or use the limiter directly,
// lim.Do). Requests to other hosts (the CDN) are answered complete.
//
// # Errors
//
// When Sluice gives up on a request (a *sluice.RateLimitError, a
// *sluice.WaitError, sluice.ErrUnauthorized, a lost connection on a request
// not safe to resend, the request's context ending...), discordgo returns a
// *url.Error wrapping the limiter's error, so errors.Is and errors.As find
// it (errors.As(err, &rateLimitErr) with a *sluice.RateLimitError). An API
// answer of 4xx is a *discordgo.RESTError as usual. A 5xx that Sluice
// returns (after its own retries, or at once for a request it may not
// resend) is, with MaxRestRetries = 0, discordgo's plain error "Exceeded Max
// retries HTTP 502 ..." for a 502 (no *discordgo.RESTError: discordgo
// formats it with fmt.Errorf) and a *discordgo.RESTError for any other 5xx.
package sluicediscordgo
