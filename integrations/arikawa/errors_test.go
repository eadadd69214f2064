package sluicearikawa_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/diamondburned/arikawa/v3/api/webhook"
	"github.com/diamondburned/arikawa/v3/discord"
	"github.com/diamondburned/arikawa/v3/utils/httputil"
	"github.com/diamondburned/arikawa/v3/utils/httputil/httpdriver"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	sluicearikawa "github.com/sluicehq/sluice/integrations/arikawa"
	"github.com/sluicehq/sluice/sluicetest"
)

// requireSluiceError checks the form a Sluice error takes through
// arikawa: httputil.RequestError, wrapping *url.Error, wrapping Sluice's
// error, each found by errors.As.
func requireSluiceError(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	var re httputil.RequestError
	require.True(t, errors.As(err, &re), "httputil.RequestError in %T: %v", err, err)
	var ue *url.Error
	require.True(t, errors.As(err, &ue), "*url.Error in %v", err)
	t.Logf("%T: %v", err, err)
}

// TestSluiceErrorsThroughArikawa shows each kind of Sluice error reaching
// the caller of an arikawa method, found by errors.As and errors.Is
// through arikawa's wrapping, after exactly one RoundTrip: arikawa does
// not send again what Sluice gave up on. Answers Sluice passes on are
// arikawa's *httputil.HTTPError as usual.
func TestSluiceErrorsThroughArikawa(t *testing.T) {
	ctx := context.Background()

	t.Run("RateLimitError", func(t *testing.T) {
		srv := newServer(t, sluicetest.Options{})
		lim := newLimiter(t, srv, func(o *sluice.Options) { o.MaxRetries = -1 })
		rt := count(lim)
		c := sluicearikawa.NewClient(botToken, rt)
		// Another user of the token eats the global limit: Sluice, told
		// not to retry, gives up at the first global 429.
		srv.InjectGlobalLimit(300 * time.Millisecond)
		_, err := c.SendMessage(1000, "hi")
		requireSluiceError(t, err)
		var rl *sluice.RateLimitError
		require.True(t, errors.As(err, &rl), "%v", err)
		assert.Equal(t, "global", rl.Scope)
		assert.Positive(t, rl.RetryAfter)
		assert.ErrorIs(t, err, sluice.ErrRateLimited)
		assert.Equal(t, 1, rt.Calls(), "arikawa did not retry the final 429")
	})

	t.Run("WaitError", func(t *testing.T) {
		// Discord's own windows: 5 messages per 5 s per channel.
		srv := newServer(t, sluicetest.Options{Rules: sluicetest.DefaultRules()})
		lim := newLimiter(t, srv, nil)
		rt := count(lim)
		c := sluicearikawa.NewClient(botToken, rt)
		for i := range 5 {
			_, err := c.SendMessage(1000, "fill "+string(rune('a'+i)))
			require.NoError(t, err)
		}
		// The window is spent for about 5 s: a call that may wait 1 s at
		// most fails at once, and so does one whose deadline is nearer.
		_, err := c.WithContext(sluice.WithMaxWait(ctx, time.Second)).SendMessage(1000, "late")
		requireSluiceError(t, err)
		var we *sluice.WaitError
		require.True(t, errors.As(err, &we), "%v", err)
		assert.ErrorIs(t, err, sluice.ErrWaitTooLong)

		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err = c.WithContext(dctx).SendMessage(1000, "late too")
		require.True(t, errors.As(err, &we), "%v", err)
		assert.Equal(t, 7, rt.Calls(), "one RoundTrip per call")
	})

	t.Run("connection died", func(t *testing.T) {
		// Every connection is closed once a request reached the server:
		// a webhook execution may have been processed, so Sluice does not
		// resend it and says why.
		srv := newServer(t, sluicetest.Options{Faults: sluicetest.Faults{DropRate: 1}})
		lim := newLimiter(t, srv, nil)
		rt := count(lim)
		hook := sluicearikawa.NewWebhookClient(4242, "webhook-token", rt)
		err := hook.Execute(webhook.ExecuteData{Content: "maybe"})
		requireSluiceError(t, err)
		assert.ErrorIs(t, err, sluice.ErrConnectionDied)
		assert.Equal(t, 1, rt.Calls(), "arikawa did not resend a request that may have been processed")
	})

	t.Run("5xx is an HTTPError", func(t *testing.T) {
		srv := newServer(t, sluicetest.Options{Faults: sluicetest.Faults{ServerErrorRate: 1}})
		lim := newLimiter(t, srv, nil)
		rt := count(lim)
		hook := sluicearikawa.NewWebhookClient(4242, "webhook-token", rt)
		err := hook.Execute(webhook.ExecuteData{Content: "maybe"})
		var he *httputil.HTTPError
		require.True(t, errors.As(err, &he), "%T: %v", err, err)
		assert.Equal(t, http.StatusBadGateway, he.Status)
		assert.Equal(t, 1, rt.Calls(), "arikawa did not resend the 502")
		assert.Equal(t, 1, srv.Stats().ServerErrors)
	})

	t.Run("4xx is an HTTPError", func(t *testing.T) {
		srv := newServer(t, sluicetest.Options{Forbidden: []string{"666"}})
		lim := newLimiter(t, srv, nil)
		c := sluicearikawa.NewClient(botToken, lim)
		_, err := c.SendMessage(discord.ChannelID(666), "no access")
		var he *httputil.HTTPError
		require.True(t, errors.As(err, &he), "%T: %v", err, err)
		assert.Equal(t, http.StatusForbidden, he.Status)
		assert.Equal(t, httputil.ErrorCode(50001), he.Code)
		t.Logf("%v", err)
	})

	// What the integration switches off: arikawa's retries on their own
	// resend what Sluice gave up on, four more times.
	t.Run("arikawa's own retries resend", func(t *testing.T) {
		srv := newServer(t, sluicetest.Options{Faults: sluicetest.Faults{DropRate: 1}})
		lim := newLimiter(t, srv, nil)
		rt := count(lim)
		hc := httputil.NewClient()
		hc.Client = httpdriver.WrapClient(http.Client{Transport: rt})
		hook := webhook.NewCustom(4242, "webhook-token", hc)
		err := hook.Execute(webhook.ExecuteData{Content: "maybe"})
		require.Error(t, err)
		assert.Equal(t, int(httputil.Retries), rt.Calls(), "arikawa's default resends")
		// Sluice sent the first three (after three dead connections in a
		// row it fails requests at once until its backoff ends): each
		// was counted, and created its message, before its connection
		// was closed.
		st := srv.Stats()
		assert.Greater(t, st.Dropped, 1, "the request reached the server more than once")
		assert.Equal(t, st.Dropped, st.MessagesCreated, "each created a message")
		assert.Equal(t, st.MessagesCreated-1, st.DuplicateMessages, "all but one are duplicates")
		t.Logf("%d RoundTrips for one Execute (last error: %v); simulator: %s", rt.Calls(), err, st.Summary())
	})

}
