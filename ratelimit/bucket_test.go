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
// Remaining to remaining. The pioneer opened its window, so the period is
// known, and the bucket trusts its reopening as if a probe had already gone
// (see TestBucketProbe* for probes).
func known(t *testing.T, limit, remaining, resetAt int) *Bucket {
	t.Helper()
	var b Bucket
	ok, _ := b.Take(at(0))
	require.True(t, ok)
	b.Observe(at(0), at(0), resp(limit, max(0, limit-1), ms(resetAt)))
	require.True(t, b.Known)
	b.Remaining = remaining
	b.trusted, b.trustSet = 0, true
	return &b
}

// guessed is known, but the pioneer's response shows another request in its
// window (Remaining = limit-2), so the window length is still a guess.
func guessed(t *testing.T, limit, remaining, resetAt int) *Bucket {
	t.Helper()
	var b Bucket
	ok, _ := b.Take(at(0))
	require.True(t, ok)
	b.Observe(at(0), at(0), resp(limit, max(0, limit-2), ms(resetAt)))
	require.True(t, b.Known)
	require.False(t, b.periodKnown)
	b.Remaining = remaining
	b.trusted, b.trustSet = 0, true
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
	assert.Equal(t, at(1002), b.ResetAt, "without X-RateLimit-Reset to tell windows apart, ResetAt only moves later")

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
	b := guessed(t, 2, 0, 100) // period 100 ms, or more
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
	b := guessed(t, 2, 0, 100)
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

func TestBucketLimitDecreaseMidWindowCountsWhatWasSent(t *testing.T) {
	b := known(t, 5, 5, 1000)
	require.Equal(t, 3, takeN(b, at(10), 3))
	// The first answer shows the window's limit is 2, and counted only
	// itself: Remaining 1 by the header, but three are out.
	b.Observe(at(60), at(10), resp(2, 1, ms(950)))
	assert.Equal(t, 2, b.Limit)
	assert.Equal(t, 0, b.Remaining, "5 - 3 sent, less the 3 the limit lost")
	assert.Equal(t, 0, takeN(b, at(61), 1))
}

func TestBucketRefillCountsTheSmallestRecentLimit(t *testing.T) {
	b := known(t, 5, 0, 1000)
	// Window [1000, 2000): its answer shows limit 2.
	require.Equal(t, 5, takeN(b, at(1000), 10))
	b.Observe(at(1050), at(1000), resp(2, 1, ms(950)))
	assert.Equal(t, 2, b.Limit)
	assert.Equal(t, 0, b.Remaining)
	for range 4 {
		b.Observe(at(1060), at(1000), resp(2, 0, ms(940)))
	}
	// Window [2000, 3000) is 5 again, but no answer has said so yet.
	assert.Equal(t, 2, takeN(b, at(2000), 10), "a refill counts the smallest recent limit")
	b.Observe(at(2050), at(2000), resp(5, 4, ms(950)))
	assert.Equal(t, 5, b.Limit)
	assert.Equal(t, 3, b.Remaining, "an answer of the window shows 5: the rest of it may go")
	assert.Equal(t, 3, takeN(b, at(2050), 10))
	b.Observe(at(2060), at(2000), resp(5, 3, ms(940)))
	assert.Equal(t, 0, b.Remaining)
	for range 3 {
		b.Observe(at(2100), at(2050), resp(5, 0, ms(900)))
	}
	// Window [3000, 4000): 2 is still remembered.
	assert.Equal(t, 2, takeN(b, at(3000), 10))
	assert.Equal(t, 2, b.Limit)
}

func TestBucketLimitIncreaseOnlyFromTheCurrentWindow(t *testing.T) {
	b := known(t, 5, 0, 1000)
	require.Equal(t, 5, takeN(b, at(1000), 10))
	b.Observe(at(1050), at(1000), resp(2, 1, ms(950)))
	for range 4 {
		b.Observe(at(1060), at(1000), resp(2, 0, ms(940)))
	}
	// Sent just before the refill at 2000; its answer comes after it and
	// shows a limit of 5, but may be an answer of the window before.
	b.Remaining = 1
	require.Equal(t, 1, takeN(b, at(1990), 1))
	assert.Equal(t, 1, takeN(b, at(2000), 10), "2, less the one in flight")
	b.Observe(at(2040), at(1990), resp(5, 4, ms(950)))
	assert.Equal(t, 2, b.Limit, "an answer sent before the window began does not raise the limit")
	assert.Equal(t, 0, b.Remaining)
	// No Observe tells its send time: the same.
	b.Observe(at(2045), time.Time{}, resp(5, 4, ms(950)))
	assert.Equal(t, 2, b.Limit)
	assert.Equal(t, 0, b.Remaining)
}

func TestBucketLimitDecreaseFromAnEarlierSendBeforeTheWindowShowsItsOwn(t *testing.T) {
	b := known(t, 5, 5, 1000)
	require.Equal(t, 2, takeN(b, at(990), 2))
	assert.Equal(t, 3, takeN(b, at(1000), 10), "refilled: 5 less the two in flight")
	// One of the two in flight was counted in the new window, whose
	// limit is 2: it may be this window's, so it binds.
	b.Observe(at(1040), at(990), resp(2, 1, ms(980)))
	assert.Equal(t, 2, b.Limit)
	assert.Equal(t, 0, b.Remaining)

	// Once an answer of the window showed its limit, an earlier send's
	// lower limit is another window's.
	c := known(t, 5, 5, 1000)
	require.Equal(t, 1, takeN(c, at(990), 1))
	require.Equal(t, 1, takeN(c, at(1000), 1))
	c.Observe(at(1030), at(1000), resp(5, 3, ms(990)))
	require.Equal(t, 5, c.Limit)
	c.Observe(at(1040), at(990), resp(2, 0, ms(10)))
	assert.Equal(t, 5, c.Limit)
	assert.Equal(t, 3, c.Remaining)
	assert.Equal(t, 2, c.recentLow(), "but it is remembered for the next refills")
}

func TestBucketLimitMemoryFades(t *testing.T) {
	b := known(t, 5, 0, 1000)
	start := 1000
	window := func(limit int) int {
		t.Helper()
		n := takeN(b, at(start), 10)
		b.Observe(at(start+50), at(start), resp(limit, limit-1, ms(950)))
		n += takeN(b, at(start+50), 10)
		for range n - 1 {
			b.Observe(at(start+60), at(start+50), resp(limit, 0, ms(940)))
		}
		start += 1000
		return n
	}
	window(2)
	firsts := 0
	for w := range 2 * limitMemory {
		if got := takeN(b, at(start), 10); got == 5 {
			firsts = w
			break
		} else {
			require.Equal(t, 2, got, "window %d", w)
			b.Observe(at(start+50), at(start), resp(5, 4, ms(950)))
			require.Equal(t, 3, takeN(b, at(start+50), 10))
			for range 4 {
				b.Observe(at(start+60), at(start+50), resp(5, 0, ms(940)))
			}
			start += 1000
		}
	}
	after := firsts + 1 // refills from the one that saw the 2
	t.Logf("5 again at the refill %d windows after the 2", after)
	assert.Greater(t, after, limitMemory, "a limit is remembered for the next limitMemory windows at least")
	assert.LessOrEqual(t, after, 2*limitMemory, "and forgotten within twice as many")
}

func TestBucketHoldsWhatTheNextWindowCannotTakeNearTheEnd(t *testing.T) {
	b := known(t, 5, 0, 1000)
	require.Equal(t, 5, takeN(b, at(1000), 10))
	b.Observe(at(1100), at(1000), resp(2, 1, ms(900)))
	for range 4 {
		b.Observe(at(1100), at(1000), resp(2, 0, ms(900)))
	}
	// Window [2000, 3000) is 5; its answers take 500 ms, so the one that
	// shows it comes late in the window.
	require.Equal(t, 2, takeN(b, at(2000), 10))
	b.Observe(at(2500), at(2000), resp(5, 4, ms(500)))
	require.Equal(t, 5, b.Limit)
	require.Equal(t, 3, b.Remaining)
	// One in flight, the next window may allow only 2: one more may go
	// whatever its trip, then none while it could land in the next window.
	assert.Equal(t, 1, takeN(b, at(2500), 10))
	ok, wait := b.Take(at(2500))
	assert.False(t, ok)
	assert.Equal(t, b.ResetAt.Sub(at(2500)), wait, "until the refill")
	assert.Equal(t, 2, b.Remaining, "the rest of the window is kept, not lost")

	// Answers that come early leave time for the rest.
	c := known(t, 5, 0, 1000)
	require.Equal(t, 5, takeN(c, at(1000), 10))
	c.Observe(at(1050), at(1000), resp(2, 1, ms(950)))
	for range 4 {
		c.Observe(at(1050), at(1000), resp(2, 0, ms(950)))
	}
	require.Equal(t, 2, takeN(c, at(2000), 10))
	c.Observe(at(2050), at(2000), resp(5, 4, ms(950)))
	assert.Equal(t, 3, takeN(c, at(2050), 10))
}

func TestBucketLateReopenBlamesALimitCut(t *testing.T) {
	b := known(t, 5, 0, 1000)
	require.Equal(t, 5, takeN(b, at(1000), 10))
	// The window reopened on time but holds only 2: the third request
	// gets a 429 that shows the lower limit.
	b.Observe(at(1050), at(1000), resp(2, 1, ms(950)))
	b.Observe(at(1051), at(1000), resp(2, 0, ms(949)))
	h := resp(2, 0, ms(948))
	h.Scope, h.RetryAfter, h.Has.Scope, h.Has.RetryAfter = ScopeUser, ms(948), true, true
	b.Observe(at(1052), at(1000), h)
	assert.False(t, b.LateReopen(at(1052), at(1000), ms(948)), "a lower limit is no late reopening")
	assert.Equal(t, ReopenMargin, b.Margin(at(1052)))
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

// withReset returns h with X-RateLimit-Reset reset (ms after t0, by the
// server's clock).
func withReset(h Headers, reset int) Headers {
	h.Reset, h.Has.Reset = at(reset), true
	return h
}

// reopened returns a known bucket whose window [0, 1000) has just been
// refilled at 1000 with all of limit 5 taken, and confirmed by a response
// sent at 1000, answered at 1300 with X-RateLimit-Reset 7000 (the server's
// clock is ahead) and Reset-After 1000: ResetAt 2300.
func reopened(t *testing.T) *Bucket {
	t.Helper()
	b := known(t, 5, 0, 1000)
	require.Equal(t, 5, takeN(b, at(1000), 10))
	b.Observe(at(1300), at(1000), withReset(resp(5, 4, ms(1000)), 7000))
	require.Equal(t, at(2300), b.ResetAt)
	return b
}

func TestBucketEarliestEstimateOfAWindowWins(t *testing.T) {
	b := reopened(t)
	// Same window (same Reset), a faster return trip: 1100 + 1000.
	b.Observe(at(1100), at(1000), withReset(resp(5, 3, ms(1000)), 7000))
	assert.Equal(t, at(2100), b.ResetAt, "the earliest estimate wins")
	assert.Equal(t, 0, b.Remaining)
	// A slower one does not move it back.
	b.Observe(at(1250), at(1000), withReset(resp(5, 2, ms(1000)), 7001))
	assert.Equal(t, at(2100), b.ResetAt)
	// Reset rounded a millisecond the other way is the same window.
	b.Observe(at(1090), at(1000), withReset(resp(5, 1, ms(999)), 6999))
	assert.Equal(t, at(2089), b.ResetAt)
	// The server's clock says the window reopens at 2003 (local): plus
	// ReopenMargin.
	h := withReset(resp(5, 0, ms(1000)), 7000)
	h.Reopen = at(2003)
	b.Observe(at(1200), at(1000), h)
	assert.Equal(t, at(2003).Add(ReopenMargin), b.ResetAt)
	assert.Equal(t, 0, b.InFlight())
}

// ResetSlack bounds how much earlier a later answer of the window may move
// ResetAt: the round trip of the answer its estimate came from.
func TestBucketResetSlack(t *testing.T) {
	b := reopened(t) // answered 300 ms after it was sent
	assert.Equal(t, 300*time.Millisecond, b.ResetSlack())
	early := b.ResetAt.Add(-b.ResetSlack())
	// A faster answer of the same window: ResetAt moves earlier, not
	// below the bound, and the slack shrinks to its round trip.
	b.Observe(at(1100), at(1000), withReset(resp(5, 3, ms(1000)), 7000))
	assert.Equal(t, at(2100), b.ResetAt)
	assert.False(t, b.ResetAt.Before(early))
	assert.Equal(t, 100*time.Millisecond, b.ResetSlack())
	// Dated by the server's clock: no slack.
	h := withReset(resp(5, 2, ms(1000)), 7000)
	h.Reopen = at(2003)
	b.Observe(at(1200), at(1000), h)
	assert.Zero(t, b.ResetSlack())

	// Pushed later by another window's answer: held there, no slack.
	b = reopened(t)
	b.Observe(at(1320), at(1000), withReset(resp(5, 3, ms(1000)), 7300))
	assert.Equal(t, at(2320), b.ResetAt)
	assert.Zero(t, b.ResetSlack())

	// Set from outside (a Store's state): no slack.
	b = reopened(t)
	b.ResetAt = at(2500)
	assert.Zero(t, b.ResetSlack())

	// Unknown: none.
	assert.Zero(t, (&Bucket{}).ResetSlack())
}

func TestBucketAnotherWindowsEstimateOnlyPushesLater(t *testing.T) {
	b := reopened(t)
	// Another Reset (a window 300 ms later), within the round trip plus
	// WindowTolerance: not adopted as a newer window, but it may be the
	// one counting the requests, so ResetAt moves to its end...
	b.Observe(at(1320), at(1000), withReset(resp(5, 3, ms(1000)), 7300))
	assert.Equal(t, at(2320), b.ResetAt)
	// ...and stays there for the window: a matching Reset with an
	// earlier estimate does not undo it.
	b.Observe(at(1100), at(1000), withReset(resp(5, 2, ms(1000)), 7000))
	assert.Equal(t, at(2320), b.ResetAt)
	// An earlier window's Reset does not move it either.
	b.Observe(at(1100), at(1000), withReset(resp(5, 2, ms(500)), 6500))
	assert.Equal(t, at(2320), b.ResetAt)
}

func TestBucketImplausibleReopenIsIgnored(t *testing.T) {
	b := reopened(t)
	// Reopen earlier than sentAt + Reset-After: the clock did not see
	// this answer (a request faster than all it knows).
	h := withReset(resp(5, 3, ms(1000)), 7000)
	h.Reopen = at(1990)
	b.Observe(at(1250), at(1000), h)
	assert.Equal(t, at(2250), b.ResetAt, "the receive-time estimate")
	// Without sentAt, the response can only push ResetAt later.
	h.Reopen = at(2001)
	b.Observe(at(1200), time.Time{}, h)
	assert.Equal(t, at(2250), b.ResetAt)
}

func TestBucketExternalResetAtIsKept(t *testing.T) {
	b := reopened(t)
	b.ResetAt = at(2500) // e.g. Absorb of another route's later window
	b.Observe(at(1100), at(1000), withReset(resp(5, 3, ms(1000)), 7000))
	assert.Equal(t, at(2500), b.ResetAt, "an end set from outside is a floor for the window")
}

func TestBucketRefillsOnTimeWithRequestsInFlight(t *testing.T) {
	b := known(t, 5, 5, 1000) // the pioneer opened its window: period known
	require.Equal(t, 5, takeN(b, at(900), 5))
	b.Observe(at(950), at(900), resp(5, 3, ms(50)))
	b.Observe(at(950), at(900), resp(5, 2, ms(50)))
	// Three still in flight at the reset, say behind a global limit. The
	// window is refilled on time; they may land in it, so they are charged.
	ok, _ := b.Take(at(1000))
	require.True(t, ok)
	assert.Equal(t, 1, b.Remaining, "5 - 3 in flight - the one just taken")
	assert.Equal(t, at(2000), b.ResetAt)
	// A second refill on a guess, nothing confirmed, still charges them.
	ok, _ = b.Take(at(2000))
	require.True(t, ok)
	assert.Equal(t, 0, b.Remaining, "5 - 4 in flight - the one just taken")
}

func TestBucketProbeOnFirstReopening(t *testing.T) {
	var b Bucket
	b.Take(at(0))
	b.Observe(at(100), at(0), resp(5, 4, ms(900))) // ResetAt 1000
	require.Equal(t, 4, takeN(&b, at(100), 10))
	for range 4 {
		b.Observe(at(200), at(100), resp(5, 0, ms(800)))
	}

	// The first window the bucket reopens itself: one probe goes...
	ok, _ := b.Take(at(1000))
	require.True(t, ok)
	assert.True(t, b.Probing())
	assert.Equal(t, 4, b.Remaining)
	// ...and the rest waits for its answer.
	ok, wait := b.Take(at(1001))
	assert.False(t, ok)
	assert.Equal(t, ms(899), wait, "until the guessed end (period 900 ms), which comes before PioneerTimeout")

	// The probe was counted on time: the window is open, the rest goes.
	b.Observe(at(1100), at(1000), resp(5, 4, ms(900)))
	assert.False(t, b.Probing())
	assert.Equal(t, 4, takeN(&b, at(1100), 10))
	for range 4 {
		b.Observe(at(1200), at(1100), resp(5, 0, ms(800)))
	}
	// Reopening as promptly again needs no probe.
	assert.Equal(t, 5, takeN(&b, at(2000), 10))
	assert.False(t, b.Probing())
}

func TestBucketProbeRefundedOrLost(t *testing.T) {
	b := known(t, 5, 0, 1000)
	b.trustSet = false
	ok, _ := b.Take(at(1000))
	require.True(t, ok)
	require.True(t, b.Probing())
	b.Refund(at(1001))
	ok, _ = b.Take(at(1002))
	assert.True(t, ok, "a refunded probe lets another go")
	ok, _ = b.Take(at(1003))
	assert.False(t, ok)

	// Headers without rate-limit information: no verdict, another probe.
	b.Observe(at(1050), at(1002), Headers{})
	ok, _ = b.Take(at(1050))
	assert.True(t, ok)

	// A probe never answered holds the window at most PioneerTimeout.
	c := known(t, 5, 0, 1000)
	c.period = time.Hour // a long window, so only the probe's deadline matters
	c.trustSet = false
	ok, _ = c.Take(at(1000))
	require.True(t, ok)
	ok, wait := c.Take(at(2000))
	assert.False(t, ok)
	assert.Equal(t, PioneerTimeout-time.Second, wait)
	assert.Equal(t, 4, takeN(c, at(1000).Add(PioneerTimeout), 10))
}

// lateReopened returns a bucket that reopened at 1010 a window the server
// reopens 300 ms later: its probe, sent at 1010, got a 429 with retry_after
// 300 ms at 1060. The server's clock is 100 ms ahead, requests arrive at
// once and answers take 50 ms, and the ServerClock put the previous
// window's reopening at 1000 (ResetAt 1000 + ReopenMargin) and the real one,
// from the 429's Reset, at 1310 (it counted the probe at once).
func lateReopened(t *testing.T, observeFirst bool) *Bucket {
	t.Helper()
	var b Bucket
	b.Take(at(0))
	h := withReset(resp(5, 4, ms(1000)), 1100)
	h.Reopen = at(1000)
	b.Observe(at(50), at(0), h)
	require.Equal(t, at(1010), b.ResetAt)
	require.Equal(t, 4, takeN(&b, at(50), 10))
	for range 4 {
		b.Observe(at(100), at(50), withReset(resp(5, 0, ms(950)), 1100))
	}
	ok, _ := b.Take(at(1010))
	require.True(t, ok)
	require.True(t, b.Probing())

	h = withReset(resp(5, 0, ms(300)), 1410)
	h.Reopen = at(1310)
	h.Scope, h.RetryAfter = ScopeUser, ms(300)
	h.Has.Scope, h.Has.RetryAfter = true, true
	if observeFirst {
		b.Observe(at(1060), at(1010), h)
		assert.True(t, b.LateReopen(at(1060), at(1010), ms(300)))
	} else {
		assert.True(t, b.LateReopen(at(1060), at(1010), ms(300)))
		b.Observe(at(1060), at(1010), h)
	}
	b.Pause(at(1360))
	return &b
}

func TestBucketLateReopenRaisesTheMargin(t *testing.T) {
	for _, observeFirst := range []bool{true, false} {
		b := lateReopened(t, observeFirst)
		// After Observe of the 429, the window really reopens at the 429's
		// own estimate, 1310 + ReopenMargin; it was reopened on the
		// estimate 1010: the bucket learns 310 ms, the margin used (0)
		// plus the lateness plus ReopenMargin. Before Observe, the best it
		// knows is now + wait + ReopenMargin = 1370: it learns 360 ms.
		late := ms(310)
		if !observeFirst {
			late = ms(360)
		}
		assert.Equal(t, ReopenMargin+late, b.Margin(at(1060)))
		assert.True(t, b.Probing(), "the window stays held: its probe got a 429")
		assert.Equal(t, 0, b.Remaining)
		assert.Equal(t, at(1320), b.ResetAt, "the 429's own estimate, no margin: the server's word")

		// After the pause the server's own word says when the window
		// reopens: no probe needed.
		assert.Equal(t, 5, takeN(b, at(1360), 10))
		assert.False(t, b.Probing())

		// The next window ends, by the server's clock, at 2360 local;
		// the bucket reopens ReopenMargin + late after that.
		h := withReset(resp(5, 4, ms(1000)), 2460)
		h.Reopen = at(2360)
		b.Observe(at(1410), at(1360), h)
		assert.Equal(t, at(2370).Add(late), b.ResetAt)
		for range 4 {
			b.Observe(at(1410), at(1360), withReset(resp(5, 0, ms(950)), 2460))
		}
		// A new margin: probe it once.
		assert.Equal(t, 1, takeN(b, b.ResetAt, 10))
		assert.True(t, b.Probing())
	}
}

func TestBucketLateReopenOnlyForSelfReopenedWindows(t *testing.T) {
	b := known(t, 5, 5, 1000) // the window of the pioneer's response
	require.Equal(t, 1, takeN(b, at(10), 1))
	assert.False(t, b.LateReopen(at(60), at(10), ms(300)), "a window the server reported, not one the bucket reopened")
	assert.Equal(t, ReopenMargin, b.Margin(at(60)))

	c := known(t, 5, 0, 1000)
	require.Equal(t, 5, takeN(c, at(1000), 5))
	assert.False(t, c.LateReopen(at(1060), at(990), ms(300)), "sent before the window")
	assert.False(t, c.LateReopen(at(1060), time.Time{}, ms(300)))
	assert.True(t, c.LateReopen(at(1060), at(1000), 5*time.Second))
	assert.Equal(t, ReopenMargin+MaxLateMargin, c.Margin(at(1060)), "capped")
	assert.False(t, c.LateReopen(at(1060), at(1000), ms(300)), "already covered")

	var u Bucket
	assert.False(t, u.LateReopen(at(0), at(0), time.Second))
}

func TestBucketMarginDecaysInSteps(t *testing.T) {
	b := lateReopened(t, true)
	raised := at(1060)
	assert.Equal(t, ms(320), b.Margin(raised.Add(MarginHalfLife-1)), "kept for a half-life")
	assert.Equal(t, ms(10+155), b.Margin(raised.Add(MarginHalfLife)))
	assert.Equal(t, ms(10)+ms(310)/4, b.Margin(raised.Add(2*MarginHalfLife)))
	assert.Equal(t, ReopenMargin, b.Margin(raised.Add(9*MarginHalfLife)), "back to the base")
	assert.Equal(t, ReopenMargin, b.Margin(raised.Add(1000*MarginHalfLife)))
}

func TestBucketProbeAfterADecayStep(t *testing.T) {
	b := lateReopened(t, true)
	require.Equal(t, 5, takeN(b, at(1360), 10))
	// Windows of 1 s, each announced to end at (window start + 1000),
	// reopened with the margin until it decays.
	start := at(1360)
	window := func(t *testing.T) (probed bool) {
		t.Helper()
		h := withReset(resp(5, 4, ms(1000)), 0)
		h.Reset = start.Add(ms(1100))
		h.Reopen = start.Add(ms(1000))
		b.Observe(start.Add(ms(50)), start, h)
		for range 4 {
			b.Observe(start.Add(ms(50)), start, withReset(resp(5, 0, ms(950)), 0))
		}
		next := b.ResetAt
		n := takeN(b, next, 10)
		probed = b.Probing()
		if probed {
			require.Equal(t, 1, n)
			b.Observe(next.Add(ms(50)), next, withReset(resp(5, 4, ms(1000)), 0))
			require.Equal(t, 4, takeN(b, next.Add(ms(50)), 10))
		}
		start = next
		return probed
	}
	assert.True(t, window(t), "the first reopening at the new margin is probed")
	for start.Before(at(1060).Add(MarginHalfLife - 2*time.Second)) {
		require.False(t, window(t), "then none while the margin is kept (%v)", start.Sub(t0))
	}
	probes := 0
	for range 5 {
		if window(t) {
			probes++
		}
	}
	assert.Equal(t, 1, probes, "the halved margin is probed once")
	assert.Equal(t, ms(165), b.Margin(start))
}

// FuzzBucketSequence drives a Bucket with an arbitrary sequence of Take,
// Observe (full, partial and 429 headers, with and without Reset and
// Reopen), Refund, LateReopen, Pause and clock steps. The invariants must
// hold after every call: 0 <= Remaining <= Limit, every Take is reported
// once (InFlight counts exactly the unreported ones), the margin stays in
// [ReopenMargin, ReopenMargin + MaxLateMargin], ResetAt stays within reach,
// and once everything is reported and enough time has passed, Take admits.
func FuzzBucketSequence(f *testing.F) {
	f.Add([]byte{0, 1, 5, 4, 100, 1, 0, 0, 6, 200, 0, 0, 0, 1, 5, 4, 90, 3, 0, 0})
	f.Add([]byte{0, 1, 2, 1, 50, 7, 9, 3, 6, 120, 0, 4, 30, 1, 2, 0, 30, 15, 60, 3, 7, 7, 0, 0})
	f.Add([]byte{0, 2, 0, 3, 0, 0, 6, 255, 0, 5, 40, 0, 1, 1, 0, 10, 1, 20, 0, 7, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var b Bucket
		now := t0
		var sent []time.Time // unreported Takes, oldest first
		next := func() int {
			if len(ops) == 0 {
				return 0
			}
			v := int(ops[0])
			ops = ops[1:]
			return v
		}
		pop := func() time.Time {
			if len(sent) == 0 {
				return now.Add(-ms(next()))
			}
			s := sent[0]
			sent = sent[1:]
			return s
		}
		check := func(op int) {
			t.Helper()
			if b.Known && (b.Limit < 1 || b.Remaining < 0 || b.Remaining > b.Limit) {
				t.Fatalf("op %d: Remaining %d out of [0, %d]", op, b.Remaining, b.Limit)
			}
			if b.InFlight() != len(sent) {
				t.Fatalf("op %d: InFlight %d, want %d", op, b.InFlight(), len(sent))
			}
			if b.uncredited < 0 || b.uncredited > b.inflight {
				t.Fatalf("op %d: uncredited %d, inflight %d", op, b.uncredited, b.inflight)
			}
			if m := b.Margin(now); m < b.baseMargin() || m > ReopenMargin+MaxLateMargin {
				t.Fatalf("op %d: margin %v", op, m)
			}
			if b.lowCur < 0 || b.lowCur > MaxLimit || b.lowPrev < 0 || b.lowPrev > MaxLimit || b.lowWindows >= limitMemory {
				t.Fatalf("op %d: limit memory %d, %d, %d windows", op, b.lowCur, b.lowPrev, b.lowWindows)
			}
			if b.rtt < 0 || time.Duration(b.rtt)*time.Millisecond > PioneerTimeout {
				t.Fatalf("op %d: rtt %d ms", op, b.rtt)
			}
			if d := b.ResetAt.Sub(now); d > MaxWait+MaxLateMargin+WindowTolerance+time.Minute {
				t.Fatalf("op %d: ResetAt %v ahead", op, d)
			}
		}
		for op := 0; len(ops) > 0; op++ {
			switch next() % 8 {
			case 0:
				ok, wait := b.Take(now)
				if ok {
					sent = append(sent, now)
				} else if wait <= 0 || wait > MaxWait+PioneerTimeout+MaxLateMargin+time.Minute {
					t.Fatalf("op %d: refused with wait %v", op, wait)
				}
			case 1, 2:
				limit := 1 + next()%10
				h := resp(limit, next()%(limit+2), ms(next()*10))
				flags := next()
				if flags&1 != 0 {
					h.Reset, h.Has.Reset = now.Add(ms(next()*10)), true
				}
				if flags&2 != 0 {
					h.Reopen = now.Add(ms(next()*10 - 1000))
				}
				if flags&4 != 0 {
					h.Scope, h.RetryAfter, h.Has.Scope, h.Has.RetryAfter = ScopeUser, h.ResetAfter, true, true
				}
				if flags&8 != 0 {
					h.Has.Remaining = false
				}
				s := pop()
				if flags&16 != 0 {
					s = time.Time{}
				}
				b.Observe(now, s, h)
			case 3:
				pop()
				b.Observe(now, now, Headers{})
			case 4:
				pop()
				b.Refund(now)
			case 5:
				s := now.Add(-ms(next() * 4))
				if len(sent) > 0 {
					s = sent[len(sent)-1]
				}
				b.LateReopen(now, s, ms(next()*5))
			case 6:
				if next()%4 == 0 {
					b.Pause(now.Add(ms(next() * 20)))
				} else {
					now = now.Add(ms(next() * 7))
				}
			case 7:
				now = now.Add(time.Duration(next()) * time.Minute)
			}
			check(op)
		}
		for range sent {
			b.Observe(now, now, Headers{})
		}
		sent = nil
		now = now.Add(2 * time.Hour)
		ok, wait := b.Take(now)
		if !ok {
			t.Fatalf("nothing in flight, two hours on, and Take still refuses (wait %v): %+v", wait, b)
		}
	})
}

func TestBucketScopeAloneIsNotA429(t *testing.T) {
	// Discord may send X-RateLimit-Scope with every response; only
	// Retry-After (or X-RateLimit-Global) marks a 429, whose estimate gets
	// no learned margin.
	b := lateReopened(t, true)
	require.Equal(t, 5, takeN(b, at(1360), 10))
	h := withReset(resp(5, 0, ms(1000)), 2460)
	h.Reopen = at(2360)
	h.Scope, h.Has.Scope = ScopeUser, true
	b.Observe(at(1410), at(1360), h)
	assert.Equal(t, at(2370).Add(ms(310)), b.ResetAt, "a success that exhausts the window keeps the margin")

	c := lateReopened(t, true)
	require.Equal(t, 5, takeN(c, at(1360), 10))
	h.RetryAfter, h.Has.RetryAfter = ms(950), true
	c.Observe(at(1410), at(1360), h)
	assert.Equal(t, at(2370), c.ResetAt, "a 429's estimate is the server's word")
}

// TestBucketObserveLost: a request the server cannot count after its
// headerless answer came (a 5xx, a connection the server closed) stays
// charged to the window it was taken in when that window surely lasts
// beyond the answer by a round trip plus WindowTolerance; otherwise it is
// charged as by Observe, for a period.
func TestBucketObserveLost(t *testing.T) {
	t.Run("well inside the window", func(t *testing.T) {
		b := known(t, 5, 5, 1000) // window ends at 1000, period 1 s
		require.Equal(t, 2, takeN(b, at(100), 2))
		b.ObserveLost(at(200), at(100), Headers{})
		assert.Equal(t, at(1000), b.ResetAt, "the window's end stays")
		assert.Equal(t, 3, b.Remaining, "its slot stays spent in this window")
		assert.Equal(t, 1, b.InFlight())
		assert.Equal(t, 4, takeN(b, at(1000), 10), "the next window: 5 less the one still in flight")
	})
	// both reports a headerless answer to a and to its twin, by
	// Observe and ObserveLost, and returns the twin.
	both := func(a *Bucket, now, sentAt time.Time) *Bucket {
		b := *a
		a.Observe(now, sentAt, Headers{})
		b.ObserveLost(now, sentAt, Headers{})
		return &b
	}
	t.Run("near the end", func(t *testing.T) {
		a := known(t, 5, 5, 1000)
		require.Equal(t, 1, takeN(a, at(100), 1))
		b := both(a, at(960), at(100)) // 960 + 0 ms round trip + 50 ms: maybe after the end
		assert.Equal(t, at(2010), b.ResetAt, "charged for a period (+ tolerance)")
		assert.Equal(t, *a, *b, "as by Observe")
	})
	t.Run("the estimate's slack and the round trip narrow it", func(t *testing.T) {
		var a Bucket
		takeN(&a, at(0), 1)
		a.Observe(at(300), at(0), resp(5, 4, ms(700))) // ends at 1000, or 300 ms earlier; round trip 300 ms
		require.Equal(t, 2, takeN(&a, at(310), 2))
		b := a
		b.ObserveLost(at(320), at(310), Headers{}) // 320 + 300 + 50 < 1000 - 300
		assert.Equal(t, at(1000), b.ResetAt, "in this window")
		c := both(&a, at(360), at(310)) // 360 + 300 + 50 > 700
		assert.Equal(t, at(1110), c.ResetAt, "charged for a period (700 ms, the longest Reset-After seen)")
		assert.Equal(t, a, *c)
	})
	t.Run("a refilled window not yet confirmed", func(t *testing.T) {
		a := known(t, 5, 0, 1000)
		require.Equal(t, 5, takeN(a, at(1000), 5)) // refilled: the end is a guess
		b := both(a, at(1100), at(1000))
		assert.Equal(t, at(2150), b.ResetAt, "charged for a period")
		assert.Equal(t, *a, *b, "as by Observe")
	})
	t.Run("with headers it is Observe", func(t *testing.T) {
		a, b := known(t, 5, 5, 1000), known(t, 5, 5, 1000)
		takeN(a, at(100), 2)
		takeN(b, at(100), 2)
		a.Observe(at(150), at(100), resp(5, 2, ms(850)))
		b.ObserveLost(at(150), at(100), resp(5, 2, ms(850)))
		assert.Equal(t, *a, *b)
	})
}
