package proxy_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness is a proxy in front of the simulator, served over loopback.
type harness struct {
	t     *testing.T
	srv   *sluicetest.Server
	p     *proxy.Proxy
	front *httptest.Server
	c     *http.Client
	// closedEarly: the test closed the proxy itself and checked the error.
	closedEarly bool
}

func newHarness(t *testing.T, sopts sluicetest.Options, cfg proxy.Config) *harness {
	t.Helper()
	srv, err := sluicetest.NewServer(sopts)
	require.NoError(t, err)
	cfg.Upstream = srv.APIBase()
	cfg.Limiter.TLSConfig = srv.ClientTLSConfig()
	p, err := proxy.New(cfg)
	if err != nil {
		srv.Close()
		require.NoError(t, err)
	}
	front := httptest.NewServer(p)
	h := &harness{t: t, srv: srv, p: p, front: front, c: front.Client()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		front.Close()
		if err := p.Close(ctx); !h.closedEarly {
			assert.NoError(t, err)
		}
		h.c.CloseIdleConnections()
		srv.Close()
	})
	return h
}

// do sends one request to the proxy and returns its status, headers and
// body.
func (h *harness) do(method, path, token, body string, hdr ...string) (int, http.Header, string) {
	h.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.front.URL+path, r)
	require.NoError(h.t, err)
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := h.c.Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// direct sends the same request to a simulator without the proxy.
func direct(t *testing.T, srv *sluicetest.Server, method, path, token, body string) (int, http.Header, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, r)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	c := srv.Client()
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// The same requests, straight to one simulator and through the proxy to a
// twin: the same statuses, bodies and rate-limit headers.
func TestAnswersLikeDirect(t *testing.T) {
	opts := sluicetest.Options{Tokens: []string{"good"}, Forbidden: []string{"666"}}
	h := newHarness(t, opts, proxy.Config{})
	twin, err := sluicetest.NewServer(opts)
	require.NoError(t, err)
	defer twin.Close()
	steps := []struct{ method, path, token, body string }{
		{"POST", "/api/v10/channels/1/messages", "Bot good", `{"content":"hi","nonce":"1","enforce_nonce":true}`},
		{"GET", "/api/v10/channels/1/messages/5?limit=2", "Bot good", ""},
		{"PUT", "/api/v10/channels/1/messages/5/reactions/%F0%9F%91%8D/@me", "Bot good", ""},
		{"GET", "/api/v10/channels/666", "Bot good", ""},
		{"GET", "/api/v10/no/such/route", "Bot good", ""},
		{"GET", "/api/v10/users/@me", "Bot bad", ""},
		{"POST", "/api/v10/webhooks/3/tok", "", `{"content":"hook"}`},
		{"DELETE", "/api/v9/channels/1/messages/5", "Bot good", ""},
	}
	for _, st := range steps {
		ds, dh, db := direct(t, twin, st.method, st.path, st.token, st.body)
		ps, ph, pb := h.do(st.method, st.path, st.token, st.body)
		name := st.method + " " + st.path
		assert.Equal(t, ds, ps, name)
		assert.Equal(t, normalize(db), normalize(pb), name)
		for _, k := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Bucket", "X-RateLimit-Scope", "Content-Type"} {
			assert.Equal(t, dh.Get(k), ph.Get(k), name+": "+k)
		}
		assert.Empty(t, ph.Get(proxy.ProxyHeader), name+": relayed, not made by the proxy")
	}
	h.srv.AssertNoViolations(t)
}

// normalize drops the fields of a JSON body that differ between two
// simulators (ids and times made from the clock).
func normalize(body string) string {
	var m map[string]any
	if json.Unmarshal([]byte(body), &m) != nil {
		return body
	}
	for _, k := range []string{"id", "timestamp"} {
		delete(m, k)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func TestBurstNoViolations(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, proxy.Config{})
	var wg sync.WaitGroup
	codes := make([]int, 60)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _, _ = h.do("POST", "/api/v10/channels/"+strconv.Itoa(i%20)+"/messages", "Bot a", `{"content":"x"}`)
		}()
	}
	wg.Wait()
	for _, c := range codes {
		assert.Equal(t, 200, c)
	}
	h.srv.AssertNoViolations(t)
	assert.Equal(t, 60, h.srv.Stats().Requests)
}

// Two tokens at once: each has its own global limit and its own buckets,
// as Discord counts them, so together they go twice as fast as one.
func TestTwoTokensKeepSeparateLimits(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, proxy.Config{})
	var wg sync.WaitGroup
	for _, tok := range []string{"Bot one", "two"} { // a bare token is a bot token
		for i := range 80 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, _, body := h.do("GET", "/api/v10/guilds/"+strconv.Itoa(i), tok, "")
				assert.Equal(t, 200, status, body)
			}()
		}
	}
	wg.Wait()
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	assert.Zero(t, st.ClientGlobal429s())
	tokens := 0
	for _, g := range st.Globals {
		if strings.HasPrefix(g.Identity, "token:") {
			tokens++
			assert.Equal(t, 80, g.Admitted, g.Identity)
			assert.Equal(t, 50, g.MaxInWindow, "%s: each token used its whole window", g.Identity)
		}
	}
	assert.Equal(t, 2, tokens, "two identities upstream")
	assert.Equal(t, 160, st.Requests)
}

// Webhook executions go without the token, on the per-IP global limit,
// beside the bot's own requests: 100 a second together, no global 429.
func TestWebhooksUsePerIPLimit(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, proxy.Config{DefaultToken: "bot-token"})
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			// Sent with the bot's Authorization as discordgo does: the
			// proxy drops it, the webhook's token is in the path.
			status, _, body := h.do("POST", "/api/v10/webhooks/"+strconv.Itoa(i)+"/tok"+strconv.Itoa(i), "Bot bot-token", `{"content":"w"}`)
			assert.Equal(t, 200, status, body)
		}()
		go func() {
			defer wg.Done()
			status, _, body := h.do("GET", "/api/v10/guilds/"+strconv.Itoa(i), "", "") // the default token
			assert.Equal(t, 200, status, body)
		}()
	}
	wg.Wait()
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	assert.Zero(t, st.ClientGlobal429s())
	byKind := map[string]int{}
	for _, g := range st.Globals {
		byKind[strings.SplitN(g.Identity, ":", 2)[0]] += g.Admitted
	}
	assert.Equal(t, map[string]int{"ip": 60, "token": 60}, byKind)
}

// An interaction token the API rejects: that request gets its 401, and
// nothing else is held — not the bot's requests, not other interactions.
func TestInteractionTokens401OnlyThatRequest(t *testing.T) {
	h := newHarness(t, sluicetest.Options{Tokens: []string{"good"}, RevokedTokens: []string{"expired"}}, proxy.Config{})
	status, hdr, body := h.do("PATCH", "/api/v10/webhooks/9/expired/messages/@original", "Bot good", `{"content":"late"}`)
	assert.Equal(t, 401, status)
	assert.Contains(t, body, "Invalid Webhook Token")
	assert.Empty(t, hdr.Get(proxy.ProxyHeader), "Discord's own answer")
	for _, st := range []struct{ method, path, body string }{
		{"PATCH", "/api/v10/webhooks/9/fresh/messages/@original", `{"content":"ok"}`},
		{"POST", "/api/v10/channels/1/messages", `{"content":"ok"}`},
		{"GET", "/api/v10/users/@me", ""},
	} {
		status, _, body := h.do(st.method, st.path, "Bot good", st.body)
		assert.Equal(t, 200, status, st.path+": "+body)
	}
	// A bad bot token is refused after its first 401 without asking
	// again, and the good one is not.
	status, _, _ = h.do("GET", "/api/v10/users/@me", "Bot bad", "")
	assert.Equal(t, 401, status)
	status, hdr, _ = h.do("GET", "/api/v10/channels/1", "Bot bad", "")
	assert.Equal(t, 401, status)
	assert.Equal(t, proxy.ReasonUnauthorized, hdr.Get(proxy.ProxyHeader))
	status, _, _ = h.do("GET", "/api/v10/channels/1", "Bot good", "")
	assert.Equal(t, 200, status)
	h.srv.AssertNoViolations(t)
}

func TestCachesHopelessAnswers(t *testing.T) {
	now := time.Unix(1e9, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	h := newHarness(t, sluicetest.Options{Tokens: []string{"good"}}, proxy.Config{Clock: clock})
	s1, hd1, b1 := h.do("GET", "/api/v10/nothing/here", "Bot good", "")
	s2, hd2, b2 := h.do("GET", "/api/v10/nothing/here", "Bot good", "")
	assert.Equal(t, 404, s1)
	assert.Equal(t, 404, s2)
	assert.Equal(t, b1, b2)
	assert.Empty(t, hd1.Get(proxy.CacheHeader))
	assert.Equal(t, "hit", hd2.Get(proxy.CacheHeader))
	assert.Equal(t, 1, h.srv.Stats().Requests, "the second 404 came from the cache")
	// Per token: another token asks the API itself.
	s3, hd3, _ := h.do("GET", "/api/v10/nothing/here", "Bot other", "")
	assert.Equal(t, 404, s3)
	assert.Empty(t, hd3.Get(proxy.CacheHeader))
	// Expired after 30 s.
	advance(31 * time.Second)
	_, hd4, _ := h.do("GET", "/api/v10/nothing/here", "Bot good", "")
	assert.Empty(t, hd4.Get(proxy.CacheHeader))
	// 401 for 5 s, on the route that got it.
	st, hd5, _ := h.do("GET", "/api/v10/users/@me", "Bot bad", "")
	assert.Equal(t, 401, st)
	assert.Empty(t, hd5.Get(proxy.CacheHeader))
	st, hd5, _ = h.do("GET", "/api/v10/users/@me", "Bot bad", "")
	assert.Equal(t, 401, st)
	assert.Equal(t, "hit", hd5.Get(proxy.CacheHeader))
	advance(6 * time.Second)
	st, hd5, _ = h.do("GET", "/api/v10/users/@me", "Bot bad", "")
	assert.Equal(t, 401, st)
	assert.Empty(t, hd5.Get(proxy.CacheHeader), "expired: the token's latch answers now")
	st, _, _ = h.do("GET", "/api/v10/webhooks/1/tok", "", "")
	assert.Equal(t, 200, st)
	_, hd5, _ = h.do("GET", "/api/v10/webhooks/1/tok", "", "")
	assert.Empty(t, hd5.Get(proxy.CacheHeader), "a 2xx is never cached")
	assert.Equal(t, 6, h.srv.Stats().Requests)
}

func TestCacheTTLRefuses2xx(t *testing.T) {
	_, err := proxy.New(proxy.Config{CacheTTL: map[int]time.Duration{200: time.Second}})
	var ce *proxy.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "CacheTTL", ce.Field)
}

// A caller that accepts at most a second's wait gets the proxy's own 429
// at once, with the predicted wait, instead of waiting for the bucket.
func TestMaxWaitHeaderFailsFast(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, proxy.Config{})
	for range 5 { // the simulator's message bucket: 5 per 5 s
		status, _, _ := h.do("POST", "/api/v10/channels/1/messages", "Bot a", `{"content":"x"}`)
		require.Equal(t, 200, status)
	}
	status, hdr, body := h.do("POST", "/api/v10/channels/1/messages", "Bot a", `{"content":"x"}`, proxy.DefaultMaxWaitHeader, "1")
	assert.Equal(t, 429, status)
	assert.Equal(t, proxy.ReasonMaxWait, hdr.Get(proxy.ProxyHeader))
	var m struct {
		RetryAfter float64 `json:"retry_after"`
		Global     bool    `json:"global"`
		ETA        string  `json:"eta"`
		Limit      string  `json:"limit"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &m), body)
	assert.Greater(t, m.RetryAfter, 1.0, "the predicted wait")
	assert.LessOrEqual(t, m.RetryAfter, 5.5)
	assert.NotEmpty(t, hdr.Get("Retry-After"))
	eta, err := time.Parse(time.RFC3339Nano, hdr.Get(proxy.ETAHeader))
	require.NoError(t, err, "the ETA header: %q", hdr.Get(proxy.ETAHeader))
	assert.WithinDuration(t, time.Now().Add(time.Duration(m.RetryAfter*float64(time.Second))), eta, 500*time.Millisecond,
		"the ETA is the predicted wait from now")
	assert.Equal(t, hdr.Get(proxy.ETAHeader), m.ETA)
	assert.Equal(t, "bucket", m.Limit)
	status, _, _ = h.do("POST", "/api/v10/channels/1/messages", "Bot a", `{"content":"x"}`, proxy.DefaultMaxWaitHeader, "banana")
	assert.Equal(t, 400, status)
	assert.Equal(t, 5, h.srv.Stats().Requests, "neither was sent")
	h.srv.AssertNoViolations(t)
}

// Beyond MaxQueue a token's requests get the overflow answer at once;
// every request gets exactly one answer.
func TestOverflowAnswer(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, proxy.Config{MaxQueue: 4, OverflowStatus: 597})
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[int]int{}
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, hdr, body := h.do("POST", "/api/v10/channels/1/messages", "Bot a", `{"content":"x"}`, proxy.DefaultMaxWaitHeader, "0.5")
			if status == 597 {
				assert.Equal(t, proxy.ReasonQueueFull, hdr.Get(proxy.ProxyHeader))
				assert.NotEmpty(t, hdr.Get("Retry-After"))
				assert.Contains(t, body, `"message"`)
			}
			mu.Lock()
			got[status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	assert.Equal(t, 12, got[200]+got[429]+got[597], got)
	assert.Positive(t, got[597], "%v: some overflowed", got)
	assert.LessOrEqual(t, got[200], 5)
	h.srv.AssertNoViolations(t)
}

func TestOpsEndpointsAndMetrics(t *testing.T) {
	var logs strings.Builder
	var lmu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		lmu.Lock()
		defer lmu.Unlock()
		return logs.Write(b)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHarness(t, sluicetest.Options{Tokens: []string{"s3cret-tok"}}, proxy.Config{Logger: logger})
	status, _, _ := h.do("GET", "/healthz", "", "")
	assert.Equal(t, 200, status)
	status, _, _ = h.do("GET", "/readyz", "", "")
	assert.Equal(t, 200, status)
	h.do("GET", "/api/v10/channels/123456789/messages/42", "Bot s3cret-tok", "")
	h.do("GET", "/api/v10/channels/1", "Bot wr0ng-tok", "")
	h.do("POST", "/api/v10/webhooks/1/hook-s3cret", "", `{"content":"x"}`)
	_, _, metrics := h.do("GET", "/metrics", "", "")
	assert.Contains(t, metrics, `sluice_proxy_requests_total{method="GET",route="/channels/{channel_id}/messages/{message_id}",source="upstream",status="200"} 1`)
	assert.Contains(t, metrics, `route="/webhooks/{webhook_id}/{webhook_token}"`)
	assert.Contains(t, metrics, "sluice_proxy_request_duration_seconds_bucket")
	assert.Contains(t, metrics, "sluice_proxy_tokens 3")
	h.p.Drain()
	status, _, _ = h.do("GET", "/readyz", "", "")
	assert.Equal(t, 503, status)
	lmu.Lock()
	out := logs.String()
	lmu.Unlock()
	assert.Contains(t, out, "tok:", "tokens are logged as a hash")
	for _, secret := range []string{"s3cret-tok", "wr0ng-tok", "hook-s3cret", "123456789"} {
		assert.NotContains(t, metrics, secret)
		if secret != "123456789" {
			assert.NotContains(t, out, secret)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// Close during load: queued requests are answered 503 shutting_down,
// those on the wire finish, and nothing is left without an answer.
func TestCloseAnswersEveryRequest(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, proxy.Config{})
	const n = 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]int{}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, hdr, _ := h.do("POST", "/api/v10/channels/1/messages", "Bot a", `{"content":"x"}`)
			mu.Lock()
			got[strconv.Itoa(status)+" "+hdr.Get(proxy.ProxyHeader)]++
			mu.Unlock()
		}()
	}
	// Wait until the first window's five were answered and the rest wait.
	require.Eventually(t, func() bool { return h.srv.Stats().Requests >= 5 }, 10*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, h.p.Close(ctx))
	wg.Wait()
	assert.Equal(t, n, got["200 "]+got["503 "+proxy.ReasonClosed], got)
	assert.Equal(t, 5, got["200 "], got)
	status, hdr, _ := h.do("GET", "/api/v10/users/@me", "Bot a", "")
	assert.Equal(t, 503, status, "after Close")
	assert.Equal(t, proxy.ReasonClosed, hdr.Get(proxy.ProxyHeader))
}

// However the bot spells its token's scheme, it is one token upstream.
func TestTokenSpellings(t *testing.T) {
	h := newHarness(t, sluicetest.Options{Tokens: []string{"abc"}}, proxy.Config{})
	for _, tok := range []string{"abc", "Bot abc", "bot abc", "BOT  abc"} {
		status, _, body := h.do("GET", "/api/v10/channels/"+strconv.Itoa(len(tok)), tok, "")
		assert.Equal(t, 200, status, tok+": "+body)
	}
	_, _, metrics := h.do("GET", "/metrics", "", "")
	assert.Contains(t, metrics, "sluice_proxy_tokens 2", "the token and the token-less limiter")
}

// stuckWriter is a client that never reads: Write blocks until released.
type stuckWriter struct {
	h       http.Header
	writing chan struct{}
	release chan struct{}
}

func (w *stuckWriter) Header() http.Header { return w.h }
func (w *stuckWriter) WriteHeader(int)     {}
func (w *stuckWriter) Write(b []byte) (int, error) {
	close(w.writing)
	<-w.release
	return len(b), nil
}

// Close does not hang on an answer a client never reads: it gives up
// when its context ends and says so.
func TestCloseBoundedBySlowClient(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, proxy.Config{})
	w := &stuckWriter{h: http.Header{}, writing: make(chan struct{}), release: make(chan struct{})}
	req := httptest.NewRequest("GET", "/api/v10/users/@me", nil)
	req.Header.Set("Authorization", "Bot a")
	served := make(chan struct{})
	go func() { defer close(served); h.p.ServeHTTP(w, req) }()
	<-w.writing
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := h.p.Close(ctx)
	h.closedEarly = true
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "answers still being written")
	close(w.release)
	<-served
}
