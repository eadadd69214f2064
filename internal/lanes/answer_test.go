package lanes

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// full is an answer's headers telling bucket hash's window: 5 a window of
// 10 s, remaining left.
func full(hash string, remaining int) ratelimit.Headers {
	h := ratelimit.Headers{Limit: 5, Remaining: remaining, ResetAfter: 10 * time.Second, Bucket: hash}
	h.Has = ratelimit.Present{Limit: true, Remaining: true, ResetAfter: true, Bucket: hash != "", RateLimit: true}
	return h
}

// charged is a known bucket, its window confirmed by an answer at t0, with
// two requests taken at t0+1s and still on the wire: the counts an
// attempt's end is reported to.
func charged(t *testing.T) ratelimit.Bucket {
	var st ratelimit.Bucket
	ok, _ := st.Take(t0)
	require.True(t, ok)
	st.Observe(t0, t0, full("h", 4))
	for range 2 {
		ok, _ := st.Take(t0.Add(time.Second))
		require.True(t, ok)
	}
	require.Equal(t, 2, st.InFlight())
	return st
}

// The ways an attempt's end may be reported to a bucket, as the bucket
// would be after each, for the answer h at at of a request sent at sent.
type reports struct{ refund, observe, lost, empty, emptyLost ratelimit.Bucket }

func reportsOf(t *testing.T, at, sent time.Time, h ratelimit.Headers) reports {
	var r reports
	r.refund, r.observe, r.lost, r.empty, r.emptyLost = charged(t), charged(t), charged(t), charged(t), charged(t)
	r.refund.Refund(at)
	r.observe.Observe(at, sent, h)
	r.lost.ObserveLost(at, sent, h)
	r.empty.Observe(at, sent, ratelimit.Headers{})
	r.emptyLost.ObserveLost(at, sent, ratelimit.Headers{})
	// The cases the tests tell apart do differ.
	require.NotEqual(t, r.refund, r.observe)
	require.NotEqual(t, r.refund, r.empty)
	require.NotEqual(t, r.observe, r.empty)
	require.NotEqual(t, r.empty, r.emptyLost, "a lost answer stays in its window")
	return r
}

// Settle refunds an attempt no bucket counted, and reports the others as
// their charge says: lost (the server cannot count it later) or not.
func TestPaceSettle(t *testing.T) {
	at, sent := t0.Add(2*time.Second), t0.Add(time.Second)
	h := full("h", 1)
	r := reportsOf(t, at, sent, h)
	for _, tc := range []struct {
		name  string
		h     ratelimit.Headers
		count ratelimit.Charge
		want  ratelimit.Bucket
	}{
		{"not counted", h, ratelimit.ChargeNone, r.refund},
		{"answered", h, ratelimit.ChargeArrived, r.lost},
		{"answered without headers", ratelimit.Headers{}, ratelimit.ChargeArrived, r.emptyLost},
		{"no answer", ratelimit.Headers{}, ratelimit.ChargeUnknown, r.empty},
		{"no answer, headers", h, ratelimit.ChargeUnknown, r.observe},
	} {
		p := Pace{State: charged(t)}
		p.Settle(at, sent, tc.h, tc.count)
		assert.Equal(t, tc.want, p.State, tc.name)
	}
}

// A first pioneer's holds: each refunded when the attempt was not counted;
// otherwise observed in the bucket the answer names (a hold of another
// major is another bucket), refunded in the others, kept charged (no
// headers) in all while the answer named none. Holds are followed to the
// lane that owns them now.
func TestSettleHolds(t *testing.T) {
	at, sent := t0.Add(2*time.Second), t0.Add(time.Second)
	const major = "channel_id=1"
	mine, theirs := routes.BucketKey("h", major), routes.BucketKey("g", major)
	named := full("h", 1)
	r := reportsOf(t, at, sent, named)
	holds := func() (hs []*lane, merged *lane) {
		a := &lane{Key: mine}
		b := &lane{Key: theirs}
		other := &lane{Key: routes.BucketKey("h", "channel_id=2")}
		merged = &lane{Key: "GET /x channel_id=1"}
		merged.MergedInto = a // followed: a is counted twice (two holds)
		for _, l := range []*lane{a, b, other, merged} {
			l.State = charged(t)
		}
		return []*lane{a, b, other}, merged
	}
	twice := func(report func(*ratelimit.Bucket)) ratelimit.Bucket {
		st := charged(t)
		report(&st)
		report(&st)
		return st
	}
	for _, tc := range []struct {
		name          string
		h             ratelimit.Headers
		count         ratelimit.Charge
		a, b, other   ratelimit.Bucket
		aFromTwoHolds ratelimit.Bucket
	}{
		{"not counted", named, ratelimit.ChargeNone, r.refund, r.refund, r.refund,
			twice(func(st *ratelimit.Bucket) { st.Refund(at) })},
		{"counted by h", named, ratelimit.ChargeUnknown, r.observe, r.refund, r.refund,
			twice(func(st *ratelimit.Bucket) { st.Observe(at, sent, named) })},
		{"counted by h, arrived", named, ratelimit.ChargeArrived, r.lost, r.refund, r.refund,
			twice(func(st *ratelimit.Bucket) { st.ObserveLost(at, sent, named) })},
		{"no bucket named", ratelimit.Headers{}, ratelimit.ChargeUnknown, r.empty, r.empty, r.empty,
			twice(func(st *ratelimit.Bucket) { st.Observe(at, sent, ratelimit.Headers{}) })},
		{"no bucket named, arrived", ratelimit.Headers{}, ratelimit.ChargeArrived, r.emptyLost, r.emptyLost, r.emptyLost,
			twice(func(st *ratelimit.Bucket) { st.ObserveLost(at, sent, ratelimit.Headers{}) })},
	} {
		hs, _ := holds()
		SettleHolds(hs, major, at, sent, tc.h, tc.count)
		assert.Equal(t, tc.a, hs[0].State, "%s: the named bucket", tc.name)
		assert.Equal(t, tc.b, hs[1].State, "%s: another bucket", tc.name)
		assert.Equal(t, tc.other, hs[2].State, "%s: another major's bucket", tc.name)

		hs, merged := holds()
		SettleHolds(append(hs[:1:1], merged), major, at, sent, tc.h, tc.count)
		assert.Equal(t, tc.aFromTwoHolds, hs[0].State, "%s: a merged hold reports to its owner", tc.name)
		assert.Equal(t, charged(t), merged.State, "%s: not to the merged lane", tc.name)
	}

	// An answer naming an empty bucket names none.
	hs, _ := holds()
	blank := full("", 1)
	blank.Has.Bucket = true
	SettleHolds(hs, major, at, sent, blank, ratelimit.ChargeUnknown)
	want := charged(t)
	want.Observe(at, sent, ratelimit.Headers{})
	assert.Equal(t, want, hs[1].State, "kept charged")

	SettleHolds[*item, itemRules](nil, major, at, sent, named, ratelimit.ChargeUnknown) // no holds: nothing
}

// A lane's first turn ends with an answer below 500 that is not a 429, or
// with any answer naming its bucket; not with a 5xx, a 429 or no answer.
func TestLaneAnswered(t *testing.T) {
	named := ratelimit.Headers{Has: ratelimit.Present{Bucket: true}}
	for _, tc := range []struct {
		status int
		h      ratelimit.Headers
		first  bool
	}{
		{http.StatusOK, ratelimit.Headers{}, false},
		{http.StatusNotFound, ratelimit.Headers{}, false},
		{499, ratelimit.Headers{}, false},
		{500, ratelimit.Headers{}, true},
		{http.StatusTooManyRequests, ratelimit.Headers{}, true},
		{0, ratelimit.Headers{}, true},
		{500, named, false},
		{http.StatusTooManyRequests, named, false},
		{0, named, false},
	} {
		l := &lane{First: true}
		l.Answered(tc.h, tc.status)
		assert.Equal(t, tc.first, l.First, "%d %v", tc.status, tc.h.Has.Bucket)
	}
}

// The window is the longest Reset-After seen, a 429's (its pause) aside.
func TestPaceWiden(t *testing.T) {
	ra := func(d time.Duration) ratelimit.Headers {
		return ratelimit.Headers{ResetAfter: d, Has: ratelimit.Present{ResetAfter: true}}
	}
	p := Pace{Window: 2 * time.Second}
	p.Widen(ra(time.Second), http.StatusOK)
	assert.Equal(t, 2*time.Second, p.Window, "shorter")
	p.Widen(ra(2*time.Second), http.StatusOK)
	assert.Equal(t, 2*time.Second, p.Window, "as long")
	p.Widen(ra(9*time.Second), http.StatusTooManyRequests)
	assert.Equal(t, 2*time.Second, p.Window, "a 429's")
	p.Widen(ratelimit.Headers{ResetAfter: 9 * time.Second}, http.StatusOK)
	assert.Equal(t, 2*time.Second, p.Window, "not present")
	p.Widen(ra(3*time.Second), 0)
	assert.Equal(t, 3*time.Second, p.Window, "longer")
	p.Widen(ra(4*time.Second), 500)
	assert.Equal(t, 4*time.Second, p.Window, "a 5xx's")
}

// A 429 pauses its lane for its wait: a shared or sublimit one makes it
// serial too; a user one may teach the margin (LateReopen first); a ban or
// a global one leaves it alone.
func TestLaneLimited(t *testing.T) {
	at, sent, wait := t0.Add(2*time.Second), t0.Add(time.Second), 3*time.Second
	// A window the bucket reopened itself, that the server reopened later:
	// a user 429 there teaches a margin.
	reopened := func() ratelimit.Bucket {
		st := charged(t)
		st.Observe(at, sent, full("h", 0))
		st.Observe(at, sent, full("h", 0))
		ok, _ := st.Take(t0.Add(12 * time.Second))
		require.True(t, ok, "refilled")
		return st
	}
	late := t0.Add(12*time.Second + 100*time.Millisecond)
	user := reopened()
	user.LateReopen(late, t0.Add(12*time.Second), wait)
	user.Pause(late.Add(wait))
	paused := reopened()
	paused.Pause(late.Add(wait))
	require.NotEqual(t, user, paused, "the margin is learned")

	for _, tc := range []struct {
		pause  ratelimit.Pause
		want   ratelimit.Bucket
		serial bool
	}{
		{ratelimit.PauseBucket, user, false},
		{ratelimit.PauseSerial, paused, true},
		{ratelimit.PauseBan, reopened(), false},
		{ratelimit.PauseGlobal, reopened(), false},
	} {
		l := &lane{}
		l.State = reopened()
		l.Limited(ratelimit.Outcome{Pause: tc.pause, Wait: wait}, late, t0.Add(12*time.Second))
		assert.Equal(t, tc.want, l.State, "%v", tc.pause)
		assert.Equal(t, tc.serial, l.Serial, "%v", tc.pause)
	}
}
