package ratelimit

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkMemoryStoreSaveLoad is the steady state: 10,000 live buckets,
// each loaded and saved again.
func BenchmarkMemoryStoreSaveLoad(b *testing.B) {
	clock := newFakeClock()
	s := &MemoryStore{Clock: clock.Now}
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("%032x %d", i, 100000000000000000+i)
		s.Save(keys[i], Bucket{Known: true, Limit: 5})
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		k := keys[i%len(keys)]
		bucket, _ := s.Load(k)
		bucket.Remaining = i
		s.Save(k, bucket)
		clock.Advance(time.Microsecond)
		i++
	}
}

// BenchmarkMemoryStoreChurn saves a new key on every operation, forever: the
// store stays bounded by expiry (TTL 1 s at 10,000 saves per simulated
// second) and, with MaxBuckets, by eviction. The cost per Save includes the
// expiry or eviction of an older bucket.
func BenchmarkMemoryStoreChurn(b *testing.B) {
	for _, bench := range []struct {
		name string
		max  int
	}{{"expiry", 0}, {"eviction", 1_000}} {
		b.Run(bench.name, func(b *testing.B) {
			clock := newFakeClock()
			s := &MemoryStore{TTL: time.Second, MaxBuckets: bench.max, Clock: clock.Now}
			keys := make([]string, 1<<16)
			for i := range keys {
				keys[i] = fmt.Sprintf("%032x %d", i, 100000000000000000+i)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				s.Save(keys[i%len(keys)], Bucket{Known: true, Limit: 5})
				clock.Advance(100 * time.Microsecond)
				i++
			}
			n, _ := s.Len()
			b.ReportMetric(float64(n), "buckets")
		})
	}
}

// BenchmarkMemoryStoreHeap measures the live heap of a store that received
// 50,000 buckets once (a bot that touched 50,000 channels), and after their
// TTL passed and the store kept being used. Run it with -benchtime=1x; the
// time per op is meaningless, the metrics are:
//
//   - MB-saved: the heap the 50,000 buckets take, above the baseline;
//   - B/bucket: the same per bucket (key strings included);
//   - MB-expired: what remains above the baseline after expiry;
//   - ops-to-free: the store operations it took to drop them all.
func BenchmarkMemoryStoreHeap(b *testing.B) {
	var saved, expired, ops float64
	for range b.N {
		clock := newFakeClock()
		s := &MemoryStore{Clock: clock.Now}
		base := heapInUse()
		saveMany(s, clock.Now(), 50_000)
		full := heapInUse()
		clock.Advance(5*time.Second + DefaultBucketTTL)
		n := 0
		for ; ; n++ {
			if l, _ := s.Len(); l == 0 {
				break
			}
			s.Load("absent")
		}
		after := heapInUse()
		s.Load("absent") // s is alive until here
		saved = float64(int64(full) - int64(base))
		expired = float64(int64(after) - int64(base))
		ops = float64(n)
	}
	b.ReportMetric(saved/(1<<20), "MB-saved")
	b.ReportMetric(saved/50_000, "B/bucket")
	b.ReportMetric(expired/(1<<20), "MB-expired")
	b.ReportMetric(ops, "ops-to-free")
}
