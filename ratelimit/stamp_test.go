package ratelimit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stampCases returns times of both forms a Bucket is given: time.Now values
// (with a monotonic reading) and a fake clock's (wall only), around the
// epoch and far from it.
func stampCases(r *rand.Rand) []time.Time {
	now := time.Now()
	fake := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var ts []time.Time
	for _, d := range []time.Duration{0, 1, -1, time.Millisecond, -time.Hour, 24 * time.Hour, -100 * 365 * 24 * time.Hour} {
		ts = append(ts, now.Add(d), fake.Add(d), epoch.Add(d))
	}
	for range 200 {
		d := time.Duration(r.Int64N(int64(200*365*24*time.Hour))) - 100*365*24*time.Hour
		ts = append(ts, now.Add(d), fake.Add(d), fake.Add(d).Round(0))
	}
	return ts
}

func TestStampKeepsInstantsAndTheirOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ts := stampCases(r)
	for _, a := range ts {
		sa := stampOf(a)
		require.NotZero(t, sa)
		require.True(t, sa.time().Equal(a), "%v comes back as %v", a, sa.time())
		for _, b := range ts {
			if a.Round(0) != a && b.Round(0) == b || a.Round(0) == a && b.Round(0) != b {
				continue // one with a monotonic reading, one without: not one clock
			}
			sb := stampOf(b)
			require.Equal(t, a.Before(b), sa < sb, "%v before %v", a, b)
			require.Equal(t, a.Equal(b), sa == sb, "%v equal to %v", a, b)
			require.Equal(t, a.Sub(b), sa.time().Sub(sb.time()), "%v - %v", a, b)
		}
	}
}

func TestStampOfZeroIsBeforeEveryInstant(t *testing.T) {
	var zero stamp
	assert.Equal(t, zero, stampOf(time.Time{}))
	assert.True(t, zero.isZero())
	assert.True(t, zero.time().IsZero())
	assert.True(t, zero.at(time.Now()).IsZero())
	for _, t0 := range []time.Time{time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), time.Unix(0, 0), time.Now(), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)} {
		s := stampOf(t0)
		assert.False(t, s.isZero(), "%v", t0)
		assert.Less(t, zero, s, "%v", t0)
	}
}

func TestStampAtKeepsTheCallersForm(t *testing.T) {
	fake := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, d := range []time.Duration{0, time.Millisecond, -time.Second, 5 * time.Minute} {
		want := fake.Add(d)
		assert.Equal(t, want, stampOf(want).at(fake), "a fake clock's time comes back as it was")
	}
	now := time.Now()
	got := stampOf(now.Add(time.Second)).at(now)
	assert.Equal(t, time.Second, got.Sub(now))
	assert.NotEqual(t, got, got.Round(0), "a time.Now value's stamp comes back with a monotonic reading")
}
