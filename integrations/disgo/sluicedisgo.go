// Package sluicedisgo sends the REST calls of github.com/disgoorg/disgo
// through a Sluice limiter (github.com/sluicehq/sluice), with disgo's own
// rate limiter and 429 retries switched off, so that Sluice alone decides
// when each request goes out.
//
// # Wiring
//
//	lim, _ := sluice.New(sluice.Options{Token: token})
//	client := rest.New(rest.NewClient(token, sluicedisgo.ConfigOpts(lim)...))
//	msg, err := client.CreateMessage(channelID, discord.MessageCreate{Content: "hi"},
//		sluicedisgo.WithContext(ctx))
//
// A bot built with disgo.New takes BotConfigOpt(lim), a webhook client built
// with webhook.New takes WebhookConfigOpt(lim).
//
// # What is switched off, and why
//
// disgo's default rest.RateLimiter holds a bucket's lock from the moment a
// request is sent until its answer is read, so it sends one request at a time
// per bucket: with it left on, Sluice never sees two requests of a bucket at
// once and cannot pipeline them (at 100 ms of latency a saturated channel
// then spends a round trip per message). It also retries a 429 answer up to
// 10 times. ConfigOpts replaces it with disgo's rest.NewNoopRateLimiter, which
// waits for nothing and whose MaxRetries is 0, so disgo never sends a request
// twice: Sluice waits out and resends 429s itself (sluice.Options.MaxRetries),
// resends what is safe to resend after a 5xx or a lost connection (message
// creations with a nonce it adds), and never returns a 429 response.
//
// disgo's default http.Client has a 20 s Timeout. That timeout also counts
// the time a request waits in Sluice's queue for its bucket, so the
// http.Client made by ConfigOpts has none: bound the wait with the call's
// context (WithContext), sluice.WithMaxWait or sluice.Options.MaxWait, and
// sluice.Options.Timeout (the deadline of a request whose context has none).
//
// # disgo loses the call's context
//
// disgo 0.18 builds each request without a context, applies rest.WithCtx to
// its RequestConfig, and then sends RequestConfig.Request, a request that
// never received the context (rest_client.go computes rq.WithContext(ctx) but
// sends the other request). With a limiter that queues in the transport, a
// cancelled call or a passed deadline does not stop the queued request:
// it is sent when its turn comes. WithContext sets the context on both, so
// Sluice sees it: a call whose context ends while it waits fails at once with
// the context's error, and one whose deadline cannot be met fails at once
// with a *sluice.WaitError.
//
// # Errors
//
// disgo wraps the transport's error with %w (through *url.Error), so
// errors.As(err, &waitErr) with a *sluice.WaitError, *sluice.RateLimitError
// and the like, and errors.Is(err, sluice.ErrConnectionDied) or
// context.Canceled, work on the error a disgo call returns. An answer that is
// not 2xx (a 5xx Sluice did not resend, a 403) is disgo's rest.Error as usual.
package sluicedisgo

import (
	"context"
	"net/http"

	"github.com/disgoorg/disgo/bot"
	"github.com/disgoorg/disgo/rest"
	"github.com/disgoorg/disgo/webhook"

	"github.com/sluicehq/sluice"
)

// ConfigOpts returns the options that make a disgo rest.Client send through
// lim: an http.Client whose Transport is lim and which has no Timeout, and
// disgo's no-op rate limiter (no waiting, no 429 retries). Use them with
// rest.NewClient(token, ConfigOpts(lim)...); options given after them
// override them.
//
// disgo keeps its default URL, https://discord.com/api/v10: Sluice sends
// requests for Discord's hosts to its own sluice.Options.BaseURL. Requests
// through the same http.Client to other hosts (the CDN) go there directly,
// outside the rate limits and without the bot's token.
func ConfigOpts(lim *sluice.Limiter) []rest.ConfigOpt {
	return []rest.ConfigOpt{
		rest.WithHTTPClient(&http.Client{Transport: lim}),
		rest.WithRateLimiter(rest.NewNoopRateLimiter()),
	}
}

// BotConfigOpt is ConfigOpts(lim) as an option of disgo.New and
// bot.BuildClient (bot.WithRestClientConfigOpts).
func BotConfigOpt(lim *sluice.Limiter) bot.ConfigOpt {
	return bot.WithRestClientConfigOpts(ConfigOpts(lim)...)
}

// WebhookConfigOpt is ConfigOpts(lim) as an option of webhook.New and
// webhook.NewWithURL (webhook.WithRestClientConfigOpts). Webhook executions
// carry their token in the path; Sluice sends them without the bot's
// Authorization header (unless sluice.Options.WebhookAuth), so they count on
// the IP's global limit, as with Discord.
func WebhookConfigOpt(lim *sluice.Limiter) webhook.ConfigOpt {
	return webhook.WithRestClientConfigOpts(ConfigOpts(lim)...)
}

// WithContext is the request option to use instead of rest.WithCtx: it
// gives ctx to disgo (rest.RequestConfig.Ctx) and to the request disgo
// sends (rest.RequestConfig.Request), which rest.WithCtx does not in disgo
// 0.18, so that Sluice ends the request when ctx ends and refuses at once,
// with a *sluice.WaitError, one that would wait past ctx's deadline.
func WithContext(ctx context.Context) rest.RequestOpt {
	return func(c *rest.RequestConfig) {
		c.Ctx = ctx
		if c.Request != nil {
			c.Request = c.Request.WithContext(ctx)
		}
	}
}
