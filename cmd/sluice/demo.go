package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// demoConfig is what the demo's flags choose.
type demoConfig struct {
	scenario string
	size     int
	trace    bool
	progress bool
	out      io.Writer
	errOut   io.Writer

	// With processes > 1, that many OS processes share one token through
	// Redis (multi.go): the one at redisURL, or a private redis-server
	// (redisBin) that killRedis kills mid-load and restarts.
	processes int
	redisURL  string
	redisBin  string
	killRedis bool
}

// job is one request of the demo's load.
type job struct {
	kind     string
	req      *http.Request
	priority sluice.Priority // sent with sluice.WithPriority
	delay    time.Duration   // when the load sends it, from its start
}

// demo runs the simulator and a limiter in-process and drives a load
// through them, showing the limiter's state as it goes and a report at the
// end.
func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	cfg := demoConfig{out: stdout, errOut: stderr}
	fs.StringVar(&cfg.scenario, "scenario", "mixed", "load to drive: mixed, saturated, fanout, burst, shared, sublimit, global429, faults, priorities")
	fs.IntVar(&cfg.size, "size", 600, "number of requests, 1 to 100000")
	fs.BoolVar(&cfg.trace, "trace", false, "print every actor message and state transition to stderr")
	progress := fs.String("progress", "auto", "live view: auto (when stdout is a terminal), on, off")
	fs.IntVar(&cfg.processes, "processes", 1, "OS processes sharing one token through Redis, 1 to 64 (1: one process, no Redis)")
	fs.StringVar(&cfg.redisURL, "redis", "", "Redis `URL` the processes share (redis://host:port/db or unix:///path); default: a private redis-server on a unix socket, if installed")
	fs.BoolVar(&cfg.killRedis, "kill-redis", false, "kill the private redis-server a quarter into the load and restart it 5 s later, to show the fallback (with -processes, without -redis)")
	const usage = "Usage: sluice demo [flags]\n\nStart the simulator in-process, drive a realistic load through Sluice and report.\nNo network is needed. Interrupted (Ctrl-C), it reports what completed and exits 130.\n" +
		"With -processes N, N OS processes (this program run again) share one token through\nRedis, each with its share of the load, and the simulator judges them together.\n"
	if done, err := parseFlags(fs, args, usage, stdout); done {
		return err
	}
	if err := between("demo", "size", cfg.size, 1, 100_000); err != nil {
		return err
	}
	switch *progress {
	case "on":
		cfg.progress = true
	case "off":
	case "auto":
		if f, ok := stdout.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				cfg.progress = true
			}
		}
	default:
		return usageErrorf("demo", "-progress must be auto, on or off, got %q", *progress)
	}
	if _, ok := scenarios[cfg.scenario]; !ok {
		return usageErrorf("demo", "unknown -scenario %q", cfg.scenario)
	}
	if err := checkMultiFlags(&cfg); err != nil {
		return err
	}
	if cfg.processes > 1 {
		return runMultiDemo(ctx, cfg)
	}
	return runDemo(ctx, cfg)
}

// demoRules are Discord's rules with windows shortened five times, and the
// hidden rename sublimit (2 per 10 minutes) shortened to 3 s, so the demo
// finishes in well under a minute.
func demoRules() sluicetest.RuleSet {
	rs := sluicetest.DefaultRules().Scaled(0.2)
	for i := range rs.Rules {
		for j := range rs.Rules[i].Sublimits {
			rs.Rules[i].Sublimits[j].Window = sluicetest.Duration(3 * time.Second)
		}
	}
	return rs
}

// demoLimits are sluice.DefaultLimits on the demo's clock, as demoRules:
// windows ×0.2, the rename limit 3 s. Declared, the hidden rename limit
// draws no 429.
func demoLimits() []sluice.Limit {
	ls := sluice.DefaultLimits()
	for i := range ls {
		ls[i].Window /= 5
		if ls[i].Name == "channel_name_topic" {
			ls[i].Window = 3 * time.Second
		}
	}
	return ls
}

func newJob(kind, method, path, body string) job {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, path, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return job{kind: kind, req: req}
}

// scenarios build the load: n requests, in submission order.
var scenarios = map[string]func(n int) []job{
	"mixed":      mixedLoad,
	"saturated":  saturatedLoad,
	"fanout":     fanoutLoad,
	"burst":      burstLoad,
	"shared":     sharedLoad,
	"sublimit":   sublimitLoad,
	"global429":  fanoutLoad,
	"faults":     mixedLoad,
	"priorities": prioritiesLoad,
}

// mixedLoad is what a busy bot sends: many channels, a hot channel,
// reactions, a route never seen, routes sharing a hash, interaction
// callbacks, reads and a few channel renames.
func mixedLoad(n int) []job {
	{
		var jobs []job
		for i := 0; len(jobs) < n; i++ {
			switch i % 20 {
			case 0, 1, 2, 3, 4, 5, 6, 7: // many channels
				jobs = append(jobs, newJob("fan-out", "POST", fmt.Sprintf("/channels/%d/messages", 2000+i%40), fmt.Sprintf(`{"content":"fan %d"}`, i)))
			case 8, 9, 10: // a hot channel
				jobs = append(jobs, newJob("hot channel", "POST", "/channels/1000/messages", fmt.Sprintf(`{"content":"hot %d"}`, i)))
			case 11, 12: // reactions on one message
				jobs = append(jobs, newJob("reactions", "PUT", fmt.Sprintf("/channels/1000/messages/1/reactions/%s/@me", []string{"%F0%9F%91%8D", "%E2%9D%A4"}[i%2]), ""))
			case 13, 14: // a burst onto a route never seen
				jobs = append(jobs, newJob("new route", "PATCH", fmt.Sprintf("/channels/1001/messages/%d", 5000+i), `{"content":"edited"}`))
			case 15, 16: // two routes sharing a hash
				jobs = append(jobs, newJob("shared hash", []string{"PUT", "DELETE"}[i%2], fmt.Sprintf("/guilds/77/members/%d/roles/9", i), ""))
			case 17: // interaction callbacks: exempt from the global limit
				jobs = append(jobs, newJob("interactions", "POST", fmt.Sprintf("/interactions/%d/token-%d/callback", 900000000000000000+i, i), `{"type":4}`))
			case 18: // reads
				jobs = append(jobs, newJob("reads", "GET", fmt.Sprintf("/channels/%d/messages/%d", 2000+i%40, i), ""))
			case 19: // renames: a hidden sublimit
				if i%100 == 19 {
					jobs = append(jobs, newJob("renames", "PATCH", "/channels/1002", fmt.Sprintf(`{"name":"room-%d"}`, i)))
				} else {
					jobs = append(jobs, newJob("fan-out", "POST", fmt.Sprintf("/channels/%d/messages", 2000+i%40), `{"content":"fan"}`))
				}
			}
		}
		return jobs[:n]
	}
}

// saturatedLoad sends everything to one channel.
func saturatedLoad(n int) []job {
	jobs := make([]job, n)
	for i := range jobs {
		jobs[i] = newJob("hot channel", "POST", "/channels/1000/messages", fmt.Sprintf(`{"content":"%d"}`, i))
	}
	return jobs
}

// fanoutLoad spreads messages over 100 channels.
func fanoutLoad(n int) []job {
	jobs := make([]job, n)
	for i := range jobs {
		jobs[i] = newJob("fan-out", "POST", fmt.Sprintf("/channels/%d/messages", 2000+i%100), fmt.Sprintf(`{"content":"%d"}`, i))
	}
	return jobs
}

// burstLoad edits messages of one channel: a route not yet seen.
func burstLoad(n int) []job {
	jobs := make([]job, n)
	for i := range jobs {
		jobs[i] = newJob("new route", "PATCH", fmt.Sprintf("/channels/1001/messages/%d", i), `{"content":"e"}`)
	}
	return jobs
}

// sharedLoad alternates adding and removing a role: two routes, one hash.
func sharedLoad(n int) []job {
	jobs := make([]job, n)
	for i := range jobs {
		jobs[i] = newJob("shared hash", []string{"PUT", "DELETE"}[i%2], fmt.Sprintf("/guilds/77/members/%d/roles/9", i), "")
	}
	return jobs
}

// sublimitLoad renames one channel again and again: a hidden sublimit.
func sublimitLoad(n int) []job {
	jobs := make([]job, n)
	for i := range jobs {
		jobs[i] = newJob("renames", "PATCH", "/channels/1002", fmt.Sprintf(`{"name":"room-%d"}`, i))
	}
	return jobs
}

// prioritiesLoad is bulk work and a user's interactions: nine in ten
// requests are bulk messages over 60 channels, all at once, filling the
// global limit; the tenth are interactive messages sent one by one over
// the bulk work's span (at the demo's global 50/s), alternately on a
// channel of their own and on one of the bulk work's channels.
func prioritiesLoad(n int) []job {
	interactive := n / 10
	bulk := n - interactive
	span := time.Duration(bulk) * time.Second / 50
	jobs := make([]job, 0, n)
	for i := range bulk {
		j := newJob("bulk", "POST", fmt.Sprintf("/channels/%d/messages", 3000+i%60), fmt.Sprintf(`{"content":"bulk %d"}`, i))
		j.priority = sluice.PriorityBulk
		jobs = append(jobs, j)
	}
	for k := range interactive {
		kind, channel := "interactive", 4000+k
		if k%2 == 1 {
			kind, channel = "interactive*", 3000+k*7%60 // on a bulk channel
		}
		j := newJob(kind, "POST", fmt.Sprintf("/channels/%d/messages", channel), fmt.Sprintf(`{"content":"interactive %d"}`, k))
		j.priority = sluice.PriorityInteractive
		j.delay = time.Duration(k+1) * span / time.Duration(interactive+1)
		jobs = append(jobs, j)
	}
	return jobs
}

// sendJobs sends every job with its priority, at its delay from now (those
// without one at once, in order), and records each outcome in t, then
// calls done (nil: nothing). wg counts the jobs without an outcome. A job
// whose delay has not come when ctx ends is recorded as cancelled, unsent.
func sendJobs(ctx context.Context, lim *sluice.Limiter, jobs []job, t *tally, wg *sync.WaitGroup, done func()) {
	start := time.Now()
	finish := func(j job, resp *http.Response, err error) {
		t.add(j.kind, resp, err)
		if done != nil {
			done()
		}
	}
	await := func(j job, f *sluice.Future, sent time.Time) {
		resp, err := f.Await(context.Background())
		t.took(j.kind, time.Since(sent))
		finish(j, resp, err)
	}
	for _, j := range jobs {
		wg.Add(1)
		if j.delay <= 0 {
			sent := time.Now()
			f := lim.Send(sluice.WithPriority(ctx, j.priority), j.req)
			go func() {
				defer wg.Done()
				await(j, f, sent)
			}()
			continue
		}
		go func() {
			defer wg.Done()
			timer := time.NewTimer(time.Until(start.Add(j.delay)))
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
				finish(j, nil, ctx.Err())
				return
			}
			sent := time.Now()
			await(j, lim.Send(sluice.WithPriority(ctx, j.priority), j.req), sent)
		}()
	}
}

// faultsFor adds the scenario's faults: the mixed load meets an external
// global 429 and a dropped connection; "faults" adds 5xx and drops.
func faultsFor(scenario string) sluicetest.Faults {
	f := sluicetest.Faults{Latency: 15 * time.Millisecond, Jitter: 10 * time.Millisecond}
	switch scenario {
	case "mixed", "global429":
		f.ExternalGlobal = []sluicetest.GlobalOutage{{After: 3 * time.Second, For: 800 * time.Millisecond}}
	case "faults":
		f.ServerErrorRate, f.DropRate = 0.03, 0.005
	}
	return f
}

type tally struct {
	mu        sync.Mutex
	byKind    map[string]map[string]int  // kind -> outcome -> count
	times     map[string][]time.Duration // kind -> from send to outcome
	done      atomic.Int64               // requests ended, cancelled ones included
	cancelled atomic.Int64               // requests ended by the demo's interruption
	started   time.Time
}

// took records how long a request of kind took from its send to its
// outcome.
func (t *tally) took(kind string, d time.Duration) {
	t.mu.Lock()
	if t.times == nil {
		t.times = map[string][]time.Duration{}
	}
	t.times[kind] = append(t.times[kind], d)
	t.mu.Unlock()
}

func (t *tally) add(kind string, resp *http.Response, err error) {
	outcome := "error"
	switch {
	case err == nil:
		outcome = fmt.Sprint(resp.StatusCode)
		resp.Body.Close()
	case errors.Is(err, sluice.ErrConnectionDied):
		outcome = "connection died"
	case errors.Is(err, sluice.ErrRateLimited):
		outcome = "rate limited"
	case errors.Is(err, context.Canceled): // the demo was interrupted
		outcome = "cancelled"
		t.cancelled.Add(1)
	default:
		outcome = "error: " + err.Error()
	}
	t.mu.Lock()
	if t.byKind[kind] == nil {
		t.byKind[kind] = map[string]int{}
	}
	t.byKind[kind][outcome]++
	t.mu.Unlock()
	t.done.Add(1)
}

func runDemo(ctx context.Context, cfg demoConfig) error {
	rules := demoRules()
	srv, err := sluicetest.NewServer(sluicetest.Options{Rules: rules, Faults: faultsFor(cfg.scenario), TimelineLimit: -1})
	if err != nil {
		return err
	}
	defer srv.Close()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	opts := sluice.Options{BaseURL: srv.APIBase(), Token: "demo-token", TLSConfig: srv.ClientTLSConfig(), MeterProvider: mp,
		Limits: demoLimits()}
	if cfg.trace {
		opts.Trace = printTrace(cfg.errOut, "")
	}
	lim, err := sluice.New(opts)
	if err != nil {
		return err
	}
	defer lim.Close(context.Background())

	jobs := scenarios[cfg.scenario](cfg.size)
	fmt.Fprintf(cfg.out, "Sluice demo: %q, %d requests against the simulator at %s\n", cfg.scenario, len(jobs), srv.URL)
	fmt.Fprintf(cfg.out, "Rules: Discord's, windows ×0.2 (messages 5/s per channel, reactions 1 per 50 ms), renames 2 per 3 s (hidden, declared to Sluice), global %d/s\n\n", rules.GlobalLimit)

	t := &tally{byKind: map[string]map[string]int{}, started: time.Now()}
	var wg sync.WaitGroup
	sendJobs(ctx, lim, jobs, t, &wg, nil)
	dropped := false
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastPlain := time.Now()
	lines := 0
	for running := true; running; {
		select {
		case <-finished:
			running = false
		case <-ctx.Done():
			<-finished // every request ends with the context's error
			running = false
		case <-tick.C:
			if cfg.scenario == "mixed" && !dropped && time.Since(t.started) > 5*time.Second {
				dropped = true
				srv.DropConnections() // the connection dies mid-run
			}
			if cfg.progress {
				lines = drawLive(cfg.out, lim, t, len(jobs), lines)
			} else if time.Since(lastPlain) >= 2*time.Second {
				lastPlain = time.Now()
				fmt.Fprintf(cfg.out, "  %d/%d done after %s\n", t.done.Load(), len(jobs), time.Since(t.started).Round(100*time.Millisecond))
			}
		}
	}
	if cfg.progress {
		drawLive(cfg.out, lim, t, len(jobs), lines)
	}
	elapsed := time.Since(t.started)
	// Interrupted: some requests were cancelled. (Every request ended
	// before a late signal is a finished run.)
	interrupted := t.cancelled.Load() > 0
	report(cfg.out, jobs, t, srv.Stats(), rules, faultsFor(cfg.scenario).ExternalGlobal, readMetrics(reader), elapsed, interrupted)
	if interrupted {
		return context.Cause(ctx)
	}
	if v := srv.Stats().Violations(); len(v) > 0 {
		return fmt.Errorf("the simulator saw avoidable 429s: %s", strings.Join(v, "; "))
	}
	return nil
}

// drawLive redraws the live view: a progress bar, the supervisor and the
// busiest buckets. It returns the number of lines drawn.
func drawLive(w io.Writer, lim *sluice.Limiter, t *tally, total, prev int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	snap, err := lim.Snapshot(ctx)
	cancel()
	var b strings.Builder
	if prev > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", prev) // back to the top of the last frame
	}
	done := int(t.done.Load())
	const width = 40
	filled := width * done / max(total, 1)
	fmt.Fprintf(&b, "\x1b[2K[%s%s] %d/%d  %s\n", strings.Repeat("█", filled), strings.Repeat("·", width-filled), done, total,
		time.Since(t.started).Round(100*time.Millisecond))
	lines := 1
	if err == nil {
		global := ""
		for _, w := range snap.Windows {
			global += fmt.Sprintf("  global %s %d/%d", w.Name, w.Used, w.Limit)
			if w.PausedFor > 0 {
				global += " paused " + w.PausedFor.Round(10*time.Millisecond).String()
			}
		}
		fmt.Fprintf(&b, "\x1b[2Ksupervisor %-13s breaker %-9s pending %-4d on the wire %-4d%s\n",
			snap.State, snap.Breaker, snap.Pending, snap.Running, global)
		bs := append([]sluice.BucketSnapshot(nil), snap.Buckets...)
		sort.SliceStable(bs, func(i, j int) bool { return bs[i].Queued+bs[i].Running > bs[j].Queued+bs[j].Running })
		// The ETA of each bucket's last waiting request: when its queue
		// drains, and which limit decides it.
		last := map[string]sluice.ETA{}
		for _, r := range snap.Requests {
			if e, ok := last[r.Bucket]; !ok || r.ETA.Start.After(e.Start) {
				last[r.Bucket] = r.ETA
			}
		}
		fmt.Fprintf(&b, "\x1b[2K%-58s %-10s %6s %9s %8s %6s  %s\n", "bucket", "state", "queued", "remaining", "reset in", "wire", "last ETA")
		lines += 2
		for i := 0; i < 6; i++ {
			if i >= len(bs) {
				fmt.Fprint(&b, "\x1b[2K\n")
			} else {
				x := bs[i]
				rem := "?"
				if x.Known {
					rem = fmt.Sprintf("%d/%d", x.Remaining, x.Limit)
				}
				eta := ""
				if e, ok := last[x.Key]; ok {
					eta = fmt.Sprintf("+%s (%s)", e.Wait(snap.Time).Round(10*time.Millisecond), e.Limit)
				}
				fmt.Fprintf(&b, "\x1b[2K%-58s %-10s %6d %9s %8s %6d  %s\n", trim(x.Key, 58), x.State, x.Queued+x.Retrying, rem,
					x.ResetIn.Round(10*time.Millisecond), x.Running, eta)
			}
			lines++
		}
		drain := ""
		if n := len(snap.Requests); n > 0 {
			e := snap.Requests[n-1].ETA // the last submitted
			drain = fmt.Sprintf(", %d waiting%s, the last submitted goes in +%s (%s, place %d in its bucket)", n, byPriority(snap.Requests),
				e.Wait(snap.Time).Round(10*time.Millisecond), e.Limit, e.Position)
		}
		fmt.Fprintf(&b, "\x1b[2K%d live buckets%s\n", len(snap.Buckets), drain)
		lines++
	}
	for ; lines < prev; lines++ {
		b.WriteString("\x1b[2K\n")
	}
	io.WriteString(w, b.String())
	return lines
}

// byPriority counts the waiting requests by priority, as " (interactive
// 2, bulk 40)", or "" when all are of the default.
func byPriority(rs []sluice.RequestSnapshot) string {
	counts := map[sluice.Priority]int{}
	for _, r := range rs {
		counts[r.Priority]++
	}
	if len(counts) == 0 || len(counts) == 1 && counts[sluice.PriorityNormal] > 0 {
		return ""
	}
	var parts []string
	for _, p := range []sluice.Priority{sluice.PriorityInteractive, sluice.PriorityNormal, sluice.PriorityBulk} {
		if counts[p] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", p, counts[p]))
		}
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// report prints what happened: outcomes, rates against what the rules
// allow, 429s by scope, retries and where the time went. An interrupted
// run says so, counts the requests that completed, and is not compared
// with the ideal time of the whole load.
func report(w io.Writer, jobs []job, t *tally, st sluicetest.Stats, rules sluicetest.RuleSet, outages []sluicetest.GlobalOutage, m demoMetrics, elapsed time.Duration, interrupted bool) {
	completed := len(jobs) - int(t.cancelled.Load())
	if interrupted {
		fmt.Fprintf(w, "\nInterrupted after %s: %d of %d requests completed, %d cancelled\n\n",
			elapsed.Round(10*time.Millisecond), completed, len(jobs), len(jobs)-completed)
	} else {
		fmt.Fprintf(w, "\nDone: %d requests in %s\n\n", len(jobs), elapsed.Round(10*time.Millisecond))
	}
	kinds := make([]string, 0, len(t.byKind))
	for k := range t.byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Fprintln(w, "Outcomes by kind of request:")
	for _, k := range kinds {
		var parts []string
		for o, n := range t.byKind[k] {
			parts = append(parts, fmt.Sprintf("%s ×%d", o, n))
		}
		sort.Strings(parts)
		fmt.Fprintf(w, "  %-13s %s\n", k, strings.Join(parts, ", "))
	}
	prioritized := false
	for _, j := range jobs {
		prioritized = prioritized || j.priority != sluice.PriorityNormal
	}
	if t.times != nil && prioritized {
		fmt.Fprintln(w, "\nFrom send to answer, by kind (p50 / p99 / max):")
		for _, k := range kinds {
			ds := t.times[k]
			if len(ds) == 0 {
				continue
			}
			slices.Sort(ds)
			q := func(p float64) time.Duration {
				return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(time.Millisecond)
			}
			fmt.Fprintf(w, "  %-13s %v / %v / %v\n", k, q(0.5), q(0.99), ds[len(ds)-1].Round(time.Millisecond))
		}
		fmt.Fprintln(w, "  (interactive* are on the bulk work's channels: they may wait for their bucket's window too)")
	}

	exempt := 0
	for _, j := range jobs {
		if strings.HasPrefix(j.req.URL.Path, "/interactions/") {
			exempt++
		}
	}
	if interrupted {
		fmt.Fprintf(w, "\nNo ratio to the ideal time: the run was interrupted, and the ideal is for all %d requests\n", len(jobs))
	} else {
		ideal, why := idealDuration(len(jobs)-exempt, st, rules, outages)
		fmt.Fprintf(w, "\nIdeal for this load, from the rules: %s (%s); achieved %s (%.0f%% of the ideal time)\n",
			ideal.Round(10*time.Millisecond), why, elapsed.Round(10*time.Millisecond), 100*elapsed.Seconds()/max(ideal.Seconds(), 0.001))
		if len(outages) > 0 {
			fmt.Fprintln(w, "  (the ideal counts the time the simulated external consumer held the global limit: no window opens then)")
		}
	}
	fmt.Fprintf(w, "Global limit: %d per %s; at most %d were admitted in any %s window (sliding); %.1f requests/s overall\n",
		rules.GlobalLimit, rules.GlobalWindow, st.MaxGlobalWindow, rules.GlobalWindow, float64(st.Requests)/elapsed.Seconds())

	fmt.Fprintln(w, "\nBusiest buckets (achieved vs allowed):")
	bs := append([]sluicetest.BucketStats(nil), st.Buckets...)
	sort.Slice(bs, func(i, j int) bool { return bs[i].Admitted > bs[j].Admitted })
	for i := 0; i < len(bs) && i < 6; i++ {
		b := bs[i]
		allowed := float64(b.Limit) / b.Window.D().Seconds()
		fmt.Fprintf(w, "  %-30s %-40s %4d requests in %3d windows of %-6s (most in one: %d of %d; allowed %.0f/s)\n",
			strings.Join(b.Rules, "+"), b.Major, b.Admitted, b.Windows, b.Window.D(), b.MaxAdmitted, b.Limit, allowed)
	}

	fmt.Fprintf(w, "\n429s by scope: user %d, global %d (%d injected by the simulated external consumer), shared %d; Cloudflare bans %d\n",
		st.RateLimited["user"], st.RateLimited["global"], st.InjectedGlobal, st.RateLimited["shared"], st.Bans)
	v := st.Violations()
	fmt.Fprintf(w, "Avoidable 429s (the simulator's verdict): %d", len(v))
	if len(v) > 0 {
		fmt.Fprintf(w, " — %s", strings.Join(v, "; "))
	}
	fmt.Fprintln(w, "\n  (one shared 429 per hidden-sublimit window and the injected global 429s cannot be foreseen; all else can)")
	if st.ServerErrors+st.Dropped > 0 {
		fmt.Fprintf(w, "Faults injected: %d 5xx, %d dropped connections\n", st.ServerErrors, st.Dropped)
	}

	responses, outcomes, waits := m.Responses, m.Outcomes, m.Waits
	fmt.Fprintf(w, "\nRetries: %d (answers received %d for %d requests ended)\n", max(0, responses-outcomes), responses, outcomes)
	total := waits["bucket"] + waits["global"] + waits["network"]
	if total > 0 {
		fmt.Fprintln(w, "Where the time went (summed over requests):")
		for _, k := range []string{"bucket", "global", "network"} {
			fmt.Fprintf(w, "  waiting for the %-8s %8.1f s  %5.1f%%\n", map[string]string{"bucket": "bucket", "global": "global limit / connection", "network": "network"}[k]+":", waits[k], 100*waits[k]/total)
		}
	}
}

// idealDuration is the least time the rules allow for the load: the
// global limit's bound for the non-exempt requests, or the busiest
// bucket's (its requests need ceil(n/limit) windows; the first starts at
// once), whichever is longer. Sublimits count like buckets. A window due
// while an external consumer holds the global limit opens when it lets go.
func idealDuration(nonExempt int, st sluicetest.Stats, rules sluicetest.RuleSet, outages []sluicetest.GlobalOutage) (time.Duration, string) {
	chain := func(n, limit int, window time.Duration) time.Duration {
		var t time.Duration
		for k := 1; k < (n+limit-1)/limit; k++ {
			t += window
			for _, o := range outages {
				if t >= o.After && t < o.After+o.For {
					t = o.After + o.For
				}
			}
		}
		return t
	}
	best := chain(nonExempt, rules.GlobalLimit, rules.GlobalWindow.D())
	why := fmt.Sprintf("the global limit, %d/s", rules.GlobalLimit)
	for _, b := range st.Buckets {
		if d := chain(b.Admitted, b.Limit, b.Window.D()); d > best {
			best, why = d, fmt.Sprintf("bucket %s %s: %d requests at %d per %s", strings.Join(b.Rules, "+"), b.Major, b.Admitted, b.Limit, b.Window.D())
		}
	}
	for _, sl := range st.Sublimits {
		if d := chain(sl.Admitted, sl.Limit, sl.Window.D()); d > best {
			best, why = d, fmt.Sprintf("hidden sublimit %s: %d at %d per %s", sl.Name, sl.Admitted, sl.Limit, sl.Window.D())
		}
	}
	return best, why
}

// demoMetrics are the limiter's own counters the report shows: answers
// received (retries included), requests ended, and the seconds they waited
// by kind (bucket, global, network), summed.
type demoMetrics struct {
	Responses int64              `json:"responses"`
	Outcomes  int64              `json:"outcomes"`
	Waits     map[string]float64 `json:"waits"`
}

// add sums o into m.
func (m *demoMetrics) add(o demoMetrics) {
	m.Responses += o.Responses
	m.Outcomes += o.Outcomes
	if m.Waits == nil {
		m.Waits = map[string]float64{}
	}
	for k, v := range o.Waits {
		m.Waits[k] += v
	}
}

// readMetrics reads the limiter's own counters from the in-process reader.
func readMetrics(reader *sdkmetric.ManualReader) demoMetrics {
	m := demoMetrics{Waits: map[string]float64{}}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		return m
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					switch mt.Name {
					case "sluice.responses":
						m.Responses += p.Value
					case "sluice.requests":
						m.Outcomes += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				if mt.Name == "sluice.wait" {
					for _, p := range d.DataPoints {
						kind, _ := p.Attributes.Value("sluice.wait.kind")
						m.Waits[kind.AsString()] += p.Sum
					}
				}
			}
		}
	}
	return m
}

// printTrace prints trace events compactly, one line each, after prefix
// (which names the process when several run).
func printTrace(w io.Writer, prefix string) func(sluice.TraceEvent) {
	var mu sync.Mutex
	start := time.Now()
	return func(e sluice.TraceEvent) {
		what := e.Message + e.Event
		line := fmt.Sprintf("%s%8.1fms %-10s %-10s %-13s", prefix, float64(e.Time.Sub(start).Microseconds())/1000, e.Actor, e.Kind, what)
		if e.RequestID != 0 {
			line += fmt.Sprintf(" req=%-5d %s", e.RequestID, e.Route)
		} else if e.Bucket != "" {
			line += " " + e.Bucket
		}
		if e.StateBefore != "" || e.StateAfter != "" {
			line += fmt.Sprintf("  [%s→%s]", e.StateBefore, e.StateAfter)
		}
		if e.Status != 0 {
			line += fmt.Sprintf(" status=%d", e.Status)
		}
		mu.Lock()
		fmt.Fprintln(w, line)
		mu.Unlock()
	}
}
