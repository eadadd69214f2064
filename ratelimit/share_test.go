package ratelimit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func knownBucket(t0 time.Time, limit, remaining int, window time.Duration) Bucket {
	var b Bucket
	ok, _ := b.Take(t0)
	if !ok {
		panic("pioneer refused")
	}
	b.Observe(t0, t0, Headers{Limit: limit, Remaining: remaining, ResetAfter: window,
		Has: Present{Limit: true, Remaining: true, ResetAfter: true, RateLimit: true}})
	return b
}

func TestAbsorbIntoUnknownAdoptsLimitsLessItsOwnInFlight(t *testing.T) {
	t0 := time.Unix(1000, 0)
	o := knownBucket(t0, 5, 3, time.Second)
	ok, _ := o.Take(t0) // one of o's requests still in flight
	assert.True(t, ok)
	var b Bucket
	ok, _ = b.Take(t0) // b's own pioneer in flight
	assert.True(t, ok)
	b.Absorb(&o)
	assert.True(t, b.Known)
	assert.Equal(t, 5, b.Limit)
	assert.Equal(t, 1, b.Remaining, "3 remaining, one taken by o, one charged for b's own pioneer")
	assert.Equal(t, 2, b.InFlight(), "both in-flight requests report here")
	b.Refund(t0)
	b.Observe(t0, t0, Headers{})
	assert.Equal(t, 0, b.InFlight())
}

func TestAbsorbIntoKnownOnlyLowers(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := knownBucket(t0, 5, 4, time.Second)
	o := knownBucket(t0.Add(10*time.Millisecond), 5, 2, 2*time.Second)
	b.Absorb(&o)
	assert.Equal(t, 2, b.Remaining)
	assert.Equal(t, t0.Add(10*time.Millisecond+2*time.Second), b.ResetAt)
	high := knownBucket(t0, 5, 4, time.Second)
	low := knownBucket(t0, 5, 1, time.Second)
	low.Absorb(&high)
	assert.Equal(t, 1, low.Remaining, "never raised")
}

func TestAbsorbUnknownChangesOnlyInFlight(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := knownBucket(t0, 5, 4, time.Second)
	var o Bucket
	o.Take(t0)
	b.Absorb(&o)
	assert.Equal(t, 4, b.Remaining)
	assert.Equal(t, 1, b.InFlight())
}

func TestAbsorbRemembersTheOtherLimit(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := knownBucket(t0, 5, 4, time.Second)
	o := knownBucket(t0, 2, 1, time.Second)
	b.Absorb(&o)
	assert.Equal(t, 5, b.Limit, "the current window keeps its own limit")
	ok, _ := b.Take(t0.Add(time.Second))
	require.True(t, ok)
	assert.Equal(t, 2, b.Limit, "the next refill counts the smaller one")
	assert.Equal(t, 1, b.Remaining)
}
