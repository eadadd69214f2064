package sluice_test

// The two global windows (issue: "Two global limits: token-less webhook
// calls on their own window"): requests with the bot's token count on the
// token's global limit, webhook executions sent without it on the per-IP
// one, and neither window waits for, or pauses with, the other. Run them in
// a loop before trusting a change:
//
//	go test -race -count=20 -run 'TestWindows' .

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

const webhookRoute = "/webhooks/{webhook_id}/{webhook_token}"

// windowRules has roomy buckets for messages and webhook executions, so
// that only the global limits (50/s each, Discord's) bind.
func windowRules() sluicetest.RuleSet {
	return sluicetest.RuleSet{Rules: []sluicetest.Rule{
		{Name: "create_message", Method: "POST", Route: messagesRoute, Bucket: "msg", Limit: 1000, Window: sluicetest.Duration(time.Second)},
		{Name: "execute_webhook", Method: "POST", Route: webhookRoute, Bucket: "hook", Limit: 1000, Window: sluicetest.Duration(time.Second), Auth: sluicetest.AuthOptional},
	}}
}

func messageReq(channel, i int) *http.Request {
	return req("POST", fmt.Sprintf("/channels/%d/messages", channel), fmt.Sprintf(`{"content":"m%d"}`, i))
}

func webhookReq(hook, i int) *http.Request {
	return req("POST", fmt.Sprintf("/webhooks/%d/hook-token-%d", 7000+hook, hook), fmt.Sprintf(`{"content":"w%d"}`, i))
}

// globalOf returns the server's global accounting of the identities whose
// name starts with prefix ("token:" or "ip:"), summed.
func globalOf(st sluicetest.Stats, prefix string) (g sluicetest.GlobalStats) {
	for _, x := range st.Globals {
		if strings.HasPrefix(x.Identity, prefix) {
			g.Identity = x.Identity
			g.Admitted += x.Admitted
			g.RateLimited += x.RateLimited
			g.Injected += x.Injected
			g.MaxInWindow = max(g.MaxInWindow, x.MaxInWindow)
		}
	}
	return g
}

// arrivals returns the server's arrival times of the admitted requests of
// the buckets whose identity starts with prefix, sorted.
func arrivals(st sluicetest.Stats, prefix string) []time.Duration {
	var at []time.Duration
	for _, b := range st.Buckets {
		if strings.HasPrefix(b.Identity, prefix) {
			for _, e := range b.Timeline {
				if e.Status < 300 {
					at = append(at, e.At)
				}
			}
		}
	}
	slices.Sort(at)
	return at
}

// maxIn returns the most arrivals within any interval of length d.
func maxIn(at []time.Duration, d time.Duration) int {
	most, j := 0, 0
	for i := range at {
		for at[i]-at[j] >= d {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// windowHits returns a trace hook that reports each pause of a global
// window ("window bot", "window ip") on the channel, when it begins.
func windowHits() (<-chan string, func(sluice.TraceEvent)) {
	hits := make(chan string, 16)
	return hits, func(e sluice.TraceEvent) {
		if e.Kind == "transition" && e.Event == "global_hit" && strings.HasPrefix(e.Bucket, "window ") {
			select {
			case hits <- e.Bucket:
			default:
			}
		}
	}
}

func TestWindowsBotAndWebhooksRunAtOnce(t *testing.T) {
	h := newHarness(t, sluicetest.Options{Rules: windowRules()}, sluice.Options{})
	// 150 messages on the token and 150 webhook executions without it,
	// submitted together: each side saturates its own global limit, so
	// the two together run at 100/s (one window alone: 50/s).
	var reqs []*http.Request
	for i := range 150 {
		reqs = append(reqs, messageReq(100+i%3, i), webhookReq(i%3, i))
	}
	doAllWithin(t, h.lim, reqs, 30*time.Second)
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	assert.Zero(t, st.ClientGlobal429s(), "global 429s")

	bot, ip := globalOf(st, "token:"), globalOf(st, "ip:")
	assert.Equal(t, 150, bot.Admitted, "messages on the token's window")
	assert.Equal(t, 150, ip.Admitted, "webhook executions on the IP's window")
	// Both windows full at the same time: the server saw ~100 requests
	// in one second (50 of each), not 50.
	assert.GreaterOrEqual(t, bot.MaxInWindow, 45)
	assert.GreaterOrEqual(t, ip.MaxInWindow, 45)
	all := append(arrivals(st, "token:"), arrivals(st, "ip:")...)
	slices.Sort(all)
	assert.GreaterOrEqual(t, maxIn(all, time.Second), 90, "requests in one second across both windows")
	t.Logf("300 requests in %v at the server (first to last arrival); at most %d in one second (token %d, IP %d); %d global 429s",
		all[len(all)-1]-all[0], maxIn(all, time.Second), bot.MaxInWindow, ip.MaxInWindow, st.RateLimited["global"])
	// The webhook executions really went without the token.
	for _, b := range st.Buckets {
		if b.Hash == "hook" {
			assert.True(t, strings.HasPrefix(b.Identity, "ip:"), "webhook bucket %s", b.Key)
		}
	}
}

// A global 429 on one window pauses only that window's requests.
func TestWindowsGlobal429PausesOneSideOnly(t *testing.T) {
	for _, side := range []string{"ip", "bot"} {
		t.Run(side+" window exhausted", func(t *testing.T) {
			const outage = 1500 * time.Millisecond
			hits, trace := windowHits()
			h := newHarness(t, sluicetest.Options{Rules: windowRules()}, sluice.Options{Trace: trace})
			// Both sides warm: connection up, buckets known.
			sendAll(t, h.lim, []*http.Request{messageReq(1, 0), webhookReq(1, 0)})
			inject, paused, other, slow, fast := h.srv.InjectIPGlobalLimit, 1, 0, webhookReq, messageReq
			if side == "bot" {
				inject, paused, other, slow, fast = h.srv.InjectGlobalLimit, 0, 1, messageReq, webhookReq
			}
			start := h.srv.Elapsed()
			inject(outage)
			// The paused side meets the outage (its first 429 pauses its
			// window), then waits for its end; the other side's 40 go at
			// once.
			var slowReqs, fastReqs []*http.Request
			for i := range 40 {
				slowReqs = append(slowReqs, slow(3, 100+i))
				fastReqs = append(fastReqs, fast(3, 100+i))
			}
			slowFutures := h.lim.SendBatch(context.Background(), slowReqs)
			require.Equal(t, "window "+side, <-hits)

			snap, err := h.lim.Snapshot(context.Background())
			require.NoError(t, err)
			require.Len(t, snap.Windows, 2)
			assert.Equal(t, "global_limit", snap.State)
			assert.Equal(t, "global_limit", snap.Windows[paused].State, "the window that met the 429")
			assert.Positive(t, snap.Windows[paused].PausedFor)
			assert.Equal(t, "open", snap.Windows[other].State, "the other window")
			assert.Zero(t, snap.Windows[other].PausedFor)

			sendAll(t, h.lim, fastReqs)
			for i, f := range slowFutures {
				resp, err := f.Await(context.Background())
				require.NoError(t, err, "request %d", i)
				resp.Body.Close()
			}

			st := h.srv.Stats()
			h.srv.AssertNoViolations(t)
			// Only the requests on the wire when the first 429 came back
			// may meet the outage (they go out at once, in a burst).
			assert.LessOrEqual(t, st.InjectedGlobal, 40, "global 429s from the outage")
			prefix, otherPrefix := "ip:", "token:"
			if side == "bot" {
				prefix, otherPrefix = otherPrefix, prefix
			}
			// Every request of the other side arrived during the outage;
			// of the paused side's, only those that met it.
			end := start + outage
			for _, at := range arrivals(st, otherPrefix)[1:] {
				assert.Less(t, at, end, "the other window's requests must not wait for the outage")
			}
			for _, at := range arrivals(st, prefix)[1:] {
				assert.GreaterOrEqual(t, at, end, "the paused window's request admitted during the outage")
			}
		})
	}
}

// A webhook call that carries the caller's own Authorization counts on the
// token's window, as does every webhook call with WebhookAuth; with no
// token configured, everything counts on the IP's window.
func TestWindowsWhoCountsWhere(t *testing.T) {
	count := func(t *testing.T, h *harness, reqs ...*http.Request) (bot, ip int) {
		t.Helper()
		sendAll(t, h.lim, reqs)
		st := h.srv.Stats()
		h.srv.AssertNoViolations(t)
		return globalOf(st, "token:").Admitted, globalOf(st, "ip:").Admitted
	}
	t.Run("caller's own Authorization", func(t *testing.T) {
		h := newHarness(t, sluicetest.Options{Rules: windowRules()}, sluice.Options{})
		r := webhookReq(1, 1)
		r.Header.Set("Authorization", "Bot "+testToken)
		bot, ip := count(t, h, r, webhookReq(1, 2))
		assert.Equal(t, 1, bot)
		assert.Equal(t, 1, ip)
	})
	t.Run("WebhookAuth", func(t *testing.T) {
		h := newHarness(t, sluicetest.Options{Rules: windowRules()}, sluice.Options{WebhookAuth: true})
		bot, ip := count(t, h, webhookReq(1, 1), webhookReq(2, 2), messageReq(1, 3))
		assert.Equal(t, 3, bot)
		assert.Zero(t, ip)
	})
	t.Run("no token", func(t *testing.T) {
		srv, err := sluicetest.NewServer(sluicetest.Options{Rules: windowRules()})
		require.NoError(t, err)
		t.Cleanup(func() { srv.Close() })
		lim, err := sluice.New(sluice.Options{BaseURL: srv.APIBase(), TLSConfig: srv.ClientTLSConfig(), IPGlobalLimit: 5})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, lim.Close(context.Background())) })
		var reqs []*http.Request
		for i := range 12 {
			reqs = append(reqs, webhookReq(i%2, i))
		}
		sendAll(t, lim, reqs)
		st := srv.Stats()
		srv.AssertNoViolations(t)
		ip := globalOf(st, "ip:")
		assert.Equal(t, 12, ip.Admitted)
		assert.LessOrEqual(t, ip.MaxInWindow, 5, "IPGlobalLimit holds the IP's window")
		snap, err := lim.Snapshot(context.Background())
		require.NoError(t, err)
		assert.Equal(t, 5, snap.Windows[1].Limit)
	})
}

// Interaction callbacks count on neither window: they go at once while a
// global 429 pauses both.
func TestWindowsInteractionCallbacksExemptFromBoth(t *testing.T) {
	hits, trace := windowHits()
	h := newHarness(t, sluicetest.Options{}, sluice.Options{Trace: trace})
	h.srv.InjectGlobalLimit(time.Minute)
	h.srv.InjectIPGlobalLimit(time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// One request of each window meets its outage and pauses it; they
	// then wait (until cancelled below).
	msg := h.lim.Send(ctx, messageReq(1, 1))
	hook := h.lim.Send(ctx, req("POST", "/webhooks/7001/hook-token", `{"content":"w"}`))
	got := []string{<-hits, <-hits}
	assert.ElementsMatch(t, []string{"window bot", "window ip"}, got)

	for i := range 3 {
		resp, err := h.lim.Do(context.Background(), req("POST", fmt.Sprintf("/interactions/%d/interaction-token-%d/callback", 8000+i, i), `{"type":4,"data":{"content":"ok"}}`))
		require.NoError(t, err)
		assert.Equal(t, http.StatusNoContent, resp.StatusCode)
		resp.Body.Close()
	}
	cancel()
	_, err := msg.Await(context.Background())
	require.ErrorIs(t, err, context.Canceled)
	_, err = hook.Await(context.Background())
	require.ErrorIs(t, err, context.Canceled)
	st := h.srv.Stats()
	assert.Equal(t, 2, st.InjectedGlobal, "one global 429 per window, then paused")
}
