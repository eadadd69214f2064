package ratelimit

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// t0 is the fake "now" of the tests. It carries no monotonic reading, which
// is fine: tests only add durations to it.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestParseHeadersFull(t *testing.T) {
	h := hdr(
		"X-RateLimit-Limit", "5",
		"X-RateLimit-Remaining", "4",
		"X-RateLimit-Reset", "1470173023.123",
		"X-RateLimit-Reset-After", "64.57",
		"X-RateLimit-Bucket", "abcd1234",
		"X-RateLimit-Global", "true",
		"X-RateLimit-Scope", "shared",
		"Retry-After", "65",
	)
	got, err := ParseHeaders(h, t0)
	require.NoError(t, err)
	assert.Equal(t, Headers{
		Limit:      5,
		Remaining:  4,
		ResetAfter: 64*time.Second + 570*time.Millisecond,
		Reset:      time.Unix(1470173023, 123_000_000),
		Bucket:     "abcd1234",
		Global:     true,
		Scope:      ScopeShared,
		RetryAfter: 65 * time.Second,
		Has:        Present{true, true, true, true, true, true, true, true, true},
	}, got)
}

func TestParseHeadersEmpty(t *testing.T) {
	got, err := ParseHeaders(http.Header{"Content-Type": {"application/json"}}, t0)
	require.NoError(t, err)
	assert.Equal(t, Headers{}, got)

	got, err = ParseHeaders(nil, t0)
	require.NoError(t, err)
	assert.Equal(t, Headers{}, got)
}

func TestParseHeadersRules(t *testing.T) {
	tests := []struct {
		name    string
		header  string
		value   string
		extra   []string // more header pairs
		check   func(t *testing.T, h Headers)
		wantErr bool
	}{
		// Reset-After precision.
		{name: "reset-after fraction kept", header: "X-RateLimit-Reset-After", value: "0.001",
			check: func(t *testing.T, h Headers) { assert.Equal(t, time.Millisecond, h.ResetAfter) }},
		{name: "reset-after nanoseconds", header: "X-RateLimit-Reset-After", value: "1.000000001",
			check: func(t *testing.T, h Headers) { assert.Equal(t, time.Second+1, h.ResetAfter) }},
		{name: "reset-after sub-ns rounds up", header: "X-RateLimit-Reset-After", value: "0.0000000001",
			check: func(t *testing.T, h Headers) { assert.Equal(t, time.Duration(1), h.ResetAfter) }},
		{name: "reset-after sub-ns rounding carries", header: "X-RateLimit-Reset-After", value: "0.9999999999",
			check: func(t *testing.T, h Headers) { assert.Equal(t, time.Second, h.ResetAfter) }},
		{name: "reset-after integer", header: "X-RateLimit-Reset-After", value: "3",
			check: func(t *testing.T, h Headers) { assert.Equal(t, 3*time.Second, h.ResetAfter) }},
		{name: "reset-after leading dot", header: "X-RateLimit-Reset-After", value: ".5",
			check: func(t *testing.T, h Headers) { assert.Equal(t, 500*time.Millisecond, h.ResetAfter) }},
		{name: "reset-after zero", header: "X-RateLimit-Reset-After", value: "0.000",
			check: func(t *testing.T, h Headers) { assert.True(t, h.Has.ResetAfter); assert.Zero(t, h.ResetAfter) }},
		{name: "reset-after minus zero", header: "X-RateLimit-Reset-After", value: "-0",
			check: func(t *testing.T, h Headers) { assert.True(t, h.Has.ResetAfter); assert.Zero(t, h.ResetAfter) }},
		{name: "reset-after exactly MaxWait", header: "X-RateLimit-Reset-After", value: "3600",
			check: func(t *testing.T, h Headers) { assert.Equal(t, MaxWait, h.ResetAfter) }},
		{name: "reset-after surrounding space", header: "X-RateLimit-Reset-After", value: " 2.5 ",
			check: func(t *testing.T, h Headers) { assert.Equal(t, 2500*time.Millisecond, h.ResetAfter) }},

		// Hostile durations.
		{name: "reset-after negative", header: "X-RateLimit-Reset-After", value: "-1.5", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.True(t, h.Has.ResetAfter); assert.Zero(t, h.ResetAfter) }},
		{name: "reset-after just above MaxWait", header: "X-RateLimit-Reset-After", value: "3600.000000001", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.Equal(t, MaxWait, h.ResetAfter) }},
		{name: "reset-after huge", header: "X-RateLimit-Reset-After", value: "99999999999999999999999999", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.Equal(t, MaxWait, h.ResetAfter) }},
		{name: "reset-after NaN", header: "X-RateLimit-Reset-After", value: "NaN", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.ResetAfter); assert.Zero(t, h.ResetAfter) }},
		{name: "reset-after Inf", header: "X-RateLimit-Reset-After", value: "+Inf", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.ResetAfter) }},
		{name: "reset-after exponent", header: "X-RateLimit-Reset-After", value: "1e3", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.ResetAfter) }},
		{name: "reset-after hex", header: "X-RateLimit-Reset-After", value: "0x10", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.ResetAfter) }},
		{name: "reset-after unit", header: "X-RateLimit-Reset-After", value: "5s", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.ResetAfter) }},
		{name: "reset-after lone dot", header: "X-RateLimit-Reset-After", value: ".", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.ResetAfter) }},
		{name: "reset-after too long", header: "X-RateLimit-Reset-After", value: "1." + strings.Repeat("0", 80), wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.ResetAfter) }},

		// Limit and Remaining.
		{name: "limit zero", header: "X-RateLimit-Limit", value: "0", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.Limit) }},
		{name: "limit negative", header: "X-RateLimit-Limit", value: "-5", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.Limit) }},
		{name: "limit decimal", header: "X-RateLimit-Limit", value: "5.0", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.Limit) }},
		{name: "limit huge", header: "X-RateLimit-Limit", value: "123456789012345678901234567890", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.Equal(t, MaxLimit, h.Limit) }},
		{name: "remaining negative", header: "X-RateLimit-Remaining", value: "-1", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.True(t, h.Has.Remaining); assert.Zero(t, h.Remaining) }},
		{name: "remaining garbage", header: "X-RateLimit-Remaining", value: "lots", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.Remaining) }},
		{name: "remaining above limit", header: "X-RateLimit-Remaining", value: "9", extra: []string{"X-RateLimit-Limit", "5"}, wantErr: true,
			check: func(t *testing.T, h Headers) { assert.Equal(t, 5, h.Remaining); assert.Equal(t, 5, h.Limit) }},
		{name: "remaining huge without limit", header: "X-RateLimit-Remaining", value: "99999999999", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.Equal(t, MaxLimit, h.Remaining) }},
		{name: "remaining zero", header: "X-RateLimit-Remaining", value: "0",
			check: func(t *testing.T, h Headers) { assert.True(t, h.Has.Remaining); assert.Zero(t, h.Remaining) }},

		// Reset (informational).
		{name: "reset negative", header: "X-RateLimit-Reset", value: "-1", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.Reset) }},
		{name: "reset far future", header: "X-RateLimit-Reset", value: "1" + strings.Repeat("0", 20), wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.Reset) }},

		// Bucket.
		{name: "bucket with space", header: "X-RateLimit-Bucket", value: "ab cd", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.Bucket) }},
		{name: "bucket too long", header: "X-RateLimit-Bucket", value: strings.Repeat("a", MaxBucketLength+1), wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.Bucket) }},
		{name: "bucket non-ascii", header: "X-RateLimit-Bucket", value: "abç", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.Bucket) }},

		// Global and scope.
		{name: "global false", header: "X-RateLimit-Global", value: "false",
			check: func(t *testing.T, h Headers) { assert.True(t, h.Has.Global); assert.False(t, h.Global) }},
		{name: "global True", header: "X-RateLimit-Global", value: "True",
			check: func(t *testing.T, h Headers) { assert.True(t, h.Global) }},
		{name: "global garbage taken as true", header: "X-RateLimit-Global", value: "yes", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.True(t, h.Has.Global); assert.True(t, h.Global) }},
		{name: "scope user", header: "X-RateLimit-Scope", value: "user",
			check: func(t *testing.T, h Headers) { assert.Equal(t, ScopeUser, h.Scope) }},
		{name: "scope GLOBAL", header: "X-RateLimit-Scope", value: "GLOBAL",
			check: func(t *testing.T, h Headers) { assert.Equal(t, ScopeGlobal, h.Scope) }},
		{name: "scope unknown", header: "X-RateLimit-Scope", value: "route", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.Scope); assert.Equal(t, ScopeNone, h.Scope) }},

		// Retry-After.
		{name: "retry-after integer", header: "Retry-After", value: "65",
			check: func(t *testing.T, h Headers) { assert.Equal(t, 65*time.Second, h.RetryAfter) }},
		{name: "retry-after decimal", header: "Retry-After", value: "1.25",
			check: func(t *testing.T, h Headers) { assert.Equal(t, 1250*time.Millisecond, h.RetryAfter) }},
		{name: "retry-after date", header: "Retry-After", value: t0.Add(90 * time.Second).Format(http.TimeFormat),
			check: func(t *testing.T, h Headers) { assert.Equal(t, 90*time.Second, h.RetryAfter) }},
		{name: "retry-after date in past", header: "Retry-After", value: t0.Add(-time.Hour).Format(http.TimeFormat),
			check: func(t *testing.T, h Headers) { assert.True(t, h.Has.RetryAfter); assert.Zero(t, h.RetryAfter) }},
		{name: "retry-after date far future", header: "Retry-After", value: t0.Add(48 * time.Hour).Format(http.TimeFormat), wantErr: true,
			check: func(t *testing.T, h Headers) { assert.Equal(t, MaxWait, h.RetryAfter) }},
		{name: "retry-after garbage", header: "Retry-After", value: "soon", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.False(t, h.Has.RetryAfter) }},
		{name: "retry-after negative", header: "Retry-After", value: "-3", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.True(t, h.Has.RetryAfter); assert.Zero(t, h.RetryAfter) }},
		{name: "retry-after huge", header: "Retry-After", value: "86400", wantErr: true,
			check: func(t *testing.T, h Headers) { assert.Equal(t, MaxWait, h.RetryAfter) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := hdr(append([]string{tt.header, tt.value}, tt.extra...)...)
			got, err := ParseHeaders(h, t0)
			if tt.wantErr {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrMalformedHeader)
				var he *HeaderError
				require.ErrorAs(t, err, &he)
				assert.NotEmpty(t, he.Reason)
				assert.LessOrEqual(t, len(he.Value), 64)
			} else {
				require.NoError(t, err)
			}
			tt.check(t, got)
			assertBounded(t, got)
		})
	}
}

func TestParseHeadersPresenceOfAnyRateLimitHeader(t *testing.T) {
	got, err := ParseHeaders(hdr("X-RateLimit-Limit", "bogus"), t0)
	require.Error(t, err)
	assert.True(t, got.Has.RateLimit, "a malformed X-RateLimit-* header still shows Discord answered")
	assert.False(t, got.Has.Limit)

	got, _ = ParseHeaders(http.Header{"x-ratelimit-something-new": {"1"}}, t0)
	assert.True(t, got.Has.RateLimit)

	got, _ = ParseHeaders(hdr("Retry-After", "5"), t0)
	assert.False(t, got.Has.RateLimit)
}

func TestParseHeadersSeveralErrors(t *testing.T) {
	got, err := ParseHeaders(hdr(
		"X-RateLimit-Limit", "-1",
		"X-RateLimit-Remaining", "NaN",
		"X-RateLimit-Reset-After", "Inf",
		"X-RateLimit-Bucket", "abc",
	), t0)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrMalformedHeader)
	assert.Equal(t, 3, strings.Count(err.Error(), "ratelimit: malformed"))
	assert.Equal(t, "abc", got.Bucket, "valid headers are still parsed")
}

func TestHeaderErrorMessage(t *testing.T) {
	_, err := ParseHeaders(hdr("X-RateLimit-Remaining", "-1"), t0)
	assert.EqualError(t, err, `ratelimit: malformed X-RateLimit-Remaining header "-1": negative; clamped to 0`)
	assert.True(t, errors.Is(err, ErrMalformedHeader))
}

func TestScopeString(t *testing.T) {
	assert.Equal(t, "none", ScopeNone.String())
	assert.Equal(t, "user", ScopeUser.String())
	assert.Equal(t, "global", ScopeGlobal.String())
	assert.Equal(t, "shared", ScopeShared.String())
	assert.Equal(t, "Scope(9)", Scope(9).String())
}

func TestParseHeadersDoesNotAllocate(t *testing.T) {
	h := hdr(
		"X-RateLimit-Limit", "5",
		"X-RateLimit-Remaining", "4",
		"X-RateLimit-Reset", "1470173023.123",
		"X-RateLimit-Reset-After", "64.57",
		"X-RateLimit-Bucket", "abcd1234",
	)
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = ParseHeaders(h, t0)
	})
	assert.Zero(t, allocs)
}

// assertBounded checks the invariants every parsed Headers must meet.
func assertBounded(t testing.TB, h Headers) {
	t.Helper()
	for _, d := range []time.Duration{h.ResetAfter, h.RetryAfter} {
		if d < 0 || d > MaxWait {
			t.Fatalf("duration %v out of [0, %v]", d, MaxWait)
		}
	}
	if h.Limit < 0 || h.Limit > MaxLimit || h.Remaining < 0 || h.Remaining > MaxLimit {
		t.Fatalf("count out of range: limit %d remaining %d", h.Limit, h.Remaining)
	}
	if h.Has.Limit && h.Limit < 1 {
		t.Fatalf("present limit %d < 1", h.Limit)
	}
	if h.Has.Limit && h.Has.Remaining && h.Remaining > h.Limit {
		t.Fatalf("remaining %d > limit %d", h.Remaining, h.Limit)
	}
	if len(h.Bucket) > MaxBucketLength {
		t.Fatalf("bucket too long: %d", len(h.Bucket))
	}
}
