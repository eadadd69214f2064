package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// An ideal run keeps 100% of the pace: 400 requests under 50 per 500 ms
// take 8 windows, the last answered at the start of the eighth (3.5 s
// after the first).
func TestPace(t *testing.T) {
	for _, tc := range []struct {
		total  int
		span   time.Duration
		limit  int
		window time.Duration
		want   float64
	}{
		{400, 3500 * time.Millisecond, 50, 500 * time.Millisecond, 1},
		{400, 1 * time.Second, 200, time.Second, 1},                     // the global limit: 2 windows
		{400, 4500 * time.Millisecond, 50, 500 * time.Millisecond, 0.8}, // two windows lost
		{800, 3 * time.Second, 200, time.Second, 1},
	} {
		if got := pace(tc.total, tc.span, tc.limit, tc.window); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("pace(%d, %v, %d, %v) = %v, want %v", tc.total, tc.span, tc.limit, tc.window, got, tc.want)
		}
	}
}

func TestParseScriptCalls(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=1200,usec=50000,usec_per_call=41.67,rejected_calls=0,failed_calls=2\r\n" +
		"cmdstat_eval:calls=3,usec=300,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha_ro:calls=10,usec=1,usec_per_call=0.1,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_flushall:calls=2,usec=20,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n"
	n, err := parseScriptCalls(info)
	if err != nil || n != 1213 {
		t.Fatalf("parseScriptCalls = %d, %v; want 1213 (evalsha + eval + evalsha_ro, not info or flushall)", n, err)
	}
	if n, err := parseScriptCalls("# Commandstats\r\n"); err != nil || n != 0 {
		t.Fatalf("no scripts yet: %d, %v; want 0", n, err)
	}
	if _, err := parseScriptCalls("cmdstat_evalsha:calls=x,usec=1\r\n"); err == nil {
		t.Fatal("a bad count was accepted")
	}
	if _, err := parseScriptCalls("cmdstat_eval:usec=1\r\n"); err == nil {
		t.Fatal("a script line without calls= was accepted")
	}
}

func TestInfoField(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n"
	if v := infoField(info, "redis_version"); v != "7.0.15" {
		t.Fatalf("redis_version = %q", v)
	}
	if v := infoField(info, "redis_mode"); v != "" {
		t.Fatalf("a missing field = %q", v)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
		idx  int
	}{
		{nil, 0, -1},
		{[]float64{0.9}, 0.9, 0},
		{[]float64{0.97, 0.91, 0.99}, 0.97, 0},
		{[]float64{0.99, 0.91, 0.95, 0.97}, 0.96, 2}, // the lower middle run: 0.95
	} {
		if got := median(tc.xs); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
		if got := medianIndex(tc.xs); got != tc.idx {
			t.Errorf("medianIndex(%v) = %d, want %d", tc.xs, got, tc.idx)
		}
	}
}

func TestTableRow(t *testing.T) {
	sc, _ := scenarioNamed("saturated")
	runs := []runResult{
		{Scenario: "saturated", Run: 1, Requests: 400, OK: 400, Pace: 0.97, ScriptCalls: 820, Reserved: 404, User429: 0,
			Finish: []time.Duration{3 * time.Second, 3100 * time.Millisecond}},
		{Scenario: "saturated", Run: 2, Requests: 400, OK: 399, Failed: 1, Pace: 0.91, ScriptCalls: 800, Reserved: 400, User429: 2, Global429: 1,
			Violations: []string{"2 user-scope 429s"}, Finish: []time.Duration{2 * time.Second, 2504 * time.Millisecond}},
		{Scenario: "saturated", Run: 3, Requests: 400, OK: 400, Pace: 0.99, ScriptCalls: 840, Reserved: 408,
			Finish: []time.Duration{time.Second, time.Second}},
	}
	got := tableRow(summarize(sc, runs))
	want := "| saturated | bucket 50 / 500ms | 97.0% (91.0%–99.0%) | 2.05 (2.00–2.10) | 1.01 (1.00–1.02) | 2 | 1 | 1 | 1199/1200 | 3.00, 3.10 s |\n"
	if got != want {
		t.Fatalf("row:\n%s\nwant:\n%s", got, want)
	}
	if cells := strings.Count(got, "|"); cells != 11 {
		t.Fatalf("%d cell separators, the table has 10 columns", cells)
	}
	one := tableRow(summarize(sc, runs[:1]))
	if !strings.Contains(one, "| 97.0% | 2.05 | 1.01 |") {
		t.Fatalf("a single run shows no range: %s", one)
	}
}

func TestParseScenarios(t *testing.T) {
	scs, err := parseScenarios("fan-out, saturated")
	if err != nil || len(scs) != 2 || scs[0].name != "fan-out" || scs[1].name != "saturated" {
		t.Fatalf("parseScenarios: %v, %v", scs, err)
	}
	for _, bad := range []string{"saturated,nope", "saturated,saturated", ""} {
		if _, err := parseScenarios(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

// fan-out gives every request of every process a channel of its own, and
// unknown-burst every process the same channels.
func TestScenarioPaths(t *testing.T) {
	const processes, goroutines = 3, 7
	fan, _ := scenarioNamed("fan-out")
	burst, _ := scenarioNamed("unknown-burst")
	seen := map[string]bool{}
	for p := range processes {
		for w := range goroutines {
			path := fan.path(p, w, goroutines)
			if seen[path] {
				t.Fatalf("fan-out: %s twice", path)
			}
			seen[path] = true
			if got, want := burst.path(p, w, goroutines), burst.path(0, w, goroutines); got != want {
				t.Fatalf("unknown-burst: process %d goroutine %d on %s, process 0 on %s", p, w, got, want)
			}
		}
	}
	if l, w := fan.binding(); l != sharedGlobal || w != time.Second {
		t.Fatalf("fan-out binds %d per %v, want the global limit", l, w)
	}
}

func TestTailBuffer(t *testing.T) {
	tb := &tailBuffer{max: 8}
	fmt.Fprint(tb, "abc")
	if got := tb.String(); got != "abc" {
		t.Fatalf("short: %q", got)
	}
	fmt.Fprint(tb, "defghijkl")
	if got := tb.String(); got != "…efghijkl" {
		t.Fatalf("tail: %q", got)
	}
}
