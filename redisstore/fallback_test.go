package redisstore

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/ratelimit"
)

// fbSim is a model of N processes in fallback on one Discord bucket (a fixed
// window that opens at the first request after the last one ended, as
// sluicetest and Discord count), on a simulated clock: each process offers
// requests without pause; the network delays each way; the server stalls
// now and then (a pause, a congested link: the requests of the stall are
// counted at its end, together); and some grants are never sent, their
// refund reported late (a reservation whose Redis half was refused after a
// slow call, in Recovering).
type fbSim struct {
	rng             *rand.Rand
	limit           int
	window          time.Duration
	stallEvery      time.Duration // mean time between stalls (0: none)
	stallMax        time.Duration
	unsent          float64 // fraction of grants never sent
	procs           []*fbProc
	winStart, winAt time.Duration // the server's window: start, end
	count           int
	stallEnd        time.Duration
	nextStall       time.Duration
	flights         []fbFlight
	maxCount        int
	over            int
	counted         int
}

type fbProc struct {
	f     *fallback
	local ratelimit.Bucket
	try   time.Duration
}

type fbFlight struct {
	at      time.Duration // arrives at the server / the answer at its process
	proc    int
	grant   ratelimit.SharedGrant
	answer  bool
	unsent  bool
	headers ratelimit.Headers
}

var fbBase = time.Unix(1_700_000_000, 0)

func (s *fbSim) run(t *testing.T, d time.Duration) {
	t.Helper()
	share := 1 / float64(len(s.procs))
	for i := range s.procs {
		p := &fbProc{f: newFallback(200, time.Second, 0, func() float64 { return share })}
		p.f.enter(fbBase)
		// Known from before the switch, its window long over.
		p.local = ratelimit.Bucket{Known: true, Limit: s.limit, ResetAt: fbBase.Add(-time.Second)}
		s.procs[i] = p
	}
	s.nextStall = s.gap()
	const step = 250 * time.Microsecond
	for now := time.Duration(0); now < d; now += step {
		s.serve(now)
		for i, p := range s.procs {
			for p.try <= now {
				r := ratelimit.SharedRequest{Now: fbBase.Add(now), Route: "GET /channels/{channel_id}/messages", Hash: "h", Major: "channel_id=1",
					Local: p.local, Window: s.window, Margin: ratelimit.ReopenMargin}
				g := p.f.reserve(r)
				if !g.OK {
					p.try = now + g.Wait
					break
				}
				if s.rng.Float64() < s.unsent {
					s.flights = append(s.flights, fbFlight{at: now + time.Duration(s.rng.Int64N(int64(60*time.Millisecond))), proc: i, grant: g, answer: true, unsent: true})
					continue
				}
				s.flights = append(s.flights, fbFlight{at: now + s.oneWay(), proc: i, grant: g})
			}
		}
	}
	require.Positive(t, s.counted)
}

func (s *fbSim) gap() time.Duration {
	if s.stallEvery == 0 {
		return 1 << 62
	}
	return time.Duration(s.rng.Int64N(int64(2 * s.stallEvery)))
}

func (s *fbSim) oneWay() time.Duration {
	return 200*time.Microsecond + time.Duration(s.rng.Int64N(int64(2*time.Millisecond)))
}

// serve delivers what is due at now: arrivals at the server (unless it
// stalls) in the order they came, answers at their processes.
func (s *fbSim) serve(now time.Duration) {
	if now >= s.nextStall {
		s.stallEnd = now + time.Duration(s.rng.Int64N(int64(s.stallMax)))
		s.nextStall = s.stallEnd + s.gap()
	}
	slices.SortStableFunc(s.flights, func(a, b fbFlight) int { return int(a.at - b.at) })
	var keep []fbFlight
	var out []fbFlight
	for _, f := range s.flights {
		switch {
		case f.at > now:
			keep = append(keep, f)
		case f.answer:
			out = append(out, f)
		case now < s.stallEnd:
			keep = append(keep, f) // counted when the stall ends
		default:
			if now >= s.winAt {
				s.winStart, s.winAt, s.count = now, now+s.window, 0
			}
			s.count++
			s.counted++
			s.maxCount = max(s.maxCount, s.count)
			if s.count > s.limit {
				s.over++
			}
			f.headers = ratelimit.Headers{Limit: s.limit, Remaining: max(0, s.limit-s.count), ResetAfter: s.winAt - now,
				Reset: fbBase.Add(s.winAt), Has: ratelimit.Present{Limit: true, Remaining: true, ResetAfter: true, Reset: true}}
			f.answer, f.at = true, now+s.oneWay()
			keep = append(keep, f)
		}
	}
	s.flights = keep
	for _, f := range out {
		p := s.procs[f.proc]
		at := fbBase.Add(now)
		if f.unsent {
			p.f.report(f.grant, ratelimit.SharedAnswer{Now: at}, false)
			continue
		}
		p.f.report(f.grant, ratelimit.SharedAnswer{Now: at, Sent: true, Status: 200, Headers: f.headers}, false)
		p.local.ResetAt = at.Add(f.headers.ResetAfter)
	}
}

// Four processes on a quarter each of a bucket of 50 per 500 ms never put
// more than 50 in one of Discord's windows: not with the network's jitter,
// not when the server stalls for up to 80 ms (a window's requests counted
// late and together), not when grants are refunded out of order. And they
// keep the pace: each its 12 per window, all but what the stalls cost.
func TestFallbackNeverOverAWindowDiscordCounts(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stallEvery time.Duration
		stallMax   time.Duration
		unsent     float64
		pace       float64 // at least this share of 48 per window
	}{
		{"jitter", 0, 0, 0, 0.95},
		{"stalls", 300 * time.Millisecond, 80 * time.Millisecond, 0, 0.93},
		{"stalls and refunds", 300 * time.Millisecond, 80 * time.Millisecond, 0.1, 0.8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(10) {
				s := &fbSim{rng: rand.New(rand.NewPCG(seed, 7)), limit: 50, window: 500 * time.Millisecond,
					stallEvery: tc.stallEvery, stallMax: max(tc.stallMax, time.Millisecond), unsent: tc.unsent, procs: make([]*fbProc, 4)}
				const d = 20 * time.Second
				s.run(t, d)
				require.Zero(t, s.over, "seed %d: %d requests over the limit, %d in one window", seed, s.over, s.maxCount)
				// The pace: requests counted against 12 per window (and
				// its margin) per process.
				windows := float64(d) / float64(s.window+ratelimit.ReopenMargin)
				pace := float64(s.counted) / (windows * 48)
				assert.GreaterOrEqual(t, pace, tc.pace, "seed %d: %.0f%% of 12 per window per process", seed, 100*pace)
				t.Logf("seed %d: %.1f%% of the pace, at most %d in a window", seed, 100*pace, s.maxCount)
			}
		})
	}
}
