package ratelimit_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

func ExampleClassify() {
	// Discord's documented global 429: no bucket headers at all.
	now := time.Now()
	h := http.Header{}
	h.Set("Retry-After", "65")
	h.Set("X-RateLimit-Global", "true")
	h.Set("X-RateLimit-Scope", "global")
	body := []byte(`{"message": "You are being rate limited.", "retry_after": 64.57, "global": true}`)

	hdr, err := ratelimit.ParseHeaders(h, now)
	if err != nil {
		panic(err)
	}
	v := ratelimit.Classify(http.StatusTooManyRequests, hdr, body)
	fmt.Println(v.Kind, v.Wait, ratelimit.CountsAsInvalid(http.StatusTooManyRequests, v))
	// Output:
	// GlobalLimit 1m4.57s true
}

func ExampleBucket() {
	t0 := time.Now()
	var b ratelimit.Bucket // unknown: one pioneer at a time

	ok, _ := b.Take(t0)
	fmt.Println("pioneer:", ok)
	ok, _ = b.Take(t0)
	fmt.Println("second before the answer:", ok)

	h := http.Header{}
	h.Set("X-RateLimit-Limit", "5")
	h.Set("X-RateLimit-Remaining", "4")
	h.Set("X-RateLimit-Reset-After", "1.5")
	hdr, _ := ratelimit.ParseHeaders(h, t0)
	b.Observe(t0.Add(80*time.Millisecond), t0, hdr)

	now := t0.Add(80 * time.Millisecond)
	n := 0
	for {
		ok, wait := b.Take(now)
		if !ok {
			fmt.Println("pipelined:", n, "then wait", wait)
			break
		}
		n++
	}
	// Output:
	// pioneer: true
	// second before the answer: false
	// pipelined: 4 then wait 1.5s
}

func ExampleSlidingWindow() {
	t0 := time.Now()
	w := ratelimit.NewSlidingWindow(50, time.Second)
	n := 0
	for {
		if ok, _ := w.Reserve(t0); !ok {
			break
		}
		n++
	}
	// All 50 are in flight; they are answered 100 ms later, so their slots
	// are held until 1.1 s.
	for range n {
		w.Settle(t0.Add(100 * time.Millisecond))
	}
	fmt.Println(n, w.Wait(t0.Add(400*time.Millisecond)))
	// Output:
	// 50 700ms
}
