package leakybucket

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
	"golang.org/x/time/rate"
)

// benchLimit is a real bucket that never fills within a benchmark (calls
// come every nanosecond of fake time, or every ~100 ns of real time, and it
// drains a thousand per microsecond), so every check takes the admitting
// path, which writes. benchRate is the x/time/rate limiter that likewise
// admits every call.
var (
	benchLimit = Limit{Name: "api", Size: 1 << 20, DripRate: time.Microsecond, DripSize: 1000}
	benchRate  = func() *rate.Limiter { return rate.NewLimiter(rate.Limit(1e12), 1<<30) }
)

// BenchmarkMemoryCheckAt: one key, the time given (as rate.Limiter.AllowN
// takes it).
func BenchmarkMemoryCheckAt(b *testing.B) {
	var m Memory
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if r, _ := m.CheckAt("203.0.113.7", benchLimit, now.Add(time.Duration(i))); r.Blocked {
			b.Fatal("blocked")
		}
	}
}

// BenchmarkMemoryCheck: one key, reading time.Now (as rate.Limiter.Allow
// does).
func BenchmarkMemoryCheck(b *testing.B) {
	var m Memory
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if r, _ := m.Check(ctx, "203.0.113.7", benchLimit); r.Blocked {
			b.Fatal("blocked")
		}
	}
}

// BenchmarkBucketCheck: the model alone, no map and no lock.
func BenchmarkBucketCheck(b *testing.B) {
	var bk Bucket
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bk.Check(benchLimit, now.Add(time.Duration(i)))
	}
}

// BenchmarkMemoryCheckAllAt: two limits at once.
func BenchmarkMemoryCheckAllAt(b *testing.B) {
	var m Memory
	limits := []Limit{benchLimit, {Name: "hour", Size: 1 << 20, DripRate: time.Millisecond, DripSize: 1000}}
	dst := make([]Result, 0, 2)
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		dst, _ = m.CheckAllAt("203.0.113.7", limits, dst[:0], now.Add(time.Duration(i)))
	}
}

// parallelLimit keeps each of 10,000 keys' buckets for a second after its
// last call (they must not drain between two visits, or every check would
// create its bucket anew), and never fills at these rates.
var parallelLimit = Limit{Name: "api", Size: 1 << 20, DripRate: time.Second, DripSize: 1 << 20}

// BenchmarkMemoryCheckParallel: GOMAXPROCS goroutines over 10,000 keys.
func BenchmarkMemoryCheckParallel(b *testing.B) {
	var m Memory
	keys := benchKeys()
	ctx := context.Background()
	var seq atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := seq.Add(1) * 7919
		for pb.Next() {
			i++
			if r, _ := m.Check(ctx, keys[i%uint64(len(keys))], parallelLimit); r.Blocked {
				b.Error("blocked")
				return
			}
		}
	})
}

// BenchmarkRateKeyedParallel is x/time/rate used the way a keyed limiter
// must use it: a sync.Map from key to *rate.Limiter, Load then Allow.
func BenchmarkRateKeyedParallel(b *testing.B) {
	var limiters sync.Map
	keys := benchKeys()
	for _, k := range keys {
		limiters.Store(k, benchRate())
	}
	var seq atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := seq.Add(1) * 7919
		for pb.Next() {
			i++
			lim, _ := limiters.Load(keys[i%uint64(len(keys))])
			if !lim.(*rate.Limiter).Allow() {
				b.Error("refused")
				return
			}
		}
	})
}

// BenchmarkRateKeyed is BenchmarkRateAllow behind a sync.Map of one key:
// the keyed counterpart of BenchmarkMemoryCheck.
func BenchmarkRateKeyed(b *testing.B) {
	var limiters sync.Map
	limiters.Store("203.0.113.7", benchRate())
	b.ReportAllocs()
	for b.Loop() {
		lim, _ := limiters.Load("203.0.113.7")
		if !lim.(*rate.Limiter).Allow() {
			b.Fatal("refused")
		}
	}
}

func benchKeys() []string {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkRateAllow is golang.org/x/time/rate's Limiter.Allow, the target.
func BenchmarkRateAllow(b *testing.B) {
	lim := benchRate()
	b.ReportAllocs()
	for b.Loop() {
		if !lim.Allow() {
			b.Fatal("refused")
		}
	}
}

// BenchmarkRateAllowN is Limiter.AllowN with the time given.
func BenchmarkRateAllowN(b *testing.B) {
	lim := benchRate()
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if !lim.AllowN(now.Add(time.Duration(i)), 1) {
			b.Fatal("refused")
		}
	}
}

// BenchmarkRedisCheck: one check at a time on one key, over a unix socket:
// the latency of a check (checks/s = 1e9 / ns/op), with the default
// Timeout (the client's WithTimeout clone and a context deadline; no
// goroutine of the store's own).
func BenchmarkRedisCheck(b *testing.B) { benchRedisCheck(b, 0) }

// BenchmarkRedisCheckNoTimeout is BenchmarkRedisCheck with Timeout -1: the
// client as it is, bounded only by the context.
func BenchmarkRedisCheckNoTimeout(b *testing.B) { benchRedisCheck(b, -1) }

func benchRedisCheck(b *testing.B, timeout time.Duration) {
	s := redistest.Start(b)
	r, _ := NewRedis(s.Client(b), RedisOptions{Timeout: timeout})
	ctx := context.Background()
	if _, err := r.Check(ctx, "203.0.113.7", benchLimit); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Check(ctx, "203.0.113.7", benchLimit); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRedisThroughput: 64 goroutines over 10,000 keys on one Redis:
// how many checks per second one Redis decides, with the default Timeout
// (100 ms). "refused/op" counts the checks that Timeout cut (decided by
// FailClosed): on a saturated machine a check now and then waits longer.
func BenchmarkRedisThroughput(b *testing.B) { benchRedisThroughput(b, 0) }

// BenchmarkRedisThroughputNoTimeout is BenchmarkRedisThroughput with
// Timeout -1.
func BenchmarkRedisThroughputNoTimeout(b *testing.B) { benchRedisThroughput(b, -1) }

func benchRedisThroughput(b *testing.B, timeout time.Duration) {
	s := redistest.Start(b)
	c := newTestClient(b, s, func(o *redis.Options) { o.PoolSize = 64 })
	r, _ := NewRedis(c, RedisOptions{Timeout: timeout})
	ctx := context.Background()
	if _, err := r.Check(ctx, "warm", benchLimit); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Uint64
	var refused atomic.Int64
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	began := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		i := seq.Add(1) * 7919
		for pb.Next() {
			i++
			_, err := r.Check(ctx, fmt.Sprint("client-", i%10_000), benchLimit)
			switch {
			case errors.Is(err, ErrUnavailable):
				refused.Add(1)
			case err != nil:
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "checks/s")
	b.ReportMetric(float64(refused.Load())/float64(b.N), "refused/op")
}

// drainedLimit is a bucket of 10 that drips 10 every microsecond: between
// two visits of a key (a round over 10,000 keys) its bucket has fully
// drained, so every check finds it empty (or forgotten) and starts it
// anew. drainedRate is the x/time/rate limiter of the same rate and burst.
var (
	drainedLimit = Limit{Name: "api", Size: 10, DripRate: time.Microsecond, DripSize: 10}
	drainedRate  = func() *rate.Limiter { return rate.NewLimiter(rate.Every(time.Microsecond/10), 10) }
)

// BenchmarkMemoryCheckDrained: one goroutine over 10,000 keys, each
// visited after its bucket has drained (the store has usually forgotten
// it by then: a client that comes back after a pause).
func BenchmarkMemoryCheckDrained(b *testing.B) {
	var m Memory
	keys := benchKeys()
	ctx := context.Background()
	for _, k := range keys {
		m.Check(ctx, k, drainedLimit)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if r, _ := m.Check(ctx, keys[i%len(keys)], drainedLimit); r.Blocked {
			b.Fatal("blocked")
		}
	}
}

// BenchmarkRateKeyedDrained is the same with a sync.Map of *rate.Limiter:
// each visited limiter is full again.
func BenchmarkRateKeyedDrained(b *testing.B) {
	var limiters sync.Map
	keys := benchKeys()
	for _, k := range keys {
		limiters.Store(k, drainedRate())
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		lim, _ := limiters.Load(keys[i%len(keys)])
		if !lim.(*rate.Limiter).Allow() {
			b.Fatal("refused")
		}
	}
}
