package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// TestWindowsBucket runs the window table on ratelimit.Bucket, as the
// limiter's bucket actor does: Take for each request, and for each answer
// Observe, or ObserveLost when ratelimit.Judge says the server cannot
// count the request any more.
func TestWindowsBucket(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	for _, c := range Windows {
		t.Run(c.Name, func(t *testing.T) {
			var b ratelimit.Bucket
			var sent []time.Time
			for i, s := range c.Steps {
				now := start.Add(s.At)
				if a := s.Answer; a != nil {
					h := a.Headers(start)
					if a.Unsent {
						b.Refund(now)
					} else if ratelimit.Judge(a.Attempt(start)).Charge == ratelimit.ChargeArrived {
						b.ObserveLost(now, sent[a.To], h)
					} else {
						b.Observe(now, sent[a.To], h)
					}
					continue
				}
				got := 0
				for range s.Send {
					if ok, _ := b.Take(now); ok {
						got++
						sent = append(sent, now)
					}
				}
				if got != s.Granted {
					t.Fatalf("step %d (%v): %d of %d requests went, want %d; bucket %s", i, s.At, got, s.Send, s.Granted, describe(b, start))
				}
			}
		})
	}
}

func describe(b ratelimit.Bucket, start time.Time) string {
	return fmt.Sprintf("limit %d, remaining %d, reset at %v", b.Limit, b.Remaining, b.ResetAt.Sub(start))
}

// TestWindowsTableWellFormed checks every row's steps go forward in time and
// answer requests that went, once each.
func TestWindowsTableWellFormed(t *testing.T) {
	names := map[string]bool{}
	for _, c := range Windows {
		if names[c.Name] {
			t.Errorf("row %q twice", c.Name)
		}
		names[c.Name] = true
		var at time.Duration
		granted, answered := 0, map[int]bool{}
		for i, s := range c.Steps {
			if s.At < at {
				t.Errorf("%s: step %d goes back in time", c.Name, i)
			}
			at = s.At
			if a := s.Answer; a != nil {
				if a.To >= granted || answered[a.To] {
					t.Errorf("%s: step %d answers request %d, of %d granted (answered before: %v)", c.Name, i, a.To, granted, answered[a.To])
				}
				answered[a.To] = true
				continue
			}
			if s.Granted > s.Send || s.Send == 0 {
				t.Errorf("%s: step %d grants %d of %d", c.Name, i, s.Granted, s.Send)
			}
			granted += s.Granted
		}
	}
}
