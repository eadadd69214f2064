// Command priorities measures sluice.WithPriority where it matters: bulk
// work that saturates the global limit while a user's interactions arrive.
//
// Run it from the bench module:
//
//	cd bench && go run ./cmd/priorities                 # full size: about 2 × 100 s a run
//	cd bench && go run ./cmd/priorities -scale 10 -runs 3
//
// The scenario (issue 39): 5,000 bulk message creations over 500 channels
// (10 each), all at once, under a global limit of 50 per second, and 100
// interactive message creations arriving evenly over the bulk work's ideal
// span: half on channels of their own, half on channels the bulk work also
// uses. Buckets are Discord's: 5 messages per 5 s per channel; 20 ms
// latency. -scale N divides every window, delay and the latency by N (the
// global limit stays 50 per window), so the run takes a tenth as long at
// -scale 10 with the same arithmetic.
//
// Each run sends the scenario twice through one fresh simulator each: with
// priorities (bulk work at sluice.PriorityBulk, interactions at
// sluice.PriorityInteractive) and without (every request at the default,
// first come first served within the rules: "FIFO"). For each it reports:
//
//   - the bulk work's completion as a multiple of the rules' ideal (the
//     greedy omniscient schedule of bench/internal/harness.Ideal);
//   - the interactive requests' waits (answer less issue less the latency),
//     p50, p99 and max, for those on their own channels and those on the
//     bulk work's channels;
//   - 429s and the simulator's violations.
//
// The bound: an interactive request's p99 wait at most one global
// window plus its own bucket's wait. On its own channel its bucket never
// makes it wait (one request), so the bound is one global window; on a
// bulk channel its bucket may have spent its window on bulk work, so the
// bound is one global window plus one bucket window.
//
// It prints a Markdown report (and writes it to -out when set) and exits 1
// when a request failed or the simulator saw a violation.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bench/internal/harness"
	"github.com/sluicehq/sluice/sluicetest"
)

const (
	bulkChannels  = 500
	bulkPer       = 10
	interactions  = 100
	globalLimit   = 50
	bucketLimit   = 5
	bucketWindow  = 5 * time.Second
	latency       = 20 * time.Millisecond
	firstChannel  = 1_200_000_000_000_000_000
	interactiveID = firstChannel + 100_000
)

func main() {
	scale := flag.Float64("scale", 1, "divide every window, delay and the latency by this (1: full size, about 100 s per mode)")
	runs := flag.Int("runs", 1, "runs of each mode")
	out := flag.String("out", "", "Markdown file to write (empty: print only)")
	flag.Parse()
	if *scale < 1 || *runs < 1 {
		fmt.Fprintln(os.Stderr, "priorities: -scale must be at least 1 and -runs at least 1")
		os.Exit(2)
	}
	prio := scenario(*scale, true)
	fifo := scenario(*scale, false)
	spec := sluiceSpec()
	var rows []row
	failed := false
	for run := range *runs {
		for _, m := range []struct {
			name string
			s    harness.Scenario
		}{{"priorities", prio}, {"FIFO", fifo}} {
			fmt.Fprintf(os.Stderr, "run %d, %s: ideal %v\n", run+1, m.name, m.s.Ideal.Round(time.Millisecond))
			res := harness.RunAt(m.s, spec, run)
			r := measure(m.name, run, m.s, res, *scale)
			rows = append(rows, r)
			failed = failed || r.failed
			fmt.Fprintf(os.Stderr, "  %s\n", r.line())
		}
	}
	report := render(rows, *scale, prio.Ideal)
	fmt.Print(report)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "priorities:", err)
			os.Exit(1)
		}
	}
	if failed {
		os.Exit(1)
	}
}

// scenario builds the load at scale, with priorities or without.
func scenario(scale float64, priorities bool) harness.Scenario {
	d := func(x time.Duration) time.Duration { return time.Duration(float64(x) / scale) }
	rs := sluicetest.DefaultRules().Scaled(1 / scale)
	rs.GlobalLimit = globalLimit
	rs.GlobalWindow = sluicetest.Duration(d(time.Second))
	for i := range rs.Rules {
		if rs.Rules[i].Name == "create_message" {
			rs.Rules[i].Limit, rs.Rules[i].Window = bucketLimit, sluicetest.Duration(d(bucketWindow))
		}
	}
	bulk, inter := sluice.PriorityNormal, sluice.PriorityNormal
	if priorities {
		bulk, inter = sluice.PriorityBulk, sluice.PriorityInteractive
	}
	var ops []harness.Op
	for i := range bulkChannels * bulkPer {
		ops = append(ops, harness.Op{Kind: harness.SendMessage, Channel: firstChannel + uint64(i%bulkChannels),
			Text: fmt.Sprintf("bulk %d", i), Priority: bulk})
	}
	// The interactions arrive evenly over the bulk work's ideal span
	// (5,100 requests at 50 per second), from its second window: even
	// ones on a channel of their own, odd ones on a bulk channel.
	span := time.Duration(bulkChannels*bulkPer+interactions) * time.Second / globalLimit
	for k := range interactions {
		ch := uint64(interactiveID + k)
		if k%2 == 1 {
			ch = firstChannel + uint64(k*7%bulkChannels)
		}
		at := time.Second + time.Duration(k)*(span-2*time.Second)/interactions
		ops = append(ops, harness.Op{Kind: harness.SendMessage, Channel: ch, Text: fmt.Sprintf("interactive %d", k),
			Delay: d(at), Priority: inter})
	}
	s := harness.Scenario{Name: "bulk work and interactions",
		Setup: fmt.Sprintf("%d bulk messages over %d channels, %d interactive ones over the run; global %d per %v; buckets %d per %v",
			bulkChannels*bulkPer, bulkChannels, interactions, globalLimit, d(time.Second), bucketLimit, d(bucketWindow)),
		Rules: rs, Faults: sluicetest.Faults{Latency: d(latency)}, Ops: ops}
	s.Ideal = harness.Ideal(s)
	return s
}

func sluiceSpec() harness.ClientSpec {
	for _, c := range harness.Clients() {
		if c.Name == "Sluice" {
			return c
		}
	}
	panic("priorities: no Sluice client in the harness")
}

// row is one run of one mode.
type row struct {
	mode            string
	run             int
	ratio           float64 // the bulk work's completion ÷ the ideal
	own, shared     waits   // the interactive requests' waits, by channel
	ownOK, sharedOK bool    // within the bound
	requests, r429  int
	violations      []string
	failed          bool
	note            string
	worst           string // the interactive request that waited longest
}

type waits struct{ p50, p99, max time.Duration }

func (w waits) String() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }
	return ms(w.p50) + " / " + ms(w.p99) + " / " + ms(w.max)
}

func (r row) line() string {
	return fmt.Sprintf("bulk %.3f× ideal; interactive waits (ms, p50/p99/max): own channels %v, bulk channels %v (longest: %s); 429s %d; violations %d %s",
		r.ratio, r.own, r.shared, r.worst, r.r429, len(r.violations), r.note)
}

func measure(mode string, run int, s harness.Scenario, res harness.Result, scale float64) row {
	r := row{mode: mode, run: run + 1, requests: res.Stats.Requests, violations: res.Violations()}
	for _, n := range res.Stats.RateLimited {
		r.r429 += n
	}
	if res.NA != "" || res.Errors > 0 || res.Hangs > 0 || len(r.violations) > 0 {
		r.failed = true
		r.note = fmt.Sprintf("(n/a %q, %d errors %v, %d hangs)", res.NA, res.Errors, res.ErrorKinds, res.Hangs)
	}
	var bulkEnd, longest time.Duration
	var own, shared []time.Duration
	lat := s.Faults.Latency
	for i, op := range s.Ops {
		e := res.Events[i]
		if !e.Done {
			continue
		}
		if strings.HasPrefix(op.Text, "bulk") {
			bulkEnd = max(bulkEnd, e.At)
			continue
		}
		w := max(0, e.At-op.Delay-lat)
		if w >= longest {
			longest = w
			r.worst = fmt.Sprintf("%q issued at %v", op.Text, op.Delay.Round(time.Millisecond))
		}
		if op.Channel >= interactiveID {
			own = append(own, w)
		} else {
			shared = append(shared, w)
		}
	}
	r.ratio = float64(bulkEnd) / float64(s.Ideal)
	r.own, r.shared = summarize(own), summarize(shared)
	global := time.Duration(float64(time.Second) / scale)
	bucket := time.Duration(float64(bucketWindow) / scale)
	r.ownOK, r.sharedOK = r.own.p99 <= global, r.shared.p99 <= global+bucket
	return r
}

func summarize(ds []time.Duration) waits {
	if len(ds) == 0 {
		return waits{}
	}
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return waits{p50: q(0.5), p99: q(0.99), max: ds[len(ds)-1]}
}

func render(rows []row, scale float64, ideal time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Scale 1/%g: global %d per %v, buckets %d per %v, latency %v; the ideal %v. Waits in ms (p50 / p99 / max); the bound: one global window on an interaction's own channel, plus one bucket window on a bulk channel.\n\n",
		scale, globalLimit, time.Duration(float64(time.Second)/scale), bucketLimit, time.Duration(float64(bucketWindow)/scale),
		time.Duration(float64(latency)/scale), ideal.Round(time.Millisecond))
	b.WriteString("| mode | run | bulk × ideal | interactive, own channel | within | interactive, bulk channel | within | 429s | violations |\n")
	b.WriteString("|---|---:|---:|---:|:---:|---:|:---:|---:|---:|\n")
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %.3f | %v | %s | %v | %s | %d | %d |\n", r.mode, r.run, r.ratio, r.own, yes(r.ownOK), r.shared, yes(r.sharedOK), r.r429, len(r.violations))
	}
	fmt.Fprintf(&b, "\nMachine: %s, %s.\n", harness.CPUModel(), harness.Revision())
	return b.String()
}
