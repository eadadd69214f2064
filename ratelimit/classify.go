package ratelimit

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Default waits used by [Classify] when a 429 says nothing about how long to
// wait.
const (
	// DefaultRetryWait is the wait for a Discord 429 (one that carries
	// X-RateLimit-* headers or a JSON body) with no retry_after,
	// Retry-After or X-RateLimit-Reset-After.
	DefaultRetryWait = time.Second

	// DefaultBanWait is the wait after a suspected Cloudflare ban that has
	// no Retry-After header. Discord's ban page has none, and retrying at
	// once extends the ban.
	DefaultBanWait = 60 * time.Second
)

// Kind is the class of a response, as far as rate limiting is concerned.
type Kind uint8

// Kinds of response. The zero value is OK.
const (
	// OK is any response that is not a 429.
	OK Kind = iota
	// UserLimit is a 429 on the route's bucket (scope user, or no scope),
	// with the bucket exhausted: pause the bucket for Wait.
	UserLimit
	// GlobalLimit is a 429 on the bot's global limit: pause every route that
	// is not exempt for Wait.
	GlobalLimit
	// SharedLimit is a 429 on a limit shared by every user of a resource
	// (scope shared): pause the bucket for Wait. It does not count as an
	// invalid request.
	SharedLimit
	// Sublimit is a user (or unscoped) 429 while the headers still show
	// requests remaining: an undocumented per-route limit such as the
	// channel rename limit. Pause the bucket for Wait.
	Sublimit
	// CloudflareBan is a 429 that does not come from Discord's rate limiter:
	// it carries no X-RateLimit-* header and its body is not JSON with a
	// usable retry_after (Cloudflare's ban page is HTML without either).
	// A 429 with any X-RateLimit-* header is never a CloudflareBan,
	// whatever its body. Stop sending from this IP for Wait; never retry at
	// once.
	CloudflareBan
)

// String returns the kind's name, e.g. "GlobalLimit".
func (k Kind) String() string {
	switch k {
	case OK:
		return "OK"
	case UserLimit:
		return "UserLimit"
	case GlobalLimit:
		return "GlobalLimit"
	case SharedLimit:
		return "SharedLimit"
	case Sublimit:
		return "Sublimit"
	case CloudflareBan:
		return "CloudflareBan"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Scope returns the name users see for a 429 of this kind, in errors,
// logs and metrics: "user", "global", "shared", "sublimit" or "ban" ("" for
// OK).
func (k Kind) Scope() string {
	switch k {
	case UserLimit:
		return "user"
	case GlobalLimit:
		return "global"
	case SharedLimit:
		return "shared"
	case Sublimit:
		return "sublimit"
	case CloudflareBan:
		return "ban"
	}
	return ""
}

// Verdict is the outcome of [Classify].
type Verdict struct {
	// Kind is the class of the response.
	Kind Kind
	// Wait is how long to pause what Kind says to pause, in [0, MaxWait].
	// It is 0 for OK.
	Wait time.Duration
	// Code is the JSON error code of a 429 body (e.g. 40062), or 0.
	Code int
}

// Classify decides what a response means for the limiter. status is the
// HTTP status, h the result of [ParseHeaders] and body the response body (or
// its first few kilobytes; a truncated body reads as non-JSON, so callers
// should read a whole 429 body up to a sane limit such as 64 KiB).
//
// A 429 is Discord's when it carries any X-RateLimit-* header (Limit,
// Remaining, Reset, Reset-After, Bucket, Scope, Global, valid or not), or,
// without one, when its body is JSON with a usable "retry_after". Its body
// matters only if it is JSON: plain text, HTML, an empty or a truncated body
// is read as no body, and the headers decide. The rules, in order:
//
//  1. A status other than 429 is OK.
//  2. CloudflareBan when the response carries no X-RateLimit-* header and
//     the body is not JSON with a usable "retry_after". Wait is Retry-After
//     if present, else DefaultBanWait.
//  3. GlobalLimit when X-RateLimit-Global is true, the scope is global, or
//     a JSON body says "global": true, with or without bucket headers.
//  4. SharedLimit when the scope is shared.
//  5. Sublimit when the scope is user or absent and X-RateLimit-Remaining is
//     above 0. Wait is the later of the retry wait (below) and
//     X-RateLimit-Reset-After.
//  6. Otherwise UserLimit.
//
// For rules 3 to 6 the retry wait is a JSON body's retry_after (float
// seconds) if usable, else Retry-After, else X-RateLimit-Reset-After, else
// DefaultRetryWait. Every wait is capped at MaxWait.
func Classify(status int, h Headers, body []byte) Verdict {
	if status != http.StatusTooManyRequests {
		return Verdict{Kind: OK}
	}
	b := parseBody(body)
	v := Verdict{Code: b.code}

	if !hasRateLimitHeader(h) && !b.hasRetryAfter {
		v.Kind = CloudflareBan
		v.Wait = DefaultBanWait
		if h.Has.RetryAfter {
			v.Wait = h.RetryAfter
		}
		return v
	}

	wait := DefaultRetryWait
	switch {
	case b.hasRetryAfter:
		wait = b.retryAfter
	case h.Has.RetryAfter:
		wait = h.RetryAfter
	case h.Has.ResetAfter:
		wait = h.ResetAfter
	}
	v.Wait = wait

	switch {
	case h.Global || h.Scope == ScopeGlobal || b.global:
		v.Kind = GlobalLimit
	case h.Scope == ScopeShared:
		v.Kind = SharedLimit
	case h.Has.Remaining && h.Remaining > 0:
		v.Kind = Sublimit
		if h.Has.ResetAfter && h.ResetAfter > v.Wait {
			v.Wait = h.ResetAfter
		}
	default:
		v.Kind = UserLimit
	}
	v.Wait = clampWait(v.Wait)
	return v
}

// hasRateLimitHeader reports whether h comes from a response with at least
// one X-RateLimit-* header: the mark of Discord's limiter, which a
// Cloudflare ban page never carries.
func hasRateLimitHeader(h Headers) bool {
	p := h.Has
	return p.RateLimit || p.Limit || p.Remaining || p.Reset || p.ResetAfter || p.Bucket || p.Global || p.Scope
}

// CountsAsInvalid reports whether a response counts against Discord's
// invalid-request limit (10,000 per 10 minutes per IP): every 401 and 403,
// and every 429 except those of scope shared.
func CountsAsInvalid(status int, v Verdict) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		return true
	case http.StatusTooManyRequests:
		return v.Kind != SharedLimit
	}
	return false
}

// body is what Classify reads from a 429 body. A body that is not a JSON
// object (plain text, HTML, truncated JSON) reads as the zero value.
type body struct {
	hasRetryAfter bool
	retryAfter    time.Duration
	global        bool
	code          int
}

func parseBody(raw []byte) body {
	var out body
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return out
	}
	if !json.Valid(raw) {
		return out
	}
	var fields struct {
		RetryAfter json.RawMessage `json:"retry_after"`
		Global     json.RawMessage `json:"global"`
		Code       json.RawMessage `json:"code"`
	}
	if json.Unmarshal(raw, &fields) != nil {
		return out // valid JSON, but not an object
	}
	if f, err := strconv.ParseFloat(string(fields.RetryAfter), 64); err == nil && f >= 0 && !math.IsInf(f, 0) && !math.IsNaN(f) {
		out.hasRetryAfter = true
		if f >= MaxWait.Seconds() {
			out.retryAfter = MaxWait
		} else {
			out.retryAfter = time.Duration(math.Round(f * float64(time.Second)))
		}
	}
	out.global = string(fields.Global) == "true"
	if c, err := strconv.Atoi(string(fields.Code)); err == nil {
		out.code = c
	}
	return out
}

func clampWait(d time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d > MaxWait:
		return MaxWait
	}
	return d
}
