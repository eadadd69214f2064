// Command shared measures Sluice's shared limits across OS processes in
// normal operation (no faults): -processes OS processes, each one
// sluice.Limiter with Options.Redis set, each sending from -goroutines
// goroutines one request apiece, all on one bot token, one real
// redis-server (a private one on a unix socket, started and stopped by
// this program) and one sluicetest simulator (h2c) per run.
//
// Run it from the bench module:
//
//	cd bench && go run ./cmd/shared
//	cd bench && go run ./cmd/shared -processes 4 -goroutines 100 -runs 3 -scenarios saturated,fan-out -out /tmp/shared.md
//
// The scenarios are the root module's TestSharedLimitsAcrossProcesses
// ones (shared_test.go), sized -processes × -goroutines: "saturated" (one
// bucket of 50 per 500 ms), "shared-hash" (two routes on one hash),
// "fan-out" (one request per channel: the global limit of 200 per second
// binds) and "unknown-burst" (one channel per goroutine index, hit by every
// process at once). Each run gets a fresh simulator, a flushed Redis and a
// token of its own; its processes are this program run again (childEnv),
// started together: each says when its limiter is up, and all get their
// "go" at once. The runs go round-robin over the scenarios, so machine
// noise spreads over all of them.
//
// For each scenario and run it measures:
//   - the pace: requests ÷ (first-to-last answer span + one window of the
//     binding limit), as a share of that limit's rate (limit ÷ window), as
//     the root test computes it;
//   - Redis round trips per request: the scripts Redis ran during the run
//     (EVALSHA and EVAL calls in INFO commandstats, after the run less
//     before) ÷ requests, and, of those, the reservations Redis answered
//     (the processes' Snapshot().Shared.Reserved, summed) ÷ requests;
//   - the simulator's verdict: user and global 429s, its violations
//     (sluicetest.Stats.Violations: limits the processes could have known),
//     and whether every request was answered with a 2xx;
//   - when each process had its last answer, after the run's first.
//
// It prints a Markdown report on stdout (and writes it to -out): one row
// per scenario with the median and range over the runs, then every run;
// progress goes to stderr. It exits 1 if a request failed or the simulator
// saw a violation, 2 on bad flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/bench/internal/harness"
	"github.com/sluicehq/sluice/internal/redisproc"
)

// params are the flags.
type params struct {
	processes, goroutines, runs int
	scenarios                   []scenario
	out                         string
}

func main() {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(parentMain())
}

// parentMain is the program as run by hand; it returns the exit status.
func parentMain() int {
	var p params
	flag.IntVar(&p.processes, "processes", 4, "OS processes, each one limiter on the shared token")
	flag.IntVar(&p.goroutines, "goroutines", 100, "goroutines per process, each sending one request")
	flag.IntVar(&p.runs, "runs", 3, "runs of each scenario (round-robin over the scenarios)")
	names := flag.String("scenarios", "saturated,shared-hash,fan-out,unknown-burst", "comma-separated scenarios to run, in this order")
	flag.StringVar(&p.out, "out", "", "also write the Markdown report to FILE")
	flag.Parse()
	var err error
	p.scenarios, err = parseScenarios(*names)
	switch {
	case err != nil:
	case flag.NArg() > 0:
		err = fmt.Errorf("unexpected arguments: %q", flag.Args())
	case p.processes < 1 || p.goroutines < 1 || p.runs < 1:
		err = errors.New("-processes, -goroutines and -runs must be positive")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "shared:", err)
		flag.Usage()
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := measure(ctx, p)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted (%w)", err)
		}
		fmt.Fprintln(os.Stderr, "shared:", err)
		return 1
	}
	md := rep.markdown()
	fmt.Print(md)
	if p.out != "" {
		if err := os.WriteFile(p.out, []byte(md), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "shared:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "shared: wrote %s\n", p.out)
	}
	if bad := rep.failures(); bad > 0 {
		fmt.Fprintf(os.Stderr, "shared: %d runs with failed requests or violations (see the notes)\n", bad)
		return 1
	}
	return 0
}

// parseScenarios is the scenarios named in the comma-separated list s.
func parseScenarios(s string) ([]scenario, error) {
	var out []scenario
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		sc, ok := scenarioNamed(name)
		if !ok {
			var known []string
			for _, sc := range scenarios {
				known = append(known, sc.name)
			}
			return nil, fmt.Errorf("unknown scenario %q (known: %s)", name, strings.Join(known, ", "))
		}
		if slices.ContainsFunc(out, func(o scenario) bool { return o.name == name }) {
			return nil, fmt.Errorf("scenario %q given twice", name)
		}
		out = append(out, sc)
	}
	return out, nil
}

// measure starts redis-server and runs every scenario p.runs times,
// round-robin, until done or ctx ends. Redis and every child are stopped
// when it returns.
func measure(ctx context.Context, p params) (*report, error) {
	began := time.Now()
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot run this program again: %w", err)
	}
	bin := redisproc.Binary()
	if bin == "" {
		return nil, errors.New("redis-server is not on PATH")
	}
	rs, err := redisproc.Start(ctx, bin)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	opt, err := redis.ParseURL(rs.URL)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO server: %w", err)
	}
	rep := &report{p: p, redisVersion: infoField(info, "redis_version"), began: began.UTC()}
	b := &bench{exe: exe, processes: p.processes, goroutines: p.goroutines, redisURL: rs.URL, rdb: rdb}
	for run := 1; run <= p.runs; run++ {
		for _, sc := range p.scenarios {
			r, err := b.run(ctx, sc, run)
			if err != nil {
				return nil, fmt.Errorf("%s, run %d: %w", sc.name, run, err)
			}
			fmt.Fprintf(os.Stderr, "%-13s run %d/%d: %d/%d answered in %v, pace %.1f%%, %.2f script calls and %.2f reservations per request, %d user and %d global 429s, %d violations\n",
				sc.name, run, p.runs, r.OK, r.Requests, r.Span.Round(time.Millisecond), 100*r.Pace,
				perRequest(r.ScriptCalls, r.Requests), perRequest(r.Reserved, r.Requests), r.User429, r.Global429, len(r.Violations))
			rep.runs = append(rep.runs, r)
		}
	}
	rep.took = time.Since(began)
	return rep, nil
}

// perRequest is n ÷ requests.
func perRequest(n int64, requests int) float64 { return float64(n) / float64(requests) }

// report is what the runs measured, and how.
type report struct {
	p            params
	redisVersion string
	began        time.Time
	took         time.Duration
	runs         []runResult // in the order they ran
}

// byScenario is the runs of the scenario called name, in order.
func (r *report) byScenario(name string) []runResult {
	var out []runResult
	for _, run := range r.runs {
		if run.Scenario == name {
			out = append(out, run)
		}
	}
	return out
}

// failures counts the runs with a failed request or a violation.
func (r *report) failures() int {
	n := 0
	for _, run := range r.runs {
		if run.Failed > 0 || run.OK != run.Requests || len(run.Violations) > 0 {
			n++
		}
	}
	return n
}

// command is the command line that ran this program, as typed in the
// bench module.
func command() string {
	cmd := "cd bench && go run ./cmd/shared"
	for _, a := range os.Args[1:] {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?&|;<>()") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		cmd += " " + a
	}
	return cmd
}

// markdown is the report: a header, one row per scenario, every run, and
// notes on what went wrong, if anything.
func (r *report) markdown() string {
	var b strings.Builder
	p := r.p
	b.WriteString("## Shared limits across processes\n\n")
	fmt.Fprintf(&b, "`%s`, %s, in %.0f s; %d CPUs (runtime.NumCPU), redis-server %s.\n\n",
		command(), r.began.Format("2006-01-02 15:04 UTC"), r.took.Seconds(), runtime.NumCPU(), r.redisVersion)
	fmt.Fprintf(&b, "- Machine: %s, %d CPUs, %s/%s, %s\n", harness.CPUModel(), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(&b, "- Sluice: %s\n", harness.Revision())
	fmt.Fprintf(&b, "- Load: %d OS processes × %d goroutines, one request each (%d per run), one token, one redis-server %s on a unix socket, one sluicetest simulator (h2c) per run; global limit %d per second in the simulator and every limiter; %d runs of each scenario, round-robin over the scenarios.\n\n",
		p.processes, p.goroutines, p.processes*p.goroutines, r.redisVersion, sharedGlobal, p.runs)

	b.WriteString("| scenario | binding limit | pace | script calls / request | reservations / request | user 429s | global 429s | violations | answered | processes done after (median run) |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, sc := range p.scenarios {
		b.WriteString(tableRow(summarize(sc, r.byScenario(sc.name))))
	}
	b.WriteString(`
- pace: requests ÷ (first-to-last answer + one window of the binding limit), as a share of the limit's rate; median (range) over the runs.
- script calls / request: the scripts Redis ran during the run (EVALSHA and EVAL calls in INFO commandstats: reservations, reports, heartbeats, of every process) ÷ requests; reservations / request: the processes' Snapshot().Shared.Reserved summed ÷ requests; median (range).
- 429s and violations (sluicetest.Stats.Violations: limits the processes could have known) are summed over the runs; answered: 2xx answers of all runs ÷ requests sent.
- processes done after: each process's last answer after the run's first, in seconds, in process order, in the run of median pace (the slower middle one for an even number of runs).
`)

	b.WriteString("\n### Every run\n\n")
	b.WriteString("| scenario | run | first to last answer | pace | script calls / request | reservations / request | user 429s | global 429s | processes done after |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, sc := range p.scenarios {
		for _, run := range r.byScenario(sc.name) {
			fmt.Fprintf(&b, "| %s | %d | %.2f s | %.1f%% | %.2f | %.2f | %d | %d | %s |\n",
				run.Scenario, run.Run, run.Span.Seconds(), 100*run.Pace, perRequest(run.ScriptCalls, run.Requests),
				perRequest(run.Reserved, run.Requests), run.User429, run.Global429, finishText(run.Finish))
		}
	}

	var notes []string
	for _, run := range r.runs {
		at := fmt.Sprintf("%s, run %d: ", run.Scenario, run.Run)
		for _, v := range run.Violations {
			notes = append(notes, at+"violation: "+v)
		}
		if run.Failed > 0 || run.OK != run.Requests {
			notes = append(notes, fmt.Sprintf("%s%d of %d requests failed: %s", at, run.Requests-run.OK, run.Requests, strings.Join(run.Errors, "; ")))
		}
		if len(run.NoShared) > 0 {
			notes = append(notes, fmt.Sprintf("%sprocesses %v had no shared state in their snapshot", at, run.NoShared))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n### Notes\n\n")
		for _, n := range notes {
			b.WriteString("- " + n + "\n")
		}
	}
	return b.String()
}

// summary is one scenario's runs, summarized.
type summary struct {
	sc                      scenario
	pace, calls, reserved   []float64 // per run
	user429, global429, bad int       // summed; bad: violations
	ok, requests            int       // summed
	medianFinish            []time.Duration
}

// summarize is the summary of sc's runs.
func summarize(sc scenario, runs []runResult) summary {
	s := summary{sc: sc}
	for _, r := range runs {
		s.pace = append(s.pace, r.Pace)
		s.calls = append(s.calls, perRequest(r.ScriptCalls, r.Requests))
		s.reserved = append(s.reserved, perRequest(r.Reserved, r.Requests))
		s.user429 += r.User429
		s.global429 += r.Global429
		s.bad += len(r.Violations)
		s.ok += r.OK
		s.requests += r.Requests
	}
	if i := medianIndex(s.pace); i >= 0 {
		s.medianFinish = runs[i].Finish
	}
	return s
}

// tableRow is s as a row of the scenarios' table.
func tableRow(s summary) string {
	pct := func(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) }
	two := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %d | %d | %d | %d/%d | %s |\n",
		s.sc.name, s.sc.bindingText(), spread(s.pace, pct), spread(s.calls, two), spread(s.reserved, two),
		s.user429, s.global429, s.bad, s.ok, s.requests, finishText(s.medianFinish))
}

// spread is the median of xs and, for more than one, their range in
// parentheses, each formatted by f; "–" for none.
func spread(xs []float64, f func(float64) string) string {
	if len(xs) == 0 {
		return "–"
	}
	if len(xs) == 1 {
		return f(xs[0])
	}
	return fmt.Sprintf("%s (%s–%s)", f(median(xs)), f(slices.Min(xs)), f(slices.Max(xs)))
}

// median is the median of xs (the mean of the two middle values for an
// even number); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// medianIndex is the index in xs of the median value, the lower of the two
// middle ones for an even number; -1 for none.
func medianIndex(xs []float64) int {
	if len(xs) == 0 {
		return -1
	}
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case xs[a] < xs[b]:
			return -1
		case xs[a] > xs[b]:
			return 1
		}
		return 0
	})
	return idx[(len(idx)-1)/2]
}

// finishText is the processes' finish times in seconds ("2.41, 3.10 s").
func finishText(ds []time.Duration) string {
	if len(ds) == 0 {
		return "–"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%.2f", d.Round(10*time.Millisecond).Seconds())
	}
	return strings.Join(parts, ", ") + " s"
}
