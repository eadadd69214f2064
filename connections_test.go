package sluice_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
)

// TestABurstSpreadsOverTheConnections: the requests a bucket sends together
// when its window reopens go over different connections of the pool, so a
// connection reset ends fewer of one bucket's window (each resend of a
// message creation then costs that bucket a slot of a later window). Before,
// every request of the burst saw the same in-flight counts and all took
// the same connection.
func TestABurstSpreadsOverTheConnections(t *testing.T) {
	var mu sync.Mutex
	active := 0
	second := make(chan struct{}) // the server serves a second connection
	var seen []string             // remote addresses of the burst's requests
	served := 0
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served++
		n := served
		if n > 2 {
			seen = append(seen, r.RemoteAddr)
		}
		mu.Unlock()
		h := w.Header()
		h.Set("X-RateLimit-Bucket", "b")
		h.Set("X-RateLimit-Limit", "4")
		if n == 1 {
			// The pioneer is answered once the pool has its second
			// connection, and empties the window for 300 ms. At the
			// refill one request goes first (the probe of a reopening,
			// ratelimit.Bucket), then the other three together.
			<-second
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset-After", "0.300")
		} else {
			h.Set("X-RateLimit-Remaining", strconv.Itoa(max(0, 5-n)))
			h.Set("X-RateLimit-Reset-After", "60")
		}
		w.Write([]byte(`{}`))
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st != http.StateActive {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if active++; active == 2 {
			close(second)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	lim, err := sluice.New(sluice.Options{BaseURL: srv.URL + "/api/v10", Token: testToken, Connections: 2,
		TLSConfig: &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}})
	require.NoError(t, err)
	defer func() { require.NoError(t, lim.Close(context.Background())) }()

	ctx := context.Background()
	pioneer := lim.Send(ctx, req("GET", "/channels/1/messages", ""))
	futures := make([]*sluice.Future, 4)
	for i := range futures {
		futures[i] = lim.Send(ctx, req("GET", "/channels/1/messages", ""))
	}
	resp, err := pioneer.Await(ctx)
	require.NoError(t, err)
	resp.Body.Close()
	for _, f := range futures {
		resp, err := f.Await(ctx)
		require.NoError(t, err)
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	per := map[string]int{}
	for _, a := range seen {
		per[a]++
	}
	assert.Len(t, seen, 3)
	assert.Len(t, per, 2, "the three requests sent together used both connections: %v", per)
}
