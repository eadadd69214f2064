package ratelimit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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

func TestHoldLowersRemainingInTheCurrentWindowOnly(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := knownBucket(t0, 5, 4, time.Second)
	b.Hold(t0, 2)
	assert.Equal(t, 2, b.Remaining)
	b.Hold(t0, 10)
	assert.Equal(t, 0, b.Remaining, "never below zero")
	var unknown Bucket
	unknown.Hold(t0, 3)
	assert.Equal(t, Bucket{}, unknown)
	c := knownBucket(t0, 5, 4, time.Second)
	c.Hold(t0.Add(time.Second), 2)
	assert.Equal(t, 4, c.Remaining, "a window that is over is left alone")
}

func TestHoldIsNotUndoneByARefund(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := knownBucket(t0, 5, 4, time.Second)
	ok, _ := b.Take(t0)
	assert.True(t, ok)
	assert.Equal(t, 3, b.Remaining)
	b.Hold(t0, 1)
	b.Refund(t0)
	assert.Equal(t, 2, b.Remaining)
}

func TestLowerOnlyLowersAndExtends(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := knownBucket(t0, 5, 4, time.Second)
	h := Headers{Limit: 5, Remaining: 2, ResetAfter: 1500 * time.Millisecond, Has: Present{Limit: true, Remaining: true, ResetAfter: true}}
	b.Lower(t0, h)
	assert.Equal(t, 2, b.Remaining)
	assert.Equal(t, t0.Add(1500*time.Millisecond), b.ResetAt)
	h.Remaining, h.ResetAfter = 4, 100*time.Millisecond
	b.Lower(t0, h)
	assert.Equal(t, 2, b.Remaining, "never raises")
	assert.Equal(t, t0.Add(1500*time.Millisecond), b.ResetAt, "never earlier")
	assert.Equal(t, 0, b.InFlight())
	b.Lower(t0, Headers{})
	assert.Equal(t, 2, b.Remaining)
}

func TestSlidingWindowCount(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := NewSlidingWindow(3, time.Second)
	assert.Equal(t, 0, w.Count(t0))
	w.Reserve(t0)
	w.Settle(t0)
	w.Reserve(t0.Add(500 * time.Millisecond))
	w.Settle(t0.Add(500 * time.Millisecond))
	w.Reserve(t0.Add(600 * time.Millisecond)) // in flight: counted until answered
	assert.Equal(t, 3, w.Count(t0.Add(600*time.Millisecond)))
	w.Cancel(t0.Add(600 * time.Millisecond))
	assert.Equal(t, 2, w.Count(t0.Add(600*time.Millisecond)))
	assert.Equal(t, 1, w.Count(t0.Add(time.Second)))
	assert.Equal(t, 0, w.Count(t0.Add(1500*time.Millisecond)))
}

func TestUnholdGivesBackWithinTheSameWindowOnly(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := knownBucket(t0, 5, 3, time.Second)
	b.Hold(t0, 1)
	assert.Equal(t, 2, b.Remaining)
	b.Unhold(t0.Add(10*time.Millisecond), 1)
	assert.Equal(t, 3, b.Remaining)
	b.Unhold(t0.Add(10*time.Millisecond), 10)
	assert.Equal(t, 5, b.Remaining, "never above the limit")

	c := knownBucket(t0, 5, 3, time.Second)
	c.Hold(t0, 1)
	ok, _ := c.Take(t0.Add(1100 * time.Millisecond)) // a new window
	assert.True(t, ok)
	before := c.Remaining
	c.Unhold(t0.Add(1100*time.Millisecond), 1)
	assert.Equal(t, before, c.Remaining, "the hold's window is over")
}
