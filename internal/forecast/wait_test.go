package forecast

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// MaxWait is the smallest of the configured limit, the request's own and
// the time to its deadline; 0 is no limit for the first two.
func TestMaxWait(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		name            string
		configured, own time.Duration
		deadline        time.Duration // from now
		hasDeadline     bool
		want            time.Duration
	}{
		{name: "none", want: 0},
		{name: "configured alone", configured: 5 * s, want: 5 * s},
		{name: "its own alone", own: 3 * s, want: 3 * s},
		{name: "its own when smaller", configured: 5 * s, own: 3 * s, want: 3 * s},
		{name: "the configured when smaller", configured: 2 * s, own: 3 * s, want: 2 * s},
		{name: "the deadline alone", deadline: 4 * s, hasDeadline: true, want: 4 * s},
		{name: "the deadline when nearer", configured: 5 * s, own: 6 * s, deadline: 4 * s, hasDeadline: true, want: 4 * s},
		{name: "the limits when the deadline is later", configured: 5 * s, own: 3 * s, deadline: 4 * s, hasDeadline: true, want: 3 * s},
		{name: "a deadline only when there is one", configured: 5 * s, deadline: 1 * s, want: 5 * s},
		{name: "a deadline passed: not positive", configured: 5 * s, deadline: -s, hasDeadline: true, want: -s},
	} {
		got := MaxWait(tc.configured, tc.own, etaNow.Add(tc.deadline), tc.hasDeadline, etaNow)
		assert.Equal(t, tc.want, got, tc.name)
	}
}

// Weigh takes the longest part (the bucket's on ties, then the declared
// window's), the global pause only for a request that needs a global
// slot; a declared window is a forecast; it refuses a wait over a positive
// limit only.
func TestWaitsWeigh(t *testing.T) {
	const s = time.Second
	type out struct {
		wait          time.Duration
		by            string
		known, refuse bool
	}
	for _, tc := range []struct {
		name string
		in   Waits
		want out
	}{
		{name: "nothing to wait for", in: Waits{Known: true}, want: out{0, BoundBucket, true, false}},
		{name: "the bucket, unknown", in: Waits{Bucket: s}, want: out{s, BoundBucket, false, false}},
		{name: "the bucket, known", in: Waits{Bucket: s, Known: true}, want: out{s, BoundBucket, true, false}},
		{name: "the declared window, longer: a forecast", in: Waits{Bucket: s, Declared: 2 * s}, want: out{2 * s, BoundDeclared, true, false}},
		{name: "the bucket on a tie with the declared window", in: Waits{Bucket: s, Declared: s}, want: out{s, BoundBucket, false, false}},
		{name: "the global pause, longest", in: Waits{Bucket: s, Known: true, Declared: 2 * s, Global: 3 * s}, want: out{3 * s, BoundGlobal, true, false}},
		{name: "the global pause does not make a forecast", in: Waits{Bucket: s, Global: 3 * s}, want: out{3 * s, BoundGlobal, false, false}},
		{name: "the declared window on a tie with the global pause", in: Waits{Declared: 2 * s, Global: 2 * s}, want: out{2 * s, BoundDeclared, true, false}},
		{name: "exempt: no global pause", in: Waits{Bucket: s, Global: 3 * s, Exempt: true}, want: out{s, BoundBucket, false, false}},
		{name: "over the limit: refused", in: Waits{Bucket: 2 * s, Limit: s}, want: out{2 * s, BoundBucket, false, true}},
		{name: "at the limit: not refused", in: Waits{Bucket: s, Limit: s}, want: out{s, BoundBucket, false, false}},
		{name: "no limit", in: Waits{Bucket: time.Hour}, want: out{time.Hour, BoundBucket, false, false}},
		{name: "a limit not positive is none", in: Waits{Bucket: s, Limit: -s}, want: out{s, BoundBucket, false, false}},
		{name: "refused by the global pause", in: Waits{Global: 2 * s, Limit: s}, want: out{2 * s, BoundGlobal, false, true}},
		{name: "refused by the declared window", in: Waits{Bucket: s / 2, Declared: 2 * s, Limit: s}, want: out{2 * s, BoundDeclared, true, true}},
	} {
		var got out
		got.wait, got.by, got.known, got.refuse = tc.in.Weigh()
		assert.Equal(t, tc.want, got, tc.name)
	}
}
