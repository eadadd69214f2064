package proxy_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/sluicetest"
)

// Two proxies on one Redis, the load split between them: one set of
// limits, as if one proxy served it all (the OS-process version of this is
// cmd/sluice's TestProxyReplicasShareLimitsThroughRedis).
func TestReplicasShareLimitsThroughRedis(t *testing.T) {
	rs := redistest.Start(t)
	srv, err := sluicetest.NewServer(sluicetest.Options{})
	require.NoError(t, err)
	defer srv.Close()
	var fronts []*httptest.Server
	for range 2 {
		p, err := proxy.New(proxy.Config{Upstream: srv.APIBase(), Redis: rs.Client(t),
			Limiter: sluice.Options{TLSConfig: srv.ClientTLSConfig()}})
		require.NoError(t, err)
		front := httptest.NewServer(p)
		fronts = append(fronts, front)
		defer func() {
			front.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			assert.NoError(t, p.Close(ctx))
		}()
	}
	var wg sync.WaitGroup
	// 2 channels × 10 messages (5 per 5 s each) and 60 webhook executions
	// on 30 webhooks, alternating between the replicas.
	var n int
	send := func(path, token, body string) {
		front := fronts[n%2]
		n++
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := &harness{t: t, front: front, c: front.Client()}
			status, _, b := h.do("POST", path, token, body)
			assert.Equal(t, 200, status, b)
		}()
	}
	for i := range 10 {
		send("/api/v10/channels/1/messages", "Bot shared", `{"content":"a`+strconv.Itoa(i)+`"}`)
		send("/api/v10/channels/2/messages", "Bot shared", `{"content":"b`+strconv.Itoa(i)+`"}`)
	}
	for i := range 60 {
		send("/api/v10/webhooks/"+strconv.Itoa(i%30)+"/tok", "", `{"content":"w`+strconv.Itoa(i)+`"}`)
	}
	wg.Wait()
	for _, f := range fronts {
		f.Client().CloseIdleConnections()
	}
	st := srv.Stats()
	srv.AssertNoViolations(t)
	assert.Zero(t, st.ClientUser429s()+st.ClientGlobal429s(), "no 429 at all: the replicas share every bucket")
	assert.Equal(t, 80, st.Requests)
}
