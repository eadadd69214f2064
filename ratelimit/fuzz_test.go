package ratelimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"
)

// FuzzParseHeaders feeds arbitrary header values and bodies to ParseHeaders
// and Classify, and a Bucket. Nothing may panic, every duration must be in
// [0, MaxWait], counts must be consistent, and a bucket must keep its
// invariants.
func FuzzParseHeaders(f *testing.F) {
	f.Add("5", "4", "1.5", "1470173023.123", "abcd1234", "", "", "", 200, []byte(nil))
	f.Add("10", "9", "64.57", "1470173023.123", "abcd1234", "false", "shared", "1337", 429,
		[]byte(`{"message": "You are being rate limited.", "retry_after": 1336.57, "global": false, "code": 40062}`))
	f.Add("", "", "", "", "", "true", "global", "65", 429,
		[]byte(`{"message": "You are being rate limited.", "retry_after": 64.57, "global": true}`))
	f.Add("", "", "", "", "", "", "", "", 429, []byte("<html>error code: 1015</html>"))
	f.Add("-1", "NaN", "+Inf", "-5", "a b", "maybe", "route", "Wed, 21 Oct 2015 07:28:00 GMT", 429, []byte(`{"retry_after": 1e999}`))
	f.Fuzz(func(t *testing.T, limit, remaining, resetAfter, reset, bucket, global, scope, retryAfter string, status int, body []byte) {
		h := http.Header{}
		set := func(k, v string) {
			if v != "" {
				h[k] = []string{v}
			}
		}
		set("X-Ratelimit-Limit", limit)
		set("X-Ratelimit-Remaining", remaining)
		set("X-Ratelimit-Reset-After", resetAfter)
		set("X-Ratelimit-Reset", reset)
		set("X-Ratelimit-Bucket", bucket)
		set("X-Ratelimit-Global", global)
		set("X-Ratelimit-Scope", scope)
		set("Retry-After", retryAfter)

		got, err := ParseHeaders(h, t0)
		if err != nil && !errors.Is(err, ErrMalformedHeader) {
			t.Fatalf("error %v does not wrap ErrMalformedHeader", err)
		}
		assertBounded(t, got)

		v := Classify(status, got, body)
		if v.Wait < 0 || v.Wait > MaxWait {
			t.Fatalf("wait %v out of [0, %v]", v.Wait, MaxWait)
		}
		if (status == http.StatusTooManyRequests) != (v.Kind != OK) {
			t.Fatalf("status %d classified %v", status, v.Kind)
		}
		_ = CountsAsInvalid(status, v)

		var b Bucket
		now := t0
		for i := range 3 {
			if ok, wait := b.Take(now); !ok && (wait <= 0 || wait > MaxWait+PioneerTimeout) {
				t.Fatalf("refused with wait %v", wait)
			}
			now = now.Add(time.Duration(i) * 10 * time.Millisecond)
			b.Observe(now, t0, got)
			if b.Known && (b.Limit < 1 || b.Remaining < 0 || b.Remaining > b.Limit) {
				t.Fatalf("bucket invariant broken: %+v", b)
			}
			if b.ResetAt.Sub(now) > MaxWait+WindowTolerance {
				t.Fatalf("ResetAt %v beyond MaxWait", b.ResetAt.Sub(now))
			}
		}
	})
}

// FuzzClassify feeds 429s with arbitrary rate-limit headers and bodies to
// Classify. A 429 with any X-RateLimit-* header is Discord's, never a
// CloudflareBan, and a body that is not JSON (plain text, HTML, truncated)
// changes nothing: the headers decide. A 429 without one is a CloudflareBan
// unless its body is JSON with a usable retry_after. Every wait is in
// [0, MaxWait].
func FuzzClassify(f *testing.F) {
	f.Add("5", "0", "1.5", "1470173023.123", "abcd1234", "", "user", "", []byte("You are being rate limited."))
	f.Add("10", "9", "64.57", "", "", "", "shared", "1337", []byte("<html>Too Many Requests</html>"))
	f.Add("", "", "", "", "", "true", "global", "65", []byte(`{"retry_after": 64.57, "global": true}`))
	f.Add("", "", "", "", "", "", "", "", []byte("<!DOCTYPE html><html>error code: 1015</html>"))
	f.Add("", "", "", "", "", "", "", "120", []byte(`{"retry_after": 2.5, "glo`))
	f.Add("", "", "", "", "", "", "", "", []byte(`{"retry_after": 2.5, "global": false}`))
	f.Add("-1", "NaN", "+Inf", "-5", "a b", "maybe", "route", "Wed, 21 Oct 2015 07:28:00 GMT", []byte(`{"retry_after": 1e999}`))
	f.Fuzz(func(t *testing.T, limit, remaining, resetAfter, reset, bucket, global, scope, retryAfter string, body []byte) {
		h := http.Header{}
		set := func(k, v string) {
			if v != "" {
				h[k] = []string{v}
			}
		}
		set("X-Ratelimit-Limit", limit)
		set("X-Ratelimit-Remaining", remaining)
		set("X-Ratelimit-Reset-After", resetAfter)
		set("X-Ratelimit-Reset", reset)
		set("X-Ratelimit-Bucket", bucket)
		set("X-Ratelimit-Global", global)
		set("X-Ratelimit-Scope", scope)
		set("Retry-After", retryAfter)
		discord := len(h) > 1 || len(h) == 1 && retryAfter == ""

		got, _ := ParseHeaders(h, t0)
		v := Classify(http.StatusTooManyRequests, got, body)
		if v.Wait < 0 || v.Wait > MaxWait {
			t.Fatalf("wait %v out of [0, %v]", v.Wait, MaxWait)
		}
		if v.Kind == OK {
			t.Fatal("a 429 classified OK")
		}
		if discord && v.Kind == CloudflareBan {
			t.Fatalf("a 429 with rate-limit headers %v taken for a ban", h)
		}
		if !json.Valid(bytes.TrimSpace(body)) {
			if w := Classify(http.StatusTooManyRequests, got, nil); v != w {
				t.Fatalf("a non-JSON body changed the verdict: %+v, without it %+v", v, w)
			}
			if !discord && v.Kind != CloudflareBan {
				t.Fatalf("no rate-limit header and no JSON, classified %v", v.Kind)
			}
		}
		if got.Scope == ScopeShared && !got.Global && v.Kind != SharedLimit && v.Kind != GlobalLimit {
			t.Fatalf("shared scope classified %v", v.Kind)
		}
		if got.Global && v.Kind != GlobalLimit {
			t.Fatalf("X-RateLimit-Global classified %v", v.Kind)
		}
		if v2 := Classify(http.StatusOK, got, body); v2 != (Verdict{Kind: OK}) {
			t.Fatalf("a 200 classified %+v", v2)
		}
	})
}
