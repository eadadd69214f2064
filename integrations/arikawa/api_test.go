package sluicearikawa_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/diamondburned/arikawa/v3/api"
	"github.com/diamondburned/arikawa/v3/api/webhook"
	"github.com/diamondburned/arikawa/v3/discord"
	"github.com/diamondburned/arikawa/v3/state"
	"github.com/diamondburned/arikawa/v3/utils/httputil"
	"github.com/diamondburned/arikawa/v3/utils/httputil/httpdriver"
	"github.com/diamondburned/arikawa/v3/utils/sendpart"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicearikawa "github.com/sluicehq/sluice/integrations/arikawa"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestHighLevelAPI drives arikawa's own methods through Sluice: messages
// (plain and with a file), an edit and a delete, a reaction added and
// removed, webhook executions, and CDN fetches through the same clients.
// Every call succeeds, each is one RoundTrip to the limiter and one
// request at the simulator, nothing draws a 429, the bot's requests carry
// arikawa's Authorization and User-Agent, the webhook's and the CDN's none.
func TestHighLevelAPI(t *testing.T) {
	srv := newServer(t, sluicetest.Options{})
	lim := newLimiter(t, srv, nil)
	cdn := newCDN(t)
	rt := count(lim)
	c := sluicearikawa.NewClient(botToken, rt)
	const ch = discord.ChannelID(1000)

	msg, err := c.SendMessage(ch, "hello")
	require.NoError(t, err)
	assert.Equal(t, "hello", msg.Content)
	assert.Equal(t, ch, msg.ChannelID)
	assert.True(t, msg.ID.IsValid(), "message id %v", msg.ID)

	withFile, err := c.SendMessageComplex(ch, api.SendMessageData{
		Content: "a file",
		Files:   []sendpart.File{{Name: "report.txt", Reader: strings.NewReader("file contents")}},
	})
	require.NoError(t, err)
	assert.True(t, withFile.ID.IsValid())
	assert.NotEqual(t, msg.ID, withFile.ID)

	require.NoError(t, c.React(ch, msg.ID, emoji))
	require.NoError(t, c.Unreact(ch, msg.ID, emoji))

	edited, err := c.EditText(ch, msg.ID, "hello again")
	require.NoError(t, err)
	assert.Equal(t, msg.ID, edited.ID)
	require.NoError(t, c.DeleteMessage(ch, withFile.ID, "test"))

	hook := sluicearikawa.NewWebhookClient(4242, "webhook-token", rt)
	require.NoError(t, hook.Execute(webhook.ExecuteData{Content: "from a webhook"}))
	hm, err := hook.ExecuteAndWait(webhook.ExecuteData{Content: "and back"})
	require.NoError(t, err)
	assert.Equal(t, "and back", hm.Content)

	const apiCalls = 8 // the calls above
	st := srv.Stats()
	srv.AssertNoViolations(t)
	assert.Empty(t, st.RateLimited, "429s by scope")
	assert.Equal(t, apiCalls, st.Requests, "requests at the simulator")
	assert.Equal(t, 4, st.MessagesCreated, "2 channel messages, 2 webhook messages")
	assert.Equal(t, 0, st.DuplicateMessages)
	for _, b := range st.Buckets {
		want := "token:"
		if b.Rules[0] == "execute_webhook" {
			want = "ip:" // sent without the bot's token
		}
		assert.True(t, strings.HasPrefix(b.Identity, want), "bucket %s (%v) counted on %s, want %s...", b.Key, b.Rules, b.Identity, want)
	}

	// The CDN, through arikawa's own httputil.Client (whose hook sets the
	// bot's Authorization) and through a plain http.Client on the limiter.
	resp, err := c.Client.Request("GET", cdn.URL+"/attachments/1/2/report.png")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.GetBody())
	require.NoError(t, err)
	require.NoError(t, resp.GetBody().Close())
	assert.Equal(t, cdnBody, string(b))
	hr, err := (&http.Client{Transport: rt}).Get(cdn.URL + "/avatars/1/a.png")
	require.NoError(t, err)
	b, err = io.ReadAll(hr.Body)
	require.NoError(t, err)
	require.NoError(t, hr.Body.Close())
	assert.Equal(t, cdnBody, string(b))
	assert.Equal(t, []string{"", ""}, cdn.Auths(), "Authorization headers the CDN got")
	assert.Equal(t, apiCalls, srv.Stats().Requests, "the CDN fetches never reached the API")

	seen := rt.Seen()
	require.Len(t, seen, apiCalls+2, "one RoundTrip per call: arikawa resent nothing")
	for _, s := range seen {
		switch {
		case strings.Contains(s.URL, "/webhooks/"):
			assert.Empty(t, s.Authorization, "%s %s", s.Method, s.URL)
		case strings.HasPrefix(s.URL, cdn.URL):
		default:
			assert.Equal(t, botToken, s.Authorization, "%s %s", s.Method, s.URL)
			assert.Equal(t, api.UserAgent, s.UserAgent, "%s %s", s.Method, s.URL)
		}
	}
	t.Log(st.Summary())
}

// TestApplyToState switches an arikawa State made by state.New to Sluice
// in place. Before Apply, arikawa's limiter holds a path's lock for each
// round trip, so a saturated channel has one request in flight at a time
// at the server; after it, Sluice pipelines the bucket. A hook of the
// user's is kept, and arikawa's headers are still set.
func TestApplyToState(t *testing.T) {
	w := workload{Channels: 1, Messages: 10}
	run := func(t *testing.T, apply bool) (*counting, sluicetest.Stats) {
		srv := newServer(t, sluicetest.Options{Faults: sluicetest.Faults{Latency: 50 * time.Millisecond}})
		lim := newLimiter(t, srv, nil)
		rt := count(lim)
		s := state.New(botToken)
		s.Client.Client.OnRequest = append(s.Client.Client.OnRequest,
			httputil.WithHeaders(http.Header{"X-Mine": {"kept"}}))
		if apply {
			sluicearikawa.Apply(s.Client, rt)
		} else {
			// Only the transport: arikawa's limiter and retries stay on.
			s.Client.Client.Client = httpdriver.WrapClient(http.Client{Transport: rt})
		}
		out := runArikawa(s.Client, w)
		require.Empty(t, out.Errors)
		require.Equal(t, w.Calls(), out.OK)
		st := srv.Stats()
		srv.AssertNoViolations(t)
		t.Logf("apply=%v: %s in %s; max in flight %v", apply, st.Summary(), out.Elapsed.Round(time.Millisecond), bucketInFlight(st, "create_message"))
		return rt, st
	}

	t.Run("arikawa limiter on", func(t *testing.T) {
		_, st := run(t, false)
		assert.Equal(t, 1, minInFlight(bucketInFlight(st, "create_message")),
			"arikawa's limiter sends one request per path at a time")
	})
	t.Run("applied", func(t *testing.T) {
		rt, st := run(t, true)
		assert.Greater(t, minInFlight(bucketInFlight(st, "create_message")), 1, "Sluice pipelines the channel")
		assert.Empty(t, st.RateLimited)
		seen := rt.Seen()
		require.Len(t, seen, w.Calls(), "one RoundTrip per call")
		for _, s := range seen {
			assert.Equal(t, botToken, s.Authorization)
			assert.Equal(t, api.UserAgent, s.UserAgent)
			assert.Equal(t, "kept", s.Header.Get("X-Mine"), "the user's hook")
		}
	})
}

// TestApplyWebhook switches a client made by webhook.New to Sluice: its
// executions go through the limiter, once each, still without a token.
func TestApplyWebhook(t *testing.T) {
	srv := newServer(t, sluicetest.Options{})
	lim := newLimiter(t, srv, nil)
	rt := count(lim)
	hook := webhook.New(77, "webhook-token")
	sluicearikawa.ApplyWebhook(hook, rt)
	assert.Empty(t, hook.Client.OnRequest, "arikawa's limiter hook")
	assert.Empty(t, hook.Client.OnResponse, "arikawa's limiter hook")
	for range 3 {
		require.NoError(t, hook.Execute(webhook.ExecuteData{Content: "hi"}))
	}
	require.Equal(t, 3, rt.Calls())
	for _, s := range rt.Seen() {
		assert.Empty(t, s.Authorization)
	}
	st := srv.Stats()
	srv.AssertNoViolations(t)
	assert.Equal(t, 3, st.MessagesCreated)
	require.Len(t, st.Buckets, 1)
	assert.True(t, strings.HasPrefix(st.Buckets[0].Identity, "ip:"), st.Buckets[0].Identity)
}

// TestApplyTwiceAndCopies checks that Apply is idempotent and that a
// WithContext copy made after it sends through Sluice too, with the
// context's deadline honoured by the limiter.
func TestApplyTwiceAndCopies(t *testing.T) {
	srv := newServer(t, sluicetest.Options{})
	lim := newLimiter(t, srv, nil)
	rt := count(lim)
	c := api.NewClient(botToken)
	sluicearikawa.Apply(c, rt)
	sluicearikawa.Apply(c, rt)
	require.Len(t, c.Client.OnRequest, 1)
	require.Empty(t, c.Client.OnResponse)
	assert.Equal(t, uint(1), c.Client.Retries)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.WithContext(ctx).SendMessage(1000, "hi")
	require.NoError(t, err)
	require.Equal(t, 1, rt.Calls())
	assert.Equal(t, botToken, rt.Seen()[0].Authorization)
}
