package ratelimit

import (
	"net/http"
	"testing"
	"time"
)

func BenchmarkBucketTake(b *testing.B) {
	bucket := Bucket{Known: true, Limit: 50, Remaining: 50, ResetAt: t0.Add(time.Hour)}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		if ok, _ := bucket.Take(now); ok {
			bucket.Refund(now)
		}
		now = now.Add(time.Microsecond)
	}
}

func BenchmarkBucketTakeObserve(b *testing.B) {
	var bucket Bucket
	h := resp(50, 49, time.Second)
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		if ok, _ := bucket.Take(now); ok {
			bucket.Observe(now.Add(time.Millisecond), now, h)
		}
		now = now.Add(time.Millisecond)
	}
}

func BenchmarkSlidingWindowReserve(b *testing.B) {
	w := NewSlidingWindow(DefaultGlobalLimit, DefaultGlobalPeriod)
	step := DefaultGlobalPeriod / DefaultGlobalLimit
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		w.Reserve(now)
		now = now.Add(step)
	}
}

func BenchmarkParseHeaders(b *testing.B) {
	h := http.Header{}
	h.Set("X-RateLimit-Limit", "5")
	h.Set("X-RateLimit-Remaining", "4")
	h.Set("X-RateLimit-Reset", "1470173023.123")
	h.Set("X-RateLimit-Reset-After", "64.57")
	h.Set("X-RateLimit-Bucket", "abcd1234")
	h.Set("Content-Type", "application/json")
	b.ReportAllocs()
	for b.Loop() {
		_, _ = ParseHeaders(h, t0)
	}
}
