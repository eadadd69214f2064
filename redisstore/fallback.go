package redisstore

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// fallbackSweep is the number of windows above which a reservation first
// drops the windows that ended.
const fallbackSweep = 4096

// sameWindow is how far apart two X-RateLimit-Reset values may be and still
// name one window (the header has millisecond precision; Discord's varies by
// a millisecond or two within a window).
const sameWindow = 5 * time.Millisecond

// fallback counts limits locally while Redis is unreachable, with a share of
// each: the global window admits k = floor(limit × share) (at least 1) in
// any period (a sliding window), and each bucket k = floor(its limit ×
// share) (at least 1) per window, under two rules that must both admit a
// request:
//
//   - Spacing: one every window/k. The processes' views of a bucket's
//     window drift apart without Redis, so a count per window alone would
//     let two of one process's windows meet one of Discord's; evenly
//     spaced, a process's requests fit any window Discord opens.
//   - A count per Discord window: this process's answered requests that
//     Discord counted in its current window (told apart by
//     X-RateLimit-Reset, never by timing), plus every request of its still
//     in flight, stay below k. Spacing alone holds only while requests
//     reach Discord as evenly as they leave: a stall (a pause of the
//     server, a congested link, a GC pause) at a window's start delivers
//     the requests of a longer span into one window, and with N processes
//     each one over, the total is over. An in-flight request is counted
//     in the current window whichever window it lands in, so no stall puts
//     more than k of this process's in one.
//
// With N processes each on 1/N, the total stays within every limit, but for
// buckets whose limit is below N: each process still sends one per window
// there (docs/scale-out.md).
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
	groups  map[string]*ratelimit.SlidingWindow // declared groups' guards, by SharedGroup.Key
	quiet   time.Time                           // nothing is sent before (the hold at the switch)
	period  time.Duration
	hold    time.Duration // how long nothing is sent after a switch
	seq     uint64        // grants so far, across buckets and switches
	entered uint64        // seq at the last switch: older grants' group guards were cleared

	// The local-only grants: counted here and not in Redis (made in
	// fallback, or kept when a Redis call failed). The other processes
	// keep this one's share out of what Redis hands them for as long as
	// they may count at Discord (Store.beat tells Redis how long).
	//
	// Invariant (under mu): only counts the local-only grants not yet
	// reported, began those ever made; onlyEnd is the latest end of what
	// a reported one may count in: its answer plus the longest of the
	// global period, its bucket's window and its groups' windows.
	only    int
	began   uint64
	onlyEnd time.Time
}

// fbWindow is one bucket as this process paces it in fallback.
//
// Invariants (under fallback.mu): inflight counts the grants of this
// window whose Report has not come; used counts answers Discord counted in
// the window named win, as long as the local clock is before ends (the
// latest end any of them implies, late by their return trips: never
// early); a reservation is granted only if used + inflight < k and now is
// at or after both next and held.
type fbWindow struct {
	next     time.Time // spacing: when the next request may go
	prevNext time.Time // next before the latest grant, for its refund
	held     time.Time // the window under way at the switch lasts until then
	first    uint64    // the first grant's sequence number in this window
	last     uint64    // the latest grant's
	inflight int
	win      time.Time // X-RateLimit-Reset of the newest window answered
	ends     time.Time // local time it ends at the latest
	used     int
	window   time.Duration // the bucket's window, margin included
}

// newFallback returns a fallback with a share of a global limit of limit
// per period, which sends nothing for hold after each switch, nor in the
// windows that began before its end.
func newFallback(limit int, period, hold time.Duration, share func() float64) *fallback {
	return &fallback{share: share, limit: limit, global: ratelimit.NewSlidingWindow(limit, period),
		buckets: map[string]*fbWindow{}, groups: map[string]*ratelimit.SlidingWindow{}, period: period,
		hold: hold}
}

// enter starts counting locally at now. The other processes keep this
// one's share out of what Redis hands them only once it has been silent
// for the hold (a heartbeat that reaches Redis ends the fallback, and says
// how long what was sent on the share may count): until then they may fill
// whole windows. So nothing is sent for the hold, nor in a window that
// began before its end: the global window's next period, and each
// bucket's window under way then.
func (f *fallback) enter(now time.Time) {
	f.global.Block(now.Add(f.hold + f.period))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entered, f.quiet = f.seq, now.Add(f.hold)
	clear(f.buckets)
	clear(f.groups)
}

// portion returns floor(n × share), at least 1.
func (f *fallback) portion(n int) int { return max(1, int(float64(n)*f.share())) }

// grantKey names a grant for Report: its bucket's key and sequence number.
func grantKey(key string, seq uint64) string { return key + "#" + strconv.FormatUint(seq, 36) }

func parseGrantKey(k string) (key string, seq uint64) {
	i := strings.LastIndexByte(k, '#')
	if i < 0 {
		return k, 0
	}
	seq, _ = strconv.ParseUint(k[i+1:], 36, 64)
	return k[:i], seq
}

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
			if w.inflight == 0 && !r.Now.Before(later(later(w.next, w.held), w.ends)) {
				delete(f.buckets, k)
			}
		}
	}
	if len(f.groups) > fallbackSweep {
		for k, gw := range f.groups {
			if gw.Count(r.Now) == 0 && gw.Blocked(r.Now) == 0 {
				delete(f.groups, k)
			}
		}
	}
	key := r.Route
	if r.Hash != "" {
		key = routes.BucketKey(r.Hash, r.Major)
	}
	w := f.buckets[key]
	if w == nil {
		w = &fbWindow{first: f.seq + 1}
		f.buckets[key] = w
	}
	limit := 1 // unknown: one at a time, as the caller's pioneer goes
	if r.Local.Known {
		limit = r.Local.Limit
	}
	k := f.portion(limit)
	w.window = max(r.Window, 50*time.Millisecond) + r.Margin
	if r.Local.Known && r.Local.ResetAt.After(r.Now) && !r.Local.ResetAt.After(f.quiet.Add(w.window)) {
		// The window under way began before the hold ended: other
		// processes may have used all of it through Redis.
		w.held = later(w.held, r.Local.ResetAt)
	}
	if !r.Now.Before(w.ends) {
		w.used = 0 // Discord's window ended: the next one is counted afresh
	}
	wait := later(later(w.next, w.held), f.quiet).Sub(r.Now)
	if w.used+w.inflight >= k {
		// Full for this process: until the window ends if its own answers
		// filled it, else until an answer (at most a spacing step).
		full := w.window / time.Duration(k)
		if w.used > 0 {
			full = w.ends.Sub(r.Now)
		}
		wait = max(wait, full)
	}
	if wait > 0 {
		if r.Global {
			f.global.Cancel(r.Now)
		}
		return refuse("bucket", wait)
	}
	// The declared groups: a guard per group of floor(Count × share) per
	// Window, held for a window at the switch like the buckets.
	for i, gr := range r.Groups {
		gw := f.groups[gr.Key]
		if gw == nil {
			gw = ratelimit.NewSlidingWindow(f.portion(gr.Count), gr.Window)
			if r.Now.Before(f.quiet.Add(gr.Window)) {
				gw.Block(f.quiet.Add(gr.Window))
			}
			f.groups[gr.Key] = gw
		}
		if ok, wait := gw.Reserve(r.Now); !ok {
			for _, taken := range r.Groups[:i] {
				f.groups[taken.Key].Cancel(r.Now)
			}
			if r.Global {
				f.global.Cancel(r.Now)
			}
			return refuse("declared", max(wait, gw.Blocked(r.Now)))
		}
	}
	f.seq++
	w.last, w.prevNext = f.seq, w.next
	w.next = r.Now.Add(w.window / time.Duration(k))
	w.inflight++
	gk := grantKey(key, f.seq)
	return ratelimit.SharedGrant{OK: true, Local: true, Key: gk, Lease: joinLease("", gk), Global: r.Global,
		Groups: r.Groups, GroupID: r.GroupID}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// begin counts a local-only grant (see fallback.only) and returns how many
// were ever made.
func (f *fallback) begin() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.only++
	f.began++
	return f.began
}

// holding returns until when the local-only grants reported may still
// count at Discord, whether some are still in flight (their end is not
// known yet), and how many were ever made.
func (f *fallback) holding() (end time.Time, inflight bool, began uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.onlyEnd, f.only > 0, f.began
}

// holds reports whether local-only grants may still count at now.
func (f *fallback) holds(now time.Time) bool {
	end, inflight, _ := f.holding()
	return inflight || now.Before(end)
}

// report settles a local grant (Key and Global as reserve set them); only
// tells a local-only one (see fallback.only).
func (f *fallback) report(g ratelimit.SharedGrant, a ratelimit.SharedAnswer, only bool) {
	o := a.Outcome() // the one outcome table, as the script reads it
	if g.Global {
		if o.Counted() {
			f.global.Settle(a.Now)
		} else {
			f.global.Cancel(a.Now)
		}
	}
	if o.Pause == ratelimit.PauseGlobal {
		f.global.Block(a.Now.Add(o.Wait))
	}
	key, seq := parseGrantKey(g.Key)
	f.mu.Lock()
	defer f.mu.Unlock()
	if only {
		f.only = max(0, f.only-1)
		if a.Sent {
			span := f.period
			if w := f.buckets[key]; w != nil {
				span = max(span, w.window)
			}
			for _, gr := range g.Groups {
				span = max(span, gr.Window)
			}
			f.onlyEnd = later(f.onlyEnd, a.Now.Add(span))
		}
	}
	for _, gr := range g.Groups {
		if gw := f.groups[gr.Key]; gw != nil && seq > f.entered {
			if o.Counted() {
				gw.Settle(a.Now)
			} else {
				gw.Cancel(a.Now)
			}
		}
	}
	w := f.buckets[key]
	if w == nil || seq < w.first || seq > w.last {
		return // granted before the last switch: its window was cleared
	}
	w.inflight--
	if !o.Counted() {
		if seq == w.last {
			// The latest grant never went (or no bucket counted it): its
			// turn goes to the next one.
			// (An earlier one's cannot: a later request went after it.)
			w.next = w.prevNext
		}
		return
	}
	h := a.Headers
	if !h.Has.Reset || !h.Has.ResetAfter {
		// No window named (no headers: a lost answer, a 5xx): it was
		// probably counted, in a window that ends within one from now.
		w.used++
		w.ends = later(w.ends, a.Now.Add(w.window))
		return
	}
	end := a.Now.Add(h.ResetAfter)
	switch d := h.Reset.Sub(w.win); {
	case w.win.IsZero() || d > sameWindow:
		w.win, w.used, w.ends = h.Reset, 1, end // a newer window
	case d < -sameWindow:
		// an older window's answer: nothing to count in this one
	default:
		w.used++
		w.ends = later(w.ends, end)
	}
}
