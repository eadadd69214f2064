package leakybucket

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// served is a handler that counts the requests it serves.
type served struct{ n int }

func (s *served) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.n++
	w.Write([]byte("ok"))
}

func do(h http.Handler, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/notes", nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func wantHeaders(t *testing.T, w *httptest.ResponseRecorder, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got := w.Header().Values(k)
		if v == "" && len(got) != 0 || v != "" && (len(got) != 1 || got[0] != v) {
			t.Fatalf("%s: %q, want %q (all: %v)", k, got, v, w.Header())
		}
	}
}

type problemBody struct {
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Status     int      `json:"status"`
	Detail     string   `json:"detail"`
	Violated   []string `json:"violated-policies"`
	RetryAfter float64  `json:"retry-after"`
}

func decodeProblem(t *testing.T, w *httptest.ResponseRecorder) problemBody {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var p problemBody
	dec := json.NewDecoder(w.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("body: %v", err)
	}
	return p
}

func TestMiddleware(t *testing.T) {
	clock := &fakeClock{now: t0}
	burst := Limit{Name: "burst", Size: 2, DripRate: time.Second}
	slow := Limit{Name: "slow", Size: 3, DripRate: 10 * time.Second}
	mw, err := NewMiddleware(&Memory{Clock: clock.Now}, MiddlewareOptions{Limits: []Limit{burst, slow}, DraftHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	next := &served{}
	h := mw(next)

	w := do(h, "203.0.113.7:1000")
	if w.Code != 200 || w.Body.String() != "ok" {
		t.Fatalf("first: %d %q", w.Code, w.Body)
	}
	wantHeaders(t, w, map[string]string{
		"X-RateLimit-Remaining": "1", "X-RateLimit-Clear": "10.000", "X-RateLimit-Reset": "", "Retry-After": "",
		"RateLimit-Policy": `"burst";q=2;w=2, "slow";q=3;w=30`,
		"RateLimit":        `"burst";r=1;t=1, "slow";r=2;t=10`,
	})
	if w := do(h, "203.0.113.7:1001"); w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("second: %d %v", w.Code, w.Header())
	}

	// The third is blocked by burst: 429, the handler is not called.
	w = do(h, "203.0.113.7:1002")
	if w.Code != http.StatusTooManyRequests || next.n != 2 {
		t.Fatalf("third: %d, handler called %d times", w.Code, next.n)
	}
	wantHeaders(t, w, map[string]string{
		"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1.000", "Retry-After": "1",
		"RateLimit": `"burst";r=0;t=1, "slow";r=1;t=10`,
	})
	p := decodeProblem(t, w)
	if p.Type != ProblemQuotaExceeded || p.Status != 429 || len(p.Violated) != 1 || p.Violated[0] != "burst" ||
		p.RetryAfter != 1 || p.Detail != `rate limit "burst" exceeded: retry in 1.000 s` {
		t.Fatalf("problem %+v", p)
	}

	// Another client has buckets of its own.
	if w := do(h, "198.51.100.9:1"); w.Code != 200 {
		t.Fatalf("another client: %d", w.Code)
	}

	// A second later burst has dripped one; slow fills with this call.
	clock.Set(t0.Add(time.Second))
	if w := do(h, "203.0.113.7:1003"); w.Code != 200 {
		t.Fatalf("after a drip: %d %v", w.Code, w.Header())
	}
	// Now both block: the wait is slow's (its first drip is at 10 s).
	w = do(h, "203.0.113.7:1004")
	wantHeaders(t, w, map[string]string{"X-RateLimit-Reset": "9.000", "Retry-After": "9"})
	if p := decodeProblem(t, w); len(p.Violated) != 2 || p.RetryAfter != 9 || p.Detail != "rate limit exceeded: retry in 9.000 s" {
		t.Fatalf("problem %+v", p)
	}

	// Without DraftHeaders, only the seed's headers.
	mw2, _ := NewMiddleware(&Memory{Clock: clock.Now}, MiddlewareOptions{Limits: []Limit{burst}})
	w = do(mw2(next), "203.0.113.7:1")
	wantHeaders(t, w, map[string]string{"X-RateLimit-Remaining": "1", "X-RateLimit-Clear": "1.000", "RateLimit": "", "RateLimit-Policy": ""})
}

func TestMiddlewareKeys(t *testing.T) {
	lim := Limit{Size: 1, DripRate: time.Hour}
	clock := &fakeClock{now: t0}
	next := &served{}
	mw, _ := NewMiddleware(&Memory{Clock: clock.Now}, MiddlewareOptions{Limits: []Limit{lim}})
	h := mw(next)
	// By default the peer's address is the key: X-Forwarded-For is not
	// believed, so a client cannot dodge its limit with it.
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "203.0.113.7:1"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	r.Header.Set("X-Forwarded-For", "1.2.3.4")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 429 {
		t.Fatalf("a spoofed X-Forwarded-For got a bucket of its own: %d", w.Code)
	}

	// Keyed by user: each user has a bucket wherever they connect from.
	type userKey struct{}
	mw, _ = NewMiddleware(&Memory{Clock: clock.Now}, MiddlewareOptions{
		Limits: []Limit{lim},
		Key: func(r *http.Request) string {
			if u, ok := r.Context().Value(userKey{}).(string); ok {
				return "user:" + u
			}
			return "ip:" + IPKey{}.Key(r)
		},
	})
	h = mw(next)
	req := func(user, remote string) int {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		if user != "" {
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if req("alice", "203.0.113.7:1") != 200 || req("alice", "198.51.100.9:1") != 429 || req("bob", "203.0.113.7:1") != 200 || req("", "203.0.113.7:1") != 200 {
		t.Fatal("keys by user")
	}
}

// storeFunc is a Store made of a function: the tests' stand-in for a store
// that fails in a chosen way.
type storeFunc func(ctx context.Context, key string, limits []Limit, dst []Result) ([]Result, error)

func (f storeFunc) CheckAll(ctx context.Context, key string, limits []Limit, dst []Result) ([]Result, error) {
	return f(ctx, key, limits, dst)
}

func TestMiddlewareStoreErrors(t *testing.T) {
	lim := Limit{Name: "api", Size: 10, DripRate: 100 * time.Millisecond}
	local := &Memory{Clock: (&fakeClock{now: t0}).Now}
	cause := errors.New("dial unix /run/redis.sock: connect: no such file or directory")
	for _, c := range []struct {
		name   string
		store  storeFunc
		code   int
		served bool
		header map[string]string
	}{
		{"FailClosed", func(_ context.Context, _ string, limits []Limit, dst []Result) ([]Result, error) {
			return append(dst, Result{Limit: limits[0], Blocked: true, RetryAfter: 1500 * time.Millisecond}),
				&UnavailableError{Policy: FailClosed, Err: cause, RetryAfter: 1500 * time.Millisecond}
		}, 503, false, map[string]string{"Retry-After": "2", "X-RateLimit-Remaining": ""}},
		{"FailOpen", func(_ context.Context, _ string, limits []Limit, dst []Result) ([]Result, error) {
			return append(dst, Result{Limit: limits[0], Remaining: 9, Level: 1}), &UnavailableError{Policy: FailOpen, Err: cause}
		}, 200, true, map[string]string{"X-RateLimit-Remaining": "", "Retry-After": ""}},
		{"FailLocal", func(ctx context.Context, key string, limits []Limit, dst []Result) ([]Result, error) {
			res, _ := local.CheckAll(ctx, key, limits, dst)
			return res, &UnavailableError{Policy: FailLocal, Err: cause}
		}, 200, true, map[string]string{"X-RateLimit-Remaining": "9", "X-RateLimit-Clear": "0.100"}},
		{"other error", func(_ context.Context, _ string, _ []Limit, dst []Result) ([]Result, error) {
			return dst, errors.New("boom")
		}, 500, false, map[string]string{"X-RateLimit-Remaining": ""}},
		{"short results", func(_ context.Context, _ string, _ []Limit, dst []Result) ([]Result, error) {
			return dst, &UnavailableError{Policy: FailOpen, Err: cause}
		}, 503, false, nil},
	} {
		var events []Event
		mw, err := NewMiddleware(c.store, MiddlewareOptions{Limits: []Limit{lim}, Observe: func(e Event) { events = append(events, e) }})
		if err != nil {
			t.Fatal(err)
		}
		next := &served{}
		w := do(mw(next), "203.0.113.7:1")
		if w.Code != c.code || (next.n == 1) != c.served {
			t.Fatalf("%s: %d, served %v", c.name, w.Code, next.n == 1)
		}
		wantHeaders(t, w, c.header)
		if !c.served {
			p := decodeProblem(t, w)
			// 503: the draft's problem type for reduced capacity, with the
			// wait; 500: about:blank, revealing nothing.
			wantType, wantRetry := "about:blank", 0.0
			if c.code == 503 {
				wantType = ProblemTemporaryReducedCapacity
				if c.name == "FailClosed" {
					wantRetry = 1.5
				}
			}
			if p.Status != c.code || p.Type != wantType || p.RetryAfter != wantRetry || strings.Contains(p.Detail, "boom") {
				t.Fatalf("%s: problem %+v", c.name, p)
			}
		}
		if len(events) != 1 || events[0].Err == nil || events[0].Blocked == c.served || events[0].Key != "203.0.113.7" {
			t.Fatalf("%s: events %+v", c.name, events)
		}
	}

	// A request whose client has gone: nothing is written.
	mw, _ := NewMiddleware(storeFunc(func(ctx context.Context, _ string, _ []Limit, dst []Result) ([]Result, error) {
		return dst, ctx.Err()
	}), MiddlewareOptions{Limits: []Limit{lim}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	w := httptest.NewRecorder()
	next := &served{}
	mw(next).ServeHTTP(w, r)
	if w.Body.Len() != 0 || len(w.Header()) != 0 || next.n != 0 {
		t.Fatalf("cancelled request: %d %v %q", w.Code, w.Header(), w.Body)
	}
}

func TestMiddlewareObserveAndOnBlocked(t *testing.T) {
	lim := Limit{Name: "api", Size: 1, DripRate: time.Minute}
	var events []Event
	mw, _ := NewMiddleware(&Memory{Clock: (&fakeClock{now: t0}).Now}, MiddlewareOptions{
		Limits:  []Limit{lim},
		Observe: func(e Event) { events = append(events, e) },
		OnBlocked: func(w http.ResponseWriter, r *http.Request, results []Result) {
			// The headers are set before OnBlocked runs.
			w.Header().Set("X-Seen-Retry-After", w.Header().Get("Retry-After"))
			w.WriteHeader(http.StatusServiceUnavailable)
		},
	})
	h := mw(&served{})
	do(h, "203.0.113.7:1")
	w := do(h, "203.0.113.7:1")
	if w.Code != 503 || w.Header().Get("X-Seen-Retry-After") != "60" {
		t.Fatalf("OnBlocked: %d %v", w.Code, w.Header())
	}
	if len(events) != 2 || events[0].Blocked || !events[1].Blocked || events[1].Err != nil ||
		len(events[1].Results) != 1 || events[1].Results[0].RetryAfter != time.Minute || events[1].Duration < 0 {
		t.Fatalf("events %+v", events)
	}
}

func TestNewMiddlewareErrors(t *testing.T) {
	var m Memory
	for _, opts := range []MiddlewareOptions{
		{},
		{Limits: []Limit{{}}},
		{Limits: []Limit{{Size: 1}, {Size: 2}}},
		{Limits: []Limit{{Name: "a", Size: 1}, {Name: "a", Size: 2}}},
	} {
		if _, err := NewMiddleware(&m, opts); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%+v: %v", opts, err)
		}
	}
	if _, err := NewMiddleware(nil, MiddlewareOptions{Limits: []Limit{{Size: 1}}}); err == nil {
		t.Error("nil store accepted")
	}
	// The options' Limits are copied: changing the caller's slice later
	// changes nothing.
	limits := []Limit{{Size: 1, DripRate: time.Hour}}
	mw, _ := NewMiddleware(&Memory{}, MiddlewareOptions{Limits: limits})
	limits[0].Size = 100
	h := mw(&served{})
	do(h, "203.0.113.7:1")
	if w := do(h, "203.0.113.7:1"); w.Code != 429 {
		t.Fatalf("limits changed under the middleware: %d", w.Code)
	}
}

func TestMiddlewareRedisKilled(t *testing.T) {
	// The default policy with a real Redis gone: 503 with Retry-After, at
	// once, and service resumes when Redis is back.
	s := redistest.Start(t)
	c := newTestClient(t, s)
	store, _ := NewRedis(c, RedisOptions{})
	mw, _ := NewMiddleware(store, MiddlewareOptions{Limits: []Limit{{Name: "api", Size: 10, DripRate: 100 * time.Millisecond}}})
	next := &served{}
	h := mw(next)
	if w := do(h, "203.0.113.7:1"); w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "9" {
		t.Fatalf("before: %d %v", w.Code, w.Header())
	}
	s.Kill()
	began := time.Now()
	w := do(h, "203.0.113.7:1")
	if took := time.Since(began); w.Code != 503 || w.Header().Get("Retry-After") != "1" || took > DefaultTimeout+400*time.Millisecond {
		t.Fatalf("Redis down: %d %v after %v", w.Code, w.Header(), took)
	}
	s.Restart(t)
	if w := do(h, "203.0.113.7:1"); w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "9" {
		t.Fatalf("after: %d %v", w.Code, w.Header())
	}
	if next.n != 2 {
		t.Fatalf("served %d", next.n)
	}
}
