package leakybucket

import (
	"context"
	"hash/maphash"
	"time"
)

// Peek describes key's bucket under each of limits at the Clock's time,
// without charging anything; see PeekAt. It never blocks and ignores ctx.
func (s *Memory) Peek(_ context.Context, key string, limits []Limit, dst []Result) ([]Result, error) {
	now, t := s.clock()
	return s.peekAt(key, limits, dst, now, t)
}

// PeekAt appends to dst one Result per limit describing key's bucket under
// it at now, as a check of cost 1 would find it, and charges nothing: a
// read of the state at that instant (under the shard's lock, so it sees
// every check before it and none after), for showing a client its quota.
// Each Result has Cost 1; Blocked reports whether a call of cost 1 would be
// blocked by that bucket now (each limit on its own), RetryAfter how long
// until one would be admitted, Remaining, Level, ClearAfter and NextDrip
// the bucket as it is. A key never seen, or whose bucket has drained, is
// an empty bucket. The only error is an invalid limit (or two with one
// name), and then nothing is read. Times are handled as by CheckAt: the
// shard's time never runs backwards.
func (s *Memory) PeekAt(key string, limits []Limit, dst []Result, now time.Time) ([]Result, error) {
	s.init()
	return s.peekAt(key, limits, dst, now, int64(now.Sub(s.epoch)))
}

func (s *Memory) peekAt(key string, limits []Limit, dst []Result, now time.Time, t int64) ([]Result, error) {
	var stack [maxStackLimits]params
	ps, err := appendParams(stack[:0], limits)
	if err != nil {
		return dst, err
	}
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	var lstack [maxStackLimits][2]int64
	ls := lstack[:0]
	sh.mu.Lock()
	now, t = sh.advance(now, t)
	for _, lim := range limits {
		var level, elapsed int64
		if e := sh.find(h, key, lim.name()); e != nil {
			level, elapsed = e.level, t-e.anchor
		}
		ls = append(ls, [2]int64{level, elapsed})
	}
	sh.mu.Unlock()
	for i, lim := range limits {
		dst = append(dst, peekResult(lim, ps[i], now, ls[i][0], ls[i][1]))
	}
	return dst, nil
}

// peekResult is the Result of a look at a bucket of p (lim's) holding level
// calls, elapsed ns after its last drip, at now: as a check of cost 1 that
// charges nothing would find it.
func peekResult(lim Limit, p params, now time.Time, level, elapsed int64) Result {
	level, elapsed, blocked := step(p, level, elapsed, 1, false)
	return result(lim, p, now, level, elapsed, 1, blocked)
}

// Reset empties key's bucket under each of limits (only their names
// matter, but they must be valid): the next check of key finds those
// buckets empty, as if key had never been seen. It is atomic (one lock)
// for the limits of one call, and a check of key either comes before it or
// sees every bucket empty. Buckets of key under other names are untouched:
// pass every limit the key is checked with (MiddlewareOptions.Limits) to
// lift all of them, such as after a support request. The only error is an
// invalid limit (or two with one name), and then nothing changes. It never
// blocks and ignores ctx.
func (s *Memory) Reset(_ context.Context, key string, limits []Limit) error {
	s.init()
	var stack [maxStackLimits]params
	if _, err := appendParams(stack[:0], limits); err != nil {
		return err
	}
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	for _, lim := range limits {
		if e := sh.find(h, key, lim.name()); e != nil {
			// Drained as of the shard's time: a check finds it empty, and
			// a sweep drops it.
			e.level, e.anchor, e.clear = 0, sh.latest, sh.latest
		}
	}
	sh.mu.Unlock()
	return nil
}

// Set sets key's bucket under each of limits to level at the Clock's time;
// see SetAt. It never blocks and ignores ctx.
func (s *Memory) Set(_ context.Context, key string, level int, limits []Limit, dst []Result) ([]Result, error) {
	now, t := s.clock()
	return s.setAt(key, level, limits, dst, now, t)
}

// SetAt sets key's bucket under each of limits to hold level units at now,
// whatever it held: as if it had been emptied and a call of cost level
// admitted at now, so its next drip is one DripRate after now. Level 0
// empties it (Reset); level Size fills it, blocking the key until its
// first drip (a penalty); in between it grants or takes back part of the
// quota. It is atomic for the limits of one call: a check of key comes
// before it or sees every bucket set. It appends one Result per limit
// describing the bucket just after, as PeekAt would. The errors are an
// invalid limit (or two with one name) and a level below 0 or above a
// limit's Size (ErrInvalidLevel); then nothing changes. Times are handled
// as by CheckAt.
func (s *Memory) SetAt(key string, level int, limits []Limit, dst []Result, now time.Time) ([]Result, error) {
	s.init()
	return s.setAt(key, level, limits, dst, now, int64(now.Sub(s.epoch)))
}

func (s *Memory) setAt(key string, level int, limits []Limit, dst []Result, now time.Time, t int64) ([]Result, error) {
	var stack [maxStackLimits]params
	ps, err := levelParams(stack[:0], limits, level)
	if err != nil {
		return dst, err
	}
	l := int64(level)
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	now, t = sh.advance(now, t)
	var nstack [maxStackLimits]bool
	missing := nstack[:0]
	for i, lim := range limits {
		e := sh.find(h, key, lim.name())
		missing = append(missing, e == nil)
		if e != nil {
			s.commit(sh, e, h, e.id, l, t, t+ps[i].drips(l)*ps[i].interval, t)
		}
	}
	inserted := false
	if l > 0 { // new buckets last, as in checkAllAt; level 0 adds none
		for i, lim := range limits {
			if missing[i] {
				inserted = true
				s.commit(sh, nil, h, bucketID{key, lim.name()}, l, t, t+ps[i].drips(l)*ps[i].interval, t)
			}
		}
	}
	if inserted {
		s.maybeSweep(sh, t, true)
	}
	sh.mu.Unlock()
	for i, lim := range limits {
		dst = append(dst, peekResult(lim, ps[i], now, l, 0))
	}
	return dst, nil
}
