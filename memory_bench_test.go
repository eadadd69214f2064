package sluice_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// statelessUpstream answers every request with the same rate-limit headers
// and keeps no state, so heap growth in the benchmark is the limiter's.
func statelessUpstream(tb testing.TB, resetAfter time.Duration) (string, *tls.Config) {
	ra := strconv.FormatFloat(resetAfter.Seconds(), 'f', 3, 64)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-RateLimit-Bucket", "memhash")
		h.Set("X-RateLimit-Limit", "1000")
		h.Set("X-RateLimit-Remaining", "999")
		h.Set("X-RateLimit-Reset-After", ra)
		_, _ = io.WriteString(w, "[]")
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	tb.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv.URL + "/api/v10", &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

func heapAlloc() int64 {
	for range 3 {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// bucketHeap returns the heap growth after n requests to n distinct
// channels: with every bucket alive (idle false), or once every bucket
// actor has stopped (idle true).
func bucketHeap(b *testing.B, n int, idle bool) int64 {
	window, idleAfter := time.Second, time.Hour
	if idle {
		window, idleAfter = 20*time.Millisecond, 0
	}
	base, conf := statelessUpstream(b, window)
	lim, err := sluice.New(sluice.Options{BaseURL: base, Token: "memory", TLSConfig: conf,
		GlobalLimit: 50_000, IdleBucketAfter: idleAfter})
	if err != nil {
		b.Fatal(err)
	}
	defer lim.Close(context.Background())
	if _, err := lim.Do(context.Background(), req("GET", "/channels/1/messages", "")); err != nil {
		b.Fatal(err)
	}
	h0 := heapAlloc()
	fs := make([]*sluice.Future, n)
	for i := range fs {
		fs[i] = lim.Send(context.Background(), req("GET", fmt.Sprintf("/channels/%d/messages", 1000+i), ""))
	}
	for _, f := range fs {
		resp, err := f.Await(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
	fs = nil
	for deadline := time.Now().Add(10 * time.Second); idle; {
		snap, err := lim.Snapshot(context.Background())
		if err == nil && len(snap.Buckets) == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d buckets still live", len(snap.Buckets))
		}
		time.Sleep(10 * time.Millisecond) // a benchmark's own wait, not a test assertion
	}
	return heapAlloc() - h0
}

// BenchmarkBucketHeap measures the heap a bucket costs while its actor is
// alive, and what is left once it went idle and stopped (the learned limits
// and route alias kept in the store). It takes the slope between 1,000 and
// 3,000 buckets, which cancels the limiter's fixed costs and most GC noise:
//
//	go test -run '^$' -bench BenchmarkBucketHeap -count 5 .
func BenchmarkBucketHeap(b *testing.B) {
	for _, idle := range []bool{false, true} {
		name := "state=live"
		if idle {
			name = "state=idle"
		}
		b.Run(name, func(b *testing.B) {
			var sum float64
			for range b.N {
				small := bucketHeap(b, 1000, idle)
				large := bucketHeap(b, 3000, idle)
				sum += float64(large-small) / 2000
			}
			b.ReportMetric(sum/float64(b.N), "B/bucket")
			b.ReportMetric(0, "ns/op")
		})
	}
}
