// Command timeline runs scenario 1 of cmd/compare (50 messages to one
// channel, bucket 5 per 500 ms, 150 ms latency) through Sluice and through
// discordgo, and draws what the simulator saw as one SVG figure: a row per
// client, a tick per request coloured by its status, and the bucket's
// windows as shaded bands.
//
//	cd bench && go run ./cmd/timeline    # writes ../docs/figures/timeline.svg
//
// It exits non-zero if Sluice drew a 429 the simulator calls avoidable.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

func main() {
	out := flag.String("out", "../docs/figures/timeline.svg", "SVG file to write")
	scenario := flag.Int("scenario", 1, "scenario to draw (one bucket works best: 1 or 3)")
	clients := flag.String("clients", "Sluice,discordgo", "comma-separated clients, one row each")
	flag.Parse()

	all := harness.Scenarios()
	if *scenario < 1 || *scenario > len(all) {
		fmt.Fprintf(os.Stderr, "timeline: no scenario %d\n", *scenario)
		os.Exit(2)
	}
	s := all[*scenario-1]
	want := strings.Split(*clients, ",")
	var rows []row
	bad := false
	for _, spec := range harness.Clients() {
		if !slices.Contains(want, spec.Name) {
			continue
		}
		r := harness.Run(s, spec)
		if r.NA != "" {
			fmt.Fprintf(os.Stderr, "timeline: %s: n/a: %s\n", spec.Name, r.NA)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "%-10s %d/%d ok in %.2f s (ideal %.2f s); %s\n", spec.Name, r.OK, r.Total, r.Elapsed.Seconds(), s.Ideal.Seconds(), r.Stats.Summary())
		if v := r.Violations(); spec.Name == "Sluice" && len(v) > 0 {
			fmt.Fprintf(os.Stderr, "timeline: SLUICE VIOLATIONS: %s\n", strings.Join(v, "; "))
			bad = true
		}
		rows = append(rows, newRow(r))
	}
	if len(rows) == 0 {
		fmt.Fprintln(os.Stderr, "timeline: no client selected")
		os.Exit(2)
	}
	svg := render(s, rows)
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "timeline:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, []byte(svg), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "timeline:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "timeline: wrote %s\n", *out)
	if bad {
		os.Exit(1)
	}
}
