package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/proxy"
)

// serialUpstream is an HTTP/2 server over TLS that answers every request
// 200 from a bucket of one request per window, and records, in arrival
// order, each request's body and whether it carried the priority header.
type serialUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	bodies   []string
	leaked   int // requests that carried proxy.DefaultPriorityHeader
	window   time.Duration
	nextFree time.Time
	over     int // requests that came before the bucket reopened
}

func newSerialUpstream(t *testing.T, window time.Duration) *serialUpstream {
	u := &serialUpstream{window: window}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		now := time.Now()
		u.mu.Lock()
		u.bodies = append(u.bodies, string(b))
		if r.Header.Get(proxy.DefaultPriorityHeader) != "" {
			u.leaked++
		}
		if now.Before(u.nextFree) {
			u.over++
		}
		// The reset, in whole milliseconds as X-RateLimit-Reset tells it:
		// a request at that instant is on time.
		reset := now.Add(window).Truncate(time.Millisecond)
		u.nextFree = reset
		u.mu.Unlock()
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("X-RateLimit-Limit", "1")
		h.Set("X-RateLimit-Remaining", "0")
		h.Set("X-RateLimit-Reset-After", strconv.FormatFloat(window.Seconds(), 'f', 3, 64))
		h.Set("X-RateLimit-Reset", strconv.FormatFloat(float64(reset.UnixMilli())/1000, 'f', 3, 64))
		h.Set("X-RateLimit-Bucket", "serial")
		_, _ = w.Write([]byte(`{"id":"1"}`))
	}))
	u.EnableHTTP2 = true
	u.StartTLS()
	t.Cleanup(u.Close)
	return u
}

// A client's X-Sluice-Priority orders its requests in their bucket's queue
// through the proxy, a bad value is answered 400 without being sent, and
// the header never goes upstream.
func TestPriorityHeaderOrdersRequests(t *testing.T) {
	up := newSerialUpstream(t, 60*time.Millisecond)
	submitted := make(chan struct{}, 64)
	cfg := proxy.Config{Upstream: up.URL + "/api/v10"}
	cfg.Limiter.TLSConfig = up.Client().Transport.(*http.Transport).TLSClientConfig
	cfg.Limiter.Trace = func(e sluice.TraceEvent) {
		if e.Kind == "receive" && e.Message == "submit" {
			submitted <- struct{}{} // the request is in its limiter's line
		}
	}
	p, err := proxy.New(cfg)
	require.NoError(t, err)
	front := httptest.NewServer(p)
	c := front.Client()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		front.Close()
		assert.NoError(t, p.Close(ctx))
		c.CloseIdleConnections()
	})
	send := func(body, priority string) int {
		r, err := http.NewRequest("POST", front.URL+"/api/v10/channels/9/messages", strings.NewReader(body))
		require.NoError(t, err)
		r.Header.Set("Authorization", "Bot prio-token")
		r.Header.Set("Content-Type", "application/json")
		if priority != "" {
			r.Header.Set(proxy.DefaultPriorityHeader, priority)
		}
		resp, err := c.Do(r)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}

	require.Equal(t, 400, send(`{"content":"bad"}`, "urgent"))
	require.Equal(t, 200, send(`{"content":"warm"}`, "")) // the bucket is known: one per window
	<-submitted

	var wg sync.WaitGroup
	run := func(body, priority string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.Equal(t, 200, send(body, priority), body)
		}()
	}
	for i := range 6 {
		run(fmt.Sprintf(`{"content":"bulk %d"}`, i), "bulk")
	}
	for range 6 {
		<-submitted
	}
	for i := range 3 {
		run(fmt.Sprintf(`{"content":"interactive %d"}`, i), "Interactive")
	}
	wg.Wait()

	up.mu.Lock()
	defer up.mu.Unlock()
	assert.Zero(t, up.leaked, "the priority header went upstream")
	assert.Zero(t, up.over, "a request came before its bucket reopened")
	require.Len(t, up.bodies, 10, "the bad one was not sent: %v", up.bodies)
	t.Logf("upstream order: %v", up.bodies)
	for i := range 3 {
		at := slices.IndexFunc(up.bodies, func(b string) bool { return strings.Contains(b, fmt.Sprintf(`"content":"interactive %d"`, i)) })
		require.GreaterOrEqual(t, at, 0, "interactive %d: %v", i, up.bodies)
		// The warm request, at most one bulk request that left before the
		// interactive ones were queued, and the three interactive ones.
		assert.LessOrEqual(t, at, 4, "interactive %d arrived %d: %v", i, at, up.bodies)
	}
}
