package lanes

import (
	"time"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/ratelimit"
)

// Pace is a lane's bucket as its queue sees it: the count, the window
// between refills, and a wait the shared count (another process on the
// token) set. Its methods tell when the request at each place of the
// queue may go, at a given now. The zero Pace is a bucket whose limit is
// not known yet.
type Pace struct {
	// State is the bucket's count.
	State ratelimit.Bucket
	// Window is the longest Reset-After seen: the window length used to
	// predict waits.
	Window time.Duration
	// SharedUntil holds the lane until then: the shared count refused its
	// head. SharedNotify is set when that wait ends early with an answer
	// another process waits for; SharedLocal when SharedUntil came from
	// the shared count's fallback share (Redis was out), which ends when
	// the shared store answers again.
	SharedUntil  time.Time
	SharedNotify bool
	SharedLocal  bool
	// settledAt is when the latest answer the bucket counted came
	// (Settle), in Unix nanoseconds of the owner's clock (0: none yet):
	// the global slots its last window took free a global period after
	// their answers, which a keep for its next window counts as its own
	// (Keep).
	settledAt int64
}

// Plan is how the bucket lets requests go from now: avail of them at
// once, the next refill (a full Limit) in next, and one every window after
// it. ok is false while the limit is unknown.
func (p *Pace) Plan(now time.Time) (avail int, next, window time.Duration, ok bool) {
	st := &p.State
	if !st.Known || st.Limit <= 0 {
		return 0, 0, 0, false
	}
	window = p.Window + st.Margin(now)
	avail, next = st.Remaining, st.ResetAt.Sub(now)
	if next <= 0 {
		avail, next = st.Limit, window // a fresh window opens now
	}
	if pause := st.PausedUntil.Sub(now); pause > 0 {
		avail, next = 0, pause
	}
	if window <= 0 {
		window = next
	}
	return avail, next, window, true
}

// Slot is the window in which the bucket lets the request at queue
// position pos go: the current one while it has room for it, then one
// full window per Limit requests after the next refill (or pause's end).
// known is false while the bucket's limit is unknown, or while the lane
// waits for another process's answer: then the window is [now, now], a
// lower bound.
func (p *Pace) Slot(now time.Time, pos int) (start, end time.Time, known bool) {
	if now.Before(p.SharedUntil) {
		if p.SharedNotify {
			// Until another process's pioneer is answered: its lease's
			// expiry only bounds that, and the answer is usually a round
			// trip away. Like an unknown bucket: a lower bound.
			return now, now, false
		}
		now = p.SharedUntil // another process holds the bucket until then
	}
	avail, next, window, ok := p.Plan(now)
	if !ok {
		return now, now, false
	}
	if pos < avail {
		return now, now.Add(next), true
	}
	start = now.Add(next + time.Duration((pos-avail)/p.State.Limit)*window)
	return start, start.Add(window), true
}

// Earliest is how early the request at queue position pos may go when
// Slot says start: start, less the bucket's reset slack
// (ratelimit.Bucket.ResetSlack) when the request waits for a refill, not
// before now. While the bucket dates its window's end from an answer's
// arrival, a faster answer of the same window may still move that end
// earlier, and every window after it with it.
func (p *Pace) Earliest(now time.Time, pos int, start time.Time) time.Time {
	avail, _, _, ok := p.Plan(now)
	if !ok || pos < avail || now.Before(p.SharedUntil) || now.Before(p.State.PausedUntil) {
		return start
	}
	if s := start.Add(-p.State.ResetSlack()); s.After(now) {
		return s
	}
	return now
}

// Room is how many requests the bucket has room for at now, its window
// refilled if it has ended (0 while it may send none): a bucket actor
// asks admission for slots for them all together. A window that holds for
// its probe sends one and the rest a round trip later, with the slots kept
// for them: asked for one at a time, as the stale count of an ended window
// (often 0) would, the rest waited a whole global window behind the probe
// under a binding global limit, at every reopening.
func (p *Pace) Room(now time.Time) int {
	st := p.State
	if ok, _ := st.Take(now); !ok {
		return 0
	}
	return 1 + st.Remaining
}

// Backlog is how long a queue of queued requests needs at the bucket's own
// pace, in whole windows (admission.Backlog): not the time to the last
// one's window, which counts when the current window happens to end.
func (p *Pace) Backlog(now time.Time, queued int) time.Duration {
	if !p.State.Known {
		return admission.Backlog(queued, 0, 0, 0)
	}
	avail, _, window, ok := p.Plan(now)
	if !ok {
		return 0
	}
	return admission.Backlog(queued, avail, p.State.Limit, window)
}

// Over reports whether the bucket's window and pause are over at now,
// plus grace; if not, how long until they are.
func (p *Pace) Over(now time.Time, grace time.Duration) (bool, time.Duration) {
	end := p.State.ResetAt
	if p.State.PausedUntil.After(end) {
		end = p.State.PausedUntil
	}
	end = end.Add(grace)
	if now.Before(end) {
		return false, end.Sub(now)
	}
	return true, 0
}
