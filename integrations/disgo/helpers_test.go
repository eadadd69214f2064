package sluicedisgo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/disgoorg/disgo/discord"
	"github.com/disgoorg/disgo/rest"
	"github.com/disgoorg/snowflake/v2"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	sluicedisgo "github.com/sluicehq/sluice/integrations/disgo"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestMain fails the run if the simulator, the limiter or disgo left a
// goroutine behind. disgo's default rate limiter (used only by the
// measurement's "disgo alone" run, never by ConfigOpts) starts a cleanup
// goroutine that nothing can stop; it is the one goroutine ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/disgoorg/disgo/rest.(*rateLimiterImpl).cleanup"))
}

// botToken is a token disgo.New accepts: its first part is the base64 of a
// snowflake (the application id 123456789012345678). The simulator accepts
// any token.
const botToken = "MTIzNDU2Nzg5MDEyMzQ1Njc4.simulated.token"

// Snowflakes the simulator accepts as channel, webhook and message ids.
const (
	firstChannel snowflake.ID = 100000000000000001
	webhookID    snowflake.ID = 200000000000000001
	webhookToken              = "webhook-token-0123456789"
)

// channel returns the i-th test channel's id.
func channel(i int) snowflake.ID { return firstChannel + snowflake.ID(i) }

// counter is an http.RoundTripper that counts the calls it passes on to
// next: how many requests disgo handed its http.Client, so a resend by
// disgo on top of Sluice would show.
type counter struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// newServer starts a simulator closed at the end of the test.
func newServer(t *testing.T, opts sluicetest.Options) *sluicetest.Server {
	t.Helper()
	srv, err := sluicetest.NewServer(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// newLimiter starts a limiter pointed at srv, closed at the end of the test
// (before srv, as cleanups run last in, first out). edit may change the
// options.
func newLimiter(t *testing.T, srv *sluicetest.Server, edit func(*sluice.Options)) *sluice.Limiter {
	t.Helper()
	opts := sluice.Options{
		BaseURL:   srv.APIBase(),
		TLSConfig: srv.ClientTLSConfig(),
		Token:     botToken,
	}
	if edit != nil {
		edit(&opts)
	}
	lim, err := sluice.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, lim.Close(ctx))
	})
	return lim
}

// newRest builds disgo's rest.Rest wired to lim with ConfigOpts, and wraps
// the http.Client's transport (lim) in a counter.
func newRest(t *testing.T, lim *sluice.Limiter) (rest.Rest, *counter) {
	t.Helper()
	client := rest.NewClient(botToken, sluicedisgo.ConfigOpts(lim)...)
	t.Cleanup(func() { client.Close(context.Background()) })
	hc := client.HTTPClient()
	require.Same(t, lim, hc.Transport, "ConfigOpts's http.Client sends through the limiter")
	require.Zero(t, hc.Timeout, "ConfigOpts's http.Client has no Timeout")
	require.Zero(t, client.RateLimiter().MaxRetries(), "disgo never retries a 429 itself")
	c := &counter{next: hc.Transport}
	hc.Transport = c
	return rest.New(client), c
}

// load is the work the timing tests and the measurement run: Messages
// messages over Channels channels, all at once, then Reactions reactions
// added and removed again on as many messages of each channel, all at once.
type load struct {
	Channels, Messages, Reactions int
}

// calls is the number of API calls the load makes.
func (l load) calls() int { return l.Messages + 2*l.Reactions*l.Channels }

// emoji is the reaction the load adds and removes, URL-escaped for a path.
const emoji = "%F0%9F%91%8D" // 👍

// outcome is what a run of the load did.
type outcome struct {
	Elapsed time.Duration
	Errors  []error
}

// runLoad runs l with send(kind, channel, i, messageID) doing one call and
// returning the id of the message it created (kind "message"), or 0.
func runLoad(l load, send func(kind string, ch snowflake.ID, i int, msg snowflake.ID) (snowflake.ID, error)) outcome {
	var (
		mu   sync.Mutex
		out  outcome
		wg   sync.WaitGroup
		msgs = make(map[snowflake.ID][]snowflake.ID)
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		out.Errors = append(out.Errors, err)
	}
	began := time.Now()
	for i := range l.Messages {
		ch := channel(i % l.Channels)
		wg.Go(func() {
			id, err := send("message", ch, i, 0)
			if err != nil {
				fail(fmt.Errorf("message %d: %w", i, err))
				return
			}
			mu.Lock()
			msgs[ch] = append(msgs[ch], id)
			mu.Unlock()
		})
	}
	wg.Wait()
	for c := range l.Channels {
		ch := channel(c)
		for i, id := range msgs[ch] {
			if i == l.Reactions {
				break
			}
			for _, kind := range []string{"react", "unreact"} {
				wg.Go(func() {
					if _, err := send(kind, ch, i, id); err != nil {
						fail(fmt.Errorf("%s on %d: %w", kind, id, err))
					}
				})
			}
		}
	}
	wg.Wait()
	out.Elapsed = time.Since(began)
	return out
}

// runDisgo runs l through disgo's high-level API.
func runDisgo(ctx context.Context, r rest.Rest, l load) outcome {
	opt := sluicedisgo.WithContext(ctx)
	return runLoad(l, func(kind string, ch snowflake.ID, i int, msg snowflake.ID) (snowflake.ID, error) {
		switch kind {
		case "message":
			m, err := r.CreateMessage(ch, discord.MessageCreate{Content: fmt.Sprintf("message %d", i)}, opt)
			if err != nil {
				return 0, err
			}
			return m.ID, nil
		case "react":
			return 0, r.AddReaction(ch, msg, emoji, opt)
		default:
			return 0, r.RemoveOwnReaction(ch, msg, emoji, opt)
		}
	})
}

// runSluice runs l with lim.Do alone: the same requests disgo makes, built
// by hand, on the same absolute URLs.
func runSluice(ctx context.Context, lim *sluice.Limiter, l load) outcome {
	const api = "https://discord.com/api/v10"
	return runLoad(l, func(kind string, ch snowflake.ID, i int, msg snowflake.ID) (snowflake.ID, error) {
		var (
			req *http.Request
			err error
		)
		switch kind {
		case "message":
			body := fmt.Sprintf(`{"content":"message %d"}`, i)
			req, err = http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/channels/%d/messages", api, ch), strings.NewReader(body))
			if err == nil {
				req.Header.Set("Content-Type", "application/json")
			}
		case "react":
			req, err = http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("%s/channels/%d/messages/%d/reactions/%s/@me", api, ch, msg, emoji), nil)
		default:
			req, err = http.NewRequestWithContext(ctx, http.MethodDelete, fmt.Sprintf("%s/channels/%d/messages/%d/reactions/%s/@me", api, ch, msg, emoji), nil)
		}
		if err != nil {
			return 0, err
		}
		resp, err := lim.Do(ctx, req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode/100 != 2 {
			return 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		if kind != "message" {
			return 0, nil
		}
		var m struct {
			ID snowflake.ID `json:"id"`
		}
		return m.ID, json.Unmarshal(b, &m)
	})
}

// bucketsOf returns the stats of the buckets whose rules include rule.
func bucketsOf(st sluicetest.Stats, rule string) []sluicetest.BucketStats {
	var out []sluicetest.BucketStats
	for _, b := range st.Buckets {
		for _, r := range b.Rules {
			if r == rule {
				out = append(out, b)
				break
			}
		}
	}
	return out
}

// maxInFlight returns the largest MaxInFlight of rule's buckets.
func maxInFlight(st sluicetest.Stats, rule string) int {
	m := 0
	for _, b := range bucketsOf(st, rule) {
		m = max(m, b.MaxInFlight)
	}
	return m
}

// requireClean fails t if the server saw a 429 of any scope or a violation.
func requireClean(t *testing.T, st sluicetest.Stats) {
	t.Helper()
	sluicetest.AssertNoViolations(t, st)
	require.Empty(t, st.RateLimited, "429s by scope")
	require.Zero(t, st.Banned)
}
