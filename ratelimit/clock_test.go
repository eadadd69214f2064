package ratelimit

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serverHeaders returns the headers of an answer counted when the server's
// clock read serverAt, in a window ending at serverEnd, as Discord and
// sluicetest send them: Reset-After rounded up to the millisecond, Reset =
// floor_ms(serverAt + Reset-After).
func serverHeaders(limit, remaining int, serverAt, serverEnd time.Time) Headers {
	ra := ceilMs(serverEnd.Sub(serverAt))
	h := resp(limit, remaining, ra)
	h.Reset = serverAt.Add(ra).Truncate(time.Millisecond)
	h.Has.Reset = true
	return h
}

// warm feeds c n answers to requests sent at t0 + i*10 ms and counted with
// lead phi, each in a window ending one second after it was counted, with
// no receive time (no Bound).
func warm(c *ServerClock, n int, phi time.Duration) {
	for i := range n {
		sent := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		c.Observe(sent, time.Time{}, serverHeaders(5, 4, sent.Add(phi), sent.Add(phi+time.Second)))
	}
}

func TestServerClockZeroValue(t *testing.T) {
	var c ServerClock
	_, ok := c.Lead()
	assert.False(t, ok)
	_, ok = c.Local(t0)
	assert.False(t, ok)
	h := resp(5, 4, time.Second)
	h.Reset, h.Has.Reset = t0, true
	c.Annotate(&h)
	assert.True(t, h.Reopen.IsZero(), "nothing to go by")
}

func TestServerClockLeadIsTheMinimum(t *testing.T) {
	var c ServerClock
	sent := t0
	// (ClockWarm samples: with fewer, the range counts more; see
	// TestServerClockFewSamplesWidenTheRange.)
	for _, phi := range append([]time.Duration{ms(180), ms(150), ms(210)}, repeat(ms(180), ClockWarm-3)...) {
		// Answered 300 ms after it was sent: a Bound of phi - 300 ms.
		c.Observe(sent, sent.Add(ms(300)), serverHeaders(5, 4, sent.Add(phi), sent.Add(phi+time.Second)))
		sent = sent.Add(time.Second)
	}
	lead, ok := c.Lead()
	require.True(t, ok)
	assert.Equal(t, ms(150-60), lead, "the fastest request, less how much they differ (60 ms)")

	// With steady trips the lead is the smallest phi.
	var steady ServerClock
	for _, phi := range append([]time.Duration{ms(151), ms(150)}, repeat(ms(150), ClockWarm-2)...) {
		steady.Observe(sent, sent.Add(ms(300)), serverHeaders(5, 4, sent.Add(phi), sent.Add(phi+time.Second)))
		sent = sent.Add(time.Second)
	}
	lead, _ = steady.Lead()
	assert.Equal(t, ms(149), lead)
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

func TestServerClockNegativeOffset(t *testing.T) {
	// The server's clock is 2 s behind ours; the forward trip is 30 ms.
	var c ServerClock
	warm(&c, ClockWarm, -2*time.Second+ms(30))
	lead, _ := c.Lead()
	assert.Equal(t, -2*time.Second+ms(30), lead)
	local, ok := c.Local(t0.Add(-time.Second))
	require.True(t, ok)
	assert.Equal(t, t0.Add(time.Second-ms(30)+ResetPrecision), local)
}

func TestServerClockIgnoresIncompleteAndAbsurdSamples(t *testing.T) {
	var c ServerClock
	h := serverHeaders(5, 4, t0.Add(ms(100)), t0.Add(ms(1100)))
	noReset := h
	noReset.Has.Reset = false
	c.Observe(t0, time.Time{}, noReset)
	noAfter := h
	noAfter.Has.ResetAfter = false
	c.Observe(t0, time.Time{}, noAfter)
	c.Observe(time.Time{}, t0, h)
	c.Observe(t0, time.Time{}, serverHeaders(5, 4, t0.Add(2*time.Hour), t0.Add(2*time.Hour+time.Second)))
	c.Observe(t0, time.Time{}, serverHeaders(5, 4, t0.Add(-2*time.Hour), t0.Add(-2*time.Hour+time.Second)))
	_, ok := c.Lead()
	assert.False(t, ok, "no usable sample")
	c.Observe(t0, t0.Add(ms(500)), h)
	lead, ok := c.Lead()
	assert.True(t, ok)
	assert.Equal(t, ms(100), lead)
}

func TestServerClockFloorKeepsAnOldFastSampleRisingSlowly(t *testing.T) {
	var c ServerClock
	// Answers come 200 ms after the count: every Bound is 200 ms below its phi.
	observe := func(sent time.Time, phi time.Duration) {
		c.Observe(sent, sent.Add(phi+ms(200)), serverHeaders(5, 4, sent.Add(phi), sent.Add(phi+time.Second)))
	}
	observe(t0, ms(50)) // fast, but old
	for i := range ClockSamples - 1 {
		observe(t0.Add(time.Duration(i+1)*10*time.Millisecond), ms(100))
	}
	lead, _ := c.Lead()
	assert.Equal(t, ms(0), lead, "the fastest, less how much the trips differ (50 ms)")
	// 64 more slow samples push the fast one out of the ring, 20 minutes
	// later: the floor has risen 20 ms, not to 100, and the trips kept no
	// longer differ.
	for i := range ClockSamples {
		observe(t0.Add(20*time.Minute+time.Duration(i)*time.Microsecond), ms(100))
	}
	lead, _ = c.Lead()
	assert.InDelta(t, float64(ms(70)), float64(lead), float64(time.Millisecond), "after a burst of slow trips, Lead stays near the fast one")
	// After a long quiet while the floor has risen above the recent
	// samples: Lead is theirs again.
	observe(t0.Add(time.Hour), ms(100))
	lead, _ = c.Lead()
	assert.InDelta(t, float64(ms(100)), float64(lead), float64(time.Millisecond))
}

// TestServerClockColdBurstThenALoneRequest is the case the range is for: a
// cold start sends 64 requests at once, and the server, busy setting up
// connections and queueing handlers, counts each 15 to 40 ms after it was
// written, while a lone request later takes 0.3 ms. The smallest phi of the
// burst (15 ms) would have the lone request counted 15 ms before the
// converted time: Lead is lowered by the range (25 ms). Then one quick
// answer (round trip 0.5 ms) makes its Bound tight, and the lead is within
// that round trip of the truth again.
func TestServerClockColdBurstThenALoneRequest(t *testing.T) {
	var c ServerClock
	offset := ms(7) // the server's clock is 7 ms ahead
	for i := range ClockSamples {
		sent := t0.Add(time.Duration(i) * 50 * time.Microsecond)
		queued := ms(15) + time.Duration(i)*25*time.Millisecond/ClockSamples
		counted := sent.Add(queued)
		c.Observe(sent, counted.Add(ms(15)), serverHeaders(1, 0, counted.Add(offset), counted.Add(offset+ms(100))))
	}
	lead, _ := c.Lead()
	lone := offset + 300*time.Microsecond // the lone request's true lead
	assert.LessOrEqual(t, lead, lone, "the lone request must not be counted before Local says")

	sent := t0.Add(ms(200))
	c.Observe(sent, sent.Add(500*time.Microsecond), serverHeaders(1, 0, sent.Add(lone), sent.Add(lone+ms(100))))
	lead, _ = c.Lead()
	assert.LessOrEqual(t, lead, lone)
	assert.GreaterOrEqual(t, lead, lone-ms(2), "tight again after a quick answer")
}

func TestServerClockNeedsWarmSamples(t *testing.T) {
	var c ServerClock
	warm(&c, ClockFirst-1, ms(100))
	_, ok := c.Lead()
	assert.True(t, ok)
	_, ok = c.Local(t0)
	assert.False(t, ok, "fewer than ClockFirst samples")
	warm(&c, 1, ms(100))
	_, ok = c.Local(t0)
	assert.True(t, ok)
}

// With fewer than ClockWarm samples, their range counts ClockWarm/n times:
// five trips that differ by 4 ms say little about the sixth.
func TestServerClockFewSamplesWidenTheRange(t *testing.T) {
	var c ServerClock
	sent := t0
	for i := range ClockFirst {
		phi := ms(100 + i) // 100..104 ms: a range of 4 ms
		c.Observe(sent, time.Time{}, serverHeaders(5, 4, sent.Add(phi), sent.Add(phi+time.Second)))
		sent = sent.Add(ms(10))
	}
	lead, _ := c.Lead()
	assert.Equal(t, ms(100)-ms(4)*ClockWarm/ClockFirst, lead, "the range counted 16/5 times")
	_, ok := c.Local(t0)
	assert.True(t, ok, "ClockFirst samples")
	for i := ClockFirst; i < ClockWarm; i++ {
		c.Observe(sent, time.Time{}, serverHeaders(5, 4, sent.Add(ms(102)), sent.Add(ms(1102))))
		sent = sent.Add(ms(10))
	}
	lead, _ = c.Lead()
	assert.Equal(t, ms(96), lead, "from ClockWarm samples on, the range as it is")
}

func TestServerClockJitterWidensLocal(t *testing.T) {
	// Forward trips jitter between 100 and 138 ms. A request may be faster
	// than every one seen: Local takes the fastest (100 ms) less how much
	// they differ (38 ms), but no less than the Bound of the answers, which
	// came 150 ms after they were sent (phi - 150 ms, at most -12 ms).
	var c ServerClock
	sent := t0
	for i := range ClockWarm {
		phi := ms(110 + (i*7)%30)
		if i == 3 {
			phi = ms(100)
		}
		c.Observe(sent, sent.Add(ms(150)), serverHeaders(5, 4, sent.Add(phi), sent.Add(phi+time.Second)))
		sent = sent.Add(ms(10))
	}
	server := t0.Add(10 * time.Second)
	local, ok := c.Local(server)
	require.True(t, ok)
	assert.Equal(t, server.Add(-ms(62)+ResetPrecision), local)
}

func TestServerClockNeverBelowTheBound(t *testing.T) {
	// Trips differ by 300 ms, but one answer came back 20 ms after it was
	// sent with phi 110 ms: the offset is at least 90 ms, so no request
	// is counted less than 90 ms after it was sent by the server's clock.
	var c ServerClock
	sent := t0
	for i := range ClockWarm {
		phi, back := ms(400), ms(500)
		if i == 5 {
			phi, back = ms(110), ms(20)
		}
		c.Observe(sent, sent.Add(back), serverHeaders(5, 4, sent.Add(phi), sent.Add(phi+time.Second)))
		sent = sent.Add(ms(10))
	}
	lead, _ := c.Lead()
	assert.Equal(t, ms(90), lead)
}

func TestServerClockPrecision(t *testing.T) {
	// Counted at 5.0009 s (server) in a window that really ends at
	// 10.0004 s: Reset-After is ceil_ms(4.9995 s) = 5.000 and Reset
	// floor_ms(10.0009 s) = 10.000, 0.4 ms before the true end. Local adds
	// ResetPrecision to stay after it.
	var c ServerClock
	counted := t0.Add(ms(5000) + 900*time.Microsecond) // by the server's clock
	end := t0.Add(ms(10000) + 400*time.Microsecond)    // the true end
	sent := t0.Add(ms(4900) + 900*time.Microsecond)    // lead 100 ms
	for i := range ClockWarm {
		back := time.Duration(ClockWarm-i) * time.Millisecond
		c.Observe(sent.Add(-back), time.Time{}, serverHeaders(5, 4, counted.Add(-back), end))
	}
	h := serverHeaders(5, 4, counted, end)
	assert.Equal(t, t0.Add(10*time.Second), h.Reset, "floor_ms(counted + ceil_ms(remaining))")
	lead, _ := c.Lead()
	local, ok := c.Local(h.Reset)
	require.True(t, ok)
	// A request sent at local is counted at local + phi >= local + lead.
	assert.False(t, local.Add(lead).Before(end), "counted at %v, before the true end %v", local.Add(lead), end)
}

func TestServerClockAnnotate(t *testing.T) {
	var c ServerClock
	warm(&c, ClockWarm, ms(180))
	sent := t0.Add(time.Minute)
	h := serverHeaders(5, 4, sent.Add(ms(180)), sent.Add(ms(1180)))
	c.Observe(sent, sent.Add(ms(200)), h)
	c.Annotate(&h)
	assert.Equal(t, sent.Add(time.Second+ResetPrecision), h.Reopen)
	assert.False(t, h.Reopen.Before(sent.Add(h.ResetAfter+ResetPrecision)), "bounded by its own sample")

	noReset := resp(5, 4, time.Second)
	c.Annotate(&noReset)
	assert.True(t, noReset.Reopen.IsZero())
}

func TestServerClockConcurrent(t *testing.T) {
	var c ServerClock
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				sent := t0.Add(time.Duration(g*1000+i) * time.Millisecond)
				h := serverHeaders(5, 4, sent.Add(ms(100+g)), sent.Add(ms(1100)))
				c.Observe(sent, sent.Add(ms(300)), h)
				c.Annotate(&h)
				c.Lead()
				c.Local(h.Reset)
			}
		}()
	}
	wg.Wait()
	lead, ok := c.Lead()
	assert.True(t, ok)
	assert.GreaterOrEqual(t, lead, ms(100-7), "the fastest (100 ms) less the range (7 ms)")
}

// TestReopenStepByStep walks through one reopening with the numbers of the
// ServerClock documentation: the server's clock is 100 ms ahead of ours, a
// request takes 80 ms to reach it and its answer 120 ms to come back, and
// the bucket allows 5 requests per second.
func TestReopenStepByStep(t *testing.T) {
	const offset, forward, back = 100 * time.Millisecond, 80 * time.Millisecond, 120 * time.Millisecond
	server := func(local time.Time) time.Time { return local.Add(offset) } // the server's clock

	// Earlier answers on other routes of the same host, with the same
	// trips, have warmed the clock: Lead = offset + forward = 180 ms.
	var clock ServerClock
	warm(&clock, ClockWarm, offset+forward)

	// A known bucket whose previous window has just ended (its reopening
	// was already tried by a probe).
	b := known(t, 5, 5, 0)
	noon := t0.Add(time.Hour) // "12:00:00.000" local

	// 1. At 12:00:00.000 the bucket admits a request; a new window.
	ok, _ := b.Take(noon)
	require.True(t, ok)

	// 2. The server counts it at 12:00:00.180 by its clock, opening a
	//    window that ends at 12:00:01.180, and answers Reset-After 1.000,
	//    Reset 12:00:01.180, Remaining 4.
	counted := server(noon.Add(forward))
	h := serverHeaders(5, 4, counted, counted.Add(time.Second))
	assert.Equal(t, time.Second, h.ResetAfter)
	assert.Equal(t, noon.Add(ms(1180)), h.Reset, "12:00:01.180 by the server's clock")

	// 3. The headers arrive at 12:00:00.200. The clock takes the sample
	//    phi = (Reset - ResetAfter) - sent = 180 ms, then converts Reset:
	//    Reopen = Reset - Lead + ResetPrecision = 12:00:01.001.
	recv := noon.Add(forward + back)
	clock.Observe(noon, recv, h)
	lead, _ := clock.Lead()
	assert.Equal(t, ms(180), lead)
	clock.Annotate(&h)
	assert.Equal(t, noon.Add(ms(1001)), h.Reopen)

	// 4. The bucket's estimates: the receive time plus Reset-After says
	//    12:00:01.200; Reopen plus ReopenMargin says 12:00:01.011. The
	//    earlier wins, plus the learned margin (none): ResetAt is
	//    12:00:01.011, 189 ms earlier than before.
	b.Observe(recv, noon, h)
	assert.Equal(t, ReopenMargin, b.Margin(recv))
	assert.Equal(t, noon.Add(ms(1011)), b.ResetAt)
	assert.Equal(t, 4, takeN(b, recv, 10), "the rest of the window")

	// 5. Nothing goes before 12:00:01.011; at 12:00:01.011 the bucket
	//    refills, and a request sent then reaches the server at
	//    12:00:01.191 by its clock: 11 ms after the window ended.
	ok, wait := b.Take(noon.Add(ms(1011) - 1))
	assert.False(t, ok)
	assert.Equal(t, time.Duration(1), wait)
	ok, _ = b.Take(noon.Add(ms(1011)))
	require.True(t, ok)
	arrives := server(noon.Add(ms(1011) + forward))
	assert.Equal(t, ms(11), arrives.Sub(h.Reset))
}
