package proxy_test

import (
	"encoding/json"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/sluicetest"
)

// scrapeMetrics returns the /metrics text of h's proxy.
func scrapeMetrics(t *testing.T, h *harness) string {
	t.Helper()
	resp, err := h.c.Get(h.front.URL + proxy.MetricsPath)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// sample is the sum of the samples of name whose labels include every
// name="value" pair of labels.
func sample(text, name string, labels ...string) float64 {
	sum := 0.0
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (!strings.HasPrefix(rest, "{") && !strings.HasPrefix(rest, " ")) {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			match = match && strings.Contains(rest, labels[i]+`="`+labels[i+1]+`"`)
		}
		if !match {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// TestMetricsCountTheLimitersEvents: after a load that draws a bucket 429
// (another client of the same token emptied the bucket behind the
// limiter's back), a global 429 (injected) and a Redis outage (the
// redis-server killed), /metrics counts each, beside the limiters' gauges
// by token class.
func TestMetricsCountTheLimitersEvents(t *testing.T) {
	rs := redistest.Start(t)
	h := newHarness(t, sluicetest.Options{}, proxy.Config{
		DefaultToken: "Bot metrics-token",
		Redis:        rs.Client(t),
		Limiter:      sluice.Options{RedisTimeout: 200 * time.Millisecond},
	})
	const path = "/api/v10/channels/5/messages"
	status, _, body := h.do("GET", path, "", "")
	require.Equal(t, 200, status, body)

	// A bucket 429: the same token empties the bucket directly.
	for range 100 {
		if s, _, _ := direct(t, h.srv, "GET", path, "Bot metrics-token", ""); s == 429 {
			break
		}
	}
	status, _, body = h.do("GET", path, "", "")
	assert.Equal(t, 200, status, "answered after the limiter waited out the 429: %s", body)

	// A global 429.
	h.srv.InjectGlobalLimit(100 * time.Millisecond)
	status, _, body = h.do("GET", "/api/v10/channels/6/messages", "", "")
	assert.Equal(t, 200, status, body)

	m := scrapeMetrics(t, h)
	assert.GreaterOrEqual(t, sample(m, "sluice_responses_total", "http_response_status_code", "429", "sluice_rate_limit_scope", "user"), 1.0, "the bucket 429:\n%s", m)
	assert.GreaterOrEqual(t, sample(m, "sluice_responses_total", "http_response_status_code", "429", "sluice_rate_limit_scope", "global"), 1.0, "the global 429")
	assert.GreaterOrEqual(t, sample(m, "sluice_transitions_total", "sluice_machine", "window", "sluice_event", "global_hit"), 1.0, "the global window's pause")
	assert.Equal(t, 50.0, sample(m, "sluice_limiter_global_limit", "tokens", "default", "window", "bot"))
	assert.Equal(t, 1.0, sample(m, "sluice_limiter_state", "tokens", "default", "state", "connected"))
	assert.GreaterOrEqual(t, sample(m, "sluice_limiter_buckets", "tokens", "default"), 2.0)
	assert.Less(t, sample(m, "sluice_limiter_invalid_budget_left", "tokens", "default"), 9000.0, "the 429s spent some of the budget")
	assert.Equal(t, 2.0, sample(m, "sluice_limiter_redis_mode", "tokens", "default", "mode", "shared"), "the bot's and the per-IP stores")
	assert.Zero(t, sample(m, "sluice_limiter_redis_outages_total"))

	// A Redis outage: the next request finds Redis gone and the stores
	// fall back to this process's share.
	rs.Kill()
	status, _, body = h.do("GET", "/api/v10/channels/7/messages", "", "")
	assert.Equal(t, 200, status, "answered on the fallback share: %s", body)
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for sample(scrapeMetrics(t, h), "sluice_limiter_redis_outages_total", "tokens", "default") < 1 {
		require.True(t, time.Now().Before(deadline), "no Redis outage counted:\n%s", scrapeMetrics(t, h))
		<-tick.C
	}
	m = scrapeMetrics(t, h)
	assert.GreaterOrEqual(t, sample(m, "sluice_limiter_redis_mode", "tokens", "default", "mode", "fallback"), 1.0)
	assert.Greater(t, sample(m, "sluice_limiter_redis_errors_total", "tokens", "default"), 0.0)
}

// TestDashboardQueriesExistingMetrics: every metric the Grafana dashboard
// in deploy/grafana queries is on /metrics after an ordinary load (one
// request relayed, one refused by the proxy).
func TestDashboardQueriesExistingMetrics(t *testing.T) {
	raw, err := os.ReadFile("../deploy/grafana/sluice-proxy.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	h := newHarness(t, sluicetest.Options{}, proxy.Config{DefaultToken: "Bot dashboard"})
	status, _, body := h.do("GET", "/api/v10/channels/1/messages", "", "")
	require.Equal(t, 200, status, body)
	status, _, _ = h.do("BREW", "/api/v10/channels/1/messages", "", "")
	require.Equal(t, 405, status)
	m := scrapeMetrics(t, h)
	names := regexp.MustCompile(`\b(?:sluice|process|go)_[a-z_]+\b`)
	labels := regexp.MustCompile(`\{[^}]*\}|(?:by|ignoring|on|without|group_left|group_right) ?\([^)]*\)`)
	queried := 0
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, target := range p.Targets {
			for _, name := range names.FindAllString(labels.ReplaceAllString(target.Expr, ""), -1) {
				queried++
				assert.Regexp(t, `(?m)^`+name+`[{ ]`, m, "panel %q queries %s, not on /metrics", p.Title, name)
			}
		}
	}
	assert.Greater(t, queried, 15)
}

// TestReadyReportsTheUpstream: /readyz says the default token's connection
// state in its body and stays 200 whatever it is; only Drain makes it 503.
// Every answer carries a request ID: the caller's if usable, else a new one.
func TestReadyReportsTheUpstream(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, proxy.Config{DefaultToken: "Bot ready"})
	status, hdr, body := h.do("GET", "/api/v10/channels/1/messages", "", "", proxy.RequestIDHeader, "trace-42")
	require.Equal(t, 200, status, body)
	assert.Equal(t, "trace-42", hdr.Get(proxy.RequestIDHeader))
	_, hdr, _ = h.do("GET", "/api/v10/channels/1/messages", "", "", proxy.RequestIDHeader, "bad id with spaces")
	assert.Regexp(t, `^[0-9a-f]{16}$`, hdr.Get(proxy.RequestIDHeader), "an unusable ID is replaced")
	_, hdr, _ = h.do("GET", "/api/v10/channels/1/messages", "Bot secret-token-1234", "", proxy.RequestIDHeader, "secret-token-1234")
	assert.NotEqual(t, "secret-token-1234", hdr.Get(proxy.RequestIDHeader), "a caller's token is never its request ID")

	status, _, body = h.do("GET", proxy.ReadyPath, "", "")
	assert.Equal(t, 200, status)
	assert.JSONEq(t, `{"status":"ready","upstream":"connected"}`, body)
	h.p.Drain()
	status, _, body = h.do("GET", proxy.ReadyPath, "", "")
	assert.Equal(t, 503, status)
	assert.JSONEq(t, `{"status":"draining","upstream":"connected"}`, body)
}
