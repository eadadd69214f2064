package main

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/leakybucket"
)

// memoryKeys is how many keys the in-memory benchmarks spread their checks
// over.
const memoryKeys = 10_000

var memoryKeyNames = func() []string {
	keys := make([]string, memoryKeys)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	return keys
}()

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }

// memoryBenches returns the in-memory benchmarks: leakybucket's Memory and
// a sync.Map of *rate.Limiter, with buckets kept between visits and with
// buckets drained between visits.
func memoryBenches() []bench {
	// kept: a bucket that never fills at these rates and holds a key's
	// calls for a second after its last, longer than a round over the keys.
	kept := leakybucket.Limit{Name: "api", Size: 1 << 20, DripRate: time.Second, DripSize: 1 << 20}
	// drained: a bucket of 10 that drips 10 every µs: a call's bucket has
	// drained long before the round over the keys comes back to it.
	drained := leakybucket.Limit{Name: "api", Size: 10, DripRate: time.Microsecond, DripSize: 10}
	var benches []bench
	for _, c := range []struct {
		group string
		lim   leakybucket.Limit
		rate  func() *rate.Limiter
	}{
		{"MemoryKept", kept, func() *rate.Limiter { return rate.NewLimiter(rate.Limit(1e12), 1<<30) }},
		{"MemoryDrained", drained, func() *rate.Limiter { return rate.NewLimiter(rate.Every(time.Microsecond/10), 10) }},
	} {
		benches = append(benches,
			bench{c.group, "leakybucket", func(b *testing.B, goroutines int) error {
				var m leakybucket.Memory
				ctx := context.Background()
				for _, k := range memoryKeyNames { // every key seen once, as in the long run
					m.Check(ctx, k, c.lim)
				}
				var blocked atomic.Int64
				memoryLoop(b, goroutines, func(i uint64) {
					if r, _ := m.Check(ctx, memoryKeyNames[i%memoryKeys], c.lim); r.Blocked {
						blocked.Add(1)
					}
				})
				b.ReportMetric(float64(blocked.Load())/float64(b.N), "blocked/op")
				return nil
			}},
			bench{c.group, "rate", func(b *testing.B, goroutines int) error {
				var limiters sync.Map
				for _, k := range memoryKeyNames {
					limiters.Store(k, c.rate())
				}
				var blocked atomic.Int64
				memoryLoop(b, goroutines, func(i uint64) {
					lim, _ := limiters.Load(memoryKeyNames[i%memoryKeys])
					if !lim.(*rate.Limiter).Allow() {
						blocked.Add(1)
					}
				})
				b.ReportMetric(float64(blocked.Load())/float64(b.N), "blocked/op")
				return nil
			}},
		)
	}
	return benches
}

// memoryLoop runs check b.N times from goroutines goroutines (1, or
// GOMAXPROCS), each walking the keys from a place of its own.
func memoryLoop(b *testing.B, goroutines int, check func(i uint64)) {
	b.ResetTimer()
	if goroutines == 1 {
		for i := range b.N {
			check(uint64(i))
		}
		return
	}
	var seq atomic.Uint64
	b.SetParallelism(max(1, goroutines/gomaxprocs()))
	b.RunParallel(func(pb *testing.PB) {
		i := seq.Add(1) * 7919
		for pb.Next() {
			i++
			check(i)
		}
	})
}
