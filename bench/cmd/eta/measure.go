package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bench/internal/harness"
)

// sample is one request of one run: its ETA when asked, and when the
// simulator saw it.
type sample struct {
	Op    int        // index into the scenario's ops, = submission order
	ETA   sluice.ETA // as Future.ETA answered
	Asked time.Time  // when Future.ETA returned
	// Actual is when the simulator decided the request's admitted attempt
	// (its bucket timeline's event, on the wall clock); zero if unmatched.
	Actual time.Time
	// Stamp is the "timestamp" the simulator echoed in the created
	// message (the same decision instant), zero if none: a check of the
	// timeline matching, not used for the figures.
	Stamp time.Time
	Err   error // the request's outcome
}

// waiting reports whether the request had not been sent when asked: the
// ETA is then a forecast.
func (s sample) waiting() bool {
	switch s.ETA.Stage {
	case sluice.StagePending, sluice.StageQueued, sluice.StageRetrying:
		return true
	}
	return false
}

// The looks: when the ETAs are asked.
const (
	// atSubmission: right after SendBatch, in submission order.
	atSubmission = iota
	// afterFirstAnswer: again, once the first request has its outcome
	// (its bucket's limit is then known).
	afterFirstAnswer
	numLooks
)

var lookNames = [numLooks]string{"at submission", "after the 1st answer"}

// runResult is one run of one scenario.
type runResult struct {
	Scenario harness.Scenario
	Run      int
	// Looks are the requests' samples of each look, in submission order
	// (Looks[afterFirstAnswer] is empty when not asked).
	Looks [numLooks][]sample
	// Unmatched says why the timeline could not be matched to the
	// requests ("" when it was): the run's samples then have no Actual
	// and are left out of the figures.
	Unmatched string
	// Bucket429s are user/shared 429 events in the bucket timelines
	// (skipped in the matching); Global429s are global 429s, which the
	// simulator answers before any bucket and so never shows there.
	Bucket429s, Global429s int
	// StampChecked counts the requests with an echoed timestamp, and
	// StampAgree those whose timeline match is within 1 ms of it.
	StampChecked, StampAgree int
	// StampMaxDiff is the largest |timestamp - timeline match| of them.
	StampMaxDiff time.Duration
	// Errors counts requests that ended in an error.
	Errors int
	// AskSpan is, for each look, from its first question to its last
	// answer; Elapsed is from the first submission to the last outcome.
	AskSpan [numLooks]time.Duration
	Elapsed time.Duration
	// Begin is when the first request was submitted.
	Begin time.Time
	// ClockSkew is how far the timeline's origin, reconstructed after the
	// run as time.Now() - srv.Elapsed(), lies from the instant the engine
	// was reset (should be ~0).
	ClockSkew time.Duration
}

// measure runs scenario s once (repetition run) through a Sluice limiter
// built as the harness builds it, against a fresh simulator: every op is
// submitted at once with SendBatch, each future's ETA is asked right
// after in submission order (and, with second, again once the first
// request has its outcome), then every outcome is awaited, and the
// requests are matched to the simulator's bucket timelines.
func measure(s harness.Scenario, run int, second bool) (runResult, error) {
	res := runResult{Scenario: s, Run: run}
	if s.Concurrency > 0 {
		return res, fmt.Errorf("scenario %d issues its ops from a pool of workers: not supported", s.ID)
	}
	for _, op := range s.Ops {
		if op.Delay > 0 {
			return res, fmt.Errorf("scenario %d paces its ops (Op.Delay): not supported", s.ID)
		}
		if op.Kind == harness.ExecuteWebhook {
			return res, fmt.Errorf("scenario %d executes webhooks, whose bucket keys the simulator hashes: not supported", s.ID)
		}
	}
	srv, err := harness.NewSimulator(s, run)
	if err != nil {
		return res, fmt.Errorf("simulator: %w", err)
	}
	defer srv.Close()
	lim, err := harness.NewSluiceLimiter(srv, harness.ConfigFor(s))
	if err != nil {
		return res, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = lim.Close(ctx)
	}()
	reqs := make([]*http.Request, len(s.Ops))
	for i, op := range s.Ops {
		reqs[i] = harness.Request(op)
	}

	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout())
	defer cancel()
	t0 := harness.Start(srv, s)
	begin := time.Now()
	res.Begin = begin
	futures := lim.SendBatch(ctx, reqs)
	ask := func(look int) error {
		from := time.Now()
		out := make([]sample, len(futures))
		for i, f := range futures {
			e, err := f.ETA(ctx)
			if err != nil {
				return fmt.Errorf("ETA of request %d: %w", i, err)
			}
			out[i] = sample{Op: i, ETA: e, Asked: time.Now()}
		}
		res.Looks[look] = out
		res.AskSpan[look] = time.Since(from)
		return nil
	}
	if err := ask(atSubmission); err != nil {
		return res, err
	}
	if second {
		select {
		case <-futures[0].Done():
		case <-ctx.Done():
			return res, fmt.Errorf("request 0 had no outcome within the scenario's timeout (%v)", s.Timeout())
		}
		if err := ask(afterFirstAnswer); err != nil {
			return res, err
		}
	}
	stamps := make([]time.Time, len(futures))
	errs := make([]error, len(futures))
	for i, f := range futures {
		resp, err := f.Await(ctx)
		if ctx.Err() != nil {
			return res, fmt.Errorf("request %d had no outcome within the scenario's timeout (%v)", i, s.Timeout())
		}
		errs[i] = err
		if err != nil {
			res.Errors++
			continue
		}
		stamps[i] = echoedStamp(resp)
		if resp.StatusCode >= 300 {
			errs[i] = fmt.Errorf("HTTP %d", resp.StatusCode)
			res.Errors++
		}
	}
	res.Elapsed = time.Since(begin)
	st := srv.Stats()
	res.ClockSkew = time.Now().Add(-srv.Elapsed()).Sub(t0)
	res.Global429s = st.RateLimited["global"]

	// The admitted events of each (major parameter, rule), in order.
	type key struct{ major, rule string }
	events := map[key][]time.Time{}
	for _, b := range st.Buckets {
		for _, ev := range b.Timeline {
			if ev.Status == http.StatusTooManyRequests {
				res.Bucket429s++
				continue
			}
			k := key{b.Major, ev.Rule}
			events[k] = append(events[k], t0.Add(ev.At))
		}
	}
	ops := map[key][]int{}
	for i, op := range s.Ops {
		k := key{op.Major(), op.Rule()}
		ops[k] = append(ops[k], i)
	}
	for k, idx := range ops {
		if len(events[k]) != len(idx) {
			res.Unmatched = fmt.Sprintf("%s on %s: %d requests, %d admitted events in the timeline", k.rule, k.major, len(idx), len(events[k]))
			break
		}
	}
	if len(events) != len(ops) {
		res.Unmatched = fmt.Sprintf("%d (route, channel) pairs in the ops, %d in the timelines", len(ops), len(events))
	}
	if res.Unmatched != "" {
		return res, nil
	}
	actual := make([]time.Time, len(s.Ops))
	for k, idx := range ops {
		for j, i := range idx {
			// Requests to one bucket go in submission order: the j-th
			// request of a (route, channel) is its j-th admitted event.
			actual[i] = events[k][j]
		}
	}
	for i, st := range stamps {
		if st.IsZero() {
			continue
		}
		res.StampChecked++
		d := st.Sub(actual[i])
		d = max(d, -d)
		if d < time.Millisecond {
			res.StampAgree++
		}
		res.StampMaxDiff = max(res.StampMaxDiff, d)
	}
	for _, look := range res.Looks {
		for i := range look {
			look[i].Actual, look[i].Stamp, look[i].Err = actual[i], stamps[i], errs[i]
		}
	}
	return res, nil
}

// echoedStamp is the "timestamp" of the message the simulator created:
// when it decided the request (zero if the answer has none).
func echoedStamp(resp *http.Response) time.Time {
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return time.Time{}
	}
	var m struct {
		Timestamp string `json:"timestamp"`
	}
	if json.Unmarshal(b, &m) != nil || m.Timestamp == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, m.Timestamp)
	if err != nil {
		return time.Time{}
	}
	return t
}
