// Package attempt is one attempt of a request, outside the actors: the
// request as the API receives it, decided once per request (Resolve, and
// the headers the caller adds), then for each attempt a shallow copy on
// the attempt's context with a fresh body, the round trip, the time its
// headers reached the wire, the answer's body read within its bounds, its
// rate-limit headers parsed and the answer classified (ratelimit.Classify).
//
// Exchange is that round trip, the same for every caller (the limited
// path, and requests sent outside the limits: Runner.Direct): it returns
// an Answer and decides nothing about limits. Runner.Run is the whole
// attempt as the actors' workers run it (run.go): the attempt's context
// (Scope, with the request's Bounds), the shared store's reservation
// before the send and the answer reported after, the global 429's block
// of its window, and one Result handed over (Runner.Hand) for the bucket
// actor to act on. It holds no rate-limit state of its own: the actors
// choose when an attempt goes and what its answer means
// (ratelimit.Judge); the windows and the shared store it is handed are
// theirs.
//
// Invariants of Run, which the actors rely on: exactly one Result is
// handed over, also after a panic (failure.ErrInternal), and none after
// it; the attempt's context has ended by then (a retry may record its own
// in Bounds.Slot); the connection's claim ends as the request is handed
// to it, or when Run returns; a global 429 blocks its window before
// anything is told (GlobalHit, then Hand); with a shared store, a granted
// reservation is reported once, a pioneer's answer and a global 429
// before the hand-over, any other after it, and a refused one is handed
// over (Result.Deferred), not reported.
//
// A request is cloned once, when it is submitted (the caller keeps its
// own): an attempt copies the *http.Request struct only, sharing the
// sealed URL and header map, which nothing writes after the seal.
package attempt

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/failure"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// ErrResponseTooLarge is returned (wrapped) when a response body exceeds
// Reader.MaxBytes, or the bytes all answers may buffer at once
// (Reader.MaxBuffered). It is failure.ErrResponseTooLarge.
var ErrResponseTooLarge = failure.ErrResponseTooLarge

// ErrNotSent is matched (errors.Is) by a *NotSentError. It is
// failure.ErrNotSent.
var ErrNotSent = failure.ErrNotSent

// NotSentError marks an attempt that failed before anything reached the
// wire (its body could not be rebuilt): it was not sent. It matches
// ErrNotSent and its cause.
type NotSentError struct{ Err error }

func (e *NotSentError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *NotSentError) Unwrap() error { return e.Err }

// Is reports whether target is ErrNotSent: errors.Is finds it without the
// allocation errors.As makes.
func (e *NotSentError) Is(target error) bool { return target == ErrNotSent }

// DefaultMaxBytes bounds one body when Reader.MaxBytes is not positive.
const DefaultMaxBytes = 64 << 20

// Reader reads answers' bodies within bounds. The zero value bounds one
// body at DefaultMaxBytes and all bodies together not at all. It is safe
// for concurrent use; its fields must not change once it is in use.
type Reader struct {
	// MaxBytes bounds one body; an answer declaring more is refused at
	// once. Not positive: DefaultMaxBytes.
	MaxBytes int64
	// MaxBuffered bounds the bytes being read at once across answers; a
	// body that would pass it is refused. 0: no bound.
	MaxBuffered int64

	buffered atomic.Int64 // bytes held by reads in progress
}

// Read reads resp's body within MaxBytes and MaxBuffered, which it holds
// only while reading: the bytes then belong to the caller. It does not
// close the body.
func (r *Reader) Read(resp *http.Response) ([]byte, error) {
	limit := r.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	if resp.ContentLength > limit {
		return nil, fmt.Errorf("%w: Content-Length %d is over %d bytes", ErrResponseTooLarge, resp.ContentLength, limit)
	}
	var held int64
	defer func() {
		if held != 0 {
			r.buffered.Add(-held)
		}
	}()
	take := func(n int64) error {
		total := r.MaxBuffered
		if total <= 0 {
			return nil
		}
		if r.buffered.Add(n) > total {
			r.buffered.Add(-n)
			return fmt.Errorf("%w: more than %d bytes buffered across requests", ErrResponseTooLarge, total)
		}
		held += n
		return nil
	}
	const chunk = 512 // as io.ReadAll: small answers stay small; the buffer doubles
	// A declared length sizes the first buffer (+1 sees a body longer than
	// declared), up to firstMax: the server's word is not memory to take
	// before any byte came; a longer body grows the buffer as it arrives.
	const firstMax = 64 << 10
	size := int64(chunk)
	if resp.ContentLength >= 0 {
		size = min(resp.ContentLength+1, firstMax)
	}
	if err := take(size); err != nil {
		return nil, err
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			grow := int64(max(cap(buf), chunk))
			if int64(cap(buf))+grow > limit+1 {
				grow = limit + 1 - int64(cap(buf))
			}
			if grow <= 0 {
				return nil, fmt.Errorf("%w: more than %d bytes", ErrResponseTooLarge, limit)
			}
			if err := take(grow); err != nil {
				return nil, err
			}
			buf = slices.Grow(buf, int(grow))
		}
		n, err := resp.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrResponseTooLarge, limit)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// Answer is what one attempt got back.
type Answer struct {
	// Answered is set once the answer's headers arrived: Headers, Status
	// and At describe them even when reading the body failed.
	Answered bool
	// At is when the answer's headers arrived, or when the attempt failed.
	At time.Time
	// Wired is when the request's headers were written to the connection
	// (the local time nearest its arrival at the server); when the
	// transport did not say, when the request was handed to it.
	Wired time.Time
	// Resp is the answer with its body read and replaced by a buffer
	// (ContentLength set); nil unless the body was read whole.
	Resp *http.Response
	// Status is the answer's status code.
	Status int
	// Headers are its rate-limit headers as parsed at At; HeaderErr says
	// what in them was malformed (the rest is still parsed).
	Headers   ratelimit.Headers
	HeaderErr error
	// Verdict classifies the answer (ratelimit.Classify); set with Resp.
	Verdict ratelimit.Verdict
}

// buffered is an answer's body once read: one allocation where
// io.NopCloser(bytes.NewReader(…)) makes two.
type buffered struct{ bytes.Reader }

func (*buffered) Close() error { return nil }

// BodyOf returns b as a request or response body, in one allocation:
// what a request's GetBody gives each attempt.
func BodyOf(b []byte) io.ReadCloser { return &buffered{Reader: *bytes.NewReader(b)} }

// Exchange is one attempt. The zero value is not usable: Clock is
// required.
type Exchange struct {
	// Clock reads the time every At and Wired is taken from.
	Clock func() time.Time
	// Body reads the answer's body.
	Body *Reader
}

// wireTrace records when the request's headers were written, as an offset
// from base (+1, so that 0 means "not written"): base keeps the clock's
// monotonic reading.
type wireTrace struct {
	clock func() time.Time
	base  time.Time
	wire  atomic.Int64
	trace httptrace.ClientTrace
}

func (w *wireTrace) wroteHeaders() { w.wire.Store(int64(w.clock().Sub(w.base)) + 1) }

// Do sends sealed (a request made ready once, see package doc) on rt as
// one attempt bounded by ctx, and reads the answer: Resp is set, with its
// body buffered, when err is nil. An error before anything reached the
// wire is a *NotSentError. The answer's body is always closed.
func (x *Exchange) Do(ctx context.Context, rt http.RoundTripper, sealed *http.Request) (Answer, error) {
	w := &wireTrace{clock: x.Clock, base: x.Clock()}
	w.trace.WroteHeaders = w.wroteHeaders
	req := sealed.WithContext(httptrace.WithClientTrace(ctx, &w.trace))
	if sealed.GetBody != nil {
		b, err := sealed.GetBody()
		if err != nil {
			return Answer{At: x.Clock()}, &NotSentError{fmt.Errorf("sluice: request body: %w", err)}
		}
		req.Body = b
	}
	handed := x.Clock()
	resp, err := rt.RoundTrip(req)
	a := Answer{At: x.Clock(), Wired: handed}
	if d := w.wire.Load(); d > 0 {
		a.Wired = w.base.Add(time.Duration(d - 1))
	}
	if err != nil {
		return a, err
	}
	a.Answered, a.Status = true, resp.StatusCode
	a.Headers, a.HeaderErr = ratelimit.ParseHeaders(resp.Header, a.At)
	body, err := x.Body.Read(resp)
	resp.Body.Close()
	if err != nil {
		return a, err
	}
	a.Verdict = ratelimit.Classify(resp.StatusCode, a.Headers, body)
	resp.Body = &buffered{Reader: *bytes.NewReader(body)}
	resp.ContentLength = int64(len(body))
	a.Resp = resp
	return a, nil
}

// Resolve returns the URL a request for u is sent to on base. A relative
// path is put below the base path, unless it already starts with it
// ("/api/v10/…"), or starts with Discord's own "/api" (any version, in any
// case, as routes.Parse reads it: "/api/v9/…", "/API/V10/…"): that one goes
// below the base's mount point as an absolute Discord URL does, its prefix
// in lower case and with the base's version if it names none, so it is
// sent where it is counted. An absolute URL on the base's host keeps its path; one
// on another host (Discord's: https://discord.com/api/v9/…) keeps its path
// below the base's mount point (MountPath), so a base of
// https://proxy/discord/api/v10 sends it to https://proxy/discord/api/v9/….
// The path's escaping (%2F in an emoji or a name) is kept as given, and so
// is the query.
func Resolve(base, u *url.URL) (*url.URL, error) {
	out := *base
	escaped := u.EscapedPath()
	switch bp := base.EscapedPath(); {
	case u.Host == "":
		switch {
		case bp != "" && bp != "/" && (escaped == bp || strings.HasPrefix(escaped, strings.TrimSuffix(bp, "/")+"/")):
			// already below the base
		case apiRooted(escaped):
			escaped = joinPath(MountPath(bp), apiPath(escaped, routes.BaseVersion(bp)))
		default:
			escaped = joinPath(bp, escaped)
		}
	case !strings.EqualFold(u.Host, base.Host):
		escaped = joinPath(MountPath(bp), escaped)
	}
	p, err := url.PathUnescape(escaped)
	if err != nil {
		return nil, fmt.Errorf("request path: %w", err)
	}
	out.Path, out.RawPath = p, escaped
	out.RawQuery = u.RawQuery
	return &out, nil
}

// apiRooted reports whether the escaped path p starts with the segment
// "api", in any case.
func apiRooted(p string) bool {
	return len(p) >= 4 && strings.EqualFold(p[:4], "/api") && (len(p) == 4 || p[4] == '/')
}

// apiPath is p, an apiRooted path, with its "/api" and the version after
// it in lower case (routes.BaseVersion tells a version), or with version
// def after "/api" if it names none and def is not "".
func apiPath(p, def string) string {
	rest := p[4:] // "" or "/…"
	if len(rest) > 1 {
		seg, tail, cut := strings.Cut(rest[1:], "/")
		if v := routes.BaseVersion("/" + seg); v != "" {
			if cut {
				return "/api/" + v + "/" + tail
			}
			return "/api/" + v
		}
	}
	if def != "" {
		return "/api/" + def + rest
	}
	return "/api" + rest
}

// MountPath is the part of a base path before Discord's own ("/api" and
// an optional "/vN"): where the API is mounted on the base's host. It is
// "/discord" for "/discord/api/v10", and "" for "/api/v10". A base path
// without an "/api" ending is all mount point.
func MountPath(base string) string {
	base = strings.TrimSuffix(base, "/")
	i := strings.LastIndex(base, "/api")
	if i < 0 {
		return base
	}
	rest := base[i+len("/api"):]
	if rest == "" || (len(rest) > 2 && rest[:2] == "/v" && allDigits(rest[2:])) {
		return base[:i]
	}
	return base
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func joinPath(base, p string) string {
	if base == "" || base == "/" {
		return p
	}
	if len(base) > 0 && base[len(base)-1] == '/' {
		base = base[:len(base)-1]
	}
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	return base + p
}
