package redisstore

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// fallbackSweep is the number of windows above which a reservation first
// drops the windows that ended.
const fallbackSweep = 4096

// fallback counts limits locally while Redis is unreachable, with a share of
// each: the global window admits k = floor(limit × share) (at least 1) in
// any period (a sliding window), and each bucket k = floor(its limit ×
// share) (at least 1) in any interval as long as its window, spaced evenly
// (one every window/k). The processes' views of a bucket's window drift
// apart without Redis, so a count per window would let two of one
// process's windows meet one of Discord's; evenly spaced, a process's
// requests fit any window Discord opens. With N processes each on 1/N, the
// total stays within every limit, but for buckets whose limit is below N:
// each process still sends one per window there (docs/scale-out.md).
//
// What other processes sent through Redis before the switch is unknown, so
// at the switch the fallback sends nothing for one global period, and
// nothing in a bucket's window under way (one that began before the
// switch): only in windows that begin after it.
type fallback struct {
	share   func() float64
	limit   int
	global  *ratelimit.SlidingWindow
	mu      sync.Mutex
	buckets map[string]*fbWindow
	since   time.Time // the last switch to the fallback
	period  time.Duration
}

// fbWindow is one bucket as this process paces it in fallback: next is
// when its next request may go; held, while the window under way at the
// switch lasts.
type fbWindow struct {
	next  time.Time
	held  time.Time
	count int // granted and not given back (for Refund)
}

func newFallback(limit int, period time.Duration, share func() float64) *fallback {
	return &fallback{share: share, limit: limit, global: ratelimit.NewSlidingWindow(limit, period),
		buckets: map[string]*fbWindow{}, period: period}
}

// enter starts counting locally at now: the windows under way are held.
func (f *fallback) enter(now time.Time) {
	f.global.Block(now.Add(f.period))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.since = now
	clear(f.buckets)
}

// portion returns floor(n × share), at least 1.
func (f *fallback) portion(n int) int { return max(1, int(float64(n)*f.share())) }

func (f *fallback) reserve(r ratelimit.SharedRequest) ratelimit.SharedGrant {
	refuse := func(scope string, wait time.Duration) ratelimit.SharedGrant {
		return ratelimit.SharedGrant{Scope: scope, Wait: max(wait, time.Millisecond), Local: true}
	}
	if r.Global {
		if wait := f.global.Blocked(r.Now); wait > 0 {
			return refuse("global", wait)
		}
		if !f.global.ReserveKeeping(r.Now, f.limit-f.portion(f.limit)) {
			return refuse("global", max(f.global.Wait(r.Now), 10*time.Millisecond))
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.buckets) > fallbackSweep {
		for k, w := range f.buckets {
			if !r.Now.Before(later(w.next, w.held)) {
				delete(f.buckets, k)
			}
		}
	}
	key := r.Route
	if r.Hash != "" {
		key = "bucket " + r.Hash + " " + r.Major
	}
	w := f.buckets[key]
	if w == nil {
		w = &fbWindow{}
		f.buckets[key] = w
	}
	limit := 1 // unknown: one at a time, as the caller's pioneer goes
	if r.Local.Known {
		limit = r.Local.Limit
	}
	window := max(r.Window, 50*time.Millisecond) + r.Margin
	if r.Local.Known && r.Local.ResetAt.After(r.Now) && !r.Local.ResetAt.After(f.since.Add(window)) {
		// The window under way began before the switch: other processes
		// may have used it through Redis.
		w.held = later(w.held, r.Local.ResetAt)
	}
	if at := later(w.next, w.held); r.Now.Before(at) {
		if r.Global {
			f.global.Cancel(r.Now)
		}
		return refuse("bucket", at.Sub(r.Now))
	}
	w.next = r.Now.Add(window / time.Duration(f.portion(limit)))
	w.count++
	return ratelimit.SharedGrant{OK: true, Local: true, Key: key, Lease: joinLease("", key), Global: r.Global}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// report settles a local grant (Key and Global as reserve set them).
func (f *fallback) report(g ratelimit.SharedGrant, a ratelimit.SharedAnswer) {
	if g.Global {
		if a.Sent {
			f.global.Settle(a.Now)
		} else {
			f.global.Cancel(a.Now)
		}
	}
	if a.Sent {
		if a.Status == 429 && a.Verdict.Kind == ratelimit.GlobalLimit {
			f.global.Block(a.Now.Add(a.Verdict.Wait))
		}
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.buckets[g.Key]; w != nil && w.count > 0 {
		w.count--
		w.next = a.Now // never sent: its turn goes to the next one
	}
}
