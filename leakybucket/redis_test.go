package leakybucket

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// newTestClient connects to s with a pool large enough that the outage
// tests never trip go-redis's dial circuit breaker, and a single dial
// attempt; then applies each of more to the options.
func newTestClient(t testing.TB, s *redistest.Server, more ...func(*redis.Options)) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	opt.PoolSize = 64
	opt.DialerRetries = 1
	for _, f := range more {
		f(opt)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// fakeClock is a clock the test moves; safe for concurrent use.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// TestRedisMatchesMemory runs one schedule of calls on a fake clock, in
// whole microseconds, through the Redis store (its script reading the
// clock from an argument instead of TIME) and the Memory store: every
// result, field by field, must be the same, for single checks and checks of
// two limits over three keys, of cost 1 and of costs 0 to 7.
func TestRedisMatchesMemory(t *testing.T) {
	s := redistest.Start(t)
	clock := &fakeClock{now: t0}
	r, err := NewRedis(newTestClient(t, s), RedisOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.now, r.minTTL = clock.Now, time.Hour // keys must not expire by Redis's own clock
	m := &Memory{}
	limits := []Limit{
		{Name: "burst", Size: 7, DripRate: 30 * time.Millisecond, DripSize: 2},
		{Name: "steady", Size: 20, DripRate: 15 * time.Millisecond},
	}
	rng := rand.New(rand.NewPCG(13, 7))
	ctx := context.Background()
	now := t0
	admitted := 0
	for i := range 1500 {
		switch d := rng.IntN(10); {
		case d < 5: // a burst: same instant
		case d < 9:
			now = now.Add(time.Duration(rng.IntN(1500)) * time.Microsecond)
		default:
			now = now.Add(time.Duration(rng.IntN(40)) * time.Millisecond)
		}
		clock.Set(now)
		key := fmt.Sprint("client-", rng.IntN(3))
		lims := limits[:1+rng.IntN(2)]
		if rng.IntN(3) == 0 {
			lims = limits[1:]
		}
		cost := 1 // and a third of the calls cost 0 to 7 (the least Size)
		if rng.IntN(3) == 0 {
			cost = rng.IntN(8)
		}
		want, err := m.CheckNAt(key, cost, lims, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		var got []Result
		if cost == 1 {
			got, err = r.CheckAll(ctx, key, lims, nil)
		} else {
			got, err = r.CheckN(ctx, key, cost, lims, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		for j := range want {
			if !sameResult(got[j], want[j]) {
				t.Fatalf("call %d (%s, %d limits) at %v, limit %s: Redis %+v, Memory %+v", i, key, len(lims), now.Sub(t0), lims[j].Name, got[j], want[j])
			}
		}
		if !want[0].Blocked {
			admitted++
		}
	}
	if admitted < 300 || admitted > 1200 {
		t.Fatalf("%d of 1500 admitted: the schedule does not test both outcomes", admitted)
	}
}

func sameResult(a, b Result) bool {
	return a.At.Equal(b.At) && a.Limit == b.Limit && a.Cost == b.Cost && a.Blocked == b.Blocked && a.Remaining == b.Remaining &&
		a.Level == b.Level && a.RetryAfter == b.RetryAfter && a.ClearAfter == b.ClearAfter && a.NextDrip == b.NextDrip
}

func TestRedisKeysExpireWithTheBucket(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, s)
	r, err := NewRedis(c, RedisOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lim := Limit{Name: "api", Size: 3, DripRate: 700 * time.Millisecond}
	var last Result
	for i := range 3 {
		sent := time.Now()
		last, err = r.Check(ctx, "203.0.113.7", lim)
		if err != nil || last.Blocked || last.Level != i+1 {
			t.Fatalf("call %d: %+v %v", i, last, err)
		}
		pttl := c.PTTL(ctx, "leakybucket:{203.0.113.7}:api").Val()
		// The key expires when the bucket has drained: PTTL is its
		// ClearAfter (rounded up to the ms) less the time since the script.
		max := time.Duration(ceilMillis(last.ClearAfter)) * time.Millisecond
		if pttl > max || pttl < max-time.Since(sent)-time.Millisecond {
			t.Fatalf("call %d: PTTL %v, ClearAfter %v (%v since the call)", i, pttl, last.ClearAfter, time.Since(sent))
		}
	}
	v := c.Get(ctx, "leakybucket:{203.0.113.7}:api").Val()
	if !strings.HasPrefix(v, "3:") || fmt.Sprintf("3:%d", last.At.Add(-(700*time.Millisecond-last.NextDrip)).UnixMicro()) != v {
		t.Fatalf("key holds %q, result %+v", v, last)
	}
	// A blocked call writes nothing: the key's expiry stays where it was.
	before := c.PTTL(ctx, "leakybucket:{203.0.113.7}:api").Val()
	if res, _ := r.Check(ctx, "203.0.113.7", lim); !res.Blocked {
		t.Fatalf("fourth call: %+v", res)
	}
	if after := c.PTTL(ctx, "leakybucket:{203.0.113.7}:api").Val(); after > before {
		t.Fatalf("a blocked call moved the expiry from %v to %v", before, after)
	}
	// Prefix.
	r2, _ := NewRedis(c, RedisOptions{Prefix: "rl:"})
	r2.Check(ctx, "u1", Limit{Size: 1})
	if n := c.Exists(ctx, "rl:{u1}:default").Val(); n != 1 {
		t.Fatalf("prefixed key missing")
	}
}

// countHook counts the commands a client sends, by name.
type countHook struct {
	mu    sync.Mutex
	names []string
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.names = append(h.names, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		for _, c := range cmds {
			h.names = append(h.names, "pipeline:"+c.Name())
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns the commands counted since the last take, without those
// that set up a new connection (HELLO, CLIENT SETINFO).
func (h *countHook) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n []string
	for _, name := range h.names {
		if name != "hello" && name != "client" && name != "pipeline:client" {
			n = append(n, name)
		}
	}
	h.names = nil
	return n
}

func TestRedisOneRoundTripPerCheck(t *testing.T) {
	s := redistest.Start(t)
	// With ContextTimeoutEnabled the store uses the client as it is, hooks
	// and all (a default client's WithTimeout clone runs none of them).
	c := newTestClient(t, s, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	hook := &countHook{}
	c.AddHook(hook)
	r, _ := NewRedis(c, RedisOptions{})
	ctx := context.Background()
	two := []Limit{{Name: "burst", Size: 5, DripRate: time.Second}, {Name: "hour", Size: 100, DripRate: 36 * time.Second}}

	// The first check finds no script cached: EVALSHA, NOSCRIPT, then EVAL.
	if _, err := r.CheckAll(ctx, "k", two, nil); err != nil {
		t.Fatal(err)
	}
	if got := hook.take(); strings.Join(got, " ") != "evalsha eval" {
		t.Fatalf("first check sent %v", got)
	}
	// From then on: one EVALSHA per check, one or several limits, admitted
	// or blocked.
	for i := range 50 {
		var err error
		if i%2 == 0 {
			_, err = r.CheckAll(ctx, "k", two, nil)
		} else {
			_, err = r.Check(ctx, fmt.Sprint("other-", i), two[0])
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := hook.take(); len(got) != 1 || got[0] != "evalsha" {
			t.Fatalf("check %d sent %v", i, got)
		}
	}
	// A flushed script cache (a restarted Redis) costs one more EVAL.
	c.ScriptFlush(ctx)
	hook.take()
	r.Check(ctx, "k", two[0])
	if got := hook.take(); strings.Join(got, " ") != "evalsha eval" {
		t.Fatalf("after SCRIPT FLUSH: %v", got)
	}
}

func TestRedisUnavailable(t *testing.T) {
	s := redistest.Start(t)
	// One client fails at once when Redis refuses connections (no retries);
	// the other has go-redis's default retries, which only Timeout cuts.
	c := newTestClient(t, s, func(o *redis.Options) { o.MaxRetries = -1 })
	retrying := redis.NewClient(&redis.Options{Network: "unix", Addr: s.Socket})
	defer retrying.Close()
	ctx := context.Background()
	lim := Limit{Name: "api", Size: 10, DripRate: 100 * time.Millisecond}
	fallbackClock := &fakeClock{now: t0}
	const timeout = 100 * time.Millisecond
	stores := map[Policy]*Redis{}
	for _, p := range []Policy{FailClosed, FailOpen, FailLocal} {
		opts := RedisOptions{Timeout: timeout, OnUnavailable: p}
		if p == FailLocal {
			opts.Fallback = &Memory{Clock: fallbackClock.Now}
			opts.FallbackShare = 2
		}
		r, err := NewRedis(c, opts)
		if err != nil {
			t.Fatal(err)
		}
		stores[p] = r
		if res, err := r.Check(ctx, "before", lim); err != nil || res.Blocked {
			t.Fatalf("%v before the outage: %+v %v", p, res, err)
		}
	}
	slow, _ := NewRedis(retrying, RedisOptions{Timeout: timeout})
	if _, err := slow.Check(ctx, "before", lim); err != nil {
		t.Fatal(err)
	}

	s.Kill()
	// check runs one check, which must come back within the timeout
	// (plus scheduling slack) with an *UnavailableError.
	check := func(p Policy, key string) Result {
		t.Helper()
		began := time.Now()
		res, err := stores[p].Check(ctx, key, lim)
		if took := time.Since(began); took > timeout+400*time.Millisecond {
			t.Fatalf("%v: a check took %v with Redis down", p, took)
		}
		var uerr *UnavailableError
		if !errors.Is(err, ErrUnavailable) || !errors.As(err, &uerr) || uerr.Policy != p || uerr.Err == nil {
			t.Fatalf("%v: error %v", p, err)
		}
		return res
	}

	// With retries, a check takes the whole Timeout, and no more.
	began := time.Now()
	res, err := slow.Check(ctx, "k", lim)
	if took := time.Since(began); took < timeout || took > timeout+400*time.Millisecond || !errors.Is(err, ErrUnavailable) || !res.Blocked {
		t.Fatalf("retrying client: %+v %v after %v", res, err, took)
	}

	// FailClosed: blocked, come back after RetryAfter (1 s by default).
	for range 3 {
		res := check(FailClosed, "k")
		if !res.Blocked || res.Remaining != 0 || res.RetryAfter != time.Second || res.Limit != lim {
			t.Fatalf("FailClosed: %+v", res)
		}
	}
	// FailOpen: admitted, as if the bucket were empty.
	for range 3 {
		if res := check(FailOpen, "k"); res.Blocked || res.Remaining != lim.Size-1 {
			t.Fatalf("FailOpen: %+v", res)
		}
	}
	// FailLocal, shared by 2: a local bucket of 5 dripping every 200 ms.
	for i := range 6 {
		res := check(FailLocal, "k")
		if res.Blocked != (i == 5) || res.Limit.Size != 5 || res.Limit.DripRate != 200*time.Millisecond {
			t.Fatalf("FailLocal call %d: %+v", i, res)
		}
	}
	fallbackClock.Set(t0.Add(200 * time.Millisecond))
	if res := check(FailLocal, "k"); res.Blocked {
		t.Fatalf("FailLocal after a local drip: %+v", res)
	}

	// A caller that gives up gets its context's error, not a decision.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if res, err := stores[FailClosed].Check(cctx, "k", lim); !errors.Is(err, context.Canceled) || res != (Result{}) {
		t.Fatalf("cancelled: %+v %v", res, err)
	}

	// Redis comes back (empty, as a crashed server without persistence):
	// the stores use it again at once.
	s.Restart(t)
	stores[Policy(-1)] = slow
	for p, r := range stores {
		res, err := r.Check(ctx, fmt.Sprint("after-", p), lim)
		if err != nil || res.Blocked || res.Level != 1 {
			t.Fatalf("%v after the restart: %+v %v", p, res, err)
		}
	}
}

func TestRedisErrorReply(t *testing.T) {
	// A key that does not hold a bucket is an error reply: the policy
	// decides, and the error says why.
	s := redistest.Start(t)
	c := newTestClient(t, s)
	ctx := context.Background()
	c.Set(ctx, "leakybucket:{k}:default", "not a bucket", 0)
	r, _ := NewRedis(c, RedisOptions{})
	res, err := r.Check(ctx, "k", Limit{Size: 1})
	var rerr redis.Error
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &rerr) || !strings.Contains(err.Error(), "does not hold a bucket") || !res.Blocked {
		t.Fatalf("%+v %v", res, err)
	}
	// An invalid limit never reaches Redis.
	if _, err := r.Check(ctx, "k", Limit{}); !errors.Is(err, ErrInvalidLimit) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("invalid limit: %v", err)
	}
	if _, err := r.CheckAll(ctx, "k", []Limit{{Size: 1}, {Size: 2}}, nil); !errors.Is(err, ErrInvalidLimit) {
		t.Fatalf("two limits named default: %v", err)
	}
	if res, err := r.CheckAll(ctx, "k", nil, nil); err != nil || len(res) != 0 {
		t.Fatalf("no limits: %v %v", res, err)
	}
}

func TestNewRedisOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"})
	defer c.Close()
	if _, err := NewRedis(nil, RedisOptions{}); err == nil {
		t.Error("nil client accepted")
	}
	if _, err := NewRedis(c, RedisOptions{Prefix: "a{b}:"}); err == nil {
		t.Error("a prefix with '{' accepted")
	}
	if _, err := NewRedis(c, RedisOptions{OnUnavailable: Policy(7)}); err == nil || !strings.Contains(err.Error(), "Policy(7)") {
		t.Errorf("policy 7: %v", err)
	}
	r, err := NewRedis(c, RedisOptions{OnUnavailable: FailLocal})
	if err != nil || r.fallback == nil || r.timeout != DefaultTimeout || r.prefix != DefaultPrefix || r.retryAfter != time.Second {
		t.Errorf("defaults: %+v %v", r, err)
	}
}

// TestRedisHangingServer: a Redis that accepts connections and never
// answers (a network partition, a stopped process) must cost a check its
// Timeout and no more, and the policy decides.
func TestRedisHangingServer(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "hang.sock"))
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	defer func() {
		ln.Close()
		<-accepted
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: ln.Addr().String()})
	defer c.Close()
	const timeout = 150 * time.Millisecond
	r, _ := NewRedis(c, RedisOptions{Timeout: timeout, OnUnavailable: FailOpen})
	for range 3 {
		began := time.Now()
		res, err := r.Check(context.Background(), "k", Limit{Size: 3})
		took := time.Since(began)
		if !errors.Is(err, ErrUnavailable) || res.Blocked || took < timeout || took > timeout+400*time.Millisecond {
			t.Fatalf("%+v %v after %v", res, err, took)
		}
	}
}
