package ratelimit

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Bounds applied to every value this package derives from a response. They
// exist so that a hostile or broken upstream cannot make the limiter sleep
// for a year or overflow a counter.
const (
	// MaxWait caps every duration parsed from a header or a 429 body
	// (X-RateLimit-Reset-After, Retry-After, retry_after) and so every
	// Verdict.Wait. Discord documents shared-scope waits of about 22 minutes;
	// a longer real wait is cut to an hour and the limiter learns the rest
	// from the next response.
	MaxWait = time.Hour

	// MaxLimit caps X-RateLimit-Limit and X-RateLimit-Remaining. Discord's
	// per-route limits are in the tens.
	MaxLimit = 1_000_000

	// MaxBucketLength is the longest X-RateLimit-Bucket hash accepted.
	// Discord's hashes are 32 hex digits.
	MaxBucketLength = 128

	// maxValueLength bounds the work done on one header value and the size
	// of HeaderError.Value.
	maxValueLength = 64
)

// Canonical header names (the keys of an http.Header built by net/http).
const (
	hdrLimit      = "X-Ratelimit-Limit"
	hdrRemaining  = "X-Ratelimit-Remaining"
	hdrReset      = "X-Ratelimit-Reset"
	hdrResetAfter = "X-Ratelimit-Reset-After"
	hdrBucket     = "X-Ratelimit-Bucket"
	hdrGlobal     = "X-Ratelimit-Global"
	hdrScope      = "X-Ratelimit-Scope"
	hdrRetryAfter = "Retry-After"
)

// ErrMalformedHeader is returned (wrapped in a [*HeaderError]) by
// [ParseHeaders] when a rate-limit header is not in the form Discord
// documents, or is out of the bounds this package accepts. The returned
// [Headers] are still usable: see ParseHeaders for what was clamped or
// ignored.
var ErrMalformedHeader = errors.New("ratelimit: malformed header")

// HeaderError describes one malformed rate-limit header. It wraps
// [ErrMalformedHeader]. Only the rate-limit headers listed in [Headers] are
// ever inspected, so Value never holds a credential.
type HeaderError struct {
	// Header is the header's name, e.g. "X-RateLimit-Remaining".
	Header string
	// Value is the offending value, cut to 64 bytes.
	Value string
	// Reason says what is wrong and what was done about it, e.g.
	// "negative; clamped to 0".
	Reason string
}

// Error implements error.
func (e *HeaderError) Error() string {
	return "ratelimit: malformed " + e.Header + " header " + strconv.Quote(e.Value) + ": " + e.Reason
}

// Unwrap returns ErrMalformedHeader.
func (e *HeaderError) Unwrap() error { return ErrMalformedHeader }

// Scope is the value of X-RateLimit-Scope, sent by Discord on 429s.
type Scope uint8

// Scopes. The zero value, ScopeNone, means the header was absent or not
// recognised.
const (
	// ScopeNone: no (or an unrecognised) X-RateLimit-Scope header.
	ScopeNone Scope = iota
	// ScopeUser: the limit is per bot or user; the 429 counts as invalid.
	ScopeUser
	// ScopeGlobal: the bot's global limit was hit.
	ScopeGlobal
	// ScopeShared: a per-resource limit shared by every user of the
	// resource; the 429 does not count as an invalid request.
	ScopeShared
)

// String returns "none", "user", "global" or "shared".
func (s Scope) String() string {
	switch s {
	case ScopeNone:
		return "none"
	case ScopeUser:
		return "user"
	case ScopeGlobal:
		return "global"
	case ScopeShared:
		return "shared"
	}
	return "Scope(" + strconv.Itoa(int(s)) + ")"
}

// Present records which fields of [Headers] hold a usable value. A header
// that was absent, or malformed and ignored, is false; a header that was
// clamped is true.
type Present struct {
	// One flag per field of Headers of the same name.
	Limit, Remaining, ResetAfter, Reset, Bucket, Global, Scope, RetryAfter bool
	// RateLimit is true when the response carried at least one
	// X-RateLimit-* header, valid or not. A 429 without any is the
	// signature of a Cloudflare ban rather than of Discord's limiter.
	RateLimit bool
}

// Headers are the rate-limit facts of one response. The zero value means "no
// rate-limit information".
type Headers struct {
	// Limit is X-RateLimit-Limit: requests per window, in [1, MaxLimit].
	Limit int
	// Remaining is X-RateLimit-Remaining: requests left in the window, in
	// [0, MaxLimit] and, when Limit is present, at most Limit.
	Remaining int
	// ResetAfter is X-RateLimit-Reset-After: time until the window resets,
	// measured by Discord when it handled the request, to the nanosecond, in
	// [0, MaxWait]. Prefer it over Reset: it does not depend on clocks
	// agreeing.
	ResetAfter time.Duration
	// Reset is X-RateLimit-Reset, the epoch time of the reset, by the
	// server's clock. It is never compared with the local clock directly:
	// [ServerClock] learns the offset from Reset - ResetAfter.
	Reset time.Time
	// Reopen is the local time at which the window these headers describe
	// reopens, as estimated by [ServerClock.Annotate]; zero when unknown.
	// ParseHeaders never sets it.
	Reopen time.Time
	// Spread is, with Reopen, how much earlier than the fastest request
	// seen a request may be counted by the server, as Reopen reckons it
	// (ServerClock: Fast - Lead, the range of the trips or less): the
	// allowance for an ordinary faster trip, not this request's own
	// slowness. Zero when Reopen is.
	Spread time.Duration
	// Bucket is X-RateLimit-Bucket, the opaque hash shared by routes that
	// share a limit.
	Bucket string
	// Global is X-RateLimit-Global (only sent on 429s).
	Global bool
	// Scope is X-RateLimit-Scope (only sent on 429s).
	Scope Scope
	// RetryAfter is Retry-After, in [0, MaxWait]. Discord sends whole
	// seconds; decimal seconds and HTTP dates are accepted too.
	RetryAfter time.Duration
	// Has says which of the fields above were present and usable.
	Has Present
}

// ParseHeaders extracts the rate-limit headers of a response. now is the time
// the response was received; it is used only to turn a Retry-After HTTP date
// into a duration. Only the first value of each header is read.
//
// ParseHeaders always returns usable, bounded Headers. When a header is
// malformed it also returns an error wrapping [ErrMalformedHeader] (a
// [*HeaderError], or several joined with errors.Join), and applies these
// rules:
//
//   - Values longer than 64 bytes, and values that are not plain decimal
//     numbers ("NaN", "Inf", "1e3", "0x10", "5s"), are ignored: the field
//     stays zero and its Has flag false.
//   - X-RateLimit-Limit must be an integer >= 1; 0 or a negative limit is
//     ignored, a limit above MaxLimit is clamped to MaxLimit.
//   - X-RateLimit-Remaining must be an integer; a negative value is
//     clamped to 0, a value above MaxLimit or above Limit is clamped to it.
//   - X-RateLimit-Reset-After and Retry-After are seconds with an optional
//     fraction, kept to the nanosecond (a fraction beyond nanoseconds rounds
//     up); a negative value is clamped to 0 and a value above MaxWait to
//     MaxWait. A Retry-After date in the past means 0 and is not an error.
//   - X-RateLimit-Reset must be a non-negative epoch before year 5000.
//   - X-RateLimit-Bucket must be 1 to MaxBucketLength printable ASCII
//     characters without spaces.
//   - X-RateLimit-Global must be a boolean (strconv.ParseBool); any other
//     value is reported and taken as true, because Discord sends the header
//     only on global 429s and pausing is the safe reading.
//   - X-RateLimit-Scope must be user, global or shared (any case); another
//     value is reported and leaves ScopeNone.
func ParseHeaders(h http.Header, now time.Time) (Headers, error) {
	var out Headers
	var c collector

	for k := range h {
		if len(k) > len("X-Ratelimit-") && strings.EqualFold(k[:len("X-Ratelimit-")], "X-Ratelimit-") {
			out.Has.RateLimit = true
			break
		}
	}

	if v, ok := get(h, hdrLimit); ok {
		n, st := parseInt(v)
		switch {
		case st == numInvalid:
			c.bad("X-RateLimit-Limit", v, "not an integer; ignored")
		case st == numNegative || n == 0:
			c.bad("X-RateLimit-Limit", v, "less than 1; ignored")
		case n > MaxLimit:
			c.bad("X-RateLimit-Limit", v, "above MaxLimit; clamped")
			out.Limit, out.Has.Limit = MaxLimit, true
		default:
			out.Limit, out.Has.Limit = int(n), true
		}
	}

	if v, ok := get(h, hdrRemaining); ok {
		n, st := parseInt(v)
		switch {
		case st == numInvalid:
			c.bad("X-RateLimit-Remaining", v, "not an integer; ignored")
		case st == numNegative:
			c.bad("X-RateLimit-Remaining", v, "negative; clamped to 0")
			out.Remaining, out.Has.Remaining = 0, true
		case n > MaxLimit:
			c.bad("X-RateLimit-Remaining", v, "above MaxLimit; clamped")
			out.Remaining, out.Has.Remaining = MaxLimit, true
		default:
			out.Remaining, out.Has.Remaining = int(n), true
		}
		if out.Has.Remaining && out.Has.Limit && out.Remaining > out.Limit {
			c.bad("X-RateLimit-Remaining", v, "greater than X-RateLimit-Limit; clamped to the limit")
			out.Remaining = out.Limit
		}
	}

	if v, ok := get(h, hdrResetAfter); ok {
		out.ResetAfter, out.Has.ResetAfter = parseWait("X-RateLimit-Reset-After", v, &c)
	}

	if v, ok := get(h, hdrReset); ok {
		sec, nsec, st := parseDecimal(v)
		switch {
		case st == numInvalid:
			c.bad("X-RateLimit-Reset", v, "not a decimal number; ignored")
		case st == numNegative:
			c.bad("X-RateLimit-Reset", v, "negative; ignored")
		case sec >= maxEpoch:
			c.bad("X-RateLimit-Reset", v, "implausibly far in the future; ignored")
		default:
			out.Reset, out.Has.Reset = time.Unix(sec, nsec), true
		}
	}

	if v, ok := get(h, hdrBucket); ok {
		if validBucket(v) {
			out.Bucket, out.Has.Bucket = v, true
		} else {
			c.bad("X-RateLimit-Bucket", v, "not 1 to 128 printable ASCII characters; ignored")
		}
	}

	if v, ok := get(h, hdrGlobal); ok {
		g, err := strconv.ParseBool(v)
		if err != nil {
			c.bad("X-RateLimit-Global", v, "not a boolean; taken as true")
			g = true
		}
		out.Global, out.Has.Global = g, true
	}

	if v, ok := get(h, hdrScope); ok {
		switch {
		case strings.EqualFold(v, "user"):
			out.Scope, out.Has.Scope = ScopeUser, true
		case strings.EqualFold(v, "global"):
			out.Scope, out.Has.Scope = ScopeGlobal, true
		case strings.EqualFold(v, "shared"):
			out.Scope, out.Has.Scope = ScopeShared, true
		default:
			c.bad("X-RateLimit-Scope", v, "unknown scope; ignored")
		}
	}

	if v, ok := get(h, hdrRetryAfter); ok {
		if v[0] >= '0' && v[0] <= '9' || v[0] == '-' || v[0] == '+' || v[0] == '.' {
			out.RetryAfter, out.Has.RetryAfter = parseWait("Retry-After", v, &c)
		} else if len(v) > maxValueLength {
			c.bad("Retry-After", v, "longer than 64 bytes; ignored")
		} else if t, err := http.ParseTime(v); err != nil {
			c.bad("Retry-After", v, "neither seconds nor an HTTP date; ignored")
		} else {
			d := t.Sub(now)
			switch {
			case d < 0:
				d = 0
			case d > MaxWait:
				c.bad("Retry-After", v, "further than MaxWait; clamped")
				d = MaxWait
			}
			out.RetryAfter, out.Has.RetryAfter = d, true
		}
	}

	return out, c.err()
}

// collector gathers the HeaderErrors of one ParseHeaders call.
type collector struct{ errs []error }

func (c *collector) bad(name, value, reason string) {
	if len(value) > maxValueLength {
		value = value[:maxValueLength]
	}
	c.errs = append(c.errs, &HeaderError{Header: name, Value: value, Reason: reason})
}

func (c *collector) err() error {
	switch len(c.errs) {
	case 0:
		return nil
	case 1:
		return c.errs[0]
	}
	return errors.Join(c.errs...)
}

// get returns the first value of a header, trimmed, if it is non-empty.
func get(h http.Header, canonical string) (string, bool) {
	vs := h[canonical]
	if len(vs) == 0 {
		return "", false
	}
	v := strings.TrimSpace(vs[0])
	return v, v != ""
}

// parseWait parses a duration header in seconds, reporting to c.
func parseWait(name, v string, c *collector) (time.Duration, bool) {
	sec, nsec, st := parseDecimal(v)
	switch {
	case st == numInvalid:
		c.bad(name, v, "not a decimal number of seconds; ignored")
		return 0, false
	case st == numNegative:
		c.bad(name, v, "negative; clamped to 0")
		return 0, true
	case sec > int64(MaxWait/time.Second) || sec == int64(MaxWait/time.Second) && nsec > 0:
		c.bad(name, v, "above MaxWait; clamped")
		return MaxWait, true
	}
	return time.Duration(sec)*time.Second + time.Duration(nsec), true
}

// maxEpoch bounds X-RateLimit-Reset (about year 5138) and the integer part
// parseDecimal computes exactly.
const maxEpoch = 100_000_000_000

type numStatus uint8

const (
	numOK       numStatus = iota
	numNegative           // syntactically valid but below zero (not "-0")
	numInvalid            // not a plain decimal number
)

// parseDecimal parses [+-]digits[.digits] (or [+-].digits) without
// allocating and without floating point. The integer part saturates at
// maxEpoch; the fraction is kept to the nanosecond and rounded up beyond.
func parseDecimal(s string) (sec, nsec int64, st numStatus) {
	if s == "" || len(s) > maxValueLength {
		return 0, 0, numInvalid
	}
	neg := false
	switch s[0] {
	case '-':
		neg = true
		s = s[1:]
	case '+':
		s = s[1:]
	}
	digits := 0
	i := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		digits++
		if sec < maxEpoch {
			sec = sec*10 + int64(s[i]-'0')
		}
	}
	if sec > maxEpoch {
		sec = maxEpoch
	}
	if i < len(s) && s[i] == '.' {
		i++
		scale := int64(100_000_000)
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			digits++
			d := int64(s[i] - '0')
			if scale > 0 {
				nsec += d * scale
				scale /= 10
			} else if d != 0 && scale == 0 {
				nsec++ // round up once, past nanosecond precision
				scale = -1
			}
		}
		if nsec >= int64(time.Second) {
			sec, nsec = sec+1, nsec-int64(time.Second)
		}
	}
	if digits == 0 || i != len(s) {
		return 0, 0, numInvalid
	}
	if neg && (sec != 0 || nsec != 0) {
		return 0, 0, numNegative
	}
	return sec, nsec, numOK
}

// parseInt parses [+-]digits.
func parseInt(s string) (int64, numStatus) {
	if strings.IndexByte(s, '.') >= 0 {
		return 0, numInvalid
	}
	sec, _, st := parseDecimal(s)
	return sec, st
}

func validBucket(v string) bool {
	if len(v) > MaxBucketLength {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] >= 0x7f {
			return false
		}
	}
	return true
}
