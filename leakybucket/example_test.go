package leakybucket_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/leakybucket"
)

var t0 = time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)

func ExampleBucket() {
	// 3 calls at once, then one every 1.5 s.
	lim := leakybucket.Limit{Size: 3, DripRate: 1500 * time.Millisecond}
	var b leakybucket.Bucket
	for i := range 4 {
		r, _ := b.Check(lim, t0)
		fmt.Printf("call %d: blocked=%v remaining=%d\n", i+1, r.Blocked, r.Remaining)
	}
	r, _ := b.Check(lim, t0.Add(745*time.Millisecond))
	fmt.Println("745 ms later: blocked =", r.Blocked, "retry after", r.RetryAfter, "clear after", r.ClearAfter)
	r, _ = b.Check(lim, t0.Add(1500*time.Millisecond))
	fmt.Println("at the first drip: blocked =", r.Blocked)
	// Output:
	// call 1: blocked=false remaining=2
	// call 2: blocked=false remaining=1
	// call 3: blocked=false remaining=0
	// call 4: blocked=true remaining=0
	// 745 ms later: blocked = true retry after 755ms clear after 3.755s
	// at the first drip: blocked = false
}

func ExampleMemory_CheckAt() {
	var store leakybucket.Memory // the zero value is ready; safe for concurrent use
	lim := leakybucket.Limit{Name: "login", Size: 2, DripRate: time.Minute}
	for _, client := range []string{"alice", "alice", "alice", "bob"} {
		r, _ := store.CheckAt(client, lim, t0)
		fmt.Println(client, "blocked:", r.Blocked)
	}
	// Output:
	// alice blocked: false
	// alice blocked: false
	// alice blocked: true
	// bob blocked: false
}

func ExampleMemory_CheckAllAt() {
	// Several limits at once: a call is admitted only if every one admits
	// it, and only then charged to each.
	var store leakybucket.Memory
	limits := []leakybucket.Limit{
		{Name: "burst", Size: 5, DripRate: time.Second},
		{Name: "hourly", Size: 6, DripRate: 10 * time.Minute},
	}
	var results []leakybucket.Result
	for i := range 7 {
		now := t0.Add(time.Duration(i) * 2 * time.Second)
		results, _ = store.CheckAllAt("alice", limits, results[:0], now)
		fmt.Printf("call %d: burst blocked=%v, hourly blocked=%v\n", i+1, results[0].Blocked, results[1].Blocked)
	}
	// Output:
	// call 1: burst blocked=false, hourly blocked=false
	// call 2: burst blocked=false, hourly blocked=false
	// call 3: burst blocked=false, hourly blocked=false
	// call 4: burst blocked=false, hourly blocked=false
	// call 5: burst blocked=false, hourly blocked=false
	// call 6: burst blocked=false, hourly blocked=false
	// call 7: burst blocked=false, hourly blocked=true
}

func ExampleLegacy_Translate() {
	// The seed's legacy limits become buckets as the seed translates them.
	for _, l := range []leakybucket.Legacy{
		{Max: 10, Duration: time.Second},
		{Max: 100, Duration: time.Second, MinInterval: 50 * time.Millisecond},
		{MinInterval: 250 * time.Millisecond},
		{Max: 10}, // a zero Duration disables the limit
	} {
		lim, ok, err := l.Translate()
		switch {
		case err != nil:
			fmt.Println(err)
		case !ok:
			fmt.Printf("max %d per %v, min interval %v: no limit\n", l.Max, l.Duration, l.MinInterval)
		default:
			fmt.Printf("max %d per %v, min interval %v: %v\n", l.Max, l.Duration, l.MinInterval, lim)
		}
	}
	// Output:
	// max 10 per 1s, min interval 0s: default: size 10, 1 every 100ms
	// max 100 per 1s, min interval 50ms: default: size 100, 5 every 50ms
	// max 0 per 0s, min interval 250ms: default: size 1, 1 every 250ms
	// max 10 per 0s, min interval 0s: no limit
}

func ExampleSetHeaders() {
	lim := leakybucket.Limit{Name: "notes", Size: 3, DripRate: 1500 * time.Millisecond}
	var b leakybucket.Bucket
	for range 3 {
		b.Check(lim, t0)
	}
	r, _ := b.Check(lim, t0.Add(745*time.Millisecond))
	h := http.Header{}
	leakybucket.SetHeaders(h, true, r)
	printHeaders(h)
	// Output:
	// Ratelimit: "notes";r=0;t=1
	// Ratelimit-Policy: "notes";q=3;w=5
	// Retry-After: 1
	// X-Ratelimit-Clear: 3.755
	// X-Ratelimit-Remaining: 0
	// X-Ratelimit-Reset: 0.755
}

func printHeaders(h http.Header) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("%s: %s\n", k, strings.Join(h[k], ", "))
	}
}

func ExampleNewMiddleware() {
	// The example server's limit: 10 at once per client, then one every
	// 100 ms. (A fake clock keeps the output fixed; leave Clock nil.)
	store := &leakybucket.Memory{Clock: func() time.Time { return t0 }}
	mw, err := leakybucket.NewMiddleware(store, leakybucket.MiddlewareOptions{
		Limits: []leakybucket.Limit{{Name: "api", Size: 10, DripRate: 100 * time.Millisecond}},
	})
	if err != nil {
		panic(err)
	}
	api := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") }))

	var last *httptest.ResponseRecorder
	for range 11 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.7:4321"
		last = httptest.NewRecorder()
		api.ServeHTTP(last, r)
	}
	fmt.Println(last.Code)
	printHeaders(last.Header())
	fmt.Print(last.Body.String())
	// Output:
	// 429
	// Cache-Control: no-store
	// Content-Length: 264
	// Content-Type: application/problem+json
	// Retry-After: 1
	// X-Ratelimit-Clear: 1.000
	// X-Ratelimit-Remaining: 0
	// X-Ratelimit-Reset: 0.100
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"rate limit \"api\" exceeded: retry in 0.100 s","violated-policies":["api"],"retry-after":0.1}
}

type userKey struct{}

func ExampleNewMiddleware_userID() {
	// Authenticated requests are limited per user (wherever they come
	// from), anonymous ones per client address. The authentication
	// middleware puts the user id in the request's context.
	store := &leakybucket.Memory{Clock: func() time.Time { return t0 }}
	mw, _ := leakybucket.NewMiddleware(store, leakybucket.MiddlewareOptions{
		Limits: []leakybucket.Limit{{Name: "posts", Size: 1, DripRate: time.Minute}},
		Key: func(r *http.Request) string {
			if id, ok := r.Context().Value(userKey{}).(string); ok {
				return "user:" + id
			}
			return "ip:" + leakybucket.IPKey{}.Key(r)
		},
	})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, c := range []struct{ user, addr string }{
		{"42", "203.0.113.7:1"},
		{"42", "198.51.100.9:1"}, // same user, another address: same bucket
		{"", "198.51.100.9:1"},   // anonymous: the address's bucket
	} {
		r := httptest.NewRequest("POST", "/posts", nil)
		r.RemoteAddr = c.addr
		if c.user != "" {
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, c.user))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("user %q from %s: %d\n", c.user, c.addr, w.Code)
	}
	// Output:
	// user "42" from 203.0.113.7:1: 200
	// user "42" from 198.51.100.9:1: 429
	// user "" from 198.51.100.9:1: 200
}

func ExampleNewMiddleware_metrics() {
	// Observe is the metrics hook: count decisions per limit, store errors
	// and store latency with the metrics library of your choice.
	var mu sync.Mutex
	counts := map[string]int{}
	store := &leakybucket.Memory{Clock: func() time.Time { return t0 }}
	mw, _ := leakybucket.NewMiddleware(store, leakybucket.MiddlewareOptions{
		Limits: []leakybucket.Limit{{Name: "api", Size: 2}},
		Observe: func(e leakybucket.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(e.Err, leakybucket.ErrUnavailable):
				counts["store_unavailable"]++
			case e.Err != nil:
				counts["store_error"]++
			}
			for _, r := range e.Results {
				if r.Blocked {
					counts["blocked:"+r.Limit.Name]++
				} else if !e.Blocked {
					counts["admitted:"+r.Limit.Name]++
				}
			}
		},
	})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 5 {
		r := httptest.NewRequest("GET", "/", nil)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	fmt.Println(counts)
	// Output:
	// map[admitted:api:2 blocked:api:3]
}

func ExampleIPKey() {
	// Behind a load balancer in 10.0.0.0/8: the client is the rightmost
	// X-Forwarded-For entry the balancer appended, not what the client
	// wrote itself.
	key := leakybucket.IPKey{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.5:41000"
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 203.0.113.7")
	fmt.Println(key.Key(r))
	r.RemoteAddr = "[2001:db8:1:2:3:4:5:6]:41000" // not a trusted proxy: X-Forwarded-For is ignored
	fmt.Println(key.Key(r))
	// Output:
	// 203.0.113.7
	// 2001:db8:1:2::/64
}

func ExampleLimit_Share() {
	// Three nodes that fall back to local limits while Redis is down each
	// enforce a third.
	lim := leakybucket.Limit{Name: "api", Size: 30, DripRate: 100 * time.Millisecond}
	fmt.Println(lim.Share(3))
	// Output:
	// api: size 10, 1 every 300ms
}

func ExampleNewRedis() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	store, err := leakybucket.NewRedis(client, leakybucket.RedisOptions{
		// While Redis is unreachable, each of the 3 nodes limits on its
		// own with a third of every limit.
		OnUnavailable: leakybucket.FailLocal,
		FallbackShare: 3,
	})
	if err != nil {
		panic(err)
	}
	res, err := store.Check(context.Background(), "203.0.113.7", leakybucket.Limit{Name: "api", Size: 10, DripRate: 100 * time.Millisecond})
	if errors.Is(err, leakybucket.ErrUnavailable) {
		fmt.Println("decided locally:", err)
	} else if err != nil {
		panic(err)
	}
	fmt.Println("blocked:", res.Blocked, "remaining:", res.Remaining)
}

func ExampleMemory_CheckNAt() {
	// A quota of bytes: 1,000 at once, then 100 every second. A call costs
	// its body's size; the call, or every limit of it, is admitted whole or
	// not at all, and Remaining and RetryAfter count in bytes.
	var store leakybucket.Memory
	limits := []leakybucket.Limit{{Name: "upload-bytes", Size: 1000, DripRate: time.Second, DripSize: 100}}
	for _, size := range []int{600, 300, 250, 100} {
		r, _ := store.CheckNAt("alice", size, limits, nil, t0)
		fmt.Printf("%d bytes: blocked=%v remaining=%d retry after %v\n", size, r[0].Blocked, r[0].Remaining, r[0].RetryAfter)
	}
	// RetryAfter is the wait of another call of the same size.
	// Output:
	// 600 bytes: blocked=false remaining=400 retry after 2s
	// 300 bytes: blocked=false remaining=100 retry after 2s
	// 250 bytes: blocked=true remaining=100 retry after 2s
	// 100 bytes: blocked=false remaining=0 retry after 1s
}

func ExampleMemory_PeekAt() {
	// Show a client its quota without spending any of it.
	var store leakybucket.Memory
	limits := []leakybucket.Limit{{Name: "api", Size: 10, DripRate: time.Second}}
	for range 7 {
		store.CheckAt("alice", limits[0], t0)
	}
	r, _ := store.PeekAt("alice", limits, nil, t0.Add(1500*time.Millisecond))
	fmt.Printf("remaining %d of %d, full again in %v\n", r[0].Remaining, r[0].Limit.Size, r[0].ClearAfter)
	r, _ = store.PeekAt("alice", limits, nil, t0.Add(1500*time.Millisecond))
	fmt.Println("peeking took nothing: remaining", r[0].Remaining)
	// Output:
	// remaining 4 of 10, full again in 5.5s
	// peeking took nothing: remaining 4
}

func ExampleMemory_SetAt() {
	var store leakybucket.Memory
	limits := []leakybucket.Limit{{Name: "login", Size: 5, DripRate: time.Minute}}
	// A penalty: fill the bucket, blocking the key until its next drip.
	r, _ := store.SetAt("mallory", 5, limits, nil, t0)
	fmt.Println("blocked:", r[0].Blocked, "for", r[0].RetryAfter)
	// After a support request, lift the limit: Reset empties the bucket
	// (as SetAt with level 0 does).
	store.Reset(context.Background(), "mallory", limits)
	c, _ := store.CheckAt("mallory", limits[0], t0.Add(time.Second))
	fmt.Println("after Reset: blocked:", c.Blocked, "remaining", c.Remaining)
	// Output:
	// blocked: true for 1m0s
	// after Reset: blocked: false remaining 4
}

func ExampleRedis_Reset() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	store, err := leakybucket.NewRedis(client, leakybucket.RedisOptions{})
	if err != nil {
		panic(err)
	}
	limits := []leakybucket.Limit{
		{Name: "burst", Size: 10, DripRate: 100 * time.Millisecond},
		{Name: "hourly", Size: 1000, DripRate: 3600 * time.Millisecond},
	}
	ctx := context.Background()
	// What the user has left, across every node, without spending it.
	if res, err := store.Peek(ctx, "user:42", limits, nil); err == nil {
		fmt.Println("remaining this hour:", res[1].Remaining)
	}
	// Lift both limits of the user at once, on every node.
	if err := store.Reset(ctx, "user:42", limits); err != nil {
		fmt.Println("not reset:", err) // wraps ErrUnavailable
	}
}

func ExampleHeaderOptions_Set() {
	// The seed's headers, the draft's fields and X-RateLimit-Limit.
	var store leakybucket.Memory
	lim := leakybucket.Limit{Name: "api", Size: 10, DripRate: 100 * time.Millisecond}
	r, _ := store.CheckAt("alice", lim, t0)
	h := http.Header{}
	leakybucket.HeaderOptions{Draft: true, Limit: true}.Set(h, r)
	printHeaders(h)
	// Output:
	// Ratelimit: "api";r=9;t=1
	// Ratelimit-Policy: "api";q=10;w=1
	// X-Ratelimit-Clear: 0.100
	// X-Ratelimit-Limit: 10
	// X-Ratelimit-Remaining: 9
}
