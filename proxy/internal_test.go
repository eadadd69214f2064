package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/routes"
)

// TestTargetIsTheCanonicalPath: the URL handed to the limiter carries the
// canonical path the route was parsed from, on Discord's host with a
// version (the request's, else the upstream's), relative without one.
func TestTargetIsTheCanonicalPath(t *testing.T) {
	for _, c := range []struct{ upstream, in, want string }{
		{"https://discord.com/api/v10", "/api/v10/channels/1", "https://discord.com/api/v10/channels/1"},
		{"https://discord.com/api/v10", "/api/v9/channels/1?x=1&y=%20", "https://discord.com/api/v9/channels/1?x=1&y=%20"},
		{"https://discord.com/api/v10", "/api/channels/1", "https://discord.com/api/v10/channels/1"},
		{"https://discord.com/api/v10", "/channels/1/", "https://discord.com/api/v10/channels/1"},
		{"https://gw.example/discord/api/v10", "/API/V8//users/@me", "https://discord.com/api/v8/users/@me"},
		{"https://gw.example/discord/api", "/channels/1", "/channels/1"},
		{"https://discord.com/api/v10", "/api/v10/%77ebhooks/1/t%6Fk", "https://discord.com/api/v10/webhooks/1/tok"},
		{"https://discord.com/api/v10", "/api/v10/channels/1/messages/2/reactions/%f0%9f%91%8d/@me", "https://discord.com/api/v10/channels/1/messages/2/reactions/%F0%9F%91%8D/@me"},
	} {
		p := &Proxy{}
		s, err := Config{Upstream: c.upstream}.settings()
		require.NoError(t, err)
		p.cfg = s
		r := httptest.NewRequest("POST", "http://proxy"+c.in, nil)
		u, route, err := p.target(r)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, u.String(), c.upstream+" + "+c.in)
		again, err := routes.Parse("POST", u.EscapedPath())
		require.NoError(t, err)
		assert.Equal(t, route, again, "the limiter parses what the proxy parsed")
	}
	p := &Proxy{}
	p.cfg, _ = Config{}.settings()
	for _, in := range []string{"/api/v10/./webhooks/1/tok", "/api/v10/x/%2e%2e/webhooks/1/tok", "/api/v10/../../x", "/api/v10/a%2Fb"} {
		r := httptest.NewRequest("POST", "http://proxy/", nil)
		r.URL, _ = url.Parse(in)
		_, _, err := p.target(r)
		assert.ErrorIs(t, err, routes.ErrInvalidPath, in)
	}
}

func TestParseWait(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "2.5": 2500 * time.Millisecond, "2500ms": 2500 * time.Millisecond, "0": time.Nanosecond, " 3 ": 3 * time.Second, "1m": time.Minute} {
		got, err := parseWait(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"-1", "soon", "1e99", "-2s", "NaN", "1_000", "1e3", "0x10", "Inf", "+5", ".5", "5.", "1.2.3", "2000000", "1_000ms", "-1ms", "1h1e3s", "300h"} {
		_, err := parseWait(in)
		assert.ErrorIs(t, err, errWait, in)
	}
}

func TestNormToken(t *testing.T) {
	assert.Equal(t, "", normToken(" "))
	assert.Equal(t, "Bot abc", normToken("abc"))
	assert.Equal(t, "Bot abc", normToken("Bot abc"))
	assert.Equal(t, "Bot abc", normToken(" bot  abc "))
	assert.Equal(t, "Bearer xyz", normToken("BEARER xyz"))
	assert.Equal(t, "Bearer xyz", normToken("Bearer xyz"))
	assert.NotContains(t, tokenName("Bot abc"), "abc")
	assert.Equal(t, "ip", tokenName(""))
}

func TestCopyHeaderDropsHopByHop(t *testing.T) {
	src := http.Header{"Connection": {"keep-alive, X-Private"}, "X-Private": {"1"}, "Keep-Alive": {"5"},
		"Transfer-Encoding": {"chunked"}, "X-Audit-Log-Reason": {"why"}, "Authorization": {"Bot t"}, "Content-Type": {"a/b"}}
	dst := http.Header{}
	copyHeader(dst, src, "Authorization")
	assert.Equal(t, http.Header{"X-Audit-Log-Reason": {"why"}, "Content-Type": {"a/b"}}, dst)
}

func TestAnswerCache(t *testing.T) {
	c := newAnswerCache(map[int]time.Duration{404: 30 * time.Second}, 2)
	t0 := time.Unix(0, 0)
	assert.False(t, c.cacheable(200))
	c.put("a", 200, nil, nil, t0)
	_, ok := c.get("a", t0)
	assert.False(t, ok, "a status without a TTL is not kept")
	c.put("a", 404, nil, []byte("A"), t0)
	c.put("b", 404, nil, []byte("B"), t0)
	c.put("c", 404, nil, []byte("C"), t0)
	_, ok = c.get("a", t0)
	assert.False(t, ok, "the oldest goes at the cap")
	got, ok := c.get("c", t0.Add(29*time.Second))
	require.True(t, ok)
	assert.Equal(t, "C", string(got.body))
	_, ok = c.get("c", t0.Add(30*time.Second))
	assert.False(t, ok, "expired")
	assert.Equal(t, 1, c.len())
}

// fakeLimiters makes limiters that are never used to send: the registry's
// bookkeeping is what is tested.
func fakeLimiters(t *testing.T) (func(string) (*sluice.Limiter, error), *sync.Map) {
	made := &sync.Map{}
	return func(token string) (*sluice.Limiter, error) {
		l, err := sluice.New(sluice.Options{Token: token, BaseURL: "http://127.0.0.1:1/api/v10", H2C: true, DialTimeout: time.Millisecond})
		if err == nil {
			made.Store(token, l)
		}
		return l, err
	}, made
}

func TestRegistryLRUAndIdle(t *testing.T) {
	now := time.Unix(0, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	newLim, _ := fakeLimiters(t)
	var evicted []string
	live := 0
	r := newRegistry(2, time.Minute, clock, newLim, nil, nil, func(n int, why string) {
		live = n
		if why != "" {
			evicted = append(evicted, why)
		}
	})
	defer func() { require.NoError(t, r.close(context.Background())) }()
	ctx := context.Background()
	a, err := r.acquire(ctx, "Bot a")
	require.NoError(t, err)
	b, err := r.acquire(ctx, "Bot b")
	require.NoError(t, err)
	_, err = r.acquire(ctx, "Bot c")
	assert.ErrorIs(t, err, errTooManyTokens, "both busy at the cap")
	r.release(a)
	advance(time.Second)
	c, err := r.acquire(ctx, "Bot c")
	require.NoError(t, err, "a, idle and least recently used, made room")
	assert.Equal(t, []string{"lru"}, evicted)
	assert.Equal(t, 2, live)
	r.release(b)
	r.release(c)
	advance(30 * time.Second)
	c2, err := r.acquire(ctx, "Bot c")
	require.NoError(t, err)
	assert.Same(t, c, c2, "a known token keeps its limiter")
	r.release(c2)
	advance(45 * time.Second)
	next := r.sweep()
	assert.Equal(t, []string{"lru", "idle"}, evicted, "b idle for 75 s is closed, c (45 s) stays")
	assert.Equal(t, 15*time.Second, next)
	assert.Equal(t, 1, live)
}

// TestRegistryPinnedTokensAreNeverRefused: the default token and the
// token-less limiter are neither evicted nor counted, so busy made-up
// tokens at the cap refuse new tokens but never them.
func TestRegistryPinnedTokensAreNeverRefused(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	newLim, _ := fakeLimiters(t)
	r := newRegistry(1, time.Minute, clock, newLim, []string{"", "Bot default"}, nil, func(int, string) {})
	defer func() { require.NoError(t, r.close(context.Background())) }()
	ctx := context.Background()
	busy, err := r.acquire(ctx, "Bot made-up")
	require.NoError(t, err)
	defer r.release(busy)
	_, err = r.acquire(ctx, "Bot another")
	assert.ErrorIs(t, err, errTooManyTokens)
	for _, tok := range []string{"", "Bot default"} {
		a, err := r.acquire(ctx, tok)
		require.NoError(t, err, "pinned %q", tok)
		r.release(a)
	}
	now = now.Add(time.Hour)
	r.sweep()
	assert.Len(t, r.tenants(), 3, "pinned tenants are not closed for idleness; the busy one stays")
}

func TestRegistryCloseRefuses(t *testing.T) {
	newLim, _ := fakeLimiters(t)
	r := newRegistry(4, time.Minute, time.Now, newLim, nil, nil, func(int, string) {})
	a, err := r.acquire(context.Background(), "")
	require.NoError(t, err)
	r.release(a)
	require.NoError(t, r.close(context.Background()))
	_, err = r.acquire(context.Background(), "")
	assert.ErrorIs(t, err, sluice.ErrClosed)
}

// classifyCases is one error per row of the failure table.
var classifyCases = []struct {
	err    error
	status int
	reason string
}{
	{sluice.ErrQueueFull, 597, ReasonQueueFull},
	{errTooManyTokens, 597, ReasonQueueFull},
	{&sluice.WaitError{Wait: 3 * time.Second, Limit: time.Second}, 429, ReasonMaxWait},
	{&sluice.RateLimitError{Scope: "global", RetryAfter: time.Second}, 429, ReasonRateLimited},
	{&sluice.BudgetError{RetryAfter: time.Minute}, 429, ReasonBudget},
	{sluice.ErrUnauthorized, 401, ReasonUnauthorized},
	{sluice.ErrBanned, 503, ReasonBanned},
	{sluice.ErrClosed, 503, ReasonClosed},
	{&sluice.TimeoutError{Timeout: time.Minute}, 504, ReasonTimeout},
	{sluice.ErrAttemptTimeout, 504, ReasonTimeout},
	{sluice.ErrResponseTooLarge, 502, ReasonTooLarge},
	{sluice.ErrBadRequest, 400, ReasonBadRequest},
	{sluice.ErrInternal, 500, ReasonInternal},
	{sluice.ErrConnectionDied, 502, ReasonUnavailable},
}

func TestClassifyTable(t *testing.T) {
	p := &Proxy{cfg: settings{Config: Config{OverflowStatus: 597, MaxWaitHeader: DefaultMaxWaitHeader}}, globalRate: 50}
	for _, c := range classifyCases {
		a := p.classify(c.err, nil)
		assert.Equal(t, c.status, a.status, "%v", c.err)
		assert.Equal(t, c.reason, a.reason, "%v", c.err)
	}
	a := p.classify(&sluice.RateLimitError{Scope: "global", RetryAfter: 1500 * time.Millisecond}, nil)
	w := httptest.NewRecorder()
	a.write(w)
	assert.Equal(t, "2", w.Header().Get("Retry-After"))
	assert.Equal(t, "true", w.Header().Get("X-RateLimit-Global"))
	assert.Equal(t, ReasonRateLimited, w.Header().Get(ProxyHeader))
	assert.JSONEq(t, `{"message":"You are being rate limited.","code":0,"retry_after":1.5,"global":true}`, w.Body.String())
}

// docs/proxy.md's failure table has one row per reason, with the status
// classify gives (the overflow row names the flag and its default).
func TestDocsFailureTableCurrent(t *testing.T) {
	b, err := os.ReadFile("../docs/proxy.md")
	require.NoError(t, err)
	rows := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if cells := strings.Split(line, "|"); len(cells) == 5 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.TrimSpace(cells[2])
		}
	}
	p := &Proxy{cfg: settings{Config: Config{OverflowStatus: DefaultOverflowStatus, MaxWaitHeader: DefaultMaxWaitHeader}}, globalRate: 50}
	for _, c := range classifyCases {
		a := p.classify(c.err, nil)
		status, ok := rows[a.reason]
		if assert.True(t, ok, "docs/proxy.md has no row for %s", a.reason) {
			assert.Contains(t, status, strconv.Itoa(a.status), a.reason)
		}
	}
}
