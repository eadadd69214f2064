package harness

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/sluicetest"
)

// Result is what one client did in one scenario.
type Result struct {
	Scenario Scenario
	Client   string
	// NA is set when the client could not be run; the rest is then empty.
	NA string
	// Total requests; OK succeeded, Errors failed, Hangs had no outcome
	// when the scenario's timeout passed.
	Total, OK, Errors, Hangs int
	// Elapsed is from the first request to the last outcome (to the
	// timeout when some hung).
	Elapsed time.Duration
	// Stats is the simulator's accounting when the client finished.
	Stats sluicetest.Stats
	// ErrorKinds counts the distinct errors returned, shortened.
	ErrorKinds map[string]int
	// Events are the client-side outcomes, in op order.
	Events []Outcome
}

// Outcome is one request's client-side result.
type Outcome struct {
	Done bool
	At   time.Duration // since start
	Err  error
}

// Ratio is Elapsed / Ideal.
func (r Result) Ratio() float64 { return float64(r.Elapsed) / float64(r.Scenario.Ideal) }

// Violations are the simulator's verdict on avoidable 429s and bans.
func (r Result) Violations() []string { return r.Stats.Violations() }

// Run runs s through the client spec built against a fresh simulator.
func Run(s Scenario, spec ClientSpec) Result {
	res := Result{Scenario: s, Client: spec.Name, Total: len(s.Ops), ErrorKinds: map[string]int{}}
	srv, err := sluicetest.NewServer(sluicetest.Options{Rules: s.Rules, Seed: uint64(1000 + s.ID), TrackDuplicates: true})
	if err != nil {
		res.NA = "simulator: " + err.Error()
		return res
	}
	defer srv.Close()
	client, err := spec.New(srv)
	if err != nil {
		res.NA = err.Error()
		return res
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make([]Outcome, len(s.Ops))
	var mu sync.Mutex
	var wg sync.WaitGroup
	allDone := make(chan struct{})

	// The simulator's clock (timelines, windows) and the faults start now.
	srv.Engine().Reset(time.Now())
	srv.SetFaults(s.Faults)
	start := time.Now()
	for i, op := range s.Ops {
		wg.Go(func() {
			if op.Delay > 0 {
				time.Sleep(time.Until(start.Add(op.Delay)))
			}
			err := client.Do(ctx, op)
			at := time.Since(start)
			mu.Lock()
			events[i] = Outcome{Done: true, At: at, Err: err}
			mu.Unlock()
		})
	}
	go func() { wg.Wait(); close(allDone) }()
	timer := time.NewTimer(s.Timeout())
	defer timer.Stop()
	timedOut := false
	select {
	case <-allDone:
	case <-timer.C:
		timedOut = true
	}
	res.Stats = srv.Stats()
	mu.Lock()
	res.Events = append([]Outcome(nil), events...)
	mu.Unlock()
	for _, e := range res.Events {
		switch {
		case !e.Done:
			res.Hangs++
		case e.Err != nil:
			res.Errors++
			res.ErrorKinds[shortErr(e.Err)]++
		default:
			res.OK++
		}
		if e.Done && e.At > res.Elapsed {
			res.Elapsed = e.At
		}
	}
	if timedOut {
		res.Elapsed = s.Timeout()
	}
	cancel()
	if !timedOut {
		client.Close()
	} else {
		// Goroutines of a hung client may still hold its limiter's locks;
		// closing it could block. Abandon it; the simulator closes below.
		go client.Close()
	}
	return res
}

// shortErr reduces an error to its kind: numbers, ids and URLs removed so
// equal failures group together.
func shortErr(err error) string {
	s := err.Error()
	if i := strings.Index(s, "\n"); i >= 0 {
		s = s[:i]
	}
	var b strings.Builder
	inNum := false
	for _, r := range s {
		if r >= '0' && r <= '9' {
			if !inNum {
				b.WriteByte('N')
			}
			inNum = true
			continue
		}
		inNum = false
		b.WriteRune(r)
	}
	s = b.String()
	if len(s) > 110 {
		s = s[:110] + "…"
	}
	return s
}

// rateLimited returns the 429 counts: user, global caused by the client,
// shared, and injected.
func (r Result) rateLimited() (user, global, shared, injected int) {
	st := r.Stats
	return st.RateLimited["user"], st.RateLimited["global"] - st.InjectedGlobal, st.RateLimited["shared"], st.InjectedGlobal
}

// Table renders results as one Markdown table, grouped by scenario.
func Table(results []Result) string {
	var b strings.Builder
	b.WriteString("| Scenario (ideal) | Client | Done | Time | × ideal | 429 user | 429 global | 429 shared | Injected global 429s (beyond 1st) | Errors | Hangs | Simulator verdict |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	last := -1
	for _, r := range results {
		scen := ""
		if r.Scenario.ID != last {
			scen = fmt.Sprintf("%d. %s (%s)", r.Scenario.ID, r.Scenario.Name, fmtDur(r.Scenario.Ideal))
			last = r.Scenario.ID
		}
		if r.NA != "" {
			fmt.Fprintf(&b, "| %s | %s | n/a | | | | | | | | | %s |\n", scen, r.Client, r.NA)
			continue
		}
		user, global, shared, injected := r.rateLimited()
		t := fmtDur(r.Elapsed)
		ratio := fmt.Sprintf("%.2f", r.Ratio())
		if r.Hangs > 0 {
			t, ratio = "> "+t, "—"
		}
		inj := fmt.Sprint(injected)
		if injected > 0 {
			inj = fmt.Sprintf("%d (%d)", injected, injected-1)
		}
		verdict := "clean"
		if v := r.Violations(); len(v) > 0 {
			verdict = violationSummary(r)
		}
		name := r.Client
		if name == "Sluice" {
			name = "**Sluice**"
		}
		fmt.Fprintf(&b, "| %s | %s | %d/%d | %s | %s | %d | %d | %d | %s | %d | %d | %s |\n",
			scen, name, r.OK, r.Total, t, ratio, user, global, shared, inj, r.Errors, r.Hangs, verdict)
	}
	return b.String()
}

func violationSummary(r Result) string {
	var parts []string
	user, global, _, _ := r.rateLimited()
	if user > 0 {
		parts = append(parts, "bucket limit exceeded")
	}
	if global > 0 {
		parts = append(parts, "global limit exceeded")
	}
	for _, sl := range r.Stats.Sublimits {
		if sl.Max429sInWindow > 1 {
			parts = append(parts, fmt.Sprintf("sublimit hit %d× in one window", sl.Max429sInWindow))
			break
		}
	}
	if r.Stats.Bans > 0 {
		parts = append(parts, "banned")
	}
	return "✗ " + strings.Join(parts, "; ")
}

// ErrorNotes lists, per scenario and client, the kinds of errors returned.
func ErrorNotes(results []Result) string {
	var b strings.Builder
	for _, r := range results {
		if len(r.ErrorKinds) == 0 {
			continue
		}
		kinds := make([]string, 0, len(r.ErrorKinds))
		for k := range r.ErrorKinds {
			kinds = append(kinds, k)
		}
		sort.Slice(kinds, func(i, j int) bool { return r.ErrorKinds[kinds[i]] > r.ErrorKinds[kinds[j]] })
		fmt.Fprintf(&b, "- scenario %d, %s:", r.Scenario.ID, r.Client)
		for i, k := range kinds {
			if i == 3 {
				fmt.Fprintf(&b, " …")
				break
			}
			fmt.Fprintf(&b, " %d× `%s`;", r.ErrorKinds[k], strings.ReplaceAll(k, "`", "'"))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// DuplicateNotes reports, for scenarios with dropped connections, how many
// POSTs the simulator processed twice: messages a bot sent twice because its
// library resent a request whose connection died after it was processed.
func DuplicateNotes(results []Result) string {
	var b strings.Builder
	for _, r := range results {
		if r.NA != "" || r.Scenario.Faults.DropRate == 0 {
			continue
		}
		n := r.Stats.Duplicates["POST"]
		note := ""
		if total := r.Stats.RateLimited["user"] + r.Stats.RateLimited["global"] + r.Stats.RateLimited["shared"]; total > 0 {
			note = " (includes resends after 429s)"
		}
		fmt.Fprintf(&b, "- scenario %d, %s: %d duplicate POSTs%s; %d connections dropped, %d injected 5xx\n",
			r.Scenario.ID, r.Client, n, note, r.Stats.Dropped, r.Stats.ServerErrors)
	}
	return b.String()
}
