package proxy_test

import (
	"context"
	"encoding/json"
	"io"
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

	"github.com/sluicehq/sluice"
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
		assert.NoError(t, p.Close(ctx))
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

func TestRelaysLikeDirect(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, proxy.Config{})
	status, hdr, body := h.do("POST", "/api/v10/channels/1/messages?x=1", "Bot a", `{"content":"hi"}`, "X-Audit-Log-Reason", "because")
	assert.Equal(t, 200, status, body)
	assert.NotEmpty(t, hdr.Get("X-RateLimit-Bucket"), "rate-limit headers come back")
	assert.Contains(t, body, `"content":"hi"`)
	for _, path := range []string{"/api/v9/users/@me", "/api/users/@me", "/users/@me"} {
		status, _, body = h.do("GET", path, "Bot a", "")
		assert.Equal(t, 200, status, path+": "+body)
	}
	h.srv.AssertNoViolations(t)
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
	var st = h.srv.Stats()
	assert.Equal(t, 60, st.Requests)
}

func TestCache404(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, proxy.Config{})
	s1, hd1, b1 := h.do("GET", "/api/v10/nothing/here", "Bot a", "")
	s2, hd2, b2 := h.do("GET", "/api/v10/nothing/here", "Bot a", "")
	assert.Equal(t, 404, s1)
	assert.Equal(t, 404, s2)
	assert.Equal(t, b1, b2)
	assert.Empty(t, hd1.Get(proxy.CacheHeader))
	assert.Equal(t, "hit", hd2.Get(proxy.CacheHeader))
	assert.Equal(t, 1, h.srv.Stats().Requests)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(b2), &m))
	_ = sluice.ErrClosed
}
