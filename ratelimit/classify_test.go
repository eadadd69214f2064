package ratelimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		headers http.Header
		body    string
		want    Verdict
		invalid bool
	}{
		{
			name:   "200 is OK",
			status: 200,
			headers: hdr("X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0",
				"X-RateLimit-Reset-After", "1.5"),
			want: Verdict{Kind: OK},
		},
		{
			name:   "documented user 429 with full headers",
			status: 429,
			headers: hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "0",
				"X-RateLimit-Reset", "1470173023.123", "X-RateLimit-Reset-After", "64.57",
				"X-RateLimit-Bucket", "abcd1234", "X-RateLimit-Scope", "user", "Retry-After", "65"),
			body:    `{"message": "You are being rate limited.", "retry_after": 64.57, "global": false}`,
			want:    Verdict{Kind: UserLimit, Wait: 64570 * time.Millisecond},
			invalid: true,
		},
		{
			name:   "documented shared 429",
			status: 429,
			headers: hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "9",
				"X-RateLimit-Reset", "1470173023.123", "X-RateLimit-Reset-After", "64.57",
				"X-RateLimit-Bucket", "abcd1234", "X-RateLimit-Scope", "shared", "Retry-After", "1337"),
			body:    `{"message": "You are being rate limited.", "retry_after": 1336.57, "global": false, "code": 40062}`,
			want:    Verdict{Kind: SharedLimit, Wait: 1336570 * time.Millisecond, Code: 40062},
			invalid: false,
		},
		{
			name:    "documented global 429: no bucket headers",
			status:  429,
			headers: hdr("Retry-After", "65", "X-RateLimit-Global", "true", "X-RateLimit-Scope", "global"),
			body:    `{"message": "You are being rate limited.", "retry_after": 64.57, "global": true}`,
			want:    Verdict{Kind: GlobalLimit, Wait: 64570 * time.Millisecond},
			invalid: true,
		},
		{
			name:    "global 429 without a body uses Retry-After",
			status:  429,
			headers: hdr("Retry-After", "3", "X-RateLimit-Global", "true"),
			want:    Verdict{Kind: GlobalLimit, Wait: 3 * time.Second},
			invalid: true,
		},
		{
			name:    "global from scope alone",
			status:  429,
			headers: hdr("X-RateLimit-Scope", "global"),
			body:    `{"retry_after": 0.5}`,
			want:    Verdict{Kind: GlobalLimit, Wait: 500 * time.Millisecond},
			invalid: true,
		},
		{
			name:    "global from body alone",
			status:  429,
			headers: hdr("Retry-After", "1"),
			body:    `{"message": "You are being rate limited.", "retry_after": 0.75, "global": true}`,
			want:    Verdict{Kind: GlobalLimit, Wait: 750 * time.Millisecond},
			invalid: true,
		},
		{
			name:    "Cloudflare ban: html, no headers",
			status:  429,
			headers: hdr("Content-Type", "text/html"),
			body:    "<!DOCTYPE html><html><body>error code: 1015</body></html>",
			want:    Verdict{Kind: CloudflareBan, Wait: DefaultBanWait},
			invalid: true,
		},
		{
			name:    "Cloudflare ban with Retry-After",
			status:  429,
			headers: hdr("Content-Type", "text/plain", "Retry-After", "120"),
			body:    "error code: 1015",
			want:    Verdict{Kind: CloudflareBan, Wait: 120 * time.Second},
			invalid: true,
		},
		{
			name:    "Cloudflare: JSON without retry_after and no headers",
			status:  429,
			body:    `{"message": "blocked", "code": 0}`,
			want:    Verdict{Kind: CloudflareBan, Wait: DefaultBanWait},
			invalid: true,
		},
		{
			name:    "Cloudflare: empty body and no headers",
			status:  429,
			want:    Verdict{Kind: CloudflareBan, Wait: DefaultBanWait},
			invalid: true,
		},
		{
			name:    "Cloudflare: truncated JSON with retry_after and no headers",
			status:  429,
			body:    `{"message": "You are being rate limited.", "retry_after": 2.5, "glo`,
			want:    Verdict{Kind: CloudflareBan, Wait: DefaultBanWait},
			invalid: true,
		},
		{
			name:    "Cloudflare: Retry-After alone is not a rate-limit header",
			status:  429,
			headers: hdr("Retry-After", "30"),
			want:    Verdict{Kind: CloudflareBan, Wait: 30 * time.Second},
			invalid: true,
		},
		{
			name:   "HTML body with headers is Discord's, by its headers",
			status: 429,
			headers: hdr("Content-Type", "text/html", "X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0",
				"X-RateLimit-Reset-After", "1"),
			body:    "<html>Too Many Requests</html>",
			want:    Verdict{Kind: UserLimit, Wait: time.Second},
			invalid: true,
		},
		{
			name:   "plain-text body with user scope",
			status: 429,
			headers: hdr("Content-Type", "text/plain", "X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0",
				"X-RateLimit-Reset-After", "1.25", "X-RateLimit-Bucket", "abcd1234", "X-RateLimit-Scope", "user"),
			body:    "You are being rate limited.",
			want:    Verdict{Kind: UserLimit, Wait: 1250 * time.Millisecond},
			invalid: true,
		},
		{
			name:   "plain-text body: Retry-After before Reset-After",
			status: 429,
			headers: hdr("X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0",
				"X-RateLimit-Reset-After", "1.25", "Retry-After", "2"),
			body:    "429 Too Many Requests",
			want:    Verdict{Kind: UserLimit, Wait: 2 * time.Second},
			invalid: true,
		},
		{
			name:    "plain-text body with X-RateLimit-Global",
			status:  429,
			headers: hdr("X-RateLimit-Global", "true", "Retry-After", "4"),
			body:    "You are being rate limited.",
			want:    Verdict{Kind: GlobalLimit, Wait: 4 * time.Second},
			invalid: true,
		},
		{
			name:    "plain-text body with global scope and no wait",
			status:  429,
			headers: hdr("X-RateLimit-Scope", "global"),
			body:    "You are being rate limited.",
			want:    Verdict{Kind: GlobalLimit, Wait: DefaultRetryWait},
			invalid: true,
		},
		{
			name:   "plain-text body with shared scope",
			status: 429,
			headers: hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "9",
				"X-RateLimit-Reset-After", "64.57", "X-RateLimit-Scope", "shared", "Retry-After", "1337"),
			body:    "You are being rate limited.",
			want:    Verdict{Kind: SharedLimit, Wait: 1337 * time.Second},
			invalid: false,
		},
		{
			name:   "plain-text body with remaining: sublimit",
			status: 429,
			headers: hdr("X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "3",
				"X-RateLimit-Reset-After", "4.5", "X-RateLimit-Scope", "user", "Retry-After", "2"),
			body:    "slow down",
			want:    Verdict{Kind: Sublimit, Wait: 4500 * time.Millisecond},
			invalid: true,
		},
		{
			name:   "empty body with unscoped headers",
			status: 429,
			headers: hdr("X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0",
				"X-RateLimit-Reset-After", "0.75", "X-RateLimit-Bucket", "abcd1234"),
			want:    Verdict{Kind: UserLimit, Wait: 750 * time.Millisecond},
			invalid: true,
		},
		{
			name:    "empty body with shared scope",
			status:  429,
			headers: hdr("X-RateLimit-Scope", "shared", "Retry-After", "20"),
			want:    Verdict{Kind: SharedLimit, Wait: 20 * time.Second},
			invalid: false,
		},
		{
			name:    "a bucket header alone makes it Discord's",
			status:  429,
			headers: hdr("X-RateLimit-Bucket", "abcd1234"),
			body:    "error",
			want:    Verdict{Kind: UserLimit, Wait: DefaultRetryWait},
			invalid: true,
		},
		{
			name:    "a reset header alone makes it Discord's",
			status:  429,
			headers: hdr("X-RateLimit-Reset", "1470173023.123", "Retry-After", "3"),
			body:    "<html></html>",
			want:    Verdict{Kind: UserLimit, Wait: 3 * time.Second},
			invalid: true,
		},
		{
			name:   "truncated JSON with headers: the headers decide",
			status: 429,
			headers: hdr("X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0",
				"X-RateLimit-Reset-After", "2.5", "X-RateLimit-Scope", "user"),
			body:    `{"message": "You are being rate limited.", "retry_after": 64.57, "glo`,
			want:    Verdict{Kind: UserLimit, Wait: 2500 * time.Millisecond},
			invalid: true,
		},
		{
			name:    "JSON retry_after and global without headers is a global limit",
			status:  429,
			body:    `{"message": "You are being rate limited.", "retry_after": 1.5, "global": true}`,
			want:    Verdict{Kind: GlobalLimit, Wait: 1500 * time.Millisecond},
			invalid: true,
		},
		{
			name:    "JSON retry_after without headers is Discord",
			status:  429,
			body:    `{"retry_after": 2.5, "global": false}`,
			want:    Verdict{Kind: UserLimit, Wait: 2500 * time.Millisecond},
			invalid: true,
		},
		{
			name:   "sublimit: user scope with remaining, reset-after further",
			status: 429,
			headers: hdr("X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "3",
				"X-RateLimit-Reset-After", "4.5", "X-RateLimit-Scope", "user"),
			body:    `{"retry_after": 1.2, "global": false}`,
			want:    Verdict{Kind: Sublimit, Wait: 4500 * time.Millisecond},
			invalid: true,
		},
		{
			name:   "sublimit: channel rename, retry_after further",
			status: 429,
			headers: hdr("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "8",
				"X-RateLimit-Reset-After", "0.4"),
			body:    `{"retry_after": 577.1, "global": false}`,
			want:    Verdict{Kind: Sublimit, Wait: 577100 * time.Millisecond},
			invalid: true,
		},
		{
			name:   "user 429 with empty body uses Retry-After",
			status: 429,
			headers: hdr("X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0",
				"X-RateLimit-Reset-After", "2", "Retry-After", "3"),
			want:    Verdict{Kind: UserLimit, Wait: 3 * time.Second},
			invalid: true,
		},
		{
			name:   "user 429 falls back to reset-after",
			status: 429,
			headers: hdr("X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0",
				"X-RateLimit-Reset-After", "2.25"),
			want:    Verdict{Kind: UserLimit, Wait: 2250 * time.Millisecond},
			invalid: true,
		},
		{
			name:    "no wait information at all",
			status:  429,
			headers: hdr("X-RateLimit-Scope", "user"),
			body:    `{"message": "?"}`,
			want:    Verdict{Kind: UserLimit, Wait: DefaultRetryWait},
			invalid: true,
		},
		{
			name:    "hostile retry_after is capped",
			status:  429,
			headers: hdr("X-RateLimit-Scope", "user"),
			body:    `{"retry_after": 1e300}`,
			want:    Verdict{Kind: UserLimit, Wait: MaxWait},
			invalid: true,
		},
		{
			name:    "negative retry_after is ignored",
			status:  429,
			headers: hdr("X-RateLimit-Scope", "user", "Retry-After", "2"),
			body:    `{"retry_after": -5}`,
			want:    Verdict{Kind: UserLimit, Wait: 2 * time.Second},
			invalid: true,
		},
		{
			name:    "string retry_after is ignored",
			status:  429,
			headers: hdr("X-RateLimit-Scope", "user", "Retry-After", "2"),
			body:    `{"retry_after": "5"}`,
			want:    Verdict{Kind: UserLimit, Wait: 2 * time.Second},
			invalid: true,
		},
		{
			name:    "JSON array body",
			status:  429,
			headers: hdr("X-RateLimit-Scope", "user", "Retry-After", "2"),
			body:    `[1,2]`,
			want:    Verdict{Kind: UserLimit, Wait: 2 * time.Second},
			invalid: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHeaders(tt.headers, t0)
			require.NoError(t, err)
			got := Classify(tt.status, h, []byte(tt.body))
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.invalid, CountsAsInvalid(tt.status, got))
		})
	}
}

func TestClassifyMalformedRateLimitHeaderIsDiscords(t *testing.T) {
	// A rate-limit header Discord sent wrong still marks Discord's limiter:
	// Cloudflare's ban page carries none.
	h, err := ParseHeaders(hdr("X-RateLimit-Scope", "route", "X-RateLimit-Remaining", "x"), t0)
	require.ErrorIs(t, err, ErrMalformedHeader)
	assert.Equal(t, Verdict{Kind: UserLimit, Wait: DefaultRetryWait}, Classify(429, h, []byte("rate limited")))

	// Headers built by hand, without Has.RateLimit, count as well.
	h = Headers{Scope: ScopeShared, Has: Present{Scope: true}}
	assert.Equal(t, Verdict{Kind: SharedLimit, Wait: DefaultRetryWait}, Classify(429, h, []byte("<html>")))
}

func TestCountsAsInvalid(t *testing.T) {
	assert.True(t, CountsAsInvalid(401, Verdict{}))
	assert.True(t, CountsAsInvalid(403, Verdict{}))
	assert.False(t, CountsAsInvalid(404, Verdict{}))
	assert.False(t, CountsAsInvalid(200, Verdict{}))
	assert.False(t, CountsAsInvalid(500, Verdict{}))
	assert.True(t, CountsAsInvalid(429, Verdict{Kind: CloudflareBan}))
	assert.False(t, CountsAsInvalid(429, Verdict{Kind: SharedLimit}))
}

func TestKindString(t *testing.T) {
	for k, s := range map[Kind]string{OK: "OK", UserLimit: "UserLimit", GlobalLimit: "GlobalLimit",
		SharedLimit: "SharedLimit", Sublimit: "Sublimit", CloudflareBan: "CloudflareBan", Kind(42): "Kind(42)"} {
		assert.Equal(t, s, k.String())
	}
}
