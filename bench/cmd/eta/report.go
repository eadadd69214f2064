package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bench/internal/harness"
)

// slack is how far outside [Start, End] a send still counts as inside the
// predicted window: the time from Sluice handing a request to the wire to
// the simulator deciding it (HTTP/2 over TLS on loopback), and scheduler
// noise.
const slack = 5 * time.Millisecond

// group is the accuracy of a set of forecasts (requests still waiting
// when asked).
type group struct {
	N          int
	In, InZero int             // sent inside [Start-slack, End+slack], and inside [Start, End]
	Early      int             // sent before Start-slack
	Late       int             // sent after End+slack
	Errs       []time.Duration // actual - Start, sorted by finish
	Widths     []time.Duration // End - Start (0 when End is before Start), sorted by finish
}

func (g *group) add(s sample) {
	g.N++
	d := s.Actual.Sub(s.ETA.Start)
	g.Errs = append(g.Errs, d)
	end := s.ETA.End
	if end.Before(s.ETA.Start) {
		end = s.ETA.Start
	}
	g.Widths = append(g.Widths, end.Sub(s.ETA.Start))
	switch {
	case s.Actual.Before(s.ETA.Start.Add(-slack)):
		g.Early++
	case s.Actual.After(end.Add(slack)):
		g.Late++
	default:
		g.In++
	}
	if !s.Actual.Before(s.ETA.Start) && !s.Actual.After(end) {
		g.InZero++
	}
}

func (g *group) finish() {
	slices.Sort(g.Errs)
	slices.Sort(g.Widths)
}

// share is n/N, 0 for an empty group.
func (g group) share(n int) float64 {
	if g.N == 0 {
		return 0
	}
	return float64(n) / float64(g.N)
}

// pct is the p-th percentile of the sorted errors (nearest rank).
func (g group) pct(p float64) time.Duration { return percentile(g.Errs, p) }

// width is the p-th percentile of the windows' widths (nearest rank).
func (g group) width(p float64) time.Duration { return percentile(g.Widths, p) }

// percentile is the p-th percentile of sorted ds (nearest rank), 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(p/100*float64(len(ds))+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func (g group) min() time.Duration { return g.pct(0) }
func (g group) max() time.Duration { return g.pct(100) }

// summary is one look at one scenario over all its runs.
type summary struct {
	Scenario harness.Scenario
	Look     int
	Runs     int
	// Unmatched lists the runs whose timeline could not be matched,
	// with why; their requests are in none of the counts below.
	Unmatched []string
	Requests  int // requests of the matched runs
	Waiting   int // asked while pending, queued or retrying
	Sent      int // asked when already sent
	Done      int // asked when already answered
	Stages    map[string]int
	All       group
	ByLimit   map[string]*group
	ByKnown   map[bool]*group
	// SentOffset: for those already sent when asked, the simulator's
	// decision minus the ETA's Start (= when Sluice sent it).
	SentOffset               group
	Bucket429s, Global429s   int
	Errors                   int
	StampChecked, StampAgree int
	StampMaxDiff             time.Duration
	AskSpan, Elapsed         []time.Duration // per run
	MaxSkew                  time.Duration
}

func summarize(s harness.Scenario, runs []runResult, look int) summary {
	sum := summary{Scenario: s, Look: look, Runs: len(runs), Stages: map[string]int{},
		ByLimit: map[string]*group{}, ByKnown: map[bool]*group{}}
	for _, r := range runs {
		sum.AskSpan = append(sum.AskSpan, r.AskSpan[look])
		sum.Elapsed = append(sum.Elapsed, r.Elapsed)
		sum.Bucket429s += r.Bucket429s
		sum.Global429s += r.Global429s
		sum.Errors += r.Errors
		sum.MaxSkew = max(sum.MaxSkew, r.ClockSkew, -r.ClockSkew)
		if r.Unmatched != "" {
			sum.Unmatched = append(sum.Unmatched, fmt.Sprintf("run %d: %s", r.Run+1, r.Unmatched))
			continue
		}
		sum.StampChecked += r.StampChecked
		sum.StampAgree += r.StampAgree
		sum.StampMaxDiff = max(sum.StampMaxDiff, r.StampMaxDiff)
		for _, sm := range r.Looks[look] {
			sum.Requests++
			sum.Stages[sm.ETA.Stage.String()]++
			switch {
			case sm.waiting():
				sum.Waiting++
				sum.All.add(sm)
				lg := sum.ByLimit[sm.ETA.Limit]
				if lg == nil {
					lg = &group{}
					sum.ByLimit[sm.ETA.Limit] = lg
				}
				lg.add(sm)
				kg := sum.ByKnown[sm.ETA.Known]
				if kg == nil {
					kg = &group{}
					sum.ByKnown[sm.ETA.Known] = kg
				}
				kg.add(sm)
			case sm.ETA.Stage == sluice.StageSent:
				sum.Sent++
				sum.SentOffset.add(sm)
			default:
				sum.Done++
			}
		}
	}
	sum.All.finish()
	sum.SentOffset.finish()
	for _, g := range sum.ByLimit {
		g.finish()
	}
	for _, g := range sum.ByKnown {
		g.finish()
	}
	return sum
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

func pc(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// tables renders the summaries (each scenario's looks in a row) as
// Markdown: the headline, then the breakdown by what set Start and by
// whether the bucket's limit was known, then notes per scenario.
func tables(sums []summary) string {
	var b strings.Builder
	sl := fmt.Sprint(int64(slack / time.Millisecond))
	b.WriteString("| Scenario | Asked | Requests | Waiting when asked | Sent when asked | In window ±" + sl + " ms | In window (0 slack) | Early | Late | Error p50 | p90 | p99 | min | max | Width p50 | p75 | p90 |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range sums {
		g := s.All
		fmt.Fprintf(&b, "| %d. %s | %s | %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			s.Scenario.ID, s.Scenario.Name, lookNames[s.Look], s.Requests, s.Waiting, s.Sent+s.Done,
			pc(g.share(g.In)), pc(g.share(g.InZero)), pc(g.share(g.Early)), pc(g.share(g.Late)),
			ms(g.pct(50)), ms(g.pct(90)), ms(g.pct(99)), ms(g.min()), ms(g.max()),
			ms(g.width(50)), ms(g.width(75)), ms(g.width(90)))
	}
	b.WriteString("\nShares and errors are over the requests still waiting (pending, queued or retrying) when asked: their ETA is a forecast. " +
		"In window: the simulator decided the request inside `[Start − " + sl + " ms, End + " + sl + " ms]` (and inside `[Start, End]` for 0 slack; End is taken as Start when the ETA tells no window). " +
		"Early: before `Start − " + sl + " ms`; late: after `End + " + sl + " ms`. " +
		"Errors are `actual − Start` in ms (negative: sent before the predicted Start). " +
		"Width is the window's `End − Start` in ms: a wide window is easy to fall in and tells the caller less.\n\n")

	b.WriteString("By what set Start (`ETA.Limit`) and by whether the bucket's limit was known (`ETA.Known`):\n\n")
	b.WriteString("| Scenario | Asked | Group | Requests | In window ±" + sl + " ms | Early | Late | Error p50 | p90 | min | max |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range sums {
		row := func(name string, g *group) {
			fmt.Fprintf(&b, "| %d | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", s.Scenario.ID, lookNames[s.Look], name, g.N,
				pc(g.share(g.In)), pc(g.share(g.Early)), pc(g.share(g.Late)), ms(g.pct(50)), ms(g.pct(90)), ms(g.min()), ms(g.max()))
		}
		for _, l := range []string{sluice.LimitBucket, sluice.LimitGlobal, sluice.LimitDeclared, sluice.LimitRetry} {
			if g := s.ByLimit[l]; g != nil {
				row("Limit "+l, g)
			}
		}
		for _, k := range []bool{true, false} {
			if g := s.ByKnown[k]; g != nil {
				row(fmt.Sprintf("Known %v", k), g)
			}
		}
	}

	b.WriteString("\nPer scenario:\n\n")
	for i, s := range sums {
		if i > 0 && sums[i-1].Scenario.ID == s.Scenario.ID {
			continue // one note per scenario, from its first look
		}
		fmt.Fprintf(&b, "- **%d. %s** (%s), %d runs.", s.Scenario.ID, s.Scenario.Name, s.Scenario.Setup, s.Runs)
		for _, t := range sums[i:] {
			if t.Scenario.ID != s.Scenario.ID {
				break
			}
			var stages []string
			for _, st := range []sluice.Stage{sluice.StagePending, sluice.StageQueued, sluice.StageRetrying, sluice.StageSent, sluice.StageDone} {
				if n := t.Stages[st.String()]; n > 0 {
					stages = append(stages, fmt.Sprintf("%s %d", st, n))
				}
			}
			fmt.Fprintf(&b, " Stages %s: %s; asking every ETA took %s ms per run.", lookNames[t.Look], strings.Join(stages, ", "), joinMs(t.AskSpan))
		}
		if s.SentOffset.N > 0 {
			fmt.Fprintf(&b, " The %d requests already sent at submission were decided by the simulator %s ms (median; max %s) after Sluice sent them (their ETA's Start).",
				s.SentOffset.N, ms(s.SentOffset.pct(50)), ms(s.SentOffset.max()))
		}
		fmt.Fprintf(&b, " Runs took %s ms from the first submission to the last outcome.", joinMs(s.Elapsed))
		fmt.Fprintf(&b, " 429s: %d in the bucket timelines (skipped in the matching), %d global.", s.Bucket429s, s.Global429s)
		if s.Errors > 0 {
			fmt.Fprintf(&b, " Requests that ended in an error: %d.", s.Errors)
		}
		if s.StampChecked > 0 {
			fmt.Fprintf(&b, " Matching check: %d of %d timeline matches within 1 ms of the timestamp the simulator echoed in the created message (largest difference %s ms).", s.StampAgree, s.StampChecked, ms(s.StampMaxDiff))
		}
		fmt.Fprintf(&b, " The timeline's origin rebuilt after the run (`time.Now() − srv.Elapsed()`) was within %s ms of the engine's reset.", ms(s.MaxSkew))
		for _, u := range s.Unmatched {
			fmt.Fprintf(&b, " UNMATCHED %s (left out).", u)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func joinMs(ds []time.Duration) string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)))
	}
	return strings.Join(out, ", ")
}
