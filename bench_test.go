package sluice_test

// Benchmarks of the limiter's own cost. They measure and report; they assert
// no wall-clock limit. docs/benchmarks.md gives the commands and the
// numbers.
//
//	go test -run '^$' -bench 'BenchmarkDo|BenchmarkBucket' -benchmem -count 6 .

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/sluicetest"
)

const (
	// benchChannels is the number of distinct buckets the throughput
	// benchmarks spread their requests over.
	benchChannels = 1000
	// benchCallers is the number of concurrent callers of BenchmarkDo.
	benchCallers = 64
	// benchLimit is a limit no benchmark comes near: an upstream that
	// never limits.
	benchLimit = 1_000_000
	// benchGlobal is the limiter's global limit: far above any rate
	// reached here (~25k/s), yet not 1,000,000, because a SlidingWindow
	// keeps one time.Time (24 bytes, with a pointer the GC scans) per slot:
	// 1,000,000 would add a 24 MB scanned object that real limits (50/s)
	// never have.
	benchGlobal = 100_000
)

// benchNeverLimits is a simulator rule set whose limits are never reached.
func benchNeverLimits() sluicetest.RuleSet {
	return sluicetest.RuleSet{
		GlobalLimit: benchLimit,
		Rules: []sluicetest.Rule{{
			Name: "get_messages", Method: "GET", Route: "/channels/{channel_id}/messages",
			Bucket: "benchhash", Limit: benchLimit, Window: sluicetest.Duration(time.Second),
		}},
	}
}

// benchPaths returns the n request paths /channels/{i}/messages.
func benchPaths(n int) []string {
	p := make([]string, n)
	for i := range p {
		p[i] = "/channels/" + strconv.Itoa(100000+i) + "/messages"
	}
	return p
}

// benchDoer sends one GET and reads the whole body, as the limiter does.
type benchDoer func(ctx context.Context, path string) error

// benchTarget is the simulator plus either a limiter or a bare HTTP/2
// client on the same kind of connection (HTTP/2 over TLS on loopback).
func benchTarget(b *testing.B, impl string) benchDoer {
	b.Helper()
	srv, err := sluicetest.NewServer(sluicetest.Options{Rules: benchNeverLimits(), TimelineLimit: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := srv.Close(); err != nil {
			b.Error(err)
		}
	})
	switch impl {
	case "sluice", "sluice-one-connection":
		conns := 0 // the default pool: one connection per connpool.CallsPerConn requests waiting
		if impl == "sluice-one-connection" {
			conns = 1 // bare-http2's one connection: the actors' cost alone
		}
		lim, err := sluice.New(sluice.Options{
			BaseURL: srv.APIBase(), Token: testToken, TLSConfig: srv.ClientTLSConfig(),
			GlobalLimit: benchGlobal, Connections: conns,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { benchClose(b, lim) }) // runs before srv.Close
		return func(ctx context.Context, path string) error {
			r, err := http.NewRequestWithContext(ctx, "GET", path, nil)
			if err != nil {
				return err
			}
			resp, err := lim.Do(ctx, r)
			if err != nil {
				return err
			}
			return benchDrain(resp)
		}
	case "actor-skeleton":
		return skeletonTarget(b, srv)
	case "bare-http2":
		return bareDoer(srv)
	}
	b.Fatalf("unknown impl %q", impl)
	return nil
}

// bareDoer sends through srv's own client: net/http on one HTTP/2
// connection over TLS (closed by srv.Close), with the limiter's headers.
func bareDoer(srv *sluicetest.Server) benchDoer {
	client, base := srv.Client(), srv.APIBase()
	return func(ctx context.Context, path string) error {
		r, err := http.NewRequestWithContext(ctx, "GET", base+path, nil)
		if err != nil {
			return err
		}
		r.Header.Set("Authorization", "Bot "+testToken)
		r.Header.Set("User-Agent", "DiscordBot (https://github.com/sluicehq/sluice, bench)")
		resp, err := client.Do(r)
		if err != nil {
			return err
		}
		if resp.ProtoMajor != 2 {
			resp.Body.Close()
			return fmt.Errorf("bare client spoke %s, want HTTP/2", resp.Proto)
		}
		return benchDrain(resp)
	}
}

func benchDrain(resp *http.Response) error {
	_, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func benchClose(b *testing.B, lim *sluice.Limiter) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lim.Close(ctx); err != nil {
		b.Error(err)
	}
}

// benchWarm sends one request to every path, 64 at a time, so connections are up
// and every bucket is discovered before the timer starts.
func benchWarm(b *testing.B, do benchDoer, paths []string) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchCallers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(paths) {
					return
				}
				if err := do(context.Background(), paths[i]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}

func benchReportRate(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "req/s")
	}
}

// BenchmarkDo: 64 concurrent callers, requests round-robin over 1,000
// buckets, against an upstream that never limits; sluice against a bare
// http.Client on one HTTP/2 TLS connection to the same simulator. impl
// sluice-one-connection is sluice held to that one connection: its pool
// grows to 16 for 64 callers.
func BenchmarkDo(b *testing.B) {
	for _, impl := range []string{"sluice", "sluice-one-connection", "actor-skeleton", "bare-http2"} {
		b.Run("impl="+impl, func(b *testing.B) {
			do := benchTarget(b, impl)
			paths := benchPaths(benchChannels)
			benchWarm(b, do, paths)
			// RunParallel starts parallelism*GOMAXPROCS goroutines.
			procs := runtime.GOMAXPROCS(0)
			b.SetParallelism((benchCallers + procs - 1) / procs)
			var next atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					i := next.Add(1) % benchChannels
					if err := do(ctx, paths[i]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			benchReportRate(b)
		})
	}
}

// BenchmarkDoSerial: one caller, one request at a time: the latency a
// request pays through the limiter against the bare client's.
func BenchmarkDoSerial(b *testing.B) {
	for _, impl := range []string{"sluice", "actor-skeleton", "bare-http2"} {
		b.Run("impl="+impl, func(b *testing.B) {
			do := benchTarget(b, impl)
			paths := benchPaths(benchChannels)
			benchWarm(b, do, paths)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := do(ctx, paths[i%benchChannels]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			benchReportRate(b)
		})
	}
}

// benchUpstream answers every request 200 with Discord's rate-limit
// headers (one hash for the route, limits never reached, the given
// Reset-After) and keeps no state per bucket, unlike the simulator, whose
// per-bucket accounting would otherwise be counted as the limiter's memory.
func benchUpstream(b *testing.B, resetAfter time.Duration) (base string, conf *tls.Config) {
	b.Helper()
	ra := strconv.FormatFloat(resetAfter.Seconds(), 'f', 3, 64)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reset := float64(time.Now().Add(resetAfter).UnixMilli()) / 1000
		hd := w.Header()
		hd.Set("Content-Type", "application/json")
		hd.Set("X-RateLimit-Bucket", "benchhash")
		hd.Set("X-RateLimit-Limit", strconv.Itoa(benchLimit))
		hd.Set("X-RateLimit-Remaining", strconv.Itoa(benchLimit-1))
		hd.Set("X-RateLimit-Reset", strconv.FormatFloat(reset, 'f', 3, 64))
		hd.Set("X-RateLimit-Reset-After", ra)
		_, _ = io.WriteString(w, "[]")
	})
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	b.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv.URL + "/api/v10", &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// benchSwapStore is a BucketStore whose MemoryStore can be replaced by an empty
// one, so a benchmark can measure what the store retains.
type benchSwapStore struct {
	p atomic.Pointer[ratelimit.MemoryStore]
}

func newBenchSwapStore() *benchSwapStore {
	s := &benchSwapStore{}
	s.p.Store(ratelimit.NewMemoryStore())
	return s
}

func (s *benchSwapStore) Load(k string) (ratelimit.Bucket, bool) { return s.p.Load().Load(k) }
func (s *benchSwapStore) Save(k string, b ratelimit.Bucket)      { s.p.Load().Save(k, b) }
func (s *benchSwapStore) Delete(k string)                        { s.p.Load().Delete(k) }
func (s *benchSwapStore) Alias(k string) (string, bool)          { return s.p.Load().Alias(k) }
func (s *benchSwapStore) SetAlias(k, v string)                   { s.p.Load().SetAlias(k, v) }

// benchHeap returns HeapInuse and HeapAlloc after two full collections.
func benchHeap() (inuse, alloc uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, m.HeapAlloc
}

// benchHeapBefore is HeapAlloc just before the latest limiter of
// BenchmarkBucketMemory was created.
var benchHeapBefore uint64

// benchWaitFreed waits, at most 10 s, until the heap is back near
// benchHeapBefore: a closed limiter sometimes stays reachable for a few
// seconds after Close with none of its goroutines left (see
// docs/benchmarks.md), and if it were freed between a baseline and the
// measurement after it, the difference would be meaningless.
func benchWaitFreed() {
	if benchHeapBefore == 0 {
		return
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, alloc := benchHeap(); alloc <= benchHeapBefore+benchHeapBefore/10+2<<20 {
			return
		}
	}
}

func benchPerBucket(after, before uint64, n int) float64 {
	return (float64(after) - float64(before)) / float64(n)
}

// benchFill sends one request to each path, benchCallers at a time.
func benchFill(b *testing.B, lim *sluice.Limiter, paths []string) {
	b.Helper()
	benchWarm(b, func(ctx context.Context, path string) error {
		r, err := http.NewRequestWithContext(ctx, "GET", path, nil)
		if err != nil {
			return err
		}
		resp, err := lim.Do(ctx, r)
		if err != nil {
			return err
		}
		return benchDrain(resp)
	}, paths)
}

// BenchmarkBucketMemory measures the heap a bucket costs. One op builds a
// fresh limiter, measures the heap after one warm-up request (connection
// up), sends one request to each of n channels (n buckets) and measures
// again.
//
// state=live: IdleBucketAfter is an hour, so every bucket actor is alive
// at the second measurement: B/bucket is the cost of a live bucket.
//
// state=idle: the upstream's windows last 50 ms and IdleBucketAfter is 0,
// so every actor stops once its window ends; the benchmark waits for
// Snapshot().Buckets to reach 0 and measures: B/bucket-after-idle is what
// stays. It then sends to the same n channels again and waits for idle
// once more (alloc-B/bucket-2nd-cycle: how much that adds), and finally
// empties the store and measures again: store-alloc-B/bucket is the
// store's share (learned limits and route aliases); the rest is the
// supervisor's route-to-bucket alias map and grown maps.
//
// B/... metrics are HeapInuse deltas (whole spans, so they include
// fragmentation); alloc-B/... are HeapAlloc deltas (live objects only).
//
// Under the race detector heap figures mean nothing (it shadows memory)
// and 10,000 requests per op are slow, so only 100 buckets are tried: a
// smoke test.
func BenchmarkBucketMemory(b *testing.B) {
	sizes := []int{1000, 10000}
	if benchRaceEnabled() {
		sizes = []int{100}
	}
	for _, state := range []string{"live", "idle"} {
		for _, n := range sizes {
			b.Run(fmt.Sprintf("state=%s/buckets=%d", state, n), func(b *testing.B) {
				benchBucketMemory(b, state == "live", n)
			})
		}
	}
}

func benchBucketMemory(b *testing.B, live bool, n int) {
	window, idleAfter := time.Second, time.Hour
	if !live {
		window, idleAfter = 50*time.Millisecond, 0
	}
	base, tlsConf := benchUpstream(b, window)
	paths := benchPaths(n + 1)
	// cur is the limiter of the op in progress: closed by the cleanup if a
	// Fatal cut the op short. A closed limiter must not stay reachable (a
	// b.Cleanup per op would keep every one alive and skew the baselines).
	var cur *sluice.Limiter
	b.Cleanup(func() {
		if cur != nil {
			benchClose(b, cur)
		}
	})
	var sumLive, sumAlloc, sumGoroutines, sumIdle, sumIdleAlloc, sumSecond, sumStore float64
	gStart := runtime.NumGoroutine()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		benchWaitFreed()
		_, benchHeapBefore = benchHeap()
		store := newBenchSwapStore()
		lim, err := sluice.New(sluice.Options{
			BaseURL: base, Token: testToken, TLSConfig: tlsConf,
			GlobalLimit: benchGlobal, IdleBucketAfter: idleAfter, Store: store,
		})
		if err != nil {
			b.Fatal(err)
		}
		cur = lim
		benchFill(b, lim, paths[:1])
		if !live {
			benchWaitNoBuckets(b, lim)
		}
		inuse0, alloc0 := benchHeap()
		g0 := runtime.NumGoroutine()
		b.StartTimer()
		benchFill(b, lim, paths[1:])
		b.StopTimer()
		if live {
			snap, err := lim.Snapshot(context.Background())
			if err != nil || len(snap.Buckets) != n+1 {
				b.Fatalf("live buckets = %d, %v; want %d", len(snap.Buckets), err, n+1)
			}
			inuse1, alloc1 := benchHeap()
			sumLive += benchPerBucket(inuse1, inuse0, n)
			sumAlloc += benchPerBucket(alloc1, alloc0, n)
			sumGoroutines += float64(runtime.NumGoroutine()-g0) / float64(n)
		} else {
			benchWaitNoBuckets(b, lim)
			inuse1, alloc1 := benchHeap()
			// The same channels again: what is retained must not grow.
			benchFill(b, lim, paths[1:])
			benchWaitNoBuckets(b, lim)
			_, alloc2 := benchHeap()
			store.p.Store(ratelimit.NewMemoryStore()) // drop what it learned
			_, alloc3 := benchHeap()
			sumIdle += benchPerBucket(inuse1, inuse0, n)
			sumIdleAlloc += benchPerBucket(alloc1, alloc0, n)
			sumSecond += benchPerBucket(alloc2, alloc1, n)
			sumStore += benchPerBucket(alloc2, alloc3, n)
		}
		benchClose(b, lim)
		cur = nil
		// Close returns with a few mailbox goroutines still finishing; let
		// them end before the next op (or the next run of this function,
		// which counts its own starting goroutines) measures a baseline.
		benchSettle(gStart)
		b.StartTimer()
	}
	b.StopTimer()
	ops := float64(b.N)
	if live {
		b.ReportMetric(sumLive/ops, "B/bucket")
		b.ReportMetric(sumAlloc/ops, "alloc-B/bucket")
		b.ReportMetric(sumGoroutines/ops, "goroutines/bucket")
	} else {
		b.ReportMetric(sumIdle/ops, "B/bucket-after-idle")
		b.ReportMetric(sumIdleAlloc/ops, "alloc-B/bucket-after-idle")
		b.ReportMetric(sumSecond/ops, "alloc-B/bucket-2nd-cycle")
		b.ReportMetric(sumStore/ops, "store-alloc-B/bucket")
	}
}

// benchSettle waits, at most 5 s, until no more than n goroutines run.
func benchSettle(n int) {
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
}

// benchRaceEnabled reports whether the test binary was built with -race.
func benchRaceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, st := range bi.Settings {
		if st.Key == "-race" {
			return st.Value == "true"
		}
	}
	return false
}

// benchWaitNoBuckets polls Snapshot until every bucket actor has stopped; it
// gives up after 10 s. (A bounded poll is fine here: it measures, it
// asserts nothing about timing.)
func benchWaitNoBuckets(b *testing.B, lim *sluice.Limiter) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		snap, err := lim.Snapshot(ctx)
		if err != nil {
			b.Fatalf("buckets did not stop: %v", err)
		}
		if len(snap.Buckets) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("%d buckets still live after 10 s", len(snap.Buckets))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// benchClock is a clock a benchmark can move forward: real time plus a
// skip.
type benchClock struct{ skip atomic.Int64 }

func (c *benchClock) now() time.Time { return time.Now().Add(time.Duration(c.skip.Load())) }

// BenchmarkManyBucketsExpire touches 50,000 channels once each (50,000
// buckets), waits until every bucket actor has stopped, then lets the
// store's TTL pass (the limiter's clock jumps 11 minutes; the store expires
// lazily, so one Sweep stands for the operations a running bot makes) and
// reports the heap left above the limiter's baseline: MB-after-expiry. The
// upstream's windows last 50 ms.
func BenchmarkManyBucketsExpire(b *testing.B) {
	n := 50_000
	if benchRaceEnabled() {
		n = 200
	}
	base, tlsConf := benchUpstream(b, 50*time.Millisecond)
	paths := benchPaths(n + 1)
	var sumIdle, sumExpired float64
	for range b.N {
		b.StopTimer()
		clock := &benchClock{}
		store := &ratelimit.MemoryStore{Clock: clock.now}
		lim, err := sluice.New(sluice.Options{BaseURL: base, Token: testToken, TLSConfig: tlsConf,
			GlobalLimit: benchGlobal, Store: store, Clock: clock.now})
		if err != nil {
			b.Fatal(err)
		}
		benchFill(b, lim, paths[:1])
		benchWaitNoBuckets(b, lim)
		_, alloc0 := benchHeap()
		b.StartTimer()
		benchFill(b, lim, paths[1:])
		b.StopTimer()
		benchWaitNoBuckets(b, lim)
		_, alloc1 := benchHeap()
		clock.skip.Store(int64(11 * time.Minute))
		store.Sweep()
		_, alloc2 := benchHeap()
		sumIdle += (float64(alloc1) - float64(alloc0)) / 1e6
		sumExpired += (float64(alloc2) - float64(alloc0)) / 1e6
		benchClose(b, lim)
	}
	b.ReportMetric(sumIdle/float64(b.N), "MB-idle")
	b.ReportMetric(sumExpired/float64(b.N), "MB-after-expiry")
}
