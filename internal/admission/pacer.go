package admission

import "time"

// pacer is a token bucket with the global limit's rate and burst: the line
// hands out at most its tokens. Left alone, a sliding window that was
// filled in one burst frees in one burst a period later, and a bucket
// joining the line just after waits for the next one (a hot channel then
// gets one bucket window per period); paced, the frees spread out. Its
// burst lets a limiter idle for a period use the whole window at once, so
// the long-run rate and the burst are the window's own. It only paces
// while some waiting bucket has a backlog longer than the window's period
// (and for two periods after): only such a bucket needs slots in every
// period; otherwise smoothing would only add the lag between its phase and
// the window's. The zero value (no limit known) never waits.
type pacer struct {
	burst  float64
	every  time.Duration // one token per every
	tokens float64
	last   time.Time
	period time.Duration
	until  time.Time // pacing on before it
}

// long notes a waiting bucket's backlog at now: one longer than a period
// turns pacing on.
func (p *pacer) long(now time.Time, backlog time.Duration) {
	if p.every > 0 && backlog > p.period {
		if u := now.Add(2 * p.period); u.After(p.until) {
			p.until = u
		}
	}
}

// refund returns n tokens spent on slots that were cancelled unused: the
// server counted nothing for them.
func (p *pacer) refund(n int) {
	if p.every > 0 && n > 0 {
		p.tokens = min(p.burst, p.tokens+float64(n))
	}
}

// take spends a token at now, or returns how long until one accrues.
func (p *pacer) take(now time.Time) time.Duration {
	if p.every <= 0 {
		return 0
	}
	if !p.last.IsZero() && now.After(p.last) {
		p.tokens = min(p.burst, p.tokens+float64(now.Sub(p.last))/float64(p.every))
	}
	if now.After(p.last) {
		p.last = now
	}
	if !now.Before(p.until) {
		p.tokens = max(0, p.tokens-1) // not pacing: still counted, never waits
		return 0
	}
	if p.tokens < 1 {
		return max(time.Microsecond, time.Duration((1-p.tokens)*float64(p.every)))
	}
	p.tokens--
	return 0
}
