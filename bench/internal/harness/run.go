package harness

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/sluicetest"
)

// Result is what one client did in one scenario.
type Result struct {
	Scenario Scenario
	Client   string
	// Run numbers the repetitions of one scenario and client, from 0.
	Run int
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
func Run(s Scenario, spec ClientSpec) Result { return RunAt(s, spec, 0) }

// RunAt is Run for repetition run: each repetition seeds the simulator's
// fault dice (5xx, drops, jitter) differently; run 0 as Run does.
func RunAt(s Scenario, spec ClientSpec, run int) Result {
	res := Result{Scenario: s, Client: spec.Name, Run: run, Total: len(s.Ops), ErrorKinds: map[string]int{}}
	for _, op := range s.Ops {
		if note, ok := spec.Unsupported[op.Kind]; ok {
			res.NA = fmt.Sprintf("no API for %v: %s", op.Kind, note)
			return res
		}
	}
	srv, err := NewSimulator(s, run)
	if err != nil {
		res.NA = "simulator: " + err.Error()
		return res
	}
	defer srv.Close()
	client, err := spec.New(srv, ConfigFor(s))
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
	Start(srv, s)
	start := time.Now()
	do := func(i int) {
		op := s.Ops[i]
		if op.Delay > 0 {
			time.Sleep(time.Until(start.Add(op.Delay)))
		}
		err := client.Do(ctx, op)
		at := time.Since(start)
		mu.Lock()
		events[i] = Outcome{Done: true, At: at, Err: err}
		mu.Unlock()
	}
	if s.Concurrency > 0 {
		// A pool: each worker takes the next op in order once its previous
		// request has an outcome. A worker stuck on a hung request holds
		// its ops back; they count as hangs too.
		var next atomic.Int64
		for range s.Concurrency {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(s.Ops) || ctx.Err() != nil {
						return
					}
					do(i)
				}
			})
		}
	} else {
		for i := range s.Ops {
			wg.Go(func() { do(i) })
		}
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
