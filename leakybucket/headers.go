package leakybucket

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names SetHeaders writes.
const (
	// HeaderLimit is the Size of the limit X-RateLimit-Remaining counts
	// against, written only when asked (HeaderOptions.Limit,
	// MiddlewareOptions.LimitHeader): the seed does not send it; ulule's
	// limiter, go-chi's httprate and GitHub's API do.
	HeaderLimit = "X-RateLimit-Limit"
	// HeaderRemaining is the seed's count of calls that can be made now.
	HeaderRemaining = "X-RateLimit-Remaining"
	// HeaderClear is the seed's seconds until every bucket is empty.
	HeaderClear = "X-RateLimit-Clear"
	// HeaderReset is the seed's seconds until a blocked call would be
	// admitted (only when blocked).
	HeaderReset = "X-RateLimit-Reset"
	// HeaderRetryAfter is HeaderReset in whole seconds, rounded up (only
	// when blocked).
	HeaderRetryAfter = "Retry-After"
	// HeaderPolicy is the quota policy field of
	// draft-ietf-httpapi-ratelimit-headers (-10, -11).
	HeaderPolicy = "RateLimit-Policy"
	// HeaderRateLimit is the service limit field of the same draft.
	HeaderRateLimit = "RateLimit"
)

// HeaderOptions selects the headers HeaderOptions.Set writes beyond the
// seed's. The zero value writes the seed's headers only, as SetHeaders(h,
// false, ...).
type HeaderOptions struct {
	// Draft adds the IETF draft's RateLimit-Policy and RateLimit fields.
	Draft bool
	// Limit adds X-RateLimit-Limit: the Size of the limit whose Remaining
	// X-RateLimit-Remaining reports (the least Remaining; of several
	// equal, the first), so that a client reads "Remaining of Limit".
	Limit bool
}

// SetHeaders sets the rate-limit headers of one response from the results
// of its request's check (one per limit), replacing any already in h. It
// is HeaderOptions{Draft: draft}.Set(h, results...):
//
//   - X-RateLimit-Remaining: the calls that can be made now without being
//     blocked, the least Remaining of the results (0 when blocked, or when
//     the next call would be).
//   - X-RateLimit-Clear: the seconds until every bucket is empty, the
//     greatest ClearAfter, with three decimals, rounded up to the
//     millisecond ("1.500").
//   - X-RateLimit-Reset: only when a result is Blocked: the seconds until
//     the call would be admitted, the greatest RetryAfter of the blocked
//     results, three decimals, rounded up to the millisecond ("0.755").
//   - Retry-After: only when Blocked: the same in whole seconds, rounded up
//     ("1"). RFC 9110 allows only whole seconds (delay-seconds), so a wait
//     of 100 ms is "1": rounding down would send the client back before it
//     can be admitted ("0" means now). The exact wait is in
//     X-RateLimit-Reset, and in the 429 body's "retry-after" (WriteBlocked).
//
// These are the seed's headers with the seed's meanings (see
// docs/leaky-bucket.md). With draft set it also writes the IETF draft's
// structured fields, one item per result, named by Limit.Name:
//
//   - RateLimit-Policy: "name";q=Size;w=W, where W is the seconds a full
//     bucket takes to drain (rounded up, at least 1: the draft's windows
//     are whole seconds).
//   - RateLimit: "name";r=Remaining;t=T, where T is the seconds until the
//     bucket next drips (rounded up): the time within which no more than r
//     calls can be made. t is left out for an empty bucket, which r alone
//     describes. For a blocked result T is its RetryAfter, rounded up (a
//     call of several units may wait several drips): the blocked limit's t
//     and Retry-After then name the same second, as the draft asks. The
//     draft makes t a non-negative Integer "compatible with the
//     delay-seconds rule" and says windows have no subsecond precision, so
//     t, like Retry-After, is rounded up and never down.
//
// Without results it removes those headers (X-RateLimit-Limit included).
// Header names are case-insensitive; net/http writes them in its canonical
// form (X-Ratelimit-Remaining), HTTP/2 in lower case.
func SetHeaders(h http.Header, draft bool, results ...Result) {
	HeaderOptions{Draft: draft}.Set(h, results...)
}

// Set sets the rate-limit headers of one response from results, as
// SetHeaders does, and those o adds (see HeaderOptions).
func (o HeaderOptions) Set(h http.Header, results ...Result) {
	for _, k := range [...]string{HeaderLimit, HeaderRemaining, HeaderClear, HeaderReset, HeaderRetryAfter, HeaderPolicy, HeaderRateLimit} {
		h.Del(k)
	}
	if len(results) == 0 {
		return
	}
	remaining, size, clear, blocked, retry := results[0].Remaining, results[0].Limit.Size, time.Duration(0), false, time.Duration(0)
	for _, r := range results {
		if r.Remaining < remaining {
			remaining, size = r.Remaining, r.Limit.Size
		}
		clear = max(clear, r.ClearAfter)
		if r.Blocked {
			blocked = true
			retry = max(retry, r.RetryAfter)
		}
	}
	if o.Limit {
		h.Set(HeaderLimit, strconv.Itoa(size))
	}
	h.Set(HeaderRemaining, strconv.Itoa(max(remaining, 0)))
	h.Set(HeaderClear, formatSeconds(clear))
	if blocked {
		h.Set(HeaderReset, formatSeconds(retry))
		h.Set(HeaderRetryAfter, strconv.FormatInt(ceilSeconds(retry), 10))
	}
	if !o.Draft {
		return
	}
	var policy, limit strings.Builder
	for i, r := range results {
		if i > 0 {
			policy.WriteString(", ")
			limit.WriteString(", ")
		}
		name := quoteSF(r.Limit.name())
		drain := time.Duration(0)
		if p, err := r.Limit.params(); err == nil {
			drain = time.Duration(ceilDiv(p.size, p.drip) * p.interval)
		}
		policy.WriteString(name)
		policy.WriteString(";q=")
		policy.WriteString(strconv.Itoa(r.Limit.Size))
		policy.WriteString(";w=")
		policy.WriteString(strconv.FormatInt(max(ceilSeconds(drain), 1), 10))

		limit.WriteString(name)
		limit.WriteString(";r=")
		limit.WriteString(strconv.Itoa(max(r.Remaining, 0)))
		if t := r.NextDrip; t > 0 {
			if r.Blocked {
				t = max(t, r.RetryAfter)
			}
			limit.WriteString(";t=")
			limit.WriteString(strconv.FormatInt(ceilSeconds(t), 10))
		}
	}
	h.Set(HeaderPolicy, policy.String())
	h.Set(HeaderRateLimit, limit.String())
}

// formatSeconds formats d as seconds with three decimals, rounded up to the
// millisecond: "0.755". Negative durations format as "0.000".
func formatSeconds(d time.Duration) string {
	ms := ceilMillis(d)
	var b [24]byte
	out := strconv.AppendInt(b[:0], ms/1000, 10)
	frac := ms % 1000
	out = append(out, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	return string(out)
}

// ceilMillis returns d in milliseconds, rounded up; 0 for d <= 0.
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return ceilDiv(int64(d), int64(time.Millisecond))
}

// ceilSeconds returns d in seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return ceilDiv(int64(d), int64(time.Second))
}

// quoteSF returns s as a structured-field String (RFC 9651): in double
// quotes, with '"' and '\' escaped. Limit names are printable ASCII (see
// Limit.Validate); any other byte is replaced by '?' rather than written.
func quoteSF(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
