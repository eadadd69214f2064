package actors

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/declared"
	"github.com/sluicehq/sluice/ratelimit"
)

// groupSet holds the declared groups this process counts (declared.Set:
// the live ratelimit.Group of each) and the groups of the shared stores it
// reserved in lately, for the snapshot (declared.Recent, read by
// System.SharedGroups).
// Bucket actors of every major use it: a declared group may span majors (a
// bot's "100 DMs a minute" covers every DM channel), so its count cannot
// live in one actor. A ratelimit.Group is a synchronized counter like the
// global window, and each request finds its place in it by itself: FIFO
// across actors comes from the order of reservations, and no actor waits
// for a message (the times a group tells are exact, or a lower bound
// re-checked on a timer).
type groupSet struct {
	declared.Set
	recent declared.Recent[Window]
}

// each runs f on every group of c's limits (declared.Set.Each).
func (s *groupSet) each(c *Call, now time.Time, f func(g *ratelimit.Group) bool) {
	s.Each(now, c.Limits, c.ID, c, f)
}

// reserve schedules c in each of its groups and returns how long until
// the latest of its windows opens.
func (s *groupSet) reserve(c *Call, now time.Time) time.Duration {
	if len(c.Limits) == 0 {
		return 0
	}
	if sh := c.shared; sh != nil {
		return max(0, sh.wait(now))
	}
	var at time.Time
	s.each(c, now, func(g *ratelimit.Group) bool {
		at = later(at, g.ReserveClass(now, c.ID, int8(c.Class)).Start)
		return true
	})
	c.placeAt = at
	return max(0, at.Sub(now))
}

// ready reports whether every group of c lets it go at now; otherwise wait
// is when to look again. moved reports that c's window is later than
// c.placeAt said, which it now says: a request of a higher class took
// c's place (ratelimit.Group's classes), or c missed its window. The
// shared store tells that by refusing c (sharedPlace.refused).
func (s *groupSet) ready(c *Call, now time.Time) (ok bool, wait time.Duration, moved bool) {
	if len(c.Limits) == 0 {
		return true, 0, false
	}
	if sh := c.shared; sh != nil {
		// The shared store takes the guard's slot with the bucket's.
		w := sh.wait(now)
		return w <= 0, max(0, w), false
	}
	ok = true
	var at time.Time
	s.each(c, now, func(g *ratelimit.Group) bool {
		// With c's class when it has no reservation (a retry, after its
		// attempt settled): Ready alone would make it normal.
		if r, w, sl := g.ReadyClass(now, c.ID, int8(c.Class)); !r {
			ok, wait, at = false, max(wait, w), later(at, sl.Start)
		}
		return true
	})
	if at.After(c.placeAt) {
		c.placeAt, moved = at, true
	}
	return ok, wait, moved
}

// take takes c's slot in every group, or in none.
func (s *groupSet) take(c *Call, now time.Time) (ok bool, wait time.Duration) {
	if len(c.Limits) == 0 || c.shared != nil {
		return true, 0
	}
	var taken []*ratelimit.Group
	ok = true
	s.each(c, now, func(g *ratelimit.Group) bool {
		if r, w := g.Take(now, c.ID); !r {
			ok, wait = false, w
			return false
		}
		taken = append(taken, g)
		return true
	})
	if !ok {
		for _, g := range taken {
			g.Cancel(now, c.ID)
		}
	}
	return ok, wait
}

// cancel gives back the slots c took and did not use; it keeps its place.
func (s *groupSet) cancel(c *Call, now time.Time) {
	if len(c.Limits) > 0 && c.shared == nil {
		s.each(c, now, func(g *ratelimit.Group) bool { g.Cancel(now, c.ID); return true })
	}
}

// settle records the answer of c's attempt, sent at c.sentAt.
func (s *groupSet) settle(c *Call, at time.Time) {
	if len(c.Limits) > 0 && c.shared == nil {
		s.each(c, at, func(g *ratelimit.Group) bool { g.Settle(at, c.sentAt, c.ID); return true })
	}
}

// release drops c's places (it has its outcome); taken slots stay until
// settled or cancelled. Safe from any goroutine.
func (s *groupSet) release(c *Call, now time.Time) {
	if sh := c.shared; sh != nil {
		if sh.tracked.CompareAndSwap(true, false) {
			s.recent.Done(c.window, c.Limits, now)
		}
		if c.resp == nil || !sh.taken.Load() {
			sh.release()
		} // else answered after taking its place in Redis: the report ends it
		return
	}
	if len(c.Limits) > 0 {
		s.each(c, now, func(g *ratelimit.Group) bool { g.Release(c.ID); return true })
	}
}

// block holds c's groups until until: the API still refused one of them.
func (s *groupSet) block(c *Call, until, now time.Time) {
	if len(c.Limits) > 0 && c.shared == nil { // the shared store blocks its groups from the answer
		s.each(c, now, func(g *ratelimit.Group) bool { g.Block(until); return true })
	}
}

// estimate returns the latest of c's slots (the window that will let it go
// last) and the limit it is, or false when c waits in no group.
func (s *groupSet) estimate(c *Call, now time.Time) (slot ratelimit.Slot, limit string, ok bool) {
	if len(c.Limits) == 0 {
		return slot, "", false
	}
	if sh := c.shared; sh != nil {
		if p := sh.place.Load(); p != nil {
			return p.slot, p.limit, true
		}
		return slot, "", false
	}
	i := 0
	s.each(c, now, func(g *ratelimit.Group) bool {
		if sl, found := g.Estimate(now, c.ID); found && (!ok || sl.Start.After(slot.Start)) {
			slot, limit, ok = sl, c.Limits[i].Limit.Name, true
		}
		i++
		return true
	})
	return slot, limit, ok
}

// sharedPlace is a call's part in the declared groups a shared store
// counts (ratelimit.SharedGroups, the Redis store): every process's
// requests reserve their (window, place) there, in the order they are
// submitted, and the store's Reserve takes the guard's slot atomically
// with the bucket's and the global one. The bucket actor holds the call
// until the latest of its reserved windows begins; the store refuses it
// ("declared") if it comes early or the guard is full, and says until
// when.
//
// The groups and id are set before the call reaches its actor and never
// change; place changes (a refusal moved the window, Future.ETA asked the
// store again) and is read on any goroutine.
type sharedPlace struct {
	store    ratelimit.SharedGroups
	groups   []ratelimit.SharedGroup // one per Call.Limits, in order
	names    []string                // their limits' names
	id       string
	place    atomic.Pointer[groupPlace] // nil: not scheduled (the store was unreachable)
	released atomic.Bool
	// taken is set while the latest attempt holds its places in the store
	// (granted there, not from the local fallback): its report, not a
	// release, ends them.
	taken atomic.Bool
	// tracked is set while the call counts in groupSet.recent.
	tracked atomic.Bool
}

// groupPlace is the latest window among a call's groups and the limit
// whose window it is.
type groupPlace struct {
	slot  ratelimit.Slot
	limit string
}

// wait returns how long until the latest of the reserved windows begins
// (negative: it has); 0 when the call has none (the store decides).
func (sh *sharedPlace) wait(now time.Time) time.Duration {
	if p := sh.place.Load(); p != nil {
		return p.slot.Start.Sub(now)
	}
	return 0
}

// set records the slots the store gave, one per group.
func (sh *sharedPlace) set(slots []ratelimit.Slot) {
	var p *groupPlace
	for i, sl := range slots {
		if p == nil || sl.Start.After(p.slot.Start) {
			p = &groupPlace{slot: sl, limit: sh.names[i]}
		}
	}
	if p != nil {
		sh.place.Store(p)
	}
}

// refused records that the store refused the call until now+wait
// ("declared"): its window moved (it had missed it), or the guard is full
// (or it came before its window). moved reports the first: the wait ends
// past the end of the window it had, so it is the call's own, not the
// group's.
func (sh *sharedPlace) refused(now time.Time, wait time.Duration) (moved bool) {
	start := now.Add(wait)
	old := sh.place.Load()
	if old != nil && !start.After(old.slot.Start) {
		return false
	}
	moved = old != nil && !start.Before(old.slot.End)
	p := &groupPlace{slot: ratelimit.Slot{Start: start}}
	if old != nil {
		p.slot.End, p.slot.Position, p.limit = start.Add(old.slot.End.Sub(old.slot.Start)), old.slot.Position, old.limit
	} else {
		p.slot.End, p.limit = start.Add(sh.groups[0].Window), sh.names[0]
	}
	sh.place.Store(p)
	return moved
}

// refresh asks the store for the call's slots now (Future.ETA): places
// ahead that ended move it forward, a missed window is reserved again.
func (sh *sharedPlace) refresh(ctx context.Context, now time.Time) {
	slots, found, err := sh.store.EstimateGroups(ctx, now, sh.id, sh.groups)
	if err != nil {
		return
	}
	var kept []ratelimit.Slot
	for i, f := range found {
		if f {
			kept = append(kept, slots[i])
		} else {
			kept = append(kept, ratelimit.Slot{Start: now, End: now.Add(sh.groups[i].Window)})
		}
	}
	sh.set(kept)
}

// release drops the call's places (it has its outcome), once.
func (sh *sharedPlace) release() {
	if sh.released.CompareAndSwap(false, true) {
		sh.store.ReleaseGroups(sh.id, sh.groups)
	}
}

// sharedPlaceOf returns c's place in the shared store of its window, not
// reserved yet, when that store counts declared groups and c is in some;
// nil otherwise. Submit sets c.shared to it before c is registered, so the
// completion hook (groupSet.release), which may run on another goroutine
// as soon as c is, reads it without a race.
func (s *System) sharedPlaceOf(c *Call) *sharedPlace {
	if len(c.Limits) == 0 {
		return nil
	}
	store, ok := s.windows[c.window].shared.(ratelimit.SharedGroups)
	if !ok {
		return nil
	}
	sh := &sharedPlace{store: store, id: strconv.FormatUint(c.ID, 10),
		groups: make([]ratelimit.SharedGroup, len(c.Limits)), names: make([]string, len(c.Limits))}
	for i, ref := range c.Limits {
		sh.groups[i] = ref.Shared()
		sh.names[i] = ref.Limit.Name
	}
	return sh
}

// reserveShared schedules c in its declared groups in the shared store of
// its window (c.shared, see sharedPlaceOf): on the caller's goroutine,
// before c reaches its actor, so places follow the order of submission
// across processes. A store that cannot be reached leaves c unscheduled:
// its Reserve still guards every send. A call that got its outcome
// meanwhile (Close, or its context) gives its place back here: its
// completion hook may have run before the place existed.
func (s *System) reserveShared(c *Call) {
	sh := c.shared
	if sh == nil {
		return
	}
	now := s.now()
	s.groups.recent.Add(c.window, c.Limits, now)
	sh.tracked.Store(true)
	slots, err := sh.store.ReserveGroups(c.Ctx, now, sh.id, int8(c.Class), sh.groups)
	if err == nil {
		sh.set(slots)
	}
	if c.Finished() {
		if sh.tracked.CompareAndSwap(true, false) {
			s.groups.recent.Done(c.window, c.Limits, s.now())
		}
		sh.store.ReleaseGroups(sh.id, sh.groups) // again if the hook did: a release of no place is a no-op
	}
}

// placeStart returns the start of c's reserved window in its declared
// groups, if it has one: in a shared store, or in this process's (as
// reserved when it was queued).
func placeStart(c *Call) (time.Time, bool) {
	if c.shared == nil {
		return c.placeAt, !c.placeAt.IsZero()
	}
	p := c.shared.place.Load()
	if p == nil {
		return time.Time{}, false
	}
	return p.slot.Start, true
}
