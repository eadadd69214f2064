package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/sluicetest"
)

// Tokens of the two modes: distinct, so that each has its own buckets and
// global window in the simulator.
const (
	directToken = "bench-direct"
	proxyToken  = "Bot bench-proxy"
)

// looseRules are four GET routes whose limits are far above what the
// benchmark sends, so that neither the simulator nor the limiters make a
// request wait for a rate limit: what is measured is the cost of the path.
func looseRules(limit int) sluicetest.RuleSet {
	w := sluicetest.Duration(time.Second)
	return sluicetest.RuleSet{
		GlobalLimit: limit, IPGlobalLimit: limit, GlobalWindow: w,
		Rules: []sluicetest.Rule{
			{Name: "get_channel", Method: "GET", Route: "/channels/{channel_id}", Bucket: "b0", Limit: limit, Window: w},
			{Name: "get_message", Method: "GET", Route: "/channels/{channel_id}/messages/{message_id}", Bucket: "b1", Limit: limit, Window: w},
			{Name: "get_guild", Method: "GET", Route: "/guilds/{guild_id}", Bucket: "b2", Limit: limit, Window: w},
			{Name: "get_user", Method: "GET", Route: "/users/{user_id}", Bucket: "b3", Limit: limit, Window: w},
		},
	}
}

// workload is the paths of n requests, relative to the API base, spread
// over the four routes and `channels` channels (and as many guilds).
func workload(n, channels int) []string {
	out := make([]string, n)
	for i := range out {
		id := strconv.Itoa(1000 + (i/4*7919)%channels)
		switch i % 4 {
		case 0:
			out[i] = "/channels/" + id
		case 1:
			out[i] = "/channels/" + id + "/messages/" + strconv.Itoa(500000+i%97)
		case 2:
			out[i] = "/guilds/" + id
		default:
			out[i] = "/users/" + strconv.Itoa(700000+i%13)
		}
	}
	return out
}

// distinct is every path of w once: the warm-up, so that bucket discovery
// and connection set-up stay out of the measured rounds.
func distinct(w []string) []string {
	s := slices.Clone(w)
	slices.Sort(s)
	return slices.Compact(s)
}

// doer sends one GET for a path relative to the API base and returns the
// status once the whole body has been read.
type doer func(ctx context.Context, path string) (int, error)

// sample is one mode's run of the workload.
type sample struct {
	mode    string
	round   int
	elapsed time.Duration
	lat     []time.Duration // sorted
	cpu     time.Duration   // CPU time of the whole process (0: unknown)
	bad     int             // errors and non-2xx answers
	firstE  string
}

func (s sample) rps() float64 { return float64(len(s.lat)) / s.elapsed.Seconds() }

// cpuPerReq is the process's CPU time per request, simulator included.
func (s sample) cpuPerReq() time.Duration { return s.cpu / time.Duration(len(s.lat)) }

// pct is the nearest-rank percentile q (0..1) of the sorted latencies.
func (s sample) pct(q float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	i := int(q*float64(len(s.lat))+0.999999) - 1
	return s.lat[min(max(i, 0), len(s.lat)-1)]
}

// run sends every path in w from c workers, one request at a time each.
func run(mode string, round int, do doer, w []string, c int) sample {
	lat := make([]time.Duration, len(w))
	var next atomic.Int64
	var bad atomic.Int64
	var firstE atomic.Value
	var wg sync.WaitGroup
	ctx := context.Background()
	cpu0, cpuOK := cpuTime()
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(w) {
					return
				}
				t0 := time.Now()
				status, err := do(ctx, w[i])
				lat[i] = time.Since(t0)
				if err != nil || status < 200 || status > 299 {
					bad.Add(1)
					if err == nil {
						err = fmt.Errorf("HTTP %d", status)
					}
					firstE.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	s := sample{mode: mode, round: round, elapsed: time.Since(start), lat: lat, bad: int(bad.Load())}
	if cpu1, ok := cpuTime(); ok && cpuOK {
		s.cpu = cpu1 - cpu0
	}
	if e, ok := firstE.Load().(string); ok {
		s.firstE = e
	}
	slices.Sort(s.lat)
	return s
}

// throughputSetup is the simulator, the direct limiter and the proxy
// behind a loopback HTTP/1.1 server, all in this process.
type throughputSetup struct {
	up     *upstream
	lim    *sluice.Limiter
	p      *proxy.Proxy
	srv    *http.Server
	front  string // http://127.0.0.1:port
	client *http.Client
}

func newThroughputSetup(p params) (*throughputSetup, error) {
	up, err := inProcess(sluicetest.Options{Rules: looseRules(p.limit), Faults: sluicetest.Faults{Latency: p.latency}})
	if err != nil {
		return nil, err
	}
	t := &throughputSetup{up: up}
	// One template for both: the direct limiter is the proxy's per-token
	// limiter made by hand.
	tmpl := sluice.Options{TLSConfig: up.tls, GlobalLimit: p.limit, IPGlobalLimit: p.limit}
	o := tmpl
	o.BaseURL, o.Token = up.apiBase, directToken
	if t.lim, err = sluice.New(o); err != nil {
		t.close()
		return nil, err
	}
	if t.p, err = proxy.New(proxy.Config{Upstream: up.apiBase, Limiter: tmpl}); err != nil {
		t.close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.close()
		return nil, err
	}
	t.front = "http://" + ln.Addr().String()
	t.srv = &http.Server{Handler: t.p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = t.srv.Serve(ln) }()
	// A bot's HTTP client with keep-alive: one idle connection kept per
	// caller (the default keeps two, which would open and close
	// connections all the time with more callers).
	t.client = &http.Client{Transport: &http.Transport{
		MaxIdleConns: 2 * p.c, MaxIdleConnsPerHost: 2 * p.c, IdleConnTimeout: 90 * time.Second,
	}}
	return t, nil
}

func (t *throughputSetup) direct(ctx context.Context, path string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := t.lim.Do(ctx, req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

func (t *throughputSetup) viaProxy(ctx context.Context, path string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.front+"/api/v10"+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", proxyToken)
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, err
}

func (t *throughputSetup) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if t.srv != nil {
		_ = t.srv.Shutdown(ctx)
	}
	if t.client != nil {
		t.client.CloseIdleConnections()
	}
	if t.p != nil {
		_ = t.p.Close(ctx)
	}
	if t.lim != nil {
		_ = t.lim.Close(ctx)
	}
	if t.up != nil {
		t.up.close()
	}
}

// throughputResult is every round of both modes and the simulator's
// accounting of them.
type throughputResult struct {
	samples []sample
	stats   sluicetest.Stats
	took    time.Duration
}

// measureThroughput runs the rounds: each round runs both modes, in
// alternating order (direct first in odd rounds, proxy first in even
// ones), so a slow spell of the machine does not fall on one mode only.
func measureThroughput(p params) (throughputResult, error) {
	began := time.Now()
	t, err := newThroughputSetup(p)
	if err != nil {
		return throughputResult{}, err
	}
	defer t.close()
	w := workload(p.n, p.channels)
	modes := []struct {
		name string
		do   doer
	}{{"direct", t.direct}, {"proxy", t.viaProxy}}
	// Warm-up: every distinct path once through each mode (buckets
	// learned, connections open), not measured.
	warm := distinct(w)
	for _, m := range modes {
		if s := run(m.name, 0, m.do, warm, p.c); s.bad > 0 {
			return throughputResult{}, fmt.Errorf("warm-up %s: %d of %d failed, first: %s", m.name, s.bad, len(warm), s.firstE)
		}
	}
	var res throughputResult
	for r := 1; r <= p.rounds; r++ {
		order := modes
		if r%2 == 0 {
			order = []struct {
				name string
				do   doer
			}{modes[1], modes[0]}
		}
		for _, m := range order {
			s := run(m.name, r, m.do, w, p.c)
			fmt.Fprintf(os.Stderr, "round %d %-6s %7.0f req/s  p50 %-9v p90 %-9v p99 %-9v CPU/req %-8v failed %d\n",
				r, m.name, s.rps(), rnd(s.pct(.5)), rnd(s.pct(.9)), rnd(s.pct(.99)), rnd(s.cpuPerReq()), s.bad)
			if s.bad > 0 {
				fmt.Fprintf(os.Stderr, "  first failure: %s\n", s.firstE)
			}
			res.samples = append(res.samples, s)
		}
	}
	res.stats = t.up.srv.Stats()
	res.took = time.Since(began)
	if bad := total429(res.stats); bad > 0 {
		return res, errors.New("the simulator answered 429s: the limits are not loose enough for this workload")
	}
	return res, nil
}

func total429(st sluicetest.Stats) int {
	n := 0
	for _, v := range st.RateLimited {
		n += v
	}
	return n
}

// rnd rounds a latency for display.
func rnd(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
