package leakybucket

import (
	"net/http"
	"testing"
	"time"
)

// TestHeaderLimit: X-RateLimit-Limit only when asked, the Size of the limit
// whose Remaining is reported, and removed when stale.
func TestHeaderLimit(t *testing.T) {
	burst := Limit{Name: "burst", Size: 10, DripRate: time.Second}
	hourly := Limit{Name: "hourly", Size: 1000, DripRate: 3600 * time.Millisecond}
	h := http.Header{}
	h.Set(HeaderLimit, "stale")
	SetHeaders(h, false, Result{Limit: burst, Remaining: 4, Level: 6})
	if _, ok := h[http.CanonicalHeaderKey(HeaderLimit)]; ok {
		t.Fatalf("SetHeaders left X-RateLimit-Limit: %v", h)
	}
	for _, c := range []struct {
		results []Result
		want    string
	}{
		{[]Result{{Limit: burst, Remaining: 4}, {Limit: hourly, Remaining: 900}}, "10"},
		{[]Result{{Limit: burst, Remaining: 9}, {Limit: hourly, Remaining: 3}}, "1000"},
		{[]Result{{Limit: burst, Remaining: 0}, {Limit: hourly, Remaining: 0}}, "10"}, // a tie: the first
	} {
		HeaderOptions{Limit: true}.Set(h, c.results...)
		if got := h.Get(HeaderLimit); got != c.want {
			t.Fatalf("%+v: X-RateLimit-Limit %q, want %q", c.results, got, c.want)
		}
	}
	HeaderOptions{Limit: true}.Set(h)
	if len(h) != 0 {
		t.Fatalf("no results left %v", h)
	}

	// Through the middleware: LimitHeader.
	clock := &fakeClock{now: t0}
	mw, err := NewMiddleware(&Memory{Clock: clock.Now}, MiddlewareOptions{Limits: []Limit{burst, hourly}, LimitHeader: true, DraftHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	w := do(mw(&served{}), "203.0.113.7:1")
	wantHeaders(t, w, map[string]string{"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "9"})
	mw, _ = NewMiddleware(&Memory{Clock: clock.Now}, MiddlewareOptions{Limits: []Limit{burst}})
	if w := do(mw(&served{}), "203.0.113.7:1"); w.Header().Get(HeaderLimit) != "" {
		t.Fatalf("X-RateLimit-Limit without LimitHeader: %v", w.Header())
	}
}

// TestHeadersSubSecondWait: a 100 ms wait. Retry-After and the draft's t
// allow whole seconds only (RFC 9110's delay-seconds; the draft's Integer),
// and are rounded up, never down to a "0" that would send the client back
// before it can be admitted; X-RateLimit-Reset and the 429 body's
// "retry-after" carry the exact wait, to the millisecond.
func TestHeadersSubSecondWait(t *testing.T) {
	lim := Limit{Name: "api", Size: 2, DripRate: 100 * time.Millisecond}
	clock := &fakeClock{now: t0}
	mw, _ := NewMiddleware(&Memory{Clock: clock.Now}, MiddlewareOptions{Limits: []Limit{lim}, DraftHeaders: true})
	h := mw(&served{})
	do(h, "203.0.113.7:1")
	do(h, "203.0.113.7:1")
	w := do(h, "203.0.113.7:1")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("third call: %d", w.Code)
	}
	wantHeaders(t, w, map[string]string{
		"Retry-After": "1", "X-RateLimit-Reset": "0.100", "X-RateLimit-Clear": "0.200",
		"RateLimit": `"api";r=0;t=1`, "RateLimit-Policy": `"api";q=2;w=1`,
	})
	if p := decodeProblem(t, w); p.RetryAfter != 0.1 {
		t.Fatalf("problem retry-after %v, want 0.1", p.RetryAfter)
	}

	// A blocked call of 5 units waits five drips, not one: its t is its
	// RetryAfter, the same second as Retry-After.
	big := Limit{Name: "bytes", Size: 10, DripRate: 400 * time.Millisecond}
	var m Memory
	m.CheckNAt("k", 10, []Limit{big}, nil, t0)
	res, _ := m.CheckNAt("k", 5, []Limit{big}, nil, t0)
	if !res[0].Blocked || res[0].NextDrip != 400*time.Millisecond || res[0].RetryAfter != 2*time.Second {
		t.Fatalf("%+v", res[0])
	}
	hdr := http.Header{}
	SetHeaders(hdr, true, res...)
	if hdr.Get("RateLimit") != `"bytes";r=0;t=2` || hdr.Get("Retry-After") != "2" {
		t.Fatalf("RateLimit %q, Retry-After %q", hdr.Get("RateLimit"), hdr.Get("Retry-After"))
	}
	// Not blocked, the same bucket's t is its next drip.
	res, _ = m.PeekAt("k", []Limit{big}, nil, t0.Add(500*time.Millisecond))
	SetHeaders(hdr, true, res...)
	if hdr.Get("RateLimit") != `"bytes";r=1;t=1` {
		t.Fatalf("RateLimit %q after a drip", hdr.Get("RateLimit"))
	}
}
