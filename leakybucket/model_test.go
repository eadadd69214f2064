package leakybucket

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// t0 is the fake clock's origin: whole microseconds, like Redis's TIME.
var t0 = time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)

func at(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }

// refBucket is the reference model: it simulates the bucket one drip at a
// time, with the drips as events on a timeline, and finds every waiting
// time by running the timeline forward. It shares no arithmetic with step.
type refBucket struct {
	size, drip int
	interval   time.Duration
	level      int
	next       time.Time // when the next drip falls; meaningful while level > 0
}

type refResult struct {
	blocked                bool
	level, remaining       int
	retry, clear, nextDrip time.Duration
}

func newRef(l Limit) *refBucket {
	interval := l.DripRate
	if interval == 0 {
		interval = time.Second
	}
	interval = (interval + time.Microsecond - 1) / time.Microsecond * time.Microsecond
	return &refBucket{size: l.Size, drip: max(l.DripSize, 1), interval: interval}
}

// advance lets every drip due at or before now fall.
func (b *refBucket) advance(now time.Time) {
	for b.level > 0 && !now.Before(b.next) {
		b.level = max(b.level-b.drip, 0)
		b.next = b.next.Add(b.interval)
	}
}

// wouldBlock reports, after advance, whether a call at now is blocked.
func (b *refBucket) wouldBlock(now time.Time) bool { return b.wouldBlockN(now, 1) }

// wouldBlockN reports, after advance, whether a call of cost n at now is
// blocked.
func (b *refBucket) wouldBlockN(now time.Time, n int) bool {
	b.advance(now)
	return b.level+n > b.size
}

// charge adds an admitted call at now (after advance).
func (b *refBucket) charge(now time.Time) { b.chargeN(now, 1) }

// chargeN adds an admitted call of cost n at now (after advance).
func (b *refBucket) chargeN(now time.Time, n int) {
	if n == 0 {
		return
	}
	if b.level == 0 {
		b.next = now.Add(b.interval)
	}
	b.level += n
}

// observe describes the bucket at now, after a check that blocked or not.
func (b *refBucket) observe(now time.Time, blocked bool) refResult {
	return b.observeN(now, blocked, 1)
}

// observeN describes the bucket at now, after a check of cost n that
// blocked or not: RetryAfter is the wait of the next call of cost n.
func (b *refBucket) observeN(now time.Time, blocked bool, n int) refResult {
	r := refResult{blocked: blocked, level: b.level, remaining: max(b.size-b.level, 0)}
	c := *b
	t := now
	for c.level+n > c.size { // wait for drips until a call fits
		t = c.next
		c.level = max(c.level-c.drip, 0)
		c.next = c.next.Add(c.interval)
	}
	r.retry = t.Sub(now)
	c, t = *b, now
	for c.level > 0 {
		t = c.next
		c.level = max(c.level-c.drip, 0)
		c.next = c.next.Add(c.interval)
	}
	r.clear = t.Sub(now)
	if b.level > 0 {
		r.nextDrip = b.next.Sub(now)
	}
	return r
}

// check is one call against the reference bucket alone.
func (b *refBucket) check(now time.Time) refResult { return b.checkN(now, 1) }

// checkN is one call of cost n against the reference bucket alone.
func (b *refBucket) checkN(now time.Time, n int) refResult {
	blocked := b.wouldBlockN(now, n)
	if !blocked {
		b.chargeN(now, n)
	}
	return b.observeN(now, blocked, n)
}

func sameAsRef(t *testing.T, what string, got Result, want refResult) {
	t.Helper()
	if got.Blocked != want.blocked || got.Level != want.level || got.Remaining != want.remaining ||
		got.RetryAfter != want.retry || got.ClearAfter != want.clear || got.NextDrip != want.nextDrip {
		t.Fatalf("%s: got {Blocked:%v Level:%d Remaining:%d RetryAfter:%v ClearAfter:%v NextDrip:%v}, reference {Blocked:%v Level:%d Remaining:%d RetryAfter:%v ClearAfter:%v NextDrip:%v}",
			what, got.Blocked, got.Level, got.Remaining, got.RetryAfter, got.ClearAfter, got.NextDrip,
			want.blocked, want.level, want.remaining, want.retry, want.clear, want.nextDrip)
	}
}

// check is one expected check in a table.
type check struct {
	ms                   float64 // time since t0
	blocked              bool
	remaining            int
	retry, clear, nextMS float64 // ms
}

func runTable(t *testing.T, lim Limit, checks []check) {
	t.Helper()
	var b Bucket
	ref := newRef(lim)
	for i, c := range checks {
		now := at(c.ms)
		got, err := b.Check(lim, now)
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("check %d at %vms", i, c.ms)
		sameAsRef(t, what, got, ref.check(now))
		ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
		if got.Blocked != c.blocked || got.Remaining != c.remaining || got.RetryAfter != ms(c.retry) ||
			got.ClearAfter != ms(c.clear) || got.NextDrip != ms(c.nextMS) {
			t.Fatalf("%s: got {Blocked:%v Remaining:%d RetryAfter:%v ClearAfter:%v NextDrip:%v}, want {%v %d %vms %vms %vms}",
				what, got.Blocked, got.Remaining, got.RetryAfter, got.ClearAfter, got.NextDrip,
				c.blocked, c.remaining, c.retry, c.clear, c.nextMS)
		}
		if !got.At.Equal(now) || got.Limit != lim {
			t.Fatalf("%s: At %v Limit %+v", what, got.At, got.Limit)
		}
	}
}

func TestBurstThenDrip(t *testing.T) {
	// The example server's limit: 10 at once, then 1 per 100 ms.
	lim := Limit{Name: "api", Size: 10, DripRate: 100 * time.Millisecond}
	var checks []check
	for i := range 10 { // a burst of 10 at t0: each admitted, Clear grows by a drip
		checks = append(checks, check{0, false, 9 - i, 0, 100 * float64(i+1), 100})
		if i == 9 {
			checks[i].retry = 100 // the bucket is full: the next call waits a drip
		}
	}
	checks = append(checks,
		check{0, true, 0, 100, 1000, 100}, // the 11th is blocked and adds nothing
		check{40, true, 0, 60, 960, 60},   // still blocked, 60 ms to the drip
		check{99.999, true, 0, 0.001, 900.001, 0.001},
		check{100, false, 0, 100, 1000, 100}, // the first drip freed one: admitted, full again
		check{100, true, 0, 100, 1000, 100},  // and the next is blocked
		check{350, false, 1, 0, 850, 50},     // two drips later (at 200, 300): two free, one used
		check{350, false, 0, 50, 950, 50},    // the last free one
		check{350, true, 0, 50, 950, 50},
		check{5000, false, 9, 0, 100, 100},     // long idle: empty; the anchor restarts at the call
		check{5099.5, false, 8, 0, 100.5, 0.5}, // still no drip: 2 in the bucket
	)
	runTable(t, lim, checks)
}

func TestDripSizeAboveOne(t *testing.T) {
	// 5 at once, then 2 every 1 s.
	lim := Limit{Size: 5, DripRate: time.Second, DripSize: 2}
	runTable(t, lim, []check{
		{0, false, 4, 0, 1000, 1000},
		{0, false, 3, 0, 1000, 1000},
		{0, false, 2, 0, 2000, 1000},
		{0, false, 1, 0, 2000, 1000},
		{0, false, 0, 1000, 3000, 1000}, // full: ceil(5/2) = 3 drips to clear
		{0, true, 0, 1000, 3000, 1000},
		{999, true, 0, 1, 2001, 1},
		{1000, false, 1, 0, 2000, 1000}, // a drip of 2 freed two: 3 held, then 4
		{1000, false, 0, 1000, 3000, 1000},
		{1000, true, 0, 1000, 3000, 1000},
		{2500, false, 1, 0, 1500, 500}, // one drip (at 2000) of 2: 3 held, then 4
		{2500, false, 0, 500, 2500, 500},
		{6000, false, 4, 0, 1000, 1000}, // empty again: fresh anchor
	})
}

func TestDripLargerThanBucket(t *testing.T) {
	// A drip of 5 from a bucket of 2 empties it: no more than 2 per drip.
	lim := Limit{Size: 2, DripRate: 10 * time.Millisecond, DripSize: 5}
	runTable(t, lim, []check{
		{0, false, 1, 0, 10, 10},
		{0, false, 0, 10, 10, 10},
		{0, true, 0, 10, 10, 10},
		{10, false, 1, 0, 10, 10}, // drained to 0 at 10: a fresh anchor at 10
		{10, false, 0, 10, 10, 10},
		{10, true, 0, 10, 10, 10},
	})
}

func TestSizeOne(t *testing.T) {
	// The seed's minInterval-only legacy limit: one call per interval.
	lim := Limit{Size: 1, DripRate: 250 * time.Millisecond}
	runTable(t, lim, []check{
		{0, false, 0, 250, 250, 250},
		{1, true, 0, 249, 249, 249},
		{249.999, true, 0, 0.001, 0.001, 0.001},
		{250, false, 0, 250, 250, 250},
		{600, false, 0, 250, 250, 250}, // drained at 500: anchor restarts at 600
		{849, true, 0, 1, 1, 1},
	})
}

func TestClockBehindAnchor(t *testing.T) {
	// A time earlier than the last drip counts as no time passed: nothing
	// drips, and the waits are measured from the earlier time.
	lim := Limit{Size: 1, DripRate: 100 * time.Millisecond}
	var b Bucket
	if r, _ := b.Check(lim, at(1000)); r.Blocked {
		t.Fatal("first call blocked")
	}
	r, _ := b.Check(lim, at(900))
	if !r.Blocked || r.RetryAfter != 200*time.Millisecond || r.ClearAfter != 200*time.Millisecond {
		t.Fatalf("100 ms before the anchor: %+v", r)
	}
	if r, _ := b.Check(lim, at(1100)); r.Blocked {
		t.Fatalf("at the drip: %+v", r)
	}
}

func TestDefaults(t *testing.T) {
	// DripRate 0 is 1 s and DripSize 0 is 1, as in the seed.
	var b Bucket
	lim := Limit{Size: 1}
	b.Check(lim, t0)
	r, _ := b.Check(lim, t0)
	if !r.Blocked || r.RetryAfter != time.Second {
		t.Fatalf("%+v", r)
	}
	// DripRate is rounded up to the microsecond.
	var c Bucket
	lim = Limit{Size: 1, DripRate: 1500 * time.Nanosecond}
	c.Check(lim, t0)
	if r, _ := c.Check(lim, t0); r.RetryAfter != 2*time.Microsecond {
		t.Fatalf("RetryAfter %v, want 2µs", r.RetryAfter)
	}
}

func TestInvalidLimits(t *testing.T) {
	for _, lim := range []Limit{
		{},
		{Size: -1},
		{Size: MaxSize + 1},
		{Size: 1, DripRate: -time.Second},
		{Size: 1, DripSize: -1},
		{Size: 1, DripRate: MaxDrain + 1},
		{Size: MaxSize, DripRate: time.Hour}, // 2^30 hours to drain
		{Size: 1, Name: "new\nline"},
		{Size: 1, Name: "é"},
		{Size: 1, Name: string(make([]byte, 129))},
	} {
		var b Bucket
		_, err := b.Check(lim, t0)
		var le *LimitError
		if !errors.Is(err, ErrInvalidLimit) || !errors.As(err, &le) {
			t.Errorf("%+v: error %v", lim, err)
		}
		if b != (Bucket{}) {
			t.Errorf("%+v: the bucket changed", lim)
		}
	}
	if err := (Limit{Size: MaxSize, DripSize: MaxSize, DripRate: MaxDrain}).Validate(); err != nil {
		t.Errorf("the largest limit: %v", err)
	}
}

func TestBoundIsTight(t *testing.T) {
	// D = 1: an empty bucket admits S at once and then one per drip:
	// S + floor(w/R) over [0, w].
	lim := Limit{Size: 3, DripRate: 10 * time.Millisecond}
	var b Bucket
	n := 0
	for ms := 0.0; ms <= 50; ms += 10 {
		for {
			r, _ := b.Check(lim, at(ms))
			if r.Blocked {
				break
			}
			n++
		}
	}
	if want := admitBound(lim, 50*time.Millisecond); n != want {
		t.Fatalf("D=1: admitted %d over 50 ms, bound %d", n, want)
	}

	// D > 1: a drip just inside the interval frees D at once. S=3, D=2,
	// R=10ms: one call at -5 sets the phase, two at 0 fill the bucket, the
	// drip at 5 frees two: four calls within [0, 5], S - 1 + D.
	lim = Limit{Size: 3, DripRate: 10 * time.Millisecond, DripSize: 2}
	b = Bucket{}
	b.Check(lim, at(-5))
	n = 0
	for _, ms := range []float64{0, 0, 5, 5} {
		if r, _ := b.Check(lim, at(ms)); r.Blocked {
			t.Fatalf("call at %v blocked: %+v", ms, r)
		}
		n++
	}
	if r, _ := b.Check(lim, at(5)); !r.Blocked {
		t.Fatal("a fifth call within [0, 5] admitted")
	}
	if want := admitBound(lim, 5*time.Millisecond); n != want {
		t.Fatalf("D=2: admitted %d within 5 ms, bound %d", n, want)
	}
}

// admitBound is the most calls a bucket of lim admits within any closed
// interval of length w: S - 1 + min(D, S) * (floor(w/R) + 1), which is
// S + floor(w/R) for D = 1.
func admitBound(lim Limit, w time.Duration) int {
	ref := newRef(lim)
	return bound(ref.size, ref.drip, ref.interval, w)
}

func bound(size, drip int, interval, w time.Duration) int {
	return size - 1 + min(drip, size)*(int(w/interval)+1)
}

// checkBound fails t if any interval between two admission times (sorted)
// holds more admissions than admitBound.
func checkBound(t testing.TB, lim Limit, admitted []time.Time) {
	t.Helper()
	checkBoundUnits(t, lim, admitted, nil)
}

// checkBoundUnits fails t if any interval between two admission times
// (sorted) holds more units than admitBound: units[i] is the cost of
// admission i (1 if units is nil). The bound holds for units as it does for
// calls of cost 1: the level never passes S, and each of the at most
// floor(w/R) + 1 drips within the interval frees at most min(D, S) (only
// floor(w/R) of them if the bucket was empty just before the first
// admission, which leaves the S - 1).
func checkBoundUnits(t testing.TB, lim Limit, admitted []time.Time, units []int) {
	t.Helper()
	ref := newRef(lim)
	for j := range admitted {
		n := 0
		for i := j; i >= 0; i-- {
			if units == nil {
				n++
			} else {
				n += units[i]
			}
			w := admitted[j].Sub(admitted[i])
			if b := bound(ref.size, ref.drip, ref.interval, w); n > b {
				t.Fatalf("%d units admitted within %v (from %v to %v after the first admission), more than the bound %d for %v",
					n, w, admitted[i].Sub(admitted[0]), admitted[j].Sub(admitted[0]), b, lim)
			}
		}
	}
}

func TestHeadersToTheMillisecond(t *testing.T) {
	// The seed's examples: 3 calls per 1.5 s, a fourth 745 ms later.
	lim := Limit{Name: "notes", Size: 3, DripRate: 1500 * time.Millisecond}
	var b Bucket
	for range 3 {
		b.Check(lim, t0)
	}
	r, _ := b.Check(lim, at(745))
	h := http.Header{}
	h.Set("Retry-After", "stale")
	SetHeaders(h, true, r)
	want := map[string]string{
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Clear":     "3.755", // 3 drips of 1.5 s from t0, 0.745 s gone
		"X-RateLimit-Reset":     "0.755",
		"Retry-After":           "1",
		"RateLimit-Policy":      `"notes";q=3;w=5`, // a full bucket drains in 4.5 s
		"RateLimit":             `"notes";r=0;t=1`,
	}
	equalHeaders(t, h, want)

	// Not blocked: no Reset, no Retry-After (the stale one is removed).
	r, _ = b.Check(lim, at(1500))
	SetHeaders(h, false, r)
	equalHeaders(t, h, map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Clear": "4.500"})

	// Durations are rounded up to the millisecond, never down.
	r = Result{Limit: lim, Blocked: true, RetryAfter: 754*time.Millisecond + 1, ClearAfter: time.Second + 1, NextDrip: 754*time.Millisecond + 1}
	SetHeaders(h, true, r)
	equalHeaders(t, h, map[string]string{
		"X-RateLimit-Remaining": "0", "X-RateLimit-Clear": "1.001", "X-RateLimit-Reset": "0.755",
		"Retry-After": "1", "RateLimit-Policy": `"notes";q=3;w=5`, "RateLimit": `"notes";r=0;t=1`,
	})
	r.RetryAfter = 2*time.Second + 1
	SetHeaders(h, false, r)
	if h.Get("Retry-After") != "3" || h.Get("X-RateLimit-Reset") != "2.001" {
		t.Fatalf("Retry-After %q Reset %q", h.Get("Retry-After"), h.Get("X-RateLimit-Reset"))
	}
}

func TestHeadersSeveralLimits(t *testing.T) {
	burst := Limit{Name: "burst", Size: 2, DripRate: time.Second}
	hourly := Limit{Name: "hourly", Size: 100, DripRate: 36 * time.Second}
	results := []Result{
		{Limit: burst, Blocked: true, Remaining: 0, Level: 2, RetryAfter: 400 * time.Millisecond, ClearAfter: 1400 * time.Millisecond, NextDrip: 400 * time.Millisecond},
		{Limit: hourly, Remaining: 57, Level: 43, ClearAfter: 43 * 36 * time.Second, NextDrip: 20 * time.Second},
	}
	h := http.Header{}
	SetHeaders(h, true, results...)
	equalHeaders(t, h, map[string]string{
		"X-RateLimit-Remaining": "0",
		"X-RateLimit-Clear":     "1548.000",
		"X-RateLimit-Reset":     "0.400",
		"Retry-After":           "1",
		"RateLimit-Policy":      `"burst";q=2;w=2, "hourly";q=100;w=3600`,
		"RateLimit":             `"burst";r=0;t=1, "hourly";r=57;t=20`,
	})
	// An empty bucket has no t; a name is quoted as a structured string.
	SetHeaders(h, true, Result{Limit: Limit{Name: `a"b\c`, Size: 5}, Remaining: 5})
	if got := h.Get("RateLimit"); got != `"a\"b\\c";r=5` {
		t.Fatalf("RateLimit %s", got)
	}
	if got := h.Get("RateLimit-Policy"); got != `"a\"b\\c";q=5;w=5` {
		t.Fatalf("RateLimit-Policy %s", got)
	}
	SetHeaders(h, true)
	if len(h) != 0 {
		t.Fatalf("no results left headers: %v", h)
	}
}

func equalHeaders(t *testing.T, h http.Header, want map[string]string) {
	t.Helper()
	if len(h) != len(want) {
		t.Fatalf("headers %v, want %v", h, want)
	}
	for k, v := range want {
		if got := h.Values(k); len(got) != 1 || got[0] != v {
			t.Fatalf("%s: %q, want %q (all: %v)", k, got, v, h)
		}
	}
}

// TestSeedPseudocodeOveradmits shows why the model differs from the seed's
// pseudocode: there, a drip that empties the bucket moves the timestamp
// only by the drips it used (deltaTimestamp = deltaCounter * dripRate), so
// after an idle spell each call drips the previous one away and an instant
// admits far more than the bucket's size. The model restarts the drip
// phase of an empty bucket instead.
func TestSeedPseudocodeOveradmits(t *testing.T) {
	const size, rate = 10, 1000 // ms
	counter, timestamp := 0, 0
	seedCheck := func(now int) bool {
		if counter > 0 { // 2 - Drip
			delta := min((now-timestamp)/rate, counter)
			if delta > 0 {
				timestamp += delta * rate
				counter -= delta
			}
		}
		if counter >= size { // 3 - Check
			return false
		}
		if timestamp == 0 {
			timestamp = now
		}
		counter++
		return true
	}
	lim := Limit{Size: size, DripRate: rate * time.Millisecond}
	var b Bucket
	for range 3 { // 3 calls at 1 s, then silence until 9 s
		seedCheck(1000)
		b.Check(lim, at(1000))
	}
	seedN, modelN := 0, 0
	for range 100 {
		if seedCheck(9000) {
			seedN++
		}
		if r, _ := b.Check(lim, at(9000)); !r.Blocked {
			modelN++
		}
	}
	if modelN != size || seedN != 15 {
		t.Fatalf("at 9 s the model admitted %d (want %d), the seed's pseudocode %d (want 15)", modelN, size, seedN)
	}
}
