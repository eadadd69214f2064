package sluicearikawa_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/diamondburned/arikawa/v3/api"
	"github.com/diamondburned/arikawa/v3/discord"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestMain fails the run if the simulator, a limiter or arikawa left a
// goroutine behind. Under SLUICE_MEASURE=1 the "arikawa alone" runs use
// an http.Client with a 10 s Timeout, whose per-request timer goroutines
// (net/http.setRequestCancel) outlive answers arikawa leaves unclosed by up
// to that timeout: those are not ours, and are ignored there only.
func TestMain(m *testing.M) {
	var opts []goleak.Option
	if os.Getenv("SLUICE_MEASURE") == "1" {
		opts = append(opts, goleak.IgnoreTopFunction("net/http.setRequestCancel.func4"))
	}
	goleak.VerifyTestMain(m, opts...)
}

const (
	// token is the bot token; the simulator accepts any.
	token = "test-token"
	// botToken is the token as arikawa expects it.
	botToken = "Bot " + token
	// emoji is the reaction the tests add and remove.
	emoji = discord.APIEmoji("👍")
)

// newServer starts a simulator with opts (DefaultRules scaled by 0.1 when
// opts.Rules is empty) and closes it when the test ends.
func newServer(t testing.TB, opts sluicetest.Options) *sluicetest.Server {
	t.Helper()
	if len(opts.Rules.Rules) == 0 {
		opts.Rules = sluicetest.DefaultRules().Scaled(0.1)
	}
	srv, err := sluicetest.NewServer(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// newLimiter starts a limiter pointed at srv, with the bot token, changed
// by edit if not nil, and closes it when the test ends.
func newLimiter(t testing.TB, srv *sluicetest.Server, edit func(*sluice.Options)) *sluice.Limiter {
	t.Helper()
	opts := sluice.Options{BaseURL: srv.APIBase(), TLSConfig: srv.ClientTLSConfig(), Token: token}
	if edit != nil {
		edit(&opts)
	}
	lim, err := sluice.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := lim.Close(ctx); err != nil {
			t.Errorf("closing the limiter: %v", err)
		}
	})
	return lim
}

// seenRequest is what the counting transport saw of one request.
type seenRequest struct {
	Method, URL, Authorization, UserAgent string
	Header                                http.Header
}

// counting is an http.RoundTripper that counts the requests arikawa hands
// to the limiter it wraps (every attempt arikawa makes is one RoundTrip)
// and remembers their headers.
type counting struct {
	rt http.RoundTripper
	n  atomic.Int64

	mu   sync.Mutex
	seen []seenRequest
}

func count(rt http.RoundTripper) *counting { return &counting{rt: rt} }

// RoundTrip counts req and passes it on.
func (c *counting) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	c.mu.Lock()
	c.seen = append(c.seen, seenRequest{
		Method: req.Method, URL: req.URL.String(),
		Authorization: req.Header.Get("Authorization"), UserAgent: req.Header.Get("User-Agent"),
		Header: req.Header.Clone(),
	})
	c.mu.Unlock()
	return c.rt.RoundTrip(req)
}

// Calls is the number of RoundTrips so far.
func (c *counting) Calls() int { return int(c.n.Load()) }

// Seen returns a copy of the requests seen so far.
func (c *counting) Seen() []seenRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]seenRequest(nil), c.seen...)
}

// cdn is a plain-HTTP server standing for cdn.discordapp.com: it serves a
// few bytes at any path and remembers the Authorization header of each
// request.
type cdn struct {
	*httptest.Server
	mu    sync.Mutex
	auths []string
}

// cdnBody is what the CDN serves.
const cdnBody = "PNG bytes"

func newCDN(t testing.TB) *cdn {
	c := &cdn{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.auths = append(c.auths, r.Header.Get("Authorization"))
		c.mu.Unlock()
		w.Header().Set("Content-Type", "image/png")
		_, _ = io.WriteString(w, cdnBody)
	}))
	t.Cleanup(c.Close)
	return c
}

// Auths returns the Authorization header of every request the CDN got.
func (c *cdn) Auths() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.auths...)
}

// workload is one load, run the same way through arikawa and through the
// limiter alone: Messages messages to each of Channels channels, all at
// once, then, on each channel's first message, Reactions reactions added
// and removed in turn (React, Unreact, React, ...), one after the other
// per channel, channels in parallel.
type workload struct {
	Channels, Messages, Reactions int
}

// Calls is the number of API calls the load makes.
func (w workload) Calls() int { return w.Channels * (w.Messages + w.Reactions) }

// channel is the id of the load's i-th channel.
func channel(i int) discord.ChannelID { return discord.ChannelID(1000 + i) }

// outcome is a load's result.
type outcome struct {
	Elapsed time.Duration
	OK      int
	Errors  []error
}

// collector gathers the outcome of concurrent calls.
type collector struct {
	mu   sync.Mutex
	ok   int
	errs []error
}

func (c *collector) add(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.errs = append(c.errs, err)
		return
	}
	c.ok++
}

// runArikawa runs w through an arikawa API client.
func runArikawa(c *api.Client, w workload) outcome {
	var col collector
	began := time.Now()
	first := make([]discord.MessageID, w.Channels)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for ch := range w.Channels {
		for i := range w.Messages {
			wg.Go(func() {
				m, err := c.SendMessage(channel(ch), fmt.Sprintf("message %d of channel %d", i, ch))
				col.add(err)
				if err == nil && i == 0 {
					mu.Lock()
					first[ch] = m.ID
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for ch := range w.Channels {
		wg.Go(func() {
			for r := range w.Reactions {
				id := first[ch]
				if !id.IsValid() {
					id = 1 // the first message failed: react anyway, to keep the count
				}
				if r%2 == 0 {
					col.add(c.React(channel(ch), id, emoji))
				} else {
					col.add(c.Unreact(channel(ch), id, emoji))
				}
			}
		})
	}
	wg.Wait()
	return outcome{Elapsed: time.Since(began), OK: col.ok, Errors: col.errs}
}

// runSluice runs w with lim.Do alone: the same requests arikawa sends
// (absolute discord.com URLs, JSON bodies), without arikawa.
func runSluice(ctx context.Context, lim *sluice.Limiter, w workload) outcome {
	var col collector
	do := func(method, path string, body []byte) ([]byte, error) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, api.Endpoint+path, rd)
		if err != nil {
			return nil, err
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := lim.Do(ctx, req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode/100 != 2 {
			err = fmt.Errorf("%s %s: %s", method, path, resp.Status)
		}
		return b, err
	}
	began := time.Now()
	first := make([]string, w.Channels)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for ch := range w.Channels {
		for i := range w.Messages {
			wg.Go(func() {
				body := fmt.Appendf(nil, `{"content":"message %d of channel %d"}`, i, ch)
				b, err := do("POST", "channels/"+channel(ch).String()+"/messages", body)
				col.add(err)
				if err == nil && i == 0 {
					mu.Lock()
					first[ch] = messageID(b)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	for ch := range w.Channels {
		wg.Go(func() {
			for r := range w.Reactions {
				id := first[ch]
				if id == "" {
					id = "1"
				}
				path := "channels/" + channel(ch).String() + "/messages/" + id + "/reactions/" + url.PathEscape(string(emoji)) + "/@me"
				method := "PUT"
				if r%2 == 1 {
					method = "DELETE"
				}
				_, err := do(method, path, nil)
				col.add(err)
			}
		})
	}
	wg.Wait()
	return outcome{Elapsed: time.Since(began), OK: col.ok, Errors: col.errs}
}

// messageID reads the "id" of a message object ("" if there is none).
func messageID(b []byte) string {
	var m struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	return m.ID
}

// bucketInFlight returns the most requests answered at once in each
// bucket whose rules include rule, keyed by major parameters.
func bucketInFlight(st sluicetest.Stats, rule string) map[string]int {
	out := map[string]int{}
	for _, b := range st.Buckets {
		for _, r := range b.Rules {
			if r == rule {
				out[b.Major] = b.MaxInFlight
			}
		}
	}
	return out
}

// minInFlight is the smallest of bucketInFlight's values (0 if none).
func minInFlight(m map[string]int) int {
	vals := make([]int, 0, len(m))
	for _, v := range m {
		vals = append(vals, v)
	}
	if len(vals) == 0 {
		return 0
	}
	sort.Ints(vals)
	return vals[0]
}
