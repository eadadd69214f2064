package harness

import (
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// The simulator and limiter RunAt builds, shared with cmd/eta (which
// measures Sluice's per-request ETA against the simulator's timelines),
// and the keys under which the simulator records an op.

// Rule is the name of the simulator rule op lands on (BucketStats'
// Event.Rule).
func (o Op) Rule() string { return o.rule() }

// Major is the op's major parameter as the simulator keys buckets
// (BucketStats.Major), for every op but webhook executions, whose token
// the simulator shows hashed.
func (o Op) Major() string { return o.major() }

// Seed is the simulator's fault seed of repetition run of s, as RunAt
// seeds it.
func Seed(s Scenario, run int) uint64 { return uint64(1000+s.ID) + uint64(run)*1_000_003 }

// NewSimulator starts the simulator RunAt starts for repetition run of s
// (its rules, seed and duplicate tracking), with its faults not set yet:
// Start them as RunAt does, when the client begins.
func NewSimulator(s Scenario, run int) (*sluicetest.Server, error) {
	return sluicetest.NewServer(sluicetest.Options{Rules: s.Rules, Seed: Seed(s, run), TrackDuplicates: true})
}

// Start resets srv's clock and turns s's faults on, as RunAt does just
// before the first request, and returns the instant the simulator's
// timelines count from (Event.At is since then).
func Start(srv *sluicetest.Server, s Scenario) time.Time {
	t0 := time.Now()
	srv.Engine().Reset(t0)
	srv.SetFaults(s.Faults)
	return t0
}

// NewSluiceLimiter builds the limiter the Sluice client of RunAt uses.
func NewSluiceLimiter(srv *sluicetest.Server, cfg Config) (*sluice.Limiter, error) {
	c, err := newSluice(srv, cfg)
	if err != nil {
		return nil, err
	}
	return c.(*sluiceClient).lim, nil
}
