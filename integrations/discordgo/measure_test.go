package sluicediscordgo_test

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sluicetest"
)

// TestMeasure prints the README's tables: the same loads sent by each
// wiring against a fresh simulator. Skipped unless SLUICE_MEASURE=1:
//
//	SLUICE_MEASURE=1 go test -run TestMeasure -v .
//
// SLUICE_MEASURE_RUNS sets the runs per cell (default 5); the table shows
// the median time and the worst of the other columns.
func TestMeasure(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE") != "1" {
		t.Skip("set SLUICE_MEASURE=1 to measure")
	}
	runs := 5
	if v := os.Getenv("SLUICE_MEASURE_RUNS"); v != "" {
		fmt.Sscan(v, &runs)
	}
	table := func(title string, ld load, ws ...wiring) {
		var b strings.Builder
		fmt.Fprintf(&b, "\n%s\n\n| wiring | wall time (median of %d) | 429s by scope | MaxInFlight (create_message) | failed calls |\n|---|---|---|---|---|\n", title, runs)
		var ref time.Duration
		for i, w := range ws {
			var times []time.Duration
			rl := map[string]int{}
			inflight, failed := 0, 0
			for range runs {
				o := runLoad(t, w, ld)
				times = append(times, o.Elapsed)
				for k, v := range o.Stats.RateLimited {
					rl[k] += v
				}
				inflight = max(inflight, o.MaxInFlight)
				failed += o.Failed
			}
			sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
			med := times[len(times)/2]
			if i == 0 {
				ref = med
			}
			fmt.Fprintf(&b, "| %s | %s (%.2fx; %s–%s) | %v | %d | %d |\n", w, med.Round(time.Millisecond),
				float64(med)/float64(ref), times[0].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond), rl, inflight, failed)
		}
		t.Log(b.String())
	}
	rules := scaled()
	table("30 messages over 3 channels + 3 reactions per channel, rules scaled 0.1 (5 messages per 500 ms per channel), 100 ms latency",
		load{Channels: 3, Messages: 30, Reactions: 3, Latency: 100 * time.Millisecond, Rules: rules},
		sluiceAlone, discordgoAlone, applied, plainTransport)
	for _, lat := range []time.Duration{100 * time.Millisecond, 150 * time.Millisecond} {
		table(fmt.Sprintf("one saturated channel: 20 messages, rules scaled 0.1, %s latency", lat),
			load{Channels: 1, Messages: 20, Latency: lat, Rules: rules},
			sluiceAlone, applied, plainTransport, strippedHeaders, discordgoAlone)
	}
	table("10 reactions in one channel, Discord's reaction rule (1 per 250 ms per channel), 20 ms latency",
		load{Channels: 1, Reactions: 10, Latency: 20 * time.Millisecond, Rules: sluicetest.DefaultRules()},
		sluiceAlone, applied, discordgoAlone)
	table("10 reactions in one channel, rules scaled 0.1 (1 reaction per 25 ms per channel), 20 ms latency",
		load{Channels: 1, Reactions: 10, Latency: 20 * time.Millisecond, Rules: rules},
		sluiceAlone, applied, discordgoAlone)
}
