package sluicedisgo_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/disgoorg/disgo/rest"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/sluicetest"
)

// TestMeasure produces README.md's table: the same load run by
//
//   - disgo alone: its default rest.RateLimiter (10 retries of 429s) and an
//     http.Client over the simulator's TLS configuration (HTTP/2), without
//     disgo's default 20 s Timeout: disgo never closes a response body, so
//     with a Timeout and a wrapped transport (via, below) net/http keeps a
//     goroutine per request until the timeout fires;
//   - disgo + Sluice as wired by ConfigOpts (no-op limiter, no retries);
//   - disgo's default limiter left on, over Sluice;
//   - Sluice alone (lim.Do with the same requests).
//
// Each against a fresh simulator with the same rules and latency. It is
// skipped unless SLUICE_MEASURE=1; SLUICE_MEASURE_SCALE (default 0.1)
// scales the bucket windows, SLUICE_MEASURE_RUNS (default 3) repeats each
// arm, and the median run is reported:
//
//	SLUICE_MEASURE=1 go test -run TestMeasure -v -count=1 .
func TestMeasure(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE") != "1" {
		t.Skip("set SLUICE_MEASURE=1 to measure")
	}
	scale, runs := 0.1, 3
	if s := os.Getenv("SLUICE_MEASURE_SCALE"); s != "" {
		var err error
		scale, err = strconv.ParseFloat(s, 64)
		require.NoError(t, err)
	}
	if s := os.Getenv("SLUICE_MEASURE_RUNS"); s != "" {
		var err error
		runs, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	const latency = 100 * time.Millisecond
	opts := sluicetest.Options{
		Rules:  sluicetest.DefaultRules().Scaled(scale),
		Faults: sluicetest.Faults{Latency: latency},
	}

	for _, l := range []load{
		{Channels: 3, Messages: 30, Reactions: 2},
		{Channels: 1, Messages: 15},
	} {
		measure(t, l, opts, runs, scale)
	}
}

// measure runs l through each arm runs times and logs the table.
func measure(t *testing.T, l load, opts sluicetest.Options, runs int, scale float64) {
	type arm struct {
		name string
		run  func(t *testing.T, srv *sluicetest.Server) outcome
	}
	arms := []arm{
		{"(a) disgo alone (its limiter and retries)", func(t *testing.T, srv *sluicetest.Server) outcome {
			client := rest.NewClient(botToken,
				rest.WithURL(srv.APIBase()),
				rest.WithHTTPClient(&http.Client{Transport: via{srv.Client().Transport}}))
			defer client.Close(context.Background())
			return runDisgo(t.Context(), rest.New(client), l)
		}},
		{"(b) disgo + Sluice (ConfigOpts)", func(t *testing.T, srv *sluicetest.Server) outcome {
			r, _ := newRest(t, newLimiter(t, srv, nil))
			return runDisgo(t.Context(), r, l)
		}},
		{"(c) disgo's limiter left on + Sluice", func(t *testing.T, srv *sluicetest.Server) outcome {
			lim := newLimiter(t, srv, nil)
			client := rest.NewClient(botToken, rest.WithHTTPClient(&http.Client{Transport: lim}))
			defer client.Close(context.Background())
			return runDisgo(t.Context(), rest.New(client), l)
		}},
		{"(d) Sluice alone (lim.Do)", func(t *testing.T, srv *sluicetest.Server) outcome {
			return runSluice(t.Context(), newLimiter(t, srv, nil), l)
		}},
	}

	var table strings.Builder
	fmt.Fprintf(&table, "load: %d messages over %d channels, then %d reactions added and removed per channel; rules DefaultRules().Scaled(%g), latency %s; median of %d runs\n\n",
		l.Messages, l.Channels, l.Reactions, scale, opts.Faults.Latency, runs)
	table.WriteString("| run | wall time | failed calls | requests at the server | 429s by scope | max in flight: create_message / reactions |\n|---|---|---|---|---|---|\n")
	for _, a := range arms {
		type result struct {
			out outcome
			st  sluicetest.Stats
		}
		var results []result
		for i := range runs {
			t.Run(fmt.Sprintf("%dx%d/%s/%d", l.Channels, l.Messages/l.Channels, a.name[1:2], i), func(t *testing.T) {
				srv := newServer(t, opts)
				out := a.run(t, srv)
				st := srv.Stats()
				results = append(results, result{out, st})
				t.Logf("%s: %s, %d errors; %s", a.name, out.Elapsed.Round(time.Millisecond), len(out.Errors), st.Summary())
				for _, err := range out.Errors[:min(3, len(out.Errors))] {
					t.Log("  ", err)
				}
			})
		}
		slices.SortFunc(results, func(x, y result) int { return int(x.out.Elapsed - y.out.Elapsed) })
		m := results[len(results)/2]
		scopes := "none"
		if len(m.st.RateLimited) > 0 {
			var parts []string
			for _, k := range slices.Sorted(maps.Keys(m.st.RateLimited)) {
				parts = append(parts, fmt.Sprintf("%s %d", k, m.st.RateLimited[k]))
			}
			scopes = strings.Join(parts, ", ")
		}
		fmt.Fprintf(&table, "| %s | %s | %d | %d | %s | %d / %d |\n", a.name,
			m.out.Elapsed.Round(10*time.Millisecond), len(m.out.Errors), m.st.Requests, scopes,
			maxInFlight(m.st, "create_message"), maxInFlight(m.st, "add_reaction"))
	}
	t.Log("\n" + table.String())
}

// via adds the Via header Discord's answers carry (Cloudflare's) and the
// simulator's lack: without it, disgo's limiter takes every 429 for a
// Cloudflare ban and pauses all requests for it.
type via struct{ next http.RoundTripper }

func (v via) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := v.next.RoundTrip(r)
	if err == nil && resp.Header.Get("Via") == "" {
		resp.Header.Set("Via", "1.1 google")
	}
	return resp, err
}
