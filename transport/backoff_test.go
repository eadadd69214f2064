package transport

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBackoffDelay(t *testing.T) {
	const ms = time.Millisecond
	half := func() float64 { return 0.5 }
	one := func() float64 { return 1 }
	for _, tc := range []struct {
		name    string
		b       Backoff
		attempt int
		rnd     func() float64
		want    time.Duration
	}{
		{"defaults attempt 0", Backoff{}, 0, nil, 250 * ms},
		{"defaults attempt 1", Backoff{}, 1, nil, 500 * ms},
		{"defaults attempt 3", Backoff{}, 3, nil, 2 * time.Second},
		{"defaults capped", Backoff{}, 7, nil, 30 * time.Second},
		{"huge attempt no overflow", Backoff{}, 1 << 30, nil, 30 * time.Second},
		{"negative attempt", Backoff{Min: 100 * ms}, -5, nil, 100 * ms},
		{"factor 3", Backoff{Min: 10 * ms, Max: time.Second, Factor: 3}, 2, nil, 90 * ms},
		{"factor below 1 is constant", Backoff{Min: 10 * ms, Factor: 0.5}, 4, nil, 10 * ms},
		{"max below min", Backoff{Min: time.Second, Max: 10 * ms}, 3, nil, time.Second},
		{"full jitter", Backoff{Min: 100 * ms, Jitter: 1}, 1, half, 100 * ms},
		{"equal jitter", Backoff{Min: 100 * ms, Jitter: 0.5}, 1, half, 150 * ms},
		{"jitter clamped to 1", Backoff{Min: 100 * ms, Jitter: 7}, 0, half, 50 * ms},
		{"negative jitter is none", Backoff{Min: 100 * ms, Jitter: -1}, 0, half, 100 * ms},
		{"nil rnd is no jitter", Backoff{Min: 100 * ms, Jitter: 1}, 0, nil, 100 * ms},
		{"rnd >= 1 clamped", Backoff{Min: 100 * ms, Jitter: 0.5}, 0, one, 50 * ms},
		{"rnd < 0 clamped", Backoff{Min: 100 * ms, Jitter: 1}, 0, func() float64 { return -3 }, 100 * ms},
		{"jitter applies after cap", Backoff{Min: time.Second, Max: 2 * time.Second, Jitter: 1}, 10, half, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.InDelta(t, float64(tc.want), float64(tc.b.Delay(tc.attempt, tc.rnd)), float64(time.Microsecond))
		})
	}
}

func TestBackoffJitterBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, j := range []float64{0, 0.25, 0.5, 1} {
		b := Backoff{Min: 50 * time.Millisecond, Max: 5 * time.Second, Factor: 2, Jitter: j}
		for attempt := range 12 {
			base := b.Delay(attempt, nil)
			for range 200 {
				d := b.Delay(attempt, r.Float64)
				assert.LessOrEqual(t, d, base)
				assert.GreaterOrEqual(t, float64(d), (1-j)*float64(base)-1)
				assert.GreaterOrEqual(t, d, time.Duration(0))
			}
		}
	}
}
