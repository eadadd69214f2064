package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

// TestMeasureWellFormed runs a trimmed scenario 1 (12 messages to one
// channel: three bucket windows of 500 ms, 150 ms latency) end to end,
// both looks, and checks the figures add up. It asserts no accuracy: the
// figures depend on the machine's timing.
func TestMeasureWellFormed(t *testing.T) {
	s := harness.Scenarios()[0]
	s.Ops = s.Ops[:12]
	s.Ideal = harness.Ideal(s)
	r, err := measure(s, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if r.Unmatched != "" {
		t.Fatalf("unmatched: %s", r.Unmatched)
	}
	for look, samples := range r.Looks {
		if len(samples) != len(s.Ops) {
			t.Fatalf("look %d: %d samples for %d ops", look, len(samples), len(s.Ops))
		}
		for i, sm := range samples {
			if sm.Op != i {
				t.Errorf("look %d: sample %d is op %d", look, i, sm.Op)
			}
			if sm.Actual.IsZero() || sm.Actual.Before(r.Begin) {
				t.Errorf("look %d: op %d sent at %v, run began %v", look, i, sm.Actual, r.Begin)
			}
			if sm.waiting() && (sm.ETA.Start.IsZero() || sm.ETA.End.Before(sm.ETA.Start)) {
				t.Errorf("look %d: op %d waiting with window [%v, %v)", look, i, sm.ETA.Start, sm.ETA.End)
			}
		}
	}
	if r.StampChecked != len(s.Ops) {
		t.Errorf("%d echoed timestamps for %d requests", r.StampChecked, len(s.Ops))
	}

	for look := range numLooks {
		sum := summarize(s, []runResult{r}, look)
		if sum.Requests != len(s.Ops) || sum.Waiting+sum.Sent+sum.Done != sum.Requests {
			t.Errorf("look %d: %d requests = %d waiting + %d sent + %d done?", look, sum.Requests, sum.Waiting, sum.Sent, sum.Done)
		}
		groups := map[string]group{"all": sum.All}
		nLimit, nKnown := 0, 0
		for l, g := range sum.ByLimit {
			groups["limit "+l] = *g
			nLimit += g.N
		}
		for k, g := range sum.ByKnown {
			groups["known "+map[bool]string{true: "true", false: "false"}[k]] = *g
			nKnown += g.N
		}
		if sum.All.N != sum.Waiting || nLimit != sum.Waiting || nKnown != sum.Waiting {
			t.Errorf("look %d: %d waiting, %d in All, %d by limit, %d by known", look, sum.Waiting, sum.All.N, nLimit, nKnown)
		}
		for name, g := range groups {
			if g.In+g.Early+g.Late != g.N || g.InZero > g.In || len(g.Errs) != g.N {
				t.Errorf("look %d %s: in %d + early %d + late %d != %d (in with 0 slack %d, %d errors)", look, name, g.In, g.Early, g.Late, g.N, g.InZero, len(g.Errs))
			}
			for _, f := range []float64{g.share(g.In), g.share(g.InZero), g.share(g.Early), g.share(g.Late)} {
				if f < 0 || f > 1 {
					t.Errorf("look %d %s: share %v", look, name, f)
				}
			}
			if g.N > 0 && !(g.min() <= g.pct(50) && g.pct(50) <= g.pct(90) && g.pct(90) <= g.pct(99) && g.pct(99) <= g.max()) {
				t.Errorf("look %d %s: percentiles out of order", look, name)
			}
		}
	}

	// The report renders, and writeDoc keeps the text around its markers.
	sums := []summary{summarize(s, []runResult{r}, atSubmission), summarize(s, []runResult{r}, afterFirstAnswer)}
	table := tables(sums)
	if !strings.Contains(table, "| 1. "+s.Name+" | at submission |") {
		t.Errorf("table lacks the scenario's row:\n%s", table)
	}
	path := filepath.Join(t.TempDir(), "eta.md")
	if err := writeDoc(path, table, 1, time.Second); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	doc := strings.Replace(string(b), intro, "# Kept\n\nhand-written\n\n", 1) + "\nafter\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeDoc(path, table, 1, time.Second); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if got := string(b); !strings.HasPrefix(got, "# Kept\n\nhand-written\n\n"+beginMarker) || !strings.HasSuffix(got, endMarker+"\n\nafter\n") || strings.Count(got, beginMarker) != 1 {
		t.Errorf("rewritten doc:\n%s", got)
	}
	if err := writeCSV(filepath.Join(t.TempDir(), "eta.csv"), []runResult{r}); err != nil {
		t.Fatal(err)
	}
}
