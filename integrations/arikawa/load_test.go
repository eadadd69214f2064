package sluicearikawa_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	sluicearikawa "github.com/sluicehq/sluice/integrations/arikawa"
	"github.com/sluicehq/sluice/sluicetest"
)

// latency is the simulator's answer delay in the load tests: long enough
// that a client sending one request of a bucket at a time shows it.
const latency = 100 * time.Millisecond

// maxRatio is how much slower arikawa through Sluice may be than the
// limiter alone on the same load.
const maxRatio = 1.05

// TestPipeliningAndTiming runs each load through arikawa wired with
// NewClient, then through lim.Do alone, each against a fresh simulator
// with the same rules (windows scaled by 0.1) and 100 ms of latency.
// Every call succeeds, no 429 is drawn, each call is one RoundTrip, the
// server answers several requests of each saturated channel at once
// (Sluice pipelines them: arikawa's limiter would hold one), and the time
// is within maxRatio of Sluice alone.
func TestPipeliningAndTiming(t *testing.T) {
	loads := []struct {
		name string
		w    workload
	}{
		{"saturated channel", workload{Channels: 1, Messages: 20}},
		{"three channels and reactions", workload{Channels: 3, Messages: 10, Reactions: 4}},
	}
	for _, l := range loads {
		t.Run(l.name, func(t *testing.T) {
			opts := sluicetest.Options{Faults: sluicetest.Faults{Latency: latency}}

			srvA := newServer(t, opts)
			rt := count(newLimiter(t, srvA, nil))
			a := runArikawa(sluicearikawa.NewClient(botToken, rt), l.w)
			stA := srvA.Stats()

			srvS := newServer(t, opts)
			s := runSluice(context.Background(), newLimiter(t, srvS, nil), l.w)
			stS := srvS.Stats()

			t.Logf("arikawa+Sluice: %s; %s; in flight %v", a.Elapsed.Round(time.Millisecond), stA.Summary(), bucketInFlight(stA, "create_message"))
			t.Logf("Sluice alone:   %s; %s; in flight %v", s.Elapsed.Round(time.Millisecond), stS.Summary(), bucketInFlight(stS, "create_message"))

			for _, o := range []outcome{a, s} {
				require.Empty(t, o.Errors)
				require.Equal(t, l.w.Calls(), o.OK)
			}
			assert.Equal(t, l.w.Calls(), rt.Calls(), "one RoundTrip per call")
			for _, st := range []sluicetest.Stats{stA, stS} {
				sluicetest.AssertNoViolations(t, st)
				assert.Empty(t, st.RateLimited, "429s by scope")
				assert.Equal(t, l.w.Calls(), st.Requests)
				assert.Equal(t, l.w.Channels*l.w.Messages, st.MessagesCreated)
			}
			inFlight := bucketInFlight(stA, "create_message")
			assert.Len(t, inFlight, l.w.Channels)
			assert.Greater(t, minInFlight(inFlight), 1, "requests of one channel answered at once: %v", inFlight)

			ratio := float64(a.Elapsed) / float64(s.Elapsed)
			t.Logf("ratio %.3f", ratio)
			assert.LessOrEqual(t, ratio, maxRatio, "arikawa+Sluice %s, Sluice alone %s", a.Elapsed, s.Elapsed)
		})
	}
}

// TestFaultsDeliverOnce runs 100 messages over 5 channels, and reactions,
// through arikawa while the simulator answers 5% of requests with a 502
// and drops the connection under 2% after counting them (the message is
// created, the answer lost). Sluice resends what is safe (message
// creations carry its nonce with enforce_nonce; reactions are PUT and
// DELETE); arikawa sends each call exactly once. Every call succeeds and
// every message exists once.
func TestFaultsDeliverOnce(t *testing.T) {
	w := workload{Channels: 5, Messages: 20, Reactions: 4}
	srv := newServer(t, sluicetest.Options{Faults: sluicetest.Faults{
		ServerErrorRate: 0.05, DropRate: 0.02, Latency: 20 * time.Millisecond,
	}})
	// Resends are Sluice's alone: give it room for a request that meets
	// several faults in a row (a dropped connection ends every request on
	// it).
	lim := newLimiter(t, srv, func(o *sluice.Options) { o.MaxErrorRetries = 8 })
	rt := count(lim)
	out := runArikawa(sluicearikawa.NewClient(botToken, rt), w)
	st := srv.Stats()
	t.Logf("%s in %s", st.Summary(), out.Elapsed.Round(time.Millisecond))

	require.Empty(t, out.Errors)
	require.Equal(t, w.Calls(), out.OK)
	require.Positive(t, st.ServerErrors+st.Dropped, "faults injected") // none in 120 requests: about 1 in 10,000 runs
	assert.Equal(t, w.Calls(), rt.Calls(), "one RoundTrip per call: arikawa resent nothing")
	assert.Equal(t, w.Channels*w.Messages, st.MessagesCreated, "messages created")
	assert.Equal(t, 0, st.DuplicateMessages, "messages created twice")
	sluicetest.AssertNoDuplicateMessages(t, st)
	sluicetest.AssertNoViolations(t, st)
}
