package ratelimit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// resp returns the Headers of a response with full bucket information.
func resp(limit, remaining int, resetAfter time.Duration) Headers {
	return Headers{
		Limit: limit, Remaining: remaining, ResetAfter: resetAfter, Bucket: "h",
		Has: Present{Limit: true, Remaining: true, ResetAfter: true, Bucket: true, RateLimit: true},
	}
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func at(n int) time.Time { return t0.Add(ms(n)) }

// known returns a bucket that has seen its pioneer's response at t0, with
// the given limit and a window ending at resetAt (ms after t0), and sets its
// Remaining to remaining.
func known(t *testing.T, limit, remaining, resetAt int) *Bucket {
	t.Helper()
	var b Bucket
	ok, _ := b.Take(at(0))
	require.True(t, ok)
	b.Observe(at(0), at(0), resp(limit, max(0, limit-1), ms(resetAt)))
	require.True(t, b.Known)
	b.Remaining = remaining
	return &b
}

func takeN(b *Bucket, now time.Time, n int) int {
	got := 0
	for range n {
		if ok, _ := b.Take(now); ok {
			got++
		}
	}
	return got
}

func TestBucketPioneer(t *testing.T) {
	var b Bucket
	ok, wait := b.Take(at(0))
	require.True(t, ok, "the zero bucket admits a pioneer")
	assert.Zero(t, wait)

	ok, wait = b.Take(at(10))
	assert.False(t, ok, "only one pioneer at a time")
	assert.Equal(t, PioneerTimeout-ms(10), wait)
	assert.Equal(t, 1, b.InFlight())

	b.Observe(at(100), at(0), resp(5, 4, ms(1000)))
	assert.True(t, b.Known)
	assert.Equal(t, 5, b.Limit)
	assert.Equal(t, 4, b.Remaining)
	assert.Equal(t, at(1100), b.ResetAt, "ResetAt = receive time + Reset-After")
	assert.Equal(t, "h", b.Hash)
	assert.Equal(t, 0, b.InFlight())

	assert.Equal(t, 4, takeN(&b, at(100), 10), "the rest of the window is pipelined")
	ok, wait = b.Take(at(200))
	assert.False(t, ok)
	assert.Equal(t, ms(900), wait)
}

func TestBucketPioneerWithoutHeaders(t *testing.T) {
	var b Bucket
	ok, _ := b.Take(at(0))
	require.True(t, ok)
	b.Observe(at(50), at(0), Headers{}) // e.g. a 502, or an emoji route without headers
	assert.False(t, b.Known)
	ok, _ = b.Take(at(50))
	assert.True(t, ok, "next pioneer goes as soon as the previous one answered")
	ok, _ = b.Take(at(50))
	assert.False(t, ok)
}

func TestBucketPioneerTimeout(t *testing.T) {
	var b Bucket
	ok, _ := b.Take(at(0))
	require.True(t, ok)
	ok, _ = b.Take(t0.Add(PioneerTimeout - 1))
	assert.False(t, ok)
	ok, _ = b.Take(t0.Add(PioneerTimeout))
	assert.True(t, ok, "a lost pioneer is replaced after PioneerTimeout")
	assert.Equal(t, 2, b.InFlight())
}

func TestBucketPipeliningCount(t *testing.T) {
	b := known(t, 5, 5, 1000)
	assert.Equal(t, 5, takeN(b, at(1), 100))
	assert.Equal(t, 5, b.InFlight())
	assert.Equal(t, 0, b.Remaining)
}

func TestBucketOutOfOrderResponsesNeverRaiseRemaining(t *testing.T) {
	b := known(t, 5, 5, 1000)
	require.Equal(t, 3, takeN(b, at(10), 3)) // requests 1, 2, 3; local remaining 2
	require.Equal(t, 2, b.Remaining)

	// Discord handled them in order (remaining 4, 3, 2); responses arrive 3, 1, 2.
	b.Observe(at(60), at(10), resp(5, 2, ms(940)))
	assert.Equal(t, 2, b.Remaining)
	b.Observe(at(61), at(10), resp(5, 4, ms(940)))
	assert.Equal(t, 2, b.Remaining, "a stale higher count must not raise Remaining")
	b.Observe(at(62), at(10), resp(5, 3, ms(940)))
	assert.Equal(t, 2, b.Remaining)
	assert.Equal(t, at(1002), b.ResetAt, "ResetAt only moves later within a window")

	// Someone else used the bucket: the header is lower than our count.
	require.Equal(t, 1, takeN(b, at(70), 1))
	b.Observe(at(80), at(70), resp(5, 0, ms(920)))
	assert.Equal(t, 0, b.Remaining)
}

func TestBucketResetRefill(t *testing.T) {
	b := known(t, 5, 0, 1000)
	ok, wait := b.Take(at(999))
	assert.False(t, ok)
	assert.Equal(t, ms(1), wait)

	assert.Equal(t, 5, takeN(b, at(1000), 10), "refilled to Limit at ResetAt")
	assert.Equal(t, at(2000), b.ResetAt, "a guessed window as long as the longest Reset-After seen")

	// The first response from the new window confirms its end.
	b.Observe(at(1050), at(1000), resp(5, 4, ms(990)))
	assert.Equal(t, at(2040), b.ResetAt)
	assert.Equal(t, 0, b.Remaining)
}

func TestBucketRefillChargesInFlight(t *testing.T) {
	b := known(t, 5, 5, 1000)
	require.Equal(t, 2, takeN(b, at(990), 2)) // still in flight at the reset
	assert.Equal(t, 3, takeN(b, at(1000), 10), "requests in flight may land in the new window")
}

func TestBucketStaleResponseAfterRefill(t *testing.T) {
	b := known(t, 5, 5, 1000)
	require.Equal(t, 5, takeN(b, at(900), 5))
	require.Equal(t, 0, takeN(b, at(1000), 1)) // refill: all five still in flight, nothing left

	// The five land in the old window and answer after our refill.
	for i := range 5 {
		b.Observe(at(1010+i), at(900), resp(5, 4-i, ms(90)))
	}
	assert.Equal(t, 0, b.Remaining, "charged requests are not given back by old-window responses")
	assert.Equal(t, at(2000), b.ResetAt, "an old-window response cannot shorten the guessed window")
	assert.Equal(t, 5, takeN(b, at(2000), 10))
}

func TestBucketNewWindowFromResponse(t *testing.T) {
	b := known(t, 5, 0, 1000)
	// A request sent just before our (conservative) ResetAt lands in
	// Discord's new window; its response shows that window.
	b.Remaining = 1
	require.Equal(t, 1, takeN(b, at(980), 1))
	b.Observe(at(1010), at(980), resp(5, 4, ms(1000)))
	assert.Equal(t, 4, b.Remaining, "a newer window is adopted")
	assert.Equal(t, at(2010), b.ResetAt)
}

func TestBucketNewWindowWithinToleranceIsSameWindow(t *testing.T) {
	b := known(t, 5, 3, 1000)
	require.Equal(t, 1, takeN(b, at(500), 1))
	// hr = 600 + 450 = 1050: later than ResetAt, but within RTT + tolerance.
	b.Observe(at(600), at(500), resp(5, 4, ms(450)))
	assert.Equal(t, 2, b.Remaining)
	assert.Equal(t, at(1050), b.ResetAt)
}

func TestBucketGuessedWindowWaitsForConfirmation(t *testing.T) {
	b := known(t, 2, 0, 100) // period 100 ms
	require.Equal(t, 2, takeN(b, at(100), 2))
	// No response by the end of the guessed window: do not refill on a guess.
	ok, wait := b.Take(at(200))
	assert.False(t, ok)
	assert.Equal(t, ms(100)+PioneerTimeout-ms(100), wait)

	b.Observe(at(250), at(100), resp(2, 1, ms(400))) // the real window is longer
	assert.Equal(t, at(650), b.ResetAt)
	ok, _ = b.Take(at(300))
	assert.False(t, ok)
	b.Observe(at(260), at(100), resp(2, 0, ms(390)))
	assert.Equal(t, 2, takeN(b, at(650), 2))
}

func TestBucketGuessedWindowGivesUpAfterTimeout(t *testing.T) {
	b := known(t, 2, 0, 100)
	require.Equal(t, 2, takeN(b, at(100), 2))
	assert.Equal(t, 0, takeN(b, at(200).Add(PioneerTimeout-1), 1))
	assert.Equal(t, 0, takeN(b, at(200).Add(PioneerTimeout), 1), "refilled, but both lost requests are charged")
	b.Refund(at(200).Add(PioneerTimeout))
	assert.Equal(t, 1, takeN(b, at(200).Add(PioneerTimeout), 5))
}

func TestBucketRefund(t *testing.T) {
	b := known(t, 5, 5, 1000)
	require.Equal(t, 5, takeN(b, at(10), 5))
	b.Refund(at(20))
	assert.Equal(t, 1, b.Remaining, "a request never sent gives its slot back")
	assert.Equal(t, 4, b.InFlight())

	// A response lowers Remaining below our count (another client used the
	// bucket). Its count does not include the requests still in flight, so
	// refunding one of those must not raise Remaining.
	b.Observe(at(30), at(10), resp(5, 0, ms(980)))
	require.Equal(t, 0, b.Remaining)
	b.Refund(at(40))
	assert.Equal(t, 0, b.Remaining)
	assert.Equal(t, 2, b.InFlight())

	// After the window ends a refund only stops charging the next window.
	b.Refund(at(1500))
	assert.Equal(t, 1, b.InFlight())
	assert.Equal(t, 4, takeN(b, at(1500), 10))

	// A refund without a Take is ignored.
	var z Bucket
	z.Refund(at(0))
	assert.Equal(t, 0, z.InFlight())
}

func TestBucketRefundPioneer(t *testing.T) {
	var b Bucket
	ok, _ := b.Take(at(0))
	require.True(t, ok)
	b.Refund(at(1))
	ok, _ = b.Take(at(2))
	assert.True(t, ok, "a refunded pioneer frees the slot at once")
}

func TestBucketPause(t *testing.T) {
	b := known(t, 5, 5, 1000)
	b.Pause(at(3000))
	b.Pause(at(2000)) // earlier: no effect
	assert.Equal(t, at(3000), b.PausedUntil)
	ok, wait := b.Take(at(100))
	assert.False(t, ok)
	assert.Equal(t, ms(2900), wait)
	ok, _ = b.Take(at(3000))
	assert.True(t, ok)

	var u Bucket
	u.Pause(at(500))
	ok, _ = u.Take(at(0))
	assert.False(t, ok, "a pause applies to an unknown bucket too")
}

func TestBucketUnknownSentAtIsConservative(t *testing.T) {
	b := known(t, 5, 5, 1000)
	require.Equal(t, 1, takeN(b, at(10), 1))
	// Looks like a new window, but without sentAt it cannot be trusted.
	b.Observe(at(900), time.Time{}, resp(5, 4, ms(1000)))
	assert.Equal(t, 4, b.Remaining)
	assert.Equal(t, at(1900), b.ResetAt, "only made later")
}

func TestBucketLimitChange(t *testing.T) {
	b := known(t, 5, 5, 1000)
	require.Equal(t, 1, takeN(b, at(10), 1))
	b.Observe(at(20), at(10), resp(2, 1, ms(980)))
	assert.Equal(t, 2, b.Limit)
	assert.Equal(t, 1, b.Remaining)
}

func TestBucketObserveSanitizesHandMadeHeaders(t *testing.T) {
	var b Bucket
	b.Take(at(0))
	b.Observe(at(1), at(0), resp(3, 99, -time.Second))
	assert.Equal(t, 2, b.Remaining, "clamped to the limit, less the pioneer itself")
	assert.Equal(t, at(1), b.ResetAt)

	var c Bucket
	c.Take(at(0))
	c.Observe(at(1), at(0), resp(0, 0, time.Second))
	assert.False(t, c.Known, "a limit below 1 is not bucket information")
}

func TestBucketIdle(t *testing.T) {
	var z Bucket
	assert.True(t, z.Idle(at(0)))
	b := known(t, 5, 5, 1000)
	assert.False(t, b.Idle(at(500)))
	assert.True(t, b.Idle(at(1000)))
	takeN(b, at(1000), 1)
	assert.False(t, b.Idle(at(5000)))
}

func TestBucketHeaderlessResponseStaysCharged(t *testing.T) {
	b := known(t, 5, 0, 1000) // period 1 s
	require.Equal(t, 5, takeN(b, at(1000), 5))

	// Two responses come back without headers (say a 502): Discord probably
	// counted them, in a window we cannot tell.
	b.Observe(at(1010), at(1000), Headers{})
	b.Observe(at(1010), at(1000), Headers{})
	assert.Equal(t, 3, b.InFlight())
	assert.Equal(t, at(2060), b.ResetAt, "pushed to a full period (+ tolerance) after the answer")

	// A response confirms a shorter window.
	b.Observe(at(1020), at(1000), resp(5, 2, ms(500)))
	require.Equal(t, at(1520), b.ResetAt)
	assert.Equal(t, 1, takeN(b, at(1520), 5), "5 - 2 in flight - 2 answered without headers")

	// A period later they no longer count.
	b.Observe(at(1600), at(1000), resp(5, 1, ms(0)))
	b.Observe(at(1600), at(1000), resp(5, 1, ms(0)))
	b.Observe(at(1600), at(1520), resp(5, 4, ms(1000)))
	require.Equal(t, 0, b.InFlight())
	assert.Equal(t, 5, takeN(b, at(2600), 10))
}

func TestBucketNewWindowChargesInFlight(t *testing.T) {
	b := known(t, 5, 5, 1000)
	require.Equal(t, 3, takeN(b, at(900), 3))
	// One of them opened Discord's next window; the two others may land
	// in it as well.
	b.Observe(at(1010), at(900), resp(5, 4, ms(1000)))
	assert.Equal(t, 2, b.Remaining, "5 - the observed one - 2 in flight")
}
