package sluice_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// go-redis retries a failed dial on a goroutine of its own that sleeps a
// second between attempts and ends at the next one after its client is
// closed: the Redis client belongs to the caller, not to the limiter (whose
// goroutines must all be gone after Close).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

const testToken = "test-token-abc123"

// harness is a simulator and a limiter pointed at it.
type harness struct {
	t   *testing.T
	srv *sluicetest.Server
	lim *sluice.Limiter
}

func newHarness(t *testing.T, sopts sluicetest.Options, lopts sluice.Options) *harness {
	t.Helper()
	srv, err := sluicetest.NewServer(sopts)
	require.NoError(t, err)
	lopts.BaseURL = srv.APIBase()
	lopts.Token = testToken
	lopts.TLSConfig = srv.ClientTLSConfig()
	lim, err := sluice.New(lopts)
	require.NoError(t, err)
	h := &harness{t: t, srv: srv, lim: lim}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, lim.Close(ctx))
		srv.Close()
	})
	return h
}

func req(method, path, body string) *http.Request {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	q, err := http.NewRequest(method, path, r)
	if err != nil {
		panic(err)
	}
	return q
}

// rules builds a rule set with one rule per (method, route) and the given
// limit and window.
func rules(limit int, window time.Duration, routes ...[2]string) sluicetest.RuleSet {
	rs := sluicetest.RuleSet{}
	for i, r := range routes {
		rs.Rules = append(rs.Rules, sluicetest.Rule{
			Name: fmt.Sprintf("r%d", i), Method: r[0], Route: r[1], Bucket: fmt.Sprintf("hash%d", i),
			Limit: limit, Window: sluicetest.Duration(window),
		})
	}
	return rs
}

func TestDoThroughTheSimulator(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, sluice.Options{})
	resp, err := h.lim.Do(context.Background(), req("POST", "/channels/1/messages", `{"content":"hi"}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, string(body), `"content":"hi"`)
	assert.Equal(t, "4", resp.Header.Get("X-RateLimit-Remaining"))
	h.srv.AssertNoViolations(t)
}

func TestSaturatedBucketHasNoViolationsAndKeepsFIFO(t *testing.T) {
	rs := rules(5, 200*time.Millisecond, [2]string{"POST", "/channels/{channel_id}/messages"})
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{})
	const n = 40
	reqs := make([]*http.Request, n)
	for i := range reqs {
		reqs[i] = req("POST", "/channels/7/messages", fmt.Sprintf(`{"content":"%d"}`, i))
	}
	results := h.lim.DoBatch(context.Background(), reqs)
	for i, r := range results {
		require.NoError(t, r.Err, i)
		assert.Equal(t, 200, r.Response.StatusCode, i)
		b, _ := io.ReadAll(r.Response.Body)
		assert.Contains(t, string(b), fmt.Sprintf(`"content":"%d"`, i), "results are in submission order")
	}
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	assert.Equal(t, n, st.Requests)
	assert.Equal(t, 5, st.MaxBucketWindow)
	require.Len(t, st.Buckets, 1)
	t.Logf("windows=%d for %d requests (ideal %d)", st.Buckets[0].Windows, n, n/5)
}

func TestFanOutOverManyChannelsUnderTheGlobalLimit(t *testing.T) {
	rs := sluicetest.DefaultRules()
	rs.GlobalLimit = 20
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{GlobalLimit: 20})
	var reqs []*http.Request
	for ch := 0; ch < 100; ch++ {
		reqs = append(reqs, req("POST", fmt.Sprintf("/channels/%d/messages", 1000+ch), `{"content":"x"}`))
	}
	for i, r := range h.lim.DoBatch(context.Background(), reqs) {
		require.NoError(t, r.Err, i)
		assert.Equal(t, 200, r.Response.StatusCode)
	}
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	assert.Equal(t, 100, st.Requests)
	assert.LessOrEqual(t, st.MaxGlobalWindow, 20)
}

func TestConcurrentCallersOnOneBucket(t *testing.T) {
	rs := rules(3, 100*time.Millisecond, [2]string{"GET", "/channels/{channel_id}"})
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{})
	var wg sync.WaitGroup
	for i := 0; i < 30; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := h.lim.Do(context.Background(), req("GET", "/channels/5", ""))
			if assert.NoError(t, err) {
				assert.Equal(t, 200, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	h.srv.AssertNoViolations(t)
}
