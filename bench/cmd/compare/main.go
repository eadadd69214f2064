// Command compare runs the same Discord REST workloads through Sluice,
// discordgo, disgo, arikawa and @discordjs/rest, each against its own fresh
// sluicetest simulator, and prints one Markdown table of what the simulator
// counted.
//
// Run it from the bench module:
//
//	cd bench && go run ./cmd/compare
//	cd bench && go run ./cmd/compare -out "" -clients sluice -runs 5 -scenarios 8,9
//
// -runs N runs every scenario and client N times (each against a fresh
// simulator, the fault dice seeded anew); the table then shows the median
// run and the range of its × ideal, and a list of every run's ratio, so a
// client whose time is bimodal shows it. -full runs scenario 8 at full size
// (45 s ideal) instead of one tenth.
//
// It writes the table, with the command, machine and date, to
// ../docs/comparison.md (-out "" to skip) and exits non-zero if Sluice drew
// any 429 the simulator calls avoidable, in any run.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

func main() {
	out := flag.String("out", "../docs/comparison.md", "Markdown file to write (empty: print only)")
	only := flag.String("scenarios", "", "comma-separated scenario numbers to run (default all)")
	clients := flag.String("clients", "", "comma-separated client names to run (default all)")
	node := flag.Bool("discordjs", true, "also run @discordjs/rest when Node and the package are available (see bench/discordjs)")
	runs := flag.Int("runs", 1, "runs of each scenario and client; the table shows the median and range of × ideal")
	full := flag.Bool("full", false, "run scenario 8 at full size (4,450 + 50 messages, 5 s windows; ideal 45 s) instead of one tenth")
	flag.Parse()
	if *runs < 1 {
		fmt.Fprintln(os.Stderr, "compare: -runs must be at least 1")
		os.Exit(2)
	}

	scenarios := harness.ScenariosAt(*full)
	if *only != "" {
		var keep []harness.Scenario
		for _, f := range strings.Split(*only, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > len(scenarios) {
				fmt.Fprintf(os.Stderr, "compare: bad scenario %q\n", f)
				os.Exit(2)
			}
			keep = append(keep, scenarios[n-1])
		}
		scenarios = keep
	}
	specs := harness.Clients()
	if *node {
		if js, why := harness.DiscordJS(); js != nil {
			specs = append(specs, *js)
		} else {
			fmt.Fprintf(os.Stderr, "compare: @discordjs/rest skipped: %s\n", why)
		}
	}
	if *clients != "" {
		want := strings.Split(strings.ToLower(*clients), ",")
		specs = slices.DeleteFunc(specs, func(s harness.ClientSpec) bool {
			return !slices.Contains(want, strings.ToLower(s.Name))
		})
	}

	began := time.Now()
	var results []harness.Result
	sluiceBad := false
	for _, s := range scenarios {
		fmt.Fprintf(os.Stderr, "scenario %d: %s — ideal %.2f s, timeout %.0f s\n", s.ID, s.Name, s.Ideal.Seconds(), s.Timeout().Seconds())
		// Runs alternate between clients, so that a slow spell of the
		// machine does not fall on one client's runs only.
		for run := range *runs {
			for _, spec := range specs {
				r := harness.RunAt(s, spec, run)
				results = append(results, r)
				label := spec.Name
				if *runs > 1 {
					label = fmt.Sprintf("%s #%d", spec.Name, run+1)
				}
				if r.NA != "" {
					fmt.Fprintf(os.Stderr, "  %-15s n/a: %s\n", label, r.NA)
					continue
				}
				fmt.Fprintf(os.Stderr, "  %-15s %3d/%d ok in %6.2f s (%.2f× ideal), errors %d, hangs %d; %s\n",
					label, r.OK, r.Total, r.Elapsed.Seconds(), r.Ratio(), r.Errors, r.Hangs, r.Stats.Summary())
				if v := r.Violations(); spec.Name == "Sluice" && len(v) > 0 {
					sluiceBad = true
					fmt.Fprintf(os.Stderr, "  SLUICE VIOLATIONS: %s\n", strings.Join(v, "; "))
				}
			}
		}
	}
	took := time.Since(began)

	table := harness.Table(results)
	fmt.Println(table)
	if mt := harness.MessageTable(results); mt != "" {
		fmt.Println("Message creations:")
		fmt.Println(mt)
	}
	if notes := harness.RunNotes(results); notes != "" {
		fmt.Println("× ideal of every run, ascending:")
		fmt.Println(notes)
	}
	if notes := harness.ErrorNotes(results); notes != "" {
		fmt.Println("Errors returned:")
		fmt.Println(notes)
	}
	if notes := harness.DuplicateNotes(results); notes != "" {
		fmt.Println("Writes processed twice:")
		fmt.Println(notes)
	}
	fmt.Fprintf(os.Stderr, "compare: %d runs in %.0f s\n", len(results), took.Seconds())
	if sluiceBad {
		fmt.Fprintln(os.Stderr, "compare: Sluice drew avoidable 429s; the table is not trustworthy and was not written")
		os.Exit(1)
	}
	if *out != "" {
		if err := writeDoc(*out, scenarios, specs, results, *runs, took); err != nil {
			fmt.Fprintln(os.Stderr, "compare:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "compare: wrote %s\n", *out)
	}
}
