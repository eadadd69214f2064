package sluicearikawa_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diamondburned/arikawa/v3/api"
	"github.com/diamondburned/arikawa/v3/discord"
	"github.com/diamondburned/arikawa/v3/utils/httputil"
	"github.com/diamondburned/arikawa/v3/utils/httputil/httpdriver"
	"github.com/stretchr/testify/require"

	sluicearikawa "github.com/sluicehq/sluice/integrations/arikawa"
	"github.com/sluicehq/sluice/sluicetest"
)

// toSimulator sends requests for discord.com to the simulator instead: the
// only change arikawa alone needs to run against it (no limiter).
type toSimulator struct {
	base *url.URL
	rt   http.RoundTripper
}

func (t toSimulator) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.URL.Scheme, r.URL.Host, r.Host = t.base.Scheme, t.base.Host, ""
	return t.rt.RoundTrip(r)
}

// TestMeasure prints the README's table: the same loads through arikawa
// alone (its limiter and its 5 tries on, a plain http.Client trusting the
// simulator), arikawa with Sluice as its transport only (arikawa's limiter
// and retries still on), arikawa wired with NewClient, and lim.Do alone,
// each against a fresh simulator with 100 ms of latency. It runs only with
// SLUICE_MEASURE=1; SLUICE_MEASURE_SCALE (default 1) scales the windows.
//
//	SLUICE_MEASURE=1 go test -run TestMeasure -v .
func TestMeasure(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE") != "1" {
		t.Skip("set SLUICE_MEASURE=1 to measure")
	}
	scale := 1.0
	if s := os.Getenv("SLUICE_MEASURE_SCALE"); s != "" {
		var err error
		scale, err = strconv.ParseFloat(s, 64)
		require.NoError(t, err)
	}
	loads := []struct {
		name string
		w    workload
	}{
		{"30 messages over 3 channels + 12 reactions", workload{Channels: 3, Messages: 10, Reactions: 4}},
		{"20 messages to one channel", workload{Channels: 1, Messages: 20}},
		{"100 messages over 25 channels", workload{Channels: 25, Messages: 4}},
	}
	type config struct {
		name string
		run  func(t *testing.T, srv *sluicetest.Server, w workload) outcome
	}
	configs := []config{
		{"arikawa alone", func(t *testing.T, srv *sluicetest.Server, w workload) outcome {
			base, _ := url.Parse(srv.URL)
			hc := httputil.NewClient() // arikawa's default: 10 s timeout, 5 tries
			hc.Client = httpdriver.WrapClient(http.Client{Timeout: 10 * time.Second, Transport: toSimulator{base, srv.Client().Transport}})
			return runArikawa(api.NewCustomClient(botToken, hc), w)
		}},
		{"arikawa + Sluice as transport only", func(t *testing.T, srv *sluicetest.Server, w workload) outcome {
			hc := httputil.NewClient()
			hc.Client = httpdriver.WrapClient(http.Client{Transport: newLimiter(t, srv, nil)})
			return runArikawa(api.NewCustomClient(botToken, hc), w)
		}},
		{"arikawa + Sluice (sluicearikawa.NewClient)", func(t *testing.T, srv *sluicetest.Server, w workload) outcome {
			return runArikawa(sluicearikawa.NewClient(botToken, newLimiter(t, srv, nil)), w)
		}},
		{"Sluice alone (lim.Do)", func(t *testing.T, srv *sluicetest.Server, w workload) outcome {
			return runSluice(context.Background(), newLimiter(t, srv, nil), w)
		}},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "windows scaled by %g, latency %s\n\n", scale, latency)
	fmt.Fprintln(&table, "| load | client | wall time | calls ok | requests | 429s by scope | max in flight per channel (messages) |")
	fmt.Fprintln(&table, "|---|---|---|---|---|---|---|")
	for _, l := range loads {
		for _, c := range configs {
			t.Run(l.name+"/"+c.name, func(t *testing.T) {
				srv := newServer(t, sluicetest.Options{
					Rules:  sluicetest.DefaultRules().Scaled(scale),
					Faults: sluicetest.Faults{Latency: latency},
				})
				out := c.run(t, srv, l.w)
				st := srv.Stats()
				for _, err := range out.Errors {
					t.Log("error:", err)
				}
				fmt.Fprintf(&table, "| %s | %s | %s | %d/%d | %d | %s | %s |\n", l.name, c.name,
					out.Elapsed.Round(10*time.Millisecond), out.OK, l.w.Calls(), st.Requests,
					scopes(st.RateLimited), inFlightList(bucketInFlight(st, "create_message")))
			})
		}
	}
	t.Log("\n" + table.String())
}

// scopes formats 429s by scope, "0" when none.
func scopes(m map[string]int) string {
	if len(m) == 0 {
		return "0"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// inFlightList formats the in-flight maxima in channel order.
func inFlightList(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = strconv.Itoa(m[k])
	}
	return strings.Join(parts, ", ")
}

// TestMeasureColdRoute times the first reaction on a channel whose message
// bucket is spent, with the reaction route never answered before (cold) and
// answered once on another channel (warm). Before Sluice's 48d5827 the cold
// one waited about 5 s for the message window (a never-answered route held
// a slot in every known bucket of its channel); now both go at once. It
// runs only with SLUICE_MEASURE=1.
func TestMeasureColdRoute(t *testing.T) {
	if os.Getenv("SLUICE_MEASURE") != "1" {
		t.Skip("set SLUICE_MEASURE=1 to measure")
	}
	for _, warm := range []bool{false, true} {
		srv := newServer(t, sluicetest.Options{Rules: sluicetest.DefaultRules()})
		c := sluicearikawa.NewClient(botToken, newLimiter(t, srv, nil))
		if warm { // the reaction route answered once, on another channel
			m, err := c.SendMessage(2000, "warm up")
			require.NoError(t, err)
			require.NoError(t, c.React(2000, m.ID, emoji))
		}
		var first discord.MessageID
		for i := range 5 { // spends channel 1000's message window
			m, err := c.SendMessage(1000, fmt.Sprint("message ", i))
			require.NoError(t, err)
			if i == 0 {
				first = m.ID
			}
		}
		began := time.Now()
		require.NoError(t, c.React(1000, first, emoji))
		t.Logf("reaction route answered before: %v; React on the spent channel took %s", warm, time.Since(began).Round(time.Millisecond))
	}
}
