package sluicetest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T, opts sluicetest.Options) *sluicetest.Server {
	t.Helper()
	s, err := sluicetest.NewServer(opts)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func get(t *testing.T, c *http.Client, method, url, auth, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

func TestServerSpeaksHTTP2OverTLS(t *testing.T) {
	s := start(t, sluicetest.Options{})
	require.True(t, strings.HasPrefix(s.URL, "https://127.0.0.1:"))
	resp, body := get(t, s.Client(), "POST", s.APIBase()+"/channels/42/messages", "Bot t", `{"content":"hello"}`)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 2, resp.ProtoMajor)
	assert.Equal(t, "5", resp.Header.Get("X-RateLimit-Limit"))
	assert.Equal(t, "4", resp.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "5.000", resp.Header.Get("X-RateLimit-Reset-After"))
	assert.Contains(t, body, `"content":"hello"`)
	assert.Contains(t, body, `"channel_id":"42"`)
	require.NotNil(t, s.Certificate())
	assert.Contains(t, string(s.CertificatePEM()), "BEGIN CERTIFICATE")
}

func TestServerFallsBackToHTTP1(t *testing.T) {
	s := start(t, sluicetest.Options{})
	tr := &http.Transport{TLSClientConfig: s.ClientTLSConfig()}
	tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	c := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	resp, _ := get(t, c, "GET", s.APIBase()+"/users/@me", "Bot t", "")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 1, resp.ProtoMajor)
}

func TestServerH2C(t *testing.T) {
	s := start(t, sluicetest.Options{H2C: true})
	require.True(t, strings.HasPrefix(s.URL, "http://"))
	resp, _ := get(t, s.Client(), "GET", s.APIBase()+"/gateway", "", "")
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 2, resp.ProtoMajor)
}

func TestServerEnforcesLimitsUnderConcurrency(t *testing.T) {
	rs := sluicetest.DefaultRules()
	s := start(t, sluicetest.Options{Rules: rs})
	c := s.Client()
	var wg sync.WaitGroup
	statuses := make(chan int, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", s.APIBase()+"/channels/1/messages", nil)
			req.Header.Set("Authorization", "Bot t")
			resp, err := c.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for st := range statuses {
		count[st]++
	}
	assert.Equal(t, map[int]int{200: 5, 429: 15}, count)
	st := s.Stats()
	assert.Equal(t, 5, st.MaxBucketWindow)
	assert.Equal(t, 15, st.RateLimited["user"])
	var tb recorder
	assert.False(t, s.AssertNoViolations(&tb))
	assert.Contains(t, tb.msg, "15 user-scope 429s")
}

type recorder struct{ msg string }

func (r *recorder) Helper()                   {}
func (r *recorder) Errorf(f string, a ...any) { r.msg += fmt.Sprintf(f, a...) }

func TestServerFakeClock(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := start(t, sluicetest.Options{Clock: clock})
	c := s.Client()
	for i := 0; i < 2; i++ {
		resp, _ := get(t, c, "GET", s.APIBase()+"/gateway/bot", "Bot t", "")
		require.Equal(t, 200, resp.StatusCode)
	}
	resp, _ := get(t, c, "GET", s.APIBase()+"/gateway/bot", "Bot t", "")
	require.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "5.000", resp.Header.Get("X-RateLimit-Reset-After"), "no time has passed on the fake clock")
	assert.Equal(t, "1893456005.000", resp.Header.Get("X-RateLimit-Reset"))
	mu.Lock()
	now = now.Add(5 * time.Second)
	mu.Unlock()
	resp, _ = get(t, c, "GET", s.APIBase()+"/gateway/bot", "Bot t", "")
	assert.Equal(t, 200, resp.StatusCode)
}

func TestServerInjectsServerErrorsWithoutHeaders(t *testing.T) {
	s := start(t, sluicetest.Options{Faults: sluicetest.Faults{ServerErrorRate: 1}})
	resp, body := get(t, s.Client(), "GET", s.APIBase()+"/users/@me", "Bot t", "")
	assert.Equal(t, 502, resp.StatusCode)
	assert.Empty(t, resp.Header.Get("X-RateLimit-Limit"))
	assert.Contains(t, body, "502 Bad Gateway")
	s.SetFaults(sluicetest.Faults{ServerErrorRate: 1, ServerErrorStatus: 500})
	resp, body = get(t, s.Client(), "GET", s.APIBase()+"/users/@me", "Bot t", "")
	assert.Equal(t, 500, resp.StatusCode)
	assert.JSONEq(t, `{"message":"500: Internal Server Error","code":0}`, body)
	st := s.Stats()
	assert.Equal(t, 2, st.ServerErrors)
	assert.Zero(t, st.Requests, "injected errors spend nothing")
}

func TestServerDropsConnections(t *testing.T) {
	s := start(t, sluicetest.Options{Faults: sluicetest.Faults{DropRate: 1}})
	req, _ := http.NewRequest("GET", s.APIBase()+"/users/@me", nil)
	req.Header.Set("Authorization", "Bot t")
	_, err := s.Client().Do(req)
	require.Error(t, err)
	st := s.Stats()
	assert.Equal(t, 1, st.Dropped)
	assert.Equal(t, 1, st.Requests, "the request was counted before the drop: it may have been processed")
}

func TestServerGoAway(t *testing.T) {
	s := start(t, sluicetest.Options{Faults: sluicetest.Faults{GoAwayRate: 1}})
	c := s.Client()
	for i := 0; i < 3; i++ {
		resp, _ := get(t, c, "GET", s.APIBase()+"/channels/1", "Bot t", "")
		assert.Equal(t, 200, resp.StatusCode, "a graceful GOAWAY still answers the stream")
		assert.Empty(t, resp.Header.Get("Connection"))
	}
	assert.Equal(t, 3, s.Stats().GoAways)
}

func TestServerLatency(t *testing.T) {
	s := start(t, sluicetest.Options{Faults: sluicetest.Faults{Latency: 30 * time.Millisecond, Jitter: 10 * time.Millisecond}})
	began := time.Now()
	resp, _ := get(t, s.Client(), "GET", s.APIBase()+"/gateway", "", "")
	assert.Equal(t, 200, resp.StatusCode)
	assert.GreaterOrEqual(t, time.Since(began), 30*time.Millisecond, "the answer is delayed at least by Latency")
}

// ForwardJitter delays a request before the rules count it: the server's
// clock in its answer (X-RateLimit-Reset less Reset-After) reads a count
// time after the request left, by a trip that differs from request to
// request.
func TestServerForwardJitter(t *testing.T) {
	s := start(t, sluicetest.Options{Faults: sluicetest.Faults{ForwardJitter: 40 * time.Millisecond}})
	c := s.Client()
	var trips []time.Duration
	for i := range 20 {
		sent := time.Now()
		resp, _ := get(t, c, "GET", fmt.Sprintf("%s/channels/%d", s.APIBase(), 100+i), "Bot t", "")
		require.Equal(t, 200, resp.StatusCode)
		h, err := ratelimit.ParseHeaders(resp.Header, time.Now())
		require.NoError(t, err)
		require.True(t, h.Has.Reset && h.Has.ResetAfter)
		counted := h.Reset.Add(-h.ResetAfter)
		trips = append(trips, counted.Sub(sent))
	}
	lo, hi := slices.Min(trips), slices.Max(trips)
	assert.GreaterOrEqual(t, lo, -2*time.Millisecond, "counted after it left (Reset is in milliseconds)")
	assert.GreaterOrEqual(t, hi-lo, 10*time.Millisecond, "trips that differ: %v", trips)
}

func TestServerScheduledExternalGlobalAndAdminEndpoints(t *testing.T) {
	s := start(t, sluicetest.Options{Faults: sluicetest.Faults{ExternalGlobal: []sluicetest.GlobalOutage{{After: 0, For: time.Hour}}}})
	c := s.Client()
	resp, body := get(t, c, "GET", s.APIBase()+"/users/@me", "Bot t", "")
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "global", resp.Header.Get("X-RateLimit-Scope"))
	assert.Equal(t, "3600", resp.Header.Get("Retry-After"))
	assert.Contains(t, body, `"global":true`)

	resp, body = get(t, c, "GET", s.URL+"/_sluice/stats", "", "")
	require.Equal(t, 200, resp.StatusCode)
	var st sluicetest.Stats
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	assert.Equal(t, 1, st.InjectedGlobal)
	assert.Equal(t, 1, st.RateLimited["global"])

	resp, _ = get(t, c, "POST", s.URL+"/_sluice/reset", "", "")
	assert.Equal(t, 204, resp.StatusCode)
	assert.Zero(t, s.Stats().Requests)

	resp, _ = get(t, c, "POST", s.URL+"/_sluice/global?for=nonsense", "", "")
	assert.Equal(t, 400, resp.StatusCode)
	resp, _ = get(t, c, "POST", s.URL+"/_sluice/global?for=2s", "", "")
	assert.Equal(t, 204, resp.StatusCode)
	resp, body = get(t, c, "POST", s.URL+"/_sluice/drop", "", "")
	assert.Equal(t, 200, resp.StatusCode)
	assert.JSONEq(t, `{"dropped":0}`, body)
	resp, _ = get(t, c, "GET", s.URL+"/_sluice/nope", "", "")
	assert.Equal(t, 404, resp.StatusCode)
}

func TestServerDropConnectionsAndClose(t *testing.T) {
	arrived := make(chan struct{}, 2)
	clock := func() time.Time {
		select {
		case arrived <- struct{}{}:
		default:
		}
		return time.Now()
	}
	s, err := sluicetest.NewServer(sluicetest.Options{Clock: clock, Faults: sluicetest.Faults{Latency: time.Hour}})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("GET", s.APIBase()+"/gateway", nil)
		resp, err := s.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	// Close must not wait for the hour of latency: it ends the handler.
	<-arrived // NewServer read the clock
	<-arrived // the request reached the rules engine
	require.NoError(t, s.Close())
	require.Error(t, <-errc)
	require.NoError(t, s.Close(), "Close is idempotent")
}

// Close while requests keep arriving: a handler that starts during Close
// neither races its wait for the running ones (the race detector checks
// the WaitGroup) nor answers; every request ends.
func TestServerCloseWhileRequestsArrive(t *testing.T) {
	s, err := sluicetest.NewServer(sluicetest.Options{Faults: sluicetest.Faults{Latency: time.Millisecond}})
	require.NoError(t, err)
	answered := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				req, _ := http.NewRequest("GET", s.APIBase()+"/gateway", nil)
				resp, err := s.Client().Do(req)
				if err != nil {
					return // closed
				}
				resp.Body.Close()
				select {
				case answered <- struct{}{}:
				default:
				}
			}
		}()
	}
	for range 16 {
		<-answered
	}
	require.NoError(t, s.Close())
	wg.Wait()
}

func TestServerLateReset(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := start(t, sluicetest.Options{Clock: clock, Faults: sluicetest.Faults{LateReset: 300 * time.Millisecond}})
	c := s.Client()
	gw := s.APIBase() + "/gateway/bot" // 2 per 5 s
	for i := 0; i < 2; i++ {
		resp, _ := get(t, c, "GET", gw, "Bot t", "")
		require.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "5.000", resp.Header.Get("X-RateLimit-Reset-After"), "the on-time reset is announced")
		assert.Equal(t, "1893456005.000", resp.Header.Get("X-RateLimit-Reset"))
	}
	advance(5 * time.Second) // the announced reset
	resp, body := get(t, c, "GET", gw, "Bot t", "")
	require.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, 2, resp.ProtoMajor)
	assert.Equal(t, "user", resp.Header.Get("X-RateLimit-Scope"))
	assert.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "0.300", resp.Header.Get("X-RateLimit-Reset-After"))
	assert.Equal(t, "1893456005.300", resp.Header.Get("X-RateLimit-Reset"))
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.JSONEq(t, `{"message":"You are being rate limited.","retry_after":0.3,"global":false}`, body)
	advance(300 * time.Millisecond) // the real reopening
	resp, _ = get(t, c, "GET", gw, "Bot t", "")
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "5.000", resp.Header.Get("X-RateLimit-Reset-After"))

	resp, body = get(t, c, "GET", s.URL+"/_sluice/stats?timeline=0", "", "")
	require.Equal(t, 200, resp.StatusCode)
	var st sluicetest.Stats
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	assert.Equal(t, 1, st.RateLimited["user"])
	assert.Equal(t, 1, st.LateReset429s)
	assert.Equal(t, 1, st.LateResetExcused)
	require.Len(t, st.Buckets, 1)
	assert.Equal(t, 1, st.Buckets[0].LateReset429s)
	assert.Equal(t, 1, st.Buckets[0].LateResetExcused)
	assert.True(t, s.AssertNoViolations(t), "the client trusted the headers")

	// SetFaults turns it off and on at run time.
	s.SetFaults(sluicetest.Faults{})
	get(t, c, "GET", gw, "Bot t", "") // spends the window that opened at 5.3 s
	advance(5 * time.Second)
	resp, _ = get(t, c, "GET", gw, "Bot t", "")
	assert.Equal(t, 200, resp.StatusCode, "on time again")
	s.SetFaults(sluicetest.Faults{LateReset: time.Second})
	get(t, c, "GET", gw, "Bot t", "")
	advance(5 * time.Second)
	resp, _ = get(t, c, "GET", gw, "Bot t", "")
	require.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "1.000", resp.Header.Get("X-RateLimit-Reset-After"))
	assert.Equal(t, 2, s.Stats().LateReset429s)

	b, err := json.Marshal(sluicetest.Faults{LateReset: 300 * time.Millisecond})
	require.NoError(t, err)
	assert.JSONEq(t, `{"late_reset":300000000}`, string(b))
	var f sluicetest.Faults
	require.NoError(t, json.Unmarshal(b, &f))
	assert.Equal(t, 300*time.Millisecond, f.LateReset)
}

func TestServerEnforcedNonceAfterADroppedAnswer(t *testing.T) {
	s := start(t, sluicetest.Options{Faults: sluicetest.Faults{DropRate: 1}})
	c := s.Client()
	url := s.APIBase() + "/channels/42/messages"
	body := `{"content":"once","nonce":"resend-me","enforce_nonce":true}`
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bot t")
	_, err = c.Do(req)
	require.Error(t, err, "the connection was closed before the answer")
	st := s.Stats()
	assert.Equal(t, 1, st.Dropped)
	assert.Equal(t, 1, st.MessagesCreated, "the engine created the message before the drop")

	s.SetFaults(sluicetest.Faults{})
	resp, got := get(t, c, "POST", url, "Bot t", body)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 2, resp.ProtoMajor)
	assert.Equal(t, "3", resp.Header.Get("X-RateLimit-Remaining"), "both requests spent the bucket")
	var m struct {
		ID        string `json:"id"`
		ChannelID string `json:"channel_id"`
		Content   string `json:"content"`
		Nonce     string `json:"nonce"`
	}
	require.NoError(t, json.Unmarshal([]byte(got), &m))
	assert.NotEmpty(t, m.ID)
	assert.Equal(t, "42", m.ChannelID)
	assert.Equal(t, "once", m.Content)
	assert.Equal(t, "resend-me", m.Nonce)
	assert.NotContains(t, got, "enforce_nonce")
	// A third send gets the same message again.
	_, again := get(t, c, "POST", url, "Bot t", body)
	assert.JSONEq(t, got, again)

	st = s.Stats()
	assert.Equal(t, 1, st.MessagesCreated)
	assert.Equal(t, 2, st.MessagesDeduplicated)
	assert.Zero(t, st.DuplicateMessages)
	assert.True(t, sluicetest.AssertNoDuplicateMessages(t, st))
	assert.True(t, s.AssertNoViolations(t))

	// Resending without enforce_nonce creates the message twice.
	get(t, c, "POST", url, "Bot t", `{"content":"once","nonce":"resend-me"}`)
	resp, raw := get(t, c, "GET", s.URL+"/_sluice/stats?timeline=0", "", "")
	require.Equal(t, 200, resp.StatusCode)
	var js map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &js))
	assert.EqualValues(t, 2, js["messages_created"])
	assert.EqualValues(t, 2, js["messages_deduplicated"])
	assert.EqualValues(t, 1, js["duplicate_messages"])
}

// TestServerCountsRequestsInFlightPerBucket: with latency, requests a
// client sends together are answered together (MaxInFlight = how many),
// and requests sent one after the other never overlap (1).
func TestServerCountsRequestsInFlightPerBucket(t *testing.T) {
	s := start(t, sluicetest.Options{Faults: sluicetest.Faults{Latency: 500 * time.Millisecond}})
	c := s.Client()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", s.APIBase()+"/channels/1/messages", nil)
			req.Header.Set("Authorization", "Bot a")
			resp, err := c.Do(req)
			if assert.NoError(t, err) {
				resp.Body.Close()
				assert.Equal(t, 200, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	for range 2 {
		resp, _ := get(t, c, "GET", s.APIBase()+"/channels/2/messages", "Bot a", "")
		assert.Equal(t, 200, resp.StatusCode)
	}
	got := map[string]int{}
	for _, b := range s.Stats().Buckets {
		got[b.Major] = b.MaxInFlight
	}
	assert.Equal(t, map[string]int{"channel_id=1": 4, "channel_id=2": 1}, got)
}
