package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// The tests of "sluice proxy" run it as an OS process: this test binary
// again, which TestMain turns into the sluice command when childEnv is
// set, in front of a simulator run by the test.

// proxyStartTimeout bounds how long a proxy process may take to print its
// listening line, and proxyStopTimeout how long it may take to exit.
const (
	proxyStartTimeout = 30 * time.Second
	proxyStopTimeout  = 30 * time.Second
)

// proxyProc is a running "sluice proxy" process.
type proxyProc struct {
	t        *testing.T
	cmd      *exec.Cmd
	URL      string // where it listens, "http://127.0.0.1:port"
	Upstream string // the upstream its listening line names
	client   *http.Client

	first   string       // its listening line
	rest    syncBuffer   // the rest of its stdout, complete once outDone is closed
	stderr  bytes.Buffer // complete once it has been waited for
	outDone chan struct{}
	exited  bool
	code    int
}

// syncBuffer is a bytes.Buffer safe to read while another goroutine
// writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proxyTestEnv is this process's environment without any SLUICE_
// variable, plus the one that makes the test binary the sluice command.
func proxyTestEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, proxyEnvPrefix) {
			env = append(env, kv)
		}
	}
	return append(append(env, childEnv+"=1"), extra...)
}

// proxyCmd is "sluice proxy args..." with env added to a clean
// environment.
func proxyCmd(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, append([]string{"proxy"}, args...)...)
	cmd.Env = proxyTestEnv(env...)
	cmd.SysProcAttr = childProcAttr() // killed if the test dies
	return cmd
}

// startProxy starts "sluice proxy args..." and returns once it has printed
// the address it listens on. It is killed at the end of the test if it is
// still running.
func startProxy(t *testing.T, env []string, args ...string) *proxyProc {
	t.Helper()
	return launchProxy(t, &http.Client{Transport: &http.Transport{}}, env, args...)
}

// launchProxy is startProxy with the client p.get uses (an HTTPS one for
// a proxy given -tls-cert: startProxyTLS).
func launchProxy(t *testing.T, client *http.Client, env []string, args ...string) *proxyProc {
	t.Helper()
	p := &proxyProc{t: t, cmd: proxyCmd(t, env, args...), outDone: make(chan struct{})}
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	p.client = client
	t.Cleanup(func() {
		client.CloseIdleConnections()
		if !p.exited {
			_ = p.cmd.Process.Kill()
			p.wait(proxyStopTimeout)
		}
	})
	firstLine := make(chan string, 1)
	go func() {
		defer close(p.outDone)
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		firstLine <- line
		_, _ = io.Copy(&p.rest, r)
	}()
	timer := time.NewTimer(proxyStartTimeout)
	defer timer.Stop()
	select {
	case p.first = <-firstLine:
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		p.first = <-firstLine
	}
	m := regexp.MustCompile(`^sluice proxy listening on (https?://\S+) → (\S+)\n$`).FindStringSubmatch(p.first)
	if m == nil {
		if !p.exited {
			_ = p.cmd.Process.Kill()
			p.wait(proxyStopTimeout)
		}
		t.Fatalf("sluice proxy did not start: stdout %q, stderr:\n%s", p.first+p.rest.String(), p.stderr.String())
	}
	p.URL, p.Upstream = m[1], m[2]
	return p
}

// wait waits up to limit for the process to exit, kills it after that,
// and returns its exit status (-1 for a signal).
func (p *proxyProc) wait(limit time.Duration) int {
	p.t.Helper()
	if p.exited {
		return p.code
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-p.outDone:
	case <-timer.C:
		p.t.Errorf("sluice proxy still running %s later: killed", limit)
		_ = p.cmd.Process.Kill()
		<-p.outDone
	}
	err := p.cmd.Wait()
	p.exited = true
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		p.code = exit.ExitCode()
	default:
		p.t.Errorf("waiting for sluice proxy: %v", err)
		p.code = -1
	}
	return p.code
}

// stop sends sig and returns the exit status.
func (p *proxyProc) stop(sig os.Signal) int {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(sig))
	return p.wait(proxyStopTimeout)
}

// output is everything the process wrote; call it after it has exited.
func (p *proxyProc) output() (stdout, stderr string) {
	return p.first + p.rest.String(), p.stderr.String()
}

// get sends a GET to the proxy with the given headers (name, value, ...)
// and returns the status, headers and body.
func (p *proxyProc) get(path string, hdr ...string) (int, http.Header, string) {
	p.t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.URL+path, nil)
	require.NoError(p.t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := p.client.Do(req)
	require.NoError(p.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(p.t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// metric is the sum of the samples of a metric on the proxy's /metrics.
func (p *proxyProc) metric(name string) float64 {
	p.t.Helper()
	return scrape(p.t, p.client, p.URL, name)
}

// scrape is the sum of the samples of a metric on /metrics at base.
func scrape(t *testing.T, c *http.Client, base, name string) float64 {
	t.Helper()
	resp, err := c.Get(base + proxy.MetricsPath)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sum := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (!strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "{")) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, line)
		sum += v
	}
	return sum
}

// newUpstream starts a simulator for t; with TLS, its certificate is
// written to a file, returned for -ca-file.
func newUpstream(t *testing.T, opts sluicetest.Options) (srv *sluicetest.Server, caFile string) {
	t.Helper()
	srv, err := sluicetest.NewServer(opts)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	if !opts.H2C {
		caFile = filepath.Join(t.TempDir(), "upstream.pem")
		require.NoError(t, os.WriteFile(caFile, srv.CertificatePEM(), 0o600))
	}
	return srv, caFile
}

// waitFor polls cond every 10 ms until it holds, failing t after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after %s for %s", limit, what)
		}
		<-tick.C
	}
}

// proxyAnswer is what a client got for one request.
type proxyAnswer struct {
	status int
	reason string // the X-Sluice-Proxy header
	err    error
}

// sendAll sends reqs at once, each from its own goroutine through one
// plain HTTP/1.1 client, and returns the answers in order once all have
// come back; ended counts the requests answered (or failed) so far.
func sendAll(ctx context.Context, reqs []*http.Request, ended *atomic.Int64) (answers []proxyAnswer, wait func()) {
	tr := &http.Transport{}
	c := &http.Client{Transport: tr}
	answers = make([]proxyAnswer, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer ended.Add(1)
			resp, err := c.Do(req.WithContext(ctx))
			if err != nil {
				answers[i].err = err
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answers[i] = proxyAnswer{status: resp.StatusCode, reason: resp.Header.Get(proxy.ProxyHeader), err: err}
		}()
	}
	return answers, func() { wg.Wait(); tr.CloseIdleConnections() }
}

// messages is n POST /channels/{1..channels}/messages requests to the
// proxy at base, round robin, with token.
func messages(t *testing.T, base string, n, channels int, token string) []*http.Request {
	t.Helper()
	reqs := make([]*http.Request, n)
	for i := range reqs {
		body := fmt.Sprintf(`{"content":"message %d"}`, i)
		req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/api/v10/channels/%d/messages", base, 1+i%channels), strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", token)
		req.Header.Set("Content-Type", "application/json")
		reqs[i] = req
	}
	return reqs
}

// TestProxySIGTERMUnderLoadAnswersEveryRequest: SIGTERM while most of 150
// requests wait for their buckets (3 channels, 5 messages per 5 s each).
// Every request gets an HTTP answer: 200 from the API for those sent,
// 503 shutting_down for those still queued once the grace is over; the
// process exits 0 and the API saw no limit exceeded.
func TestProxySIGTERMUnderLoadAnswersEveryRequest(t *testing.T) {
	t.Parallel()
	srv, ca := newUpstream(t, sluicetest.Options{})
	p := startProxy(t, nil, "-listen", "127.0.0.1:0", "-upstream", srv.APIBase(), "-ca-file", ca, "-grace", "2s")
	assert.Equal(t, srv.APIBase(), p.Upstream)
	const n, channels, firstWindow = 150, 3, 3 * 5
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ended atomic.Int64
	answers, wait := sendAll(ctx, messages(t, p.URL, n, channels, "Bot t"), &ended)
	// Every request accepted (in flight, or already answered: counted
	// before the scrape, so none is counted twice) and the first window of
	// each channel answered; the others wait for the next window, 5 s
	// after the first.
	waitFor(t, 30*time.Second, "every request accepted and the first windows answered", func() bool {
		answered := ended.Load()
		return float64(answered)+p.metric("sluice_proxy_requests_in_flight") >= n && srv.Stats().ByStatus[200] >= firstWindow
	})
	signalled := time.Now()
	code := p.stop(syscall.SIGTERM)
	took := time.Since(signalled)
	wait()
	stdout, stderr := p.output()
	assert.Equal(t, 0, code, "exit status; stderr:\n%s", stderr)
	ok, refused := 0, 0
	for i, a := range answers {
		switch {
		case a.err != nil:
			t.Errorf("request %d got no answer: %v", i, a.err)
		case a.status == http.StatusOK && a.reason == "":
			ok++
		case a.status == http.StatusServiceUnavailable && a.reason == proxy.ReasonClosed:
			refused++
		default:
			t.Errorf("request %d: status %d, %s %q", i, a.status, proxy.ProxyHeader, a.reason)
		}
	}
	st := srv.Stats()
	t.Logf("%d answered 200, %d answered 503 %s; exit %s after SIGTERM", ok, refused, proxy.ReasonClosed, took.Round(time.Millisecond))
	assert.Equal(t, n, ok+refused)
	assert.GreaterOrEqual(t, ok, firstWindow)
	assert.Positive(t, refused, "requests were still queued at the signal")
	assert.Equal(t, st.Requests, ok, "every request the API answered was relayed")
	assert.Equal(t, st.ByStatus[200], ok)
	srv.AssertNoViolations(t)
	assert.Contains(t, stderr, "sluice proxy shutting down")
	assert.Contains(t, stderr, "sluice proxy stopped")
	assert.Equal(t, p.first, stdout, "one line on stdout")
}

// Clients may speak HTTP/1.1 or cleartext HTTP/2 (prior knowledge).
func TestProxyServesH2C(t *testing.T) {
	t.Parallel()
	srv, ca := newUpstream(t, sluicetest.Options{})
	p := startProxy(t, nil, "-listen", "127.0.0.1:0", "-upstream", srv.APIBase(), "-ca-file", ca)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protocols}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, p.URL+"/api/v10/users/@me", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bot t")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 2, resp.ProtoMajor)
	assert.Equal(t, 0, p.stop(syscall.SIGTERM))
}

// With -drain-delay, a signalled proxy says it is not ready but still
// serves, so a load balancer can stop sending before the listener closes.
func TestProxyDrainDelayKeepsServing(t *testing.T) {
	t.Parallel()
	srv, ca := newUpstream(t, sluicetest.Options{})
	p := startProxy(t, nil, "-listen", "127.0.0.1:0", "-upstream", srv.APIBase(), "-ca-file", ca, "-drain-delay", "3s", "-grace", "1s")
	status, _, _ := p.get("/readyz")
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	waitFor(t, 10*time.Second, "/readyz to answer 503", func() bool {
		status, _, _ := p.get("/readyz")
		return status == http.StatusServiceUnavailable
	})
	status, hdr, body := p.get("/api/v10/users/@me", "Authorization", "Bot t")
	assert.Equal(t, http.StatusOK, status, "still served while draining: %s", body)
	assert.Empty(t, hdr.Get(proxy.ProxyHeader))
	assert.Equal(t, 0, p.wait(proxyStopTimeout))
	_, stderr := p.output()
	assert.Contains(t, stderr, "sluice proxy draining")
	assert.Contains(t, stderr, "sluice proxy stopped")
}

// TestProxyReplicasShareLimitsThroughRedis: two proxy processes with one
// Redis in front of one API, the load alternating between them on one
// token. Together they stay within every limit, each serves half, and
// every request is answered 200.
func TestProxyReplicasShareLimitsThroughRedis(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	srv, _ := newUpstream(t, sluicetest.Options{H2C: true})
	// The token is also SLUICE_TOKEN, so each replica makes its limiter,
	// and subscribes to the token's wake-ups in Redis, at start; the load
	// waits for both subscriptions. (A limiter made by its first request
	// can miss another process's wake-up published before its
	// subscription is active, and wait out the lease, 40 s: redisstore.New
	// does not wait for its SUBSCRIBE.)
	const token = "Bot t"
	env := []string{"SLUICE_TOKEN=" + token}
	args := []string{"-listen", "127.0.0.1:0", "-upstream", srv.APIBase(), "-h2c", "-redis", rs.URL}
	replicas := []*proxyProc{startProxy(t, env, args...), startProxy(t, env, args...)}
	for _, p := range replicas {
		status, _, body := p.get(proxy.ReadyPath)
		assert.Equal(t, http.StatusOK, status, body)
		assert.Contains(t, body, `"redis":"ok"`)
	}
	wakes := redisstore.Namespace(token) + ":wake"
	rdb := rs.Client(t)
	waitFor(t, 30*time.Second, "both replicas subscribed to "+wakes, func() bool {
		n, err := rdb.PubSubNumSub(context.Background(), wakes).Result()
		require.NoError(t, err)
		return n[wakes] == int64(len(replicas))
	})
	// 3 channels × 15 messages (5 per 5 s each: windows at 0, 5 and 10 s)
	// and 12 user lookups (30 per 30 s), alternating between the replicas.
	const perChannel, channels, lookups = 15, 3, 12
	var reqs []*http.Request
	share := make([]int, len(replicas))
	for i, req := range messages(t, "", perChannel*channels, channels, token) {
		reqs = append(reqs, req)
		if i < lookups {
			get, err := http.NewRequest(http.MethodGet, fmt.Sprintf("/api/v10/users/%d", 100+i), nil)
			require.NoError(t, err)
			get.Header.Set("Authorization", token)
			reqs = append(reqs, get)
		}
	}
	for i, req := range reqs {
		p := replicas[i%len(replicas)]
		share[i%len(replicas)]++
		u, err := req.URL.Parse(p.URL + req.URL.Path)
		require.NoError(t, err)
		req.URL, req.Host = u, u.Host
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ended atomic.Int64
	start := time.Now()
	answers, wait := sendAll(ctx, reqs, &ended)
	wait()
	elapsed := time.Since(start)
	for i, a := range answers {
		if assert.NoError(t, a.err, "request %d", i) {
			assert.Equal(t, http.StatusOK, a.status, "request %d: %s %q", i, proxy.ProxyHeader, a.reason)
		}
	}
	ideal := time.Duration(perChannel/5-1) * 5 * time.Second
	t.Logf("%d requests through 2 replicas in %s; the rules allow it in %s at best (%.2f×)",
		len(reqs), elapsed.Round(10*time.Millisecond), ideal, elapsed.Seconds()/ideal.Seconds())
	st := srv.Stats()
	if !assert.Less(t, elapsed, 4*ideal, "sanity bound") {
		for _, b := range st.Buckets {
			var at []string
			for _, e := range b.Timeline {
				at = append(at, fmt.Sprintf("%s:%d", e.At.Round(10*time.Millisecond), e.Status))
			}
			t.Logf("bucket %s: %d windows, answers at %s", b.Key, b.Windows, strings.Join(at, " "))
		}
	}
	srv.AssertNoViolations(t)
	assert.Equal(t, len(reqs), st.Requests)
	assert.Equal(t, len(reqs), st.ByStatus[200])
	for i, p := range replicas {
		served := p.metric("sluice_proxy_requests_total")
		assert.Equal(t, float64(share[i]), served, "replica %d served its half", i+1)
		assert.Positive(t, served)
	}
	for i, p := range replicas {
		code := p.stop(syscall.SIGTERM)
		stdout, stderr := p.output()
		assert.Equal(t, 0, code, "replica %d; stderr:\n%s", i+1, stderr)
		assert.NotContains(t, stdout+stderr, token)
	}
}

// TestProxyEnvironmentAndFlags: settings from SLUICE_* variables, flags
// winning over them; health endpoints; SLUICE_TOKEN used for requests
// without Authorization and never shown.
func TestProxyEnvironmentAndFlags(t *testing.T) {
	t.Parallel()
	const token = "s3cr3t-t0ken-for-the-proxy-test"
	srv, ca := newUpstream(t, sluicetest.Options{Tokens: []string{token}})
	env := []string{
		"SLUICE_LISTEN=127.0.0.1:0", // the default, 127.0.0.1:8080, is not used
		"SLUICE_UPSTREAM=" + srv.APIBase(),
		"SLUICE_CA_FILE=" + ca,
		"SLUICE_MAX_QUEUE=77", // -max-queue wins
		"SLUICE_MAX_WAIT_HEADER=X-Env-Wait",
		"SLUICE_OVERFLOW_STATUS=429",
		"SLUICE_CACHE_404=0",
		"SLUICE_GRACE=",            // empty: unset
		"SLUICE_LOG_LEVEL=DEBUG",   // a line per request: the token must not be in any
		"SLUICE_LOG_FORMAT=json",   // parsed below
		"SLUICE_IDLE_TIMEOUT=bad!", // -idle-timeout wins: never parsed
		"SLUICE_TOKEN=" + token,
	}
	p := startProxy(t, env, "-max-queue", "88", "-max-wait-header", "X-Flag-Wait", "-idle-timeout", "1m")
	assert.Equal(t, srv.APIBase(), p.Upstream)
	assert.NotContains(t, p.URL, ":8080")

	status, _, body := p.get(proxy.HealthPath)
	assert.Equal(t, http.StatusOK, status, body)
	status, _, body = p.get(proxy.ReadyPath)
	assert.Equal(t, http.StatusOK, status, body)
	var ready map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &ready), body)
	assert.Equal(t, "ready", ready["status"], body)
	assert.Contains(t, []any{"connecting", "connected"}, ready["upstream"], "the default token's connection: %s", body)

	// No Authorization: the proxy sends SLUICE_TOKEN, the only token the
	// API accepts, on the bot's limits.
	status, hdr, body := p.get("/api/v10/users/@me")
	assert.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "4", hdr.Get("X-RateLimit-Remaining"))
	sum := sha256.Sum256([]byte(token))
	idents := []string{}
	for _, g := range srv.Stats().Globals {
		idents = append(idents, g.Identity)
	}
	assert.Equal(t, []string{"token:" + hex.EncodeToString(sum[:4])}, idents, "counted on the token's global limit")
	// A caller's own token is relayed; the API's 401 is cached (-cache-401
	// default 5 s), 404s are not (SLUICE_CACHE_404=0).
	for i, want := range []string{"", "hit"} {
		status, hdr, _ = p.get("/api/v10/channels/1", "Authorization", "Bot wrong")
		assert.Equal(t, http.StatusUnauthorized, status, "401 #%d", i+1)
		assert.Equal(t, want, hdr.Get(proxy.CacheHeader), "401 #%d", i+1)
	}
	// (An unknown route under a channel: an unknown one without major
	// parameters might share the hash of /users/@me, whose window the
	// limiter would then count it in.)
	before := srv.Stats().Requests
	for i := range 2 {
		status, hdr, _ = p.get("/api/v10/channels/5/nothing")
		assert.Equal(t, http.StatusNotFound, status, "404 #%d", i+1)
		assert.Empty(t, hdr.Get(proxy.CacheHeader), "404 #%d", i+1)
	}
	assert.Equal(t, before+2, srv.Stats().Requests, "both 404s came from the API")

	// The rest of the window, then one more that would wait ~5 s: the
	// flag's header (not the variable's) turns it away at once.
	for range 4 {
		status, _, body = p.get("/api/v10/users/@me")
		require.Equal(t, http.StatusOK, status, body)
	}
	status, hdr, _ = p.get("/api/v10/users/@me", "X-Env-Wait", "0.001", "X-Flag-Wait", "0.001")
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Equal(t, proxy.ReasonMaxWait, hdr.Get(proxy.ProxyHeader))

	code := p.stop(os.Interrupt)
	stdout, stderr := p.output()
	assert.Equal(t, 0, code, "exit status; stderr:\n%s", stderr)
	assert.NotContains(t, stdout, token)
	assert.NotContains(t, stderr, token)
	assert.NotContains(t, stderr, token[:12])

	// The settings in force, from the start record of the JSON log.
	var started map[string]any
	lines := 0
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "not a JSON log line: %s", line)
		lines++
		if rec["msg"] == "sluice proxy listening" {
			started = rec
		}
	}
	require.NotNil(t, started, "no start record in:\n%s", stderr)
	for k, want := range map[string]any{
		"upstream":        srv.APIBase(),
		"max_queue":       88.0,          // flag over variable
		"max_wait_header": "X-Flag-Wait", // flag over variable
		"idle_timeout":    60.0,          // durations in seconds
		"body_timeout":    60.0,
		"max_body":        float64(proxy.DefaultMaxBody),
		"overflow_status": 429.0, // variable over default
		"cache_404":       0.0,   // variable over default
		"cache_401":       5.0,
		"grace":           30.0, // empty variable: default
		"default_token":   true,
		"redis":           "",
	} {
		assert.Equal(t, want, started[k], k)
	}
	assert.Contains(t, stderr, `"level":"DEBUG"`)
	assert.Greater(t, lines, 10)
}

// runRejectedProxy runs `sluice proxy` with env and args as a process,
// which must refuse them: exit code 2, nothing on stdout. It returns
// stderr.
func runRejectedProxy(t *testing.T, env []string, args ...string) string {
	t.Helper()
	var stdout, stderr strings.Builder
	cmd := proxyCmd(t, env, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	kill := time.AfterFunc(proxyStopTimeout, func() {
		t.Errorf("still running %s later: killed", proxyStopTimeout)
		_ = cmd.Process.Kill()
	})
	err := cmd.Wait()
	kill.Stop()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
	assert.Equal(t, 2, exit.ExitCode(), "stderr: %s", stderr.String())
	assert.Empty(t, stdout.String(), "a rejected proxy must not start")
	return stderr.String()
}

// TestProxyBadValuesExit2: a value the proxy cannot take, from a flag or
// a variable, is a usage error naming it: exit status 2, one message on
// stderr, nothing on stdout, nothing started.
func TestProxyBadValuesExit2(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { busy.Close() }) // after the parallel subtests
	noRedis := "unix://" + filepath.Join(t.TempDir(), "none.sock")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	for _, tc := range []struct {
		env  []string
		args []string
		want string // in stderr
	}{
		{nil, []string{"-max-queue", "0"}, "sluice proxy: -max-queue must be 1 or more, got 0\nRun \"sluice proxy -h\" for usage.\n"},
		{[]string{"SLUICE_MAX_QUEUE=0"}, nil, "sluice proxy: SLUICE_MAX_QUEUE must be 1 or more, got 0\n"},
		{[]string{"SLUICE_MAX_QUEUE=lots"}, nil, `sluice proxy: invalid value "lots" for SLUICE_MAX_QUEUE: parse error`},
		{nil, []string{"-max-queue", "lots"}, `sluice proxy: invalid value "lots" for flag -max-queue: parse error`},
		{[]string{"SLUICE_MAX_TOKENS=0"}, nil, "SLUICE_MAX_TOKENS must be 1 or more, got 0"},
		{[]string{"SLUICE_IDLE_TIMEOUT=0s"}, nil, "SLUICE_IDLE_TIMEOUT must be more than 0s, got 0s"},
		{[]string{"SLUICE_OVERFLOW_STATUS=200"}, nil, "SLUICE_OVERFLOW_STATUS must be between 400 and 599, got 200"},
		{nil, []string{"-overflow-status", "600"}, "-overflow-status must be between 400 and 599, got 600"},
		{nil, []string{"-max-wait-header", "X Wait"}, `-max-wait-header "X Wait" is not a header name`},
		{[]string{"SLUICE_CACHE_404=-1s"}, nil, "SLUICE_CACHE_404 must be 0s or more, got -1s"},
		{nil, []string{"-cache-401", "soon"}, `invalid value "soon" for flag -cache-401`},
		{[]string{"SLUICE_GRACE=-5s"}, nil, "SLUICE_GRACE must be 0s or more, got -5s"},
		{[]string{"SLUICE_LOG_LEVEL=loud"}, nil, `SLUICE_LOG_LEVEL must be debug, info, warn or error, got "loud"`},
		{nil, []string{"-log-format", "xml"}, `-log-format must be text or json, got "xml"`},
		{[]string{"SLUICE_WEBHOOK_AUTH=maybe"}, nil, `invalid value "maybe" for SLUICE_WEBHOOK_AUTH`},
		{nil, []string{"-listen", "8080"}, `-listen "8080": want host:port`},
		{nil, []string{"-listen", busy.Addr().String(), "-upstream", "http://127.0.0.1:1/api"}, "sluice: -listen: listen tcp " + busy.Addr().String()},
		{[]string{"SLUICE_UPSTREAM=ftp://example.com/api"}, nil, `SLUICE_UPSTREAM "ftp://example.com/api": want an absolute http:// or https:// API base`},
		{nil, []string{"-upstream", "https://user:pw@example.com/api"}, `-upstream "https://user:xxxxx@example.com/api": must not carry credentials`},
		{nil, []string{"-h2c"}, "-h2c is for an http:// upstream; -upstream is https"},
		{nil, []string{"-upstream", "http://127.0.0.1:1/api", "-ca-file", notPEM}, "-ca-file is for an https upstream; -upstream is http"},
		{nil, []string{"-ca-file", notPEM}, "-ca-file " + notPEM + ": no PEM certificate in it"},
		{[]string{"SLUICE_CA_FILE=/nonexistent/ca.pem"}, nil, "SLUICE_CA_FILE: open /nonexistent/ca.pem: no such file or directory"},
		{nil, []string{"-redis", "http://localhost:6379"}, "-redis http://localhost:6379: redis: invalid URL scheme: http"},
		{[]string{"SLUICE_REDIS=redis://:pw@localhost:6379/x"}, nil, "SLUICE_REDIS redis://:xxxxx@localhost:6379/x: redis: invalid database number"},
		{nil, []string{"-redis-ip-key", "eu"}, "-redis-ip-key needs -redis"},
		{nil, []string{"-redis", noRedis, "-listen", "127.0.0.1:0"}, "sluice: Redis at " + noRedis + " (-redis) does not answer"},
		{nil, []string{"-token", "abc"}, "flag provided but not defined: -token (the token comes only from the environment variable SLUICE_TOKEN)"},
		{nil, []string{"extra"}, `sluice proxy: unexpected argument "extra": proxy takes no arguments`},
		{[]string{"SLUICE_TOKEN=bad\x01token"}, nil, "sluice proxy: SLUICE_TOKEN contains control characters\n"},
		// A flag wins over its variable, which is then not even read.
		{[]string{"SLUICE_MAX_QUEUE=lots"}, []string{"-max-queue", "5", "-log-format", "xml"}, "-log-format must be text or json"},
	} {
		t.Run(strings.Join(append(append([]string{}, tc.env...), tc.args...), " "), func(t *testing.T) {
			t.Parallel()
			stderr := runRejectedProxy(t, tc.env, tc.args...)
			assert.Contains(t, stderr, tc.want)
			assert.NotContains(t, stderr, "pw@")
			assert.NotContains(t, stderr, "bad\x01token")
		})
	}
}

// TestProxyHelp: "sluice proxy -h" and "sluice help proxy" print the usage
// with every flag, and no environment value is read for it.
// TestProxyMetricsOnTheirOwnListener: with -metrics-listen, /metrics is
// served there only (404 on the proxy's port, where clients are), and
// counts the requests the proxy's port relayed.
func TestProxyMetricsOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	srv, ca := newUpstream(t, sluicetest.Options{})
	p := startProxy(t, []string{"SLUICE_TOKEN=Bot metrics"}, "-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-upstream", srv.APIBase(), "-ca-file", ca)
	waitFor(t, 10*time.Second, "the metrics line", func() bool { return strings.Contains(p.rest.String(), "metrics on") })
	m := regexp.MustCompile(`sluice proxy metrics on (http://\S+)/metrics`).FindStringSubmatch(p.rest.String())
	require.NotNil(t, m, p.rest.String())
	status, _, body := p.get("/api/v10/channels/1/messages")
	require.Equal(t, http.StatusOK, status, body)
	status, _, _ = p.get(proxy.MetricsPath)
	assert.Equal(t, http.StatusNotFound, status, "no metrics on the clients' port")
	assert.Equal(t, 1.0, scrape(t, p.client, m[1], "sluice_proxy_requests_total"))
	assert.Equal(t, 0, p.stop(syscall.SIGTERM))
}

func TestProxyHelp(t *testing.T) {
	for _, args := range [][]string{{"proxy", "-h"}, {"help", "proxy"}, {"proxy", "--help"}} {
		var out, errOut strings.Builder
		require.NoError(t, run(context.Background(), args, &out, &errOut), args)
		assert.Empty(t, errOut.String())
		assert.Contains(t, out.String(), "Usage: sluice proxy [flags]")
		for _, f := range []string{"listen", "upstream", "h2c", "ca-file", "redis", "redis-ip-key", "max-tokens", "idle-timeout", "max-queue",
			"overflow-status", "max-wait-header", "cache-404", "cache-401", "webhook-auth", "grace", "drain-delay", "log-level", "log-format",
			"max-body", "max-buffered", "body-timeout", "metrics-listen", "max-conns"} {
			assert.Regexp(t, `\n  -`+f+`[ \n]`, out.String())
		}
		assert.Contains(t, out.String(), "SLUICE_TOKEN")
	}
	var out strings.Builder
	require.NoError(t, run(context.Background(), []string{"help"}, &out, io.Discard))
	assert.Contains(t, out.String(), "sluice proxy [flags]")
}

// TestProxyParseFlags checks the environment rules without a process.
func TestProxyParseFlags(t *testing.T) {
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	f, done, err := parseProxyFlags(nil, env(nil), io.Discard)
	require.NoError(t, err)
	require.False(t, done)
	assert.Equal(t, "127.0.0.1:8080", f.listen)
	assert.Equal(t, proxy.DefaultMaxQueue, f.maxQueue)
	assert.Equal(t, proxy.DefaultCacheTTL(), f.cacheTTL())
	assert.Empty(t, f.token)

	f, _, err = parseProxyFlags([]string{"-cache-401", "0", "-upstream", "http://127.0.0.1:1"}, env(map[string]string{
		"SLUICE_CACHE_404": "0", "SLUICE_CACHE_401": "9s", "SLUICE_H2C": "true", "SLUICE_TOKEN": "  abc \n",
		"SLUICE_UPSTREAM": "https://ignored.example", "SLUICE_REDIS_IP_KEY": "", "SLUICE_WEBHOOK_AUTH": "1",
	}), io.Discard)
	require.NoError(t, err)
	ttl := f.cacheTTL()
	assert.NotNil(t, ttl, "both caches off is an empty map, not the defaults")
	assert.Empty(t, ttl)
	assert.True(t, f.h2c)
	assert.True(t, f.webhookAuth)
	assert.Equal(t, "http://127.0.0.1:1", f.upstream)
	assert.Equal(t, "abc", f.token)
	assert.Equal(t, map[string]string{"cache-404": "SLUICE_CACHE_404", "h2c": "SLUICE_H2C", "webhook-auth": "SLUICE_WEBHOOK_AUTH"}, f.from)
	assert.Equal(t, "SLUICE_CACHE_404", proxyEnvName("cache-404"))
	assert.Equal(t, "SLUICE_REDIS_IP_KEY", proxyEnvName("redis-ip-key"))
}

// TestProxyInProcessStopsCleanly runs the command in this process and
// cancels it as a signal would: it returns nil once the queued request
// has been answered 503, leaving no goroutine behind (TestMain checks).
func TestProxyInProcessStopsCleanly(t *testing.T) {
	srv, _ := newUpstream(t, sluicetest.Options{H2C: true})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"proxy", "-listen", "127.0.0.1:0", "-upstream", srv.APIBase(), "-grace", "0"}, pw, io.Discard)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	require.True(t, sc.Scan())
	m := regexp.MustCompile(`^sluice proxy listening on (http://\S+) → `).FindStringSubmatch(sc.Text())
	require.NotNil(t, m, sc.Text())
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	// 6 messages to one channel: the 6th waits 5 s for the next window.
	var ended atomic.Int64
	answers, wait := sendAll(context.Background(), messages(t, m[1], 6, 1, "Bot t"), &ended)
	waitFor(t, 30*time.Second, "5 answered and the 6th queued", func() bool {
		return ended.Load() == 5 && scrape(t, c, m[1], "sluice_proxy_requests_in_flight") == 1
	})
	cancel(interrupted{syscall.SIGTERM})
	require.NoError(t, <-errc)
	wait()
	statuses := map[int]int{}
	for _, a := range answers {
		require.NoError(t, a.err)
		statuses[a.status]++
	}
	assert.Equal(t, map[int]int{200: 5, 503: 1}, statuses)
	_, err := c.Get(m[1] + proxy.HealthPath)
	assert.Error(t, err, "no longer listening")
	srv.AssertNoViolations(t)
}
