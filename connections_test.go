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
	burst := make(chan struct{}) // all three requests of the burst arrived
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served++
		n := served
		if n > 2 {
			seen = append(seen, r.RemoteAddr)
			if len(seen) == 3 {
				close(burst)
			}
		}
		mu.Unlock()
		if n > 2 {
			// The burst's requests stay in flight until all three
			// arrived, as on a real API, whatever the scheduler's pace
			// on a busy machine (they multiplex on one connection as
			// well, so this never waits for a spread that fails).
			select {
			case <-burst:
			case <-r.Context().Done():
			}
		}
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
	awaitClosed(t, ctx, pioneer)
	awaitClosed(t, ctx, futures...)
	mu.Lock()
	defer mu.Unlock()
	per := map[string]int{}
	for _, a := range seen {
		per[a]++
	}
	assert.Len(t, seen, 3)
	assert.Len(t, per, 2, "the three requests sent together used both connections: %v", per)
}

// TestThePoolGrowsWithTheLoad: the limiter opens one connection per four
// requests awaiting an outcome, up to Options.Connections, so that a reset
// ends a few requests rather than a burst; a caller sending one request at
// a time keeps one connection.
func TestThePoolGrowsWithTheLoad(t *testing.T) {
	for _, tc := range []struct {
		name        string
		connections int // Options.Connections (0: default)
		held        int // requests the server holds together
		want        int // connections it then serves
	}{
		{"40 requests, default pool", 0, 40, 10},
		{"41 requests, default pool", 0, 41, 11},
		{"100 requests, default pool of 16", 0, 100, 16},
		{"40 requests, Connections 3", 3, 40, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			cond := sync.NewCond(&mu)
			conns, arrived := 0, 0
			hold := false
			release := make(chan struct{})
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				held := hold
				if held {
					arrived++
					cond.Broadcast()
				}
				mu.Unlock()
				if held {
					<-release
				}
				h := w.Header()
				h.Set("X-RateLimit-Bucket", "b")
				h.Set("X-RateLimit-Limit", "1000")
				h.Set("X-RateLimit-Remaining", "999")
				h.Set("X-RateLimit-Reset-After", "60")
				w.Write([]byte(`{}`))
			}))
			srv.EnableHTTP2 = true
			srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					mu.Lock()
					conns++
					cond.Broadcast()
					mu.Unlock()
				}
			}
			srv.StartTLS()
			t.Cleanup(srv.Close)
			lim, err := sluice.New(sluice.Options{BaseURL: srv.URL + "/api/v10", Token: testToken, Connections: tc.connections, GlobalLimit: 10_000,
				TLSConfig: &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}})
			require.NoError(t, err)
			defer func() { require.NoError(t, lim.Close(context.Background())) }()
			ctx := context.Background()

			// One at a time, on several channels: one connection.
			for i := range 10 {
				resp, err := lim.Do(ctx, req("GET", "/channels/"+strconv.Itoa(i%3+1), ""))
				require.NoError(t, err)
				resp.Body.Close()
			}
			mu.Lock()
			assert.Equal(t, 1, conns, "requests sent one at a time share one connection")
			hold = true
			mu.Unlock()

			// Many together: the pool grows while they wait on the server.
			futures := make([]*sluice.Future, tc.held)
			for i := range futures {
				futures[i] = lim.Send(ctx, req("GET", "/channels/"+strconv.Itoa(100+i), ""))
			}
			mu.Lock()
			for arrived < tc.held || conns < tc.want {
				cond.Wait()
			}
			mu.Unlock()
			close(release)
			awaitClosed(t, ctx, futures...)
			// No dial is under way once the calls ended (a dial starts only
			// while more than 4 per connection wait): the count is final.
			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, tc.want, conns)
		})
	}
}

// awaitClosed waits for each future, requires a response and closes its
// body.
func awaitClosed(t *testing.T, ctx context.Context, fs ...*sluice.Future) {
	t.Helper()
	for _, f := range fs {
		resp, err := f.Await(ctx)
		require.NoError(t, err)
		resp.Body.Close()
	}
}
