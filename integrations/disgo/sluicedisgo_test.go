package sluicedisgo_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/disgoorg/disgo"
	"github.com/disgoorg/disgo/discord"
	"github.com/disgoorg/disgo/webhook"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicedisgo "github.com/sluicehq/sluice/integrations/disgo"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestHighLevelAPIThroughSluice drives disgo's own API through Sluice:
// messages, a reaction added and removed, a file upload, webhook executions
// (through rest.Rest and through a webhook.Client), a call from a bot made
// with disgo.New, and a CDN download through the same http.Client. Every
// call succeeds, the simulator sees no 429 and exactly one request per call
// (disgo sends each once), webhook executions reach it without the bot's
// token, and the CDN gets no Authorization header.
func TestHighLevelAPIThroughSluice(t *testing.T) {
	srv := newServer(t, sluicetest.Options{Rules: sluicetest.DefaultRules().Scaled(0.1)})
	lim := newLimiter(t, srv, nil)
	r, calls := newRest(t, lim)
	ctx := t.Context()
	opt := sluicedisgo.WithContext(ctx)

	// The CDN: plain HTTP on another host, outside Discord's limits.
	var (
		cdnMu   sync.Mutex
		cdnAuth []string
		cdnPath string
	)
	cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		cdnMu.Lock()
		cdnAuth = append(cdnAuth, req.Header.Values("Authorization")...)
		cdnPath = req.URL.Path
		cdnMu.Unlock()
		_, _ = io.WriteString(w, "attachment bytes")
	}))
	defer cdn.Close()

	apiCalls := 0
	ch := channel(0)
	var ids []string
	for i := range 3 {
		m, err := r.CreateMessage(ch, discord.MessageCreate{Content: "hello " + string(rune('a'+i))}, opt)
		require.NoError(t, err)
		require.Equal(t, ch, m.ChannelID)
		ids = append(ids, m.ID.String())
		apiCalls++
	}
	require.Len(t, ids, 3)

	m, err := r.CreateMessage(ch, discord.MessageCreate{Content: "react to me"}, opt)
	require.NoError(t, err)
	apiCalls++
	require.NoError(t, r.AddReaction(ch, m.ID, emoji, opt))
	require.NoError(t, r.RemoveOwnReaction(ch, m.ID, emoji, opt))
	apiCalls += 2

	// A file upload: multipart, so Sluice adds no nonce and never resends it.
	up, err := r.CreateMessage(channel(1), discord.MessageCreate{
		Content: "a file",
		Files:   []*discord.File{discord.NewFile("hello.txt", "", strings.NewReader("hello, file"))},
	}, opt)
	require.NoError(t, err)
	require.Equal(t, channel(1), up.ChannelID)
	apiCalls++

	// Webhook executions, through rest.Rest and through disgo's webhook
	// client: disgo sends no Authorization header on them, and Sluice must
	// not add the bot's.
	wm, err := r.CreateWebhookMessage(webhookID, webhookToken, discord.WebhookMessageCreate{Content: "from rest"}, true, 0, opt)
	require.NoError(t, err)
	require.NotZero(t, wm.ID)
	apiCalls++
	wh := webhook.New(webhookID+1, webhookToken, sluicedisgo.WebhookConfigOpt(lim))
	defer wh.Close(context.Background())
	wm, err = wh.CreateContent("from the webhook client", opt)
	require.NoError(t, err)
	require.NotZero(t, wm.ID)
	apiCalls++

	// A bot made with disgo.New, REST only (no gateway is opened).
	bot, err := disgo.New(botToken, sluicedisgo.BotConfigOpt(lim))
	require.NoError(t, err)
	defer bot.Close(context.Background())
	require.Same(t, lim, bot.Rest().HTTPClient().Transport)
	_, err = bot.Rest().CreateMessage(channel(2), discord.MessageCreate{Content: "from disgo.New"}, opt)
	require.NoError(t, err)
	apiCalls++

	// A CDN download through the very http.Client disgo uses.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cdn.URL+"/attachments/1/2/hello.txt", nil)
	require.NoError(t, err)
	resp, err := r.HTTPClient().Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "attachment bytes", string(body))
	cdnMu.Lock()
	assert.Equal(t, "/attachments/1/2/hello.txt", cdnPath)
	assert.Empty(t, cdnAuth, "the CDN got an Authorization header")
	cdnMu.Unlock()

	st := srv.Stats()
	requireClean(t, st)
	assert.Equal(t, apiCalls, st.Requests, "the simulator answered one request per call")
	// r's counter saw every call but the webhook client's and the bot's,
	// and the CDN download.
	assert.EqualValues(t, apiCalls-2+1, calls.n.Load(), "RoundTrips through disgo's http.Client")
	assert.Equal(t, 8, st.MessagesCreated)
	assert.Zero(t, st.DuplicateMessages)

	webhooks := bucketsOf(st, "execute_webhook")
	require.Len(t, webhooks, 2)
	for _, b := range webhooks {
		assert.True(t, strings.HasPrefix(b.Identity, "ip:"), "webhook execution counted on %s: it carried a token", b.Identity)
	}
	for _, b := range bucketsOf(st, "create_message") {
		assert.True(t, strings.HasPrefix(b.Identity, "token:"), "message creation counted on %s", b.Identity)
	}
	t.Logf("%d calls; %s", apiCalls, st.Summary())
}

// TestSaturatedChannelIsPipelined sends one channel more messages than a
// window admits, at 100 ms of latency: with disgo's limiter off, Sluice has
// several of the bucket's requests on the wire at once, and the run takes
// the windows' time, not a round trip per message.
func TestSaturatedChannelIsPipelined(t *testing.T) {
	srv := newServer(t, sluicetest.Options{
		Rules:  sluicetest.DefaultRules().Scaled(0.1), // 5 messages per 500 ms
		Faults: sluicetest.Faults{Latency: 100 * time.Millisecond},
	})
	lim := newLimiter(t, srv, nil)
	r, calls := newRest(t, lim)

	l := load{Channels: 1, Messages: 15}
	out := runDisgo(t.Context(), r, l)
	require.Empty(t, out.Errors)

	st := srv.Stats()
	requireClean(t, st)
	require.Equal(t, l.Messages, st.Requests)
	require.EqualValues(t, l.Messages, calls.n.Load())
	inFlight := maxInFlight(st, "create_message")
	assert.Greater(t, inFlight, 1, "the bucket was not pipelined")
	// Three windows of 500 ms: the third opens at about 1 s, and its answers
	// come back a latency later. One request at a time would take at least
	// 15 round trips (1.5 s).
	assert.Less(t, out.Elapsed, 1500*time.Millisecond)
	t.Logf("%d messages in %s, max in flight %d; %s", l.Messages, out.Elapsed.Round(time.Millisecond), inFlight, st.Summary())
}

// TestTimeMatchesSluiceAlone runs the same load (30 messages over 3
// channels, then 2 reactions added and removed per channel) at 100 ms of
// latency through disgo + Sluice and through Sluice alone (lim.Do), each
// against a fresh simulator with the same rules: disgo adds at most 5%.
// Each side runs twice and keeps its best time, so one slow scheduling of
// the race detector does not decide the ratio.
func TestTimeMatchesSluiceAlone(t *testing.T) {
	l := load{Channels: 3, Messages: 30, Reactions: 2}
	opts := sluicetest.Options{
		Rules:  sluicetest.DefaultRules().Scaled(0.1), // 5 messages per 500 ms per channel
		Faults: sluicetest.Faults{Latency: 100 * time.Millisecond},
	}
	run := func(viaDisgo bool) time.Duration {
		var d time.Duration
		t.Run(map[bool]string{true: "disgo", false: "sluice"}[viaDisgo], func(t *testing.T) {
			srv := newServer(t, opts)
			lim := newLimiter(t, srv, nil)
			var out outcome
			if viaDisgo {
				r, calls := newRest(t, lim)
				out = runDisgo(t.Context(), r, l)
				require.EqualValues(t, l.calls(), calls.n.Load())
			} else {
				out = runSluice(t.Context(), lim, l)
			}
			require.Empty(t, out.Errors)
			st := srv.Stats()
			requireClean(t, st)
			require.Equal(t, l.calls(), st.Requests)
			assert.Greater(t, maxInFlight(st, "create_message"), 1)
			d = out.Elapsed
			t.Logf("%s; max in flight %d", d.Round(time.Millisecond), maxInFlight(st, "create_message"))
		})
		return d
	}
	best := func(viaDisgo bool) time.Duration { return min(run(viaDisgo), run(viaDisgo)) }
	alone := best(false)
	withDisgo := best(true)
	ratio := float64(withDisgo) / float64(alone)
	t.Logf("disgo + Sluice %s, Sluice alone %s: %.3fx", withDisgo.Round(time.Millisecond), alone.Round(time.Millisecond), ratio)
	assert.LessOrEqual(t, ratio, 1.05)
}
