package ratelimit

// Absorb takes over o, the count of a route whose hash turned out to be
// this bucket's (two routes sharing one Discord bucket, learned when the
// second one's pioneer was answered). o's requests in flight become this
// bucket's, to be reported here with Observe or Refund. An unknown bucket
// adopts o's limits and window, less the requests it has in flight itself
// (they may be counted in that window too); a known one only becomes more
// conservative: Remaining can only drop, ResetAt and PausedUntil only move
// later, and o's limits are remembered for the next refills. o must not be
// used afterwards.
func (b *Bucket) Absorb(o *Bucket) {
	inflight := b.inflight + o.inflight
	switch {
	case !o.Known:
	case !b.Known:
		mine := b.inflight
		*b = *o
		b.Remaining = max(0, b.Remaining-int(mine))
	default:
		b.lower(o.Remaining)
		b.noteLimit(o.Limit) // remembered for the next refills
		if low := o.recentLow(); low > 0 {
			b.noteLimit(low)
		}
		b.ResetAt = later(b.ResetAt, o.ResetAt)
		b.PausedUntil = later(b.PausedUntil, o.PausedUntil)
	}
	b.inflight = inflight
	b.uncredited = min(b.uncredited, b.inflight)
}
