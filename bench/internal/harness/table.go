package harness

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/sluicetest"
)

// Group is every run of one scenario through one client.
type Group struct {
	Scenario Scenario
	Client   string
	Runs     []Result
}

// Groups gathers results by scenario and client, in the order each pair
// first appears.
func Groups(results []Result) []Group {
	var out []Group
	at := map[[2]string]int{}
	for _, r := range results {
		k := [2]string{fmt.Sprint(r.Scenario.ID), r.Client}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, Group{Scenario: r.Scenario, Client: r.Client})
		}
		out[i].Runs = append(out[i].Runs, r)
	}
	return out
}

// ran is the runs of g that could be run (not n/a), fastest first, runs
// with hangs last.
func (g Group) ran() []Result {
	var rs []Result
	for _, r := range g.Runs {
		if r.NA == "" {
			rs = append(rs, r)
		}
	}
	sort.SliceStable(rs, func(i, j int) bool {
		if (rs[i].Hangs > 0) != (rs[j].Hangs > 0) {
			return rs[j].Hangs > 0
		}
		return rs[i].Elapsed < rs[j].Elapsed
	})
	return rs
}

// Median is the median run of g by completion time (of an even number,
// the faster of the two middle ones), min and max the fastest and slowest;
// a run with hangs is slower than any without. ok is false when no run
// could be run.
func (g Group) Median() (median, min, max Result, ok bool) {
	rs := g.ran()
	if len(rs) == 0 {
		return Result{}, Result{}, Result{}, false
	}
	return rs[(len(rs)-1)/2], rs[0], rs[len(rs)-1], true
}

// ratio formats a run's × ideal, "hang" when some request hung.
func ratio(r Result) string {
	if r.Hangs > 0 {
		return "hang"
	}
	return fmt.Sprintf("%.2f", r.Ratio())
}

// Table renders results as one Markdown table, grouped by scenario. With one
// run per scenario and client it shows that run; with several, the median
// run's time, the ratio's median and range, and counts totalled over the
// runs.
func Table(results []Result) string {
	groups := Groups(results)
	multi := false
	for _, g := range groups {
		if len(g.Runs) > 1 {
			multi = true
		}
	}
	if multi {
		return multiTable(groups)
	}
	var b strings.Builder
	b.WriteString("| Scenario (ideal) | Client | Done | Time | × ideal | 429 user | 429 global | 429 shared | Injected global 429s (beyond 1st) | Errors | Hangs | Simulator verdict |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	last := -1
	for _, r := range results {
		scen := ""
		if r.Scenario.ID != last {
			scen = scenarioCell(r.Scenario)
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
			verdict = "✗ " + strings.Join(violationKinds(r), "; ")
		}
		fmt.Fprintf(&b, "| %s | %s | %d/%d | %s | %s | %d | %d | %d | %s | %d | %d | %s |\n",
			scen, clientCell(r.Client), r.OK, r.Total, t, ratio, user, global, shared, inj, r.Errors, r.Hangs, verdict)
	}
	return b.String()
}

func multiTable(groups []Group) string {
	var b strings.Builder
	b.WriteString("| Scenario (ideal) | Client | Runs | Done (all runs) | Time (median run) | × ideal: median (min–max) | 429 user | 429 global | 429 shared | Injected global 429s (beyond 1st) | Errors | Hangs | Simulator verdict |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	last := -1
	for _, g := range groups {
		scen := ""
		if g.Scenario.ID != last {
			scen = scenarioCell(g.Scenario)
			last = g.Scenario.ID
		}
		med, lo, hi, ok := g.Median()
		if !ok {
			fmt.Fprintf(&b, "| %s | %s | %d | n/a | | | | | | | | | %s |\n", scen, g.Client, len(g.Runs), g.Runs[0].NA)
			continue
		}
		rs := g.ran()
		var ok2, total, user, global, shared, injected, beyond, errs, hangs, bad int
		kinds := map[string]bool{}
		var kindOrder []string
		for _, r := range rs {
			u, gl, sh, inj := r.rateLimited()
			ok2, total, user, global, shared, injected = ok2+r.OK, total+r.Total, user+u, global+gl, shared+sh, injected+inj
			if inj > 0 {
				beyond += inj - 1
			}
			errs, hangs = errs+r.Errors, hangs+r.Hangs
			if len(r.Violations()) > 0 {
				bad++
				for _, k := range violationKinds(r) {
					if !kinds[k] {
						kinds[k] = true
						kindOrder = append(kindOrder, k)
					}
				}
			}
		}
		t := fmtDur(med.Elapsed)
		if med.Hangs > 0 {
			t = "> " + t
		}
		inj := fmt.Sprint(injected)
		if injected > 0 {
			inj = fmt.Sprintf("%d (%d)", injected, beyond)
		}
		verdict := "clean"
		if bad > 0 {
			verdict = fmt.Sprintf("✗ %s (%d of %d runs)", strings.Join(kindOrder, "; "), bad, len(rs))
		}
		runs := fmt.Sprint(len(rs))
		if len(rs) < len(g.Runs) {
			runs = fmt.Sprintf("%d (+%d n/a)", len(rs), len(g.Runs)-len(rs))
		}
		spread := fmt.Sprintf("%s (%s–%s)", ratio(med), ratio(lo), ratio(hi))
		if lo.Hangs > 0 {
			spread = "hang (every run)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d/%d | %s | %s | %d | %d | %d | %s | %d | %d | %s |\n",
			scen, clientCell(g.Client), runs, ok2, total, t, spread, user, global, shared, inj, errs, hangs, verdict)
	}
	return b.String()
}

// RunNotes lists, for scenarios run more than once, every run's × ideal in
// ascending order, so that a bimodal client shows as two clusters.
func RunNotes(results []Result) string {
	var b strings.Builder
	for _, g := range Groups(results) {
		rs := g.ran()
		if len(g.Runs) < 2 || len(rs) == 0 {
			continue
		}
		parts := make([]string, len(rs))
		for i, r := range rs {
			parts[i] = ratio(r)
		}
		fmt.Fprintf(&b, "- scenario %d, %s: %s\n", g.Scenario.ID, g.Client, strings.Join(parts, ", "))
	}
	return b.String()
}

func scenarioCell(s Scenario) string {
	return fmt.Sprintf("%d. %s (%s)", s.ID, s.Name, fmtDur(s.Ideal))
}

func clientCell(name string) string {
	if name == "Sluice" {
		return "**Sluice**"
	}
	return name
}

// violationKinds names the ways r broke the rules, for the verdict column.
func violationKinds(r Result) []string {
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
	return parts
}

// ErrorNotes lists, per scenario and client, the kinds of errors returned
// (over all runs).
func ErrorNotes(results []Result) string {
	var b strings.Builder
	for _, g := range Groups(results) {
		counts := map[string]int{}
		for _, r := range g.Runs {
			for k, n := range r.ErrorKinds {
				counts[k] += n
			}
		}
		if len(counts) == 0 {
			continue
		}
		kinds := make([]string, 0, len(counts))
		for k := range counts {
			kinds = append(kinds, k)
		}
		sort.Slice(kinds, func(i, j int) bool {
			if counts[kinds[i]] != counts[kinds[j]] {
				return counts[kinds[i]] > counts[kinds[j]]
			}
			return kinds[i] < kinds[j]
		})
		fmt.Fprintf(&b, "- scenario %d, %s%s:", g.Scenario.ID, g.Client, overRuns(g))
		for i, k := range kinds {
			if i == 3 {
				fmt.Fprintf(&b, " …")
				break
			}
			fmt.Fprintf(&b, " %d× `%s`;", counts[k], strings.ReplaceAll(k, "`", "'"))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func overRuns(g Group) string {
	if len(g.Runs) > 1 {
		return fmt.Sprintf(" (%d runs)", len(g.Runs))
	}
	return ""
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// DuplicateNotes reports, for scenarios with dropped connections, how many
// POSTs the simulator processed twice: messages a bot sent twice because its
// library resent a request whose connection died after it was processed.
func DuplicateNotes(results []Result) string {
	var b strings.Builder
	for _, g := range Groups(results) {
		if g.Scenario.Faults.DropRate == 0 {
			continue
		}
		var dup, dropped, injected, limited int
		ran := 0
		for _, r := range g.Runs {
			if r.NA != "" {
				continue
			}
			ran++
			dup += r.Stats.Duplicates["POST"]
			dropped += r.Stats.Dropped
			injected += r.Stats.ServerErrors
			limited += r.Stats.RateLimited["user"] + r.Stats.RateLimited["global"] + r.Stats.RateLimited["shared"]
		}
		if ran == 0 {
			continue
		}
		note := ""
		if limited > 0 {
			note = " (includes resends after 429s)"
		}
		fmt.Fprintf(&b, "- scenario %d, %s%s: %d duplicate POSTs%s; %d connections dropped, %d injected 5xx\n",
			g.Scenario.ID, g.Client, overRuns(g), dup, note, dropped, injected)
	}
	return b.String()
}

// messageCounts is what became of a run's message creations (SendMessage
// ops), from the client's outcomes and the simulator's message counters.
type messageCounts struct {
	sent int // message creations the bot asked for
	ok   int // of them, those the client reported as successes
	// twice is the simulator's DuplicateMessages: messages created a
	// second time by a resend the API could not deduplicate.
	twice int
	// lost are messages never created: sent minus the distinct messages
	// created (MessagesCreated - DuplicateMessages; the scenario's texts
	// are distinct, so only resends count as duplicates).
	lost int
	// unseen are messages created although the client reported an error
	// (or had no outcome) for them: the distinct messages created minus
	// the successes. A bot that resends them itself creates them twice.
	unseen int
	// resends are the admitted requests beyond one per message created:
	// resends the API deduplicated (MessagesDeduplicated) and those that
	// created a message twice. Each spent a bucket slot and a global one.
	resends int
	// windows are the message buckets' windows opened, minWindows those
	// the scenario's messages need when each is sent once.
	windows, minWindows int
}

func (r Result) messages() messageCounts {
	var m messageCounts
	for i, op := range r.Scenario.Ops {
		if op.Kind != SendMessage {
			continue
		}
		m.sent++
		if i < len(r.Events) && r.Events[i].Done && r.Events[i].Err == nil {
			m.ok++
		}
	}
	distinct := r.Stats.MessagesCreated - r.Stats.DuplicateMessages
	m.twice = r.Stats.DuplicateMessages
	m.lost = max(0, m.sent-distinct)
	m.unseen = max(0, distinct-m.ok)
	m.resends = r.Stats.MessagesDeduplicated + r.Stats.DuplicateMessages
	for _, b := range r.Stats.Buckets {
		if slices.Contains(b.Rules, "create_message") {
			m.windows += b.Windows
		}
	}
	m.minWindows = minWindows(r.Scenario, SendMessage)
	return m
}

// AdmittedIdeal is the ideal (see Ideal) of the requests the simulator
// admitted in r, rather than of the scenario's ops: each of the
// scenario's message buckets gets as many message creations as it
// admitted, resends that were deduplicated or created twice included,
// and requests that were never admitted (502s, 429s, messages given up)
// are left out. It is the completion time of an omniscient client that
// knew from the start which requests would have to be sent again, so
// r.Elapsed over it is what the limiter's own scheduling cost, the
// faults' cost set apart. Zero for a scenario without MessageReport.
func AdmittedIdeal(r Result) time.Duration {
	s := r.Scenario
	if !s.MessageReport || r.NA != "" {
		return 0
	}
	admitted := map[string]int{}
	for _, b := range r.Stats.Buckets {
		if slices.Contains(b.Rules, "create_message") {
			admitted[b.Major] += b.Admitted
		}
	}
	var ops []Op
	for _, op := range s.Ops {
		if op.Kind != SendMessage {
			ops = append(ops, op)
			continue
		}
		if admitted[op.major()] > 0 {
			admitted[op.major()]--
			ops = append(ops, op)
		}
	}
	// What is left are the resends, on channels the ops name.
	for _, op := range s.Ops {
		if op.Kind != SendMessage {
			continue
		}
		for ; admitted[op.major()] > 0; admitted[op.major()]-- {
			ops = append(ops, op)
		}
	}
	s.Ops = ops
	if len(ops) == 0 {
		return 0
	}
	return Ideal(s)
}

// minWindows is how many bucket windows the scenario's ops of kind k need
// when each is sent once: for each bucket, its requests over its limit,
// rounded up.
func minWindows(s Scenario, k OpKind) int {
	rules := map[string]sluicetest.Rule{}
	for _, r := range s.Rules.Rules {
		rules[r.Name] = r
	}
	count := map[string]int{}
	limit := map[string]int{}
	for _, op := range s.Ops {
		if op.Kind != k {
			continue
		}
		r := rules[op.rule()]
		key := r.Bucket + "/" + op.major()
		count[key]++
		limit[key] = r.Limit
	}
	n := 0
	for key, c := range count {
		n += (c + limit[key] - 1) / limit[key]
	}
	return n
}

// MessageTable renders, for the scenarios with MessageReport, what became
// of the message creations, per client, totalled over the runs: requests
// that succeeded, messages created twice (the simulator's
// DuplicateMessages), messages never created, messages created although
// the client reported an error, then the median run's time and the ratio
// to the ideal as in Table, the 429s the client caused, what resends cost
// (resends admitted, each spending a bucket slot, and the bucket windows
// opened, beside those the messages need), and the runs' times over
// AdmittedIdeal (median and range). Empty when no such scenario ran.
func MessageTable(results []Result) string {
	var b strings.Builder
	last := -1
	for _, g := range Groups(results) {
		if !g.Scenario.MessageReport {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("| Scenario (ideal) | Client | Runs | Succeeded | Created twice | Lost | Created, client saw an error | Time (median run) | × ideal: median (min–max) | 429s | Resends admitted | Bucket windows opened (the messages need) | × ideal of the admitted requests: median (min–max) |\n")
			b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		}
		scen := ""
		if g.Scenario.ID != last {
			scen = scenarioCell(g.Scenario)
			last = g.Scenario.ID
		}
		med, lo, hi, ok := g.Median()
		if !ok {
			fmt.Fprintf(&b, "| %s | %s | %d | n/a | | | | | | | | | |\n", scen, g.Client, len(g.Runs))
			continue
		}
		rs := g.ran()
		var tot messageCounts
		limited := 0
		for _, r := range rs {
			m := r.messages()
			tot.sent, tot.ok, tot.twice, tot.lost, tot.unseen = tot.sent+m.sent, tot.ok+m.ok, tot.twice+m.twice, tot.lost+m.lost, tot.unseen+m.unseen
			tot.resends, tot.windows, tot.minWindows = tot.resends+m.resends, tot.windows+m.windows, tot.minWindows+m.minWindows
			u, gl, sh, _ := r.rateLimited()
			limited += u + gl + sh
		}
		t := fmtDur(med.Elapsed)
		if med.Hangs > 0 {
			t = "> " + t
		}
		spread := fmt.Sprintf("%s (%s–%s)", ratio(med), ratio(lo), ratio(hi))
		if len(rs) == 1 {
			spread = ratio(med)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d/%d | %d | %d | %d | %s | %s | %d | %d | %d (%d) | %s |\n",
			scen, clientCell(g.Client), len(rs), tot.ok, tot.sent, tot.twice, tot.lost, tot.unseen, t, spread, limited,
			tot.resends, tot.windows, tot.minWindows, admittedSpread(rs))
	}
	return b.String()
}

// admittedSpread formats the runs' elapsed time over AdmittedIdeal: the
// median and range, "hang" for a run with hangs.
func admittedSpread(rs []Result) string {
	var ratios []float64
	hangs := 0
	for _, r := range rs {
		ai := AdmittedIdeal(r)
		switch {
		case r.Hangs > 0:
			hangs++
		case ai > 0:
			ratios = append(ratios, float64(r.Elapsed)/float64(ai))
		}
	}
	if len(ratios) == 0 {
		if hangs > 0 {
			return "hang"
		}
		return "—"
	}
	sort.Float64s(ratios)
	// Runs with hangs count as slower than any other, as in Median.
	all := len(ratios) + hangs
	mid := (all - 1) / 2
	med := "hang"
	if mid < len(ratios) {
		med = fmt.Sprintf("%.2f", ratios[mid])
	}
	hi := "hang"
	if hangs == 0 {
		hi = fmt.Sprintf("%.2f", ratios[len(ratios)-1])
	}
	if all == 1 {
		return med
	}
	return fmt.Sprintf("%s (%.2f–%s)", med, ratios[0], hi)
}
