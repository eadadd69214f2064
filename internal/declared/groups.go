package declared

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// Groups holds the declared groups a process counts (Set: the live
// ratelimit.Group of each) and the groups of the shared stores it
// reserved in lately, for the snapshot (Recent; W names a store, as in
// Recent), and applies a request's declared limits to its Place (read
// through a Request): reserve, ready, take, cancel, settle, release,
// block, estimate.
// Bucket actors of every major use it: a declared group may span majors (a
// bot's "100 DMs a minute" covers every DM channel), so its count cannot
// live in one actor. A ratelimit.Group is a synchronized counter like the
// global window, and each request finds its place in it by itself: FIFO
// across actors comes from the order of reservations, and no actor waits
// for a message (the times a group tells are exact, or a lower bound
// re-checked on a timer). The zero Groups is ready. Safe for concurrent
// use; each Place is its request's holder's (Place's invariant).
//
// A request whose groups a shared store counts (Place.Shared) waits there,
// not here: reserve and ready read its place in the store, take, cancel,
// settle and block leave it to the store (which takes its guard's slot
// with the bucket's and blocks its groups from the answer).
type Groups[W comparable] struct {
	Set
	// Recent is the shared stores' groups this process reserved in
	// lately (ReserveShared counts a request in, Release out).
	Recent Recent[W]
}

// each runs f on every group of r's limits (Set.Each).
func (s *Groups[W]) each(r Request, now time.Time, f func(g *ratelimit.Group) bool) {
	s.Each(now, r.Refs, r.ID, r.Req, f)
}

// Reserve schedules r in each of its groups and returns how long until
// the latest of its windows opens.
func (s *Groups[W]) Reserve(r Request, now time.Time) time.Duration {
	if len(r.Refs) == 0 {
		return 0
	}
	if sh := r.Place.shared; sh != nil {
		return max(0, sh.wait(now))
	}
	var at time.Time
	s.each(r, now, func(g *ratelimit.Group) bool {
		at = later(at, g.ReserveClass(now, r.ID, int8(r.Class)).Start)
		return true
	})
	r.Place.at = at
	return max(0, at.Sub(now))
}

// Ready reports whether every group of r lets it go at now; otherwise wait
// is when to look again. moved reports that r's window is later than
// r.Place.Start said, which it now says: a request of a higher class took
// r's place (ratelimit.Group's classes), or r missed its window. The
// shared store tells that by refusing it (SharedPlace.Refused).
func (s *Groups[W]) Ready(r Request, now time.Time) (ok bool, wait time.Duration, moved bool) {
	if len(r.Refs) == 0 {
		return true, 0, false
	}
	if sh := r.Place.shared; sh != nil {
		// The shared store takes the guard's slot with the bucket's.
		w := sh.wait(now)
		return w <= 0, max(0, w), false
	}
	ok = true
	var at time.Time
	s.each(r, now, func(g *ratelimit.Group) bool {
		// With r's class when it has no reservation (a retry, after its
		// attempt settled): Ready alone would make it normal.
		if free, w, sl := g.ReadyClass(now, r.ID, int8(r.Class)); !free {
			ok, wait, at = false, max(wait, w), later(at, sl.Start)
		}
		return true
	})
	if at.After(r.Place.at) {
		r.Place.at, moved = at, true
	}
	return ok, wait, moved
}

// Take takes r's slot in every group, or in none.
func (s *Groups[W]) Take(r Request, now time.Time) (ok bool, wait time.Duration) {
	if len(r.Refs) == 0 || r.Place.shared != nil {
		return true, 0
	}
	var taken []*ratelimit.Group
	ok = true
	s.each(r, now, func(g *ratelimit.Group) bool {
		if took, w := g.Take(now, r.ID); !took {
			ok, wait = false, w
			return false
		}
		taken = append(taken, g)
		return true
	})
	if !ok {
		for _, g := range taken {
			g.Cancel(now, r.ID)
		}
	}
	return ok, wait
}

// Cancel gives back the slots r took and did not use; it keeps its place.
func (s *Groups[W]) Cancel(r Request, now time.Time) {
	if len(r.Refs) > 0 && r.Place.shared == nil {
		s.each(r, now, func(g *ratelimit.Group) bool { g.Cancel(now, r.ID); return true })
	}
}

// Settle records at the answer of r's attempt, sent at sentAt.
func (s *Groups[W]) Settle(r Request, sentAt, at time.Time) {
	if len(r.Refs) > 0 && r.Place.shared == nil {
		s.each(r, at, func(g *ratelimit.Group) bool { g.Settle(at, sentAt, r.ID); return true })
	}
}

// Release drops r's places (its request has its outcome; answered: a
// response); taken slots stay until settled or cancelled. w is the store
// of r's shared place (ReserveShared's). Safe from any goroutine.
func (s *Groups[W]) Release(r Request, w W, answered bool, now time.Time) {
	if sh := r.Place.shared; sh != nil {
		if sh.tracked.CompareAndSwap(true, false) {
			s.Recent.Done(w, r.Refs, now)
		}
		if !answered || !sh.taken.Load() {
			sh.release()
		} // else answered after taking its place in the store: the report ends it
		return
	}
	if len(r.Refs) > 0 {
		s.each(r, now, func(g *ratelimit.Group) bool { g.Release(r.ID); return true })
	}
}

// Block holds r's groups until until: the API still refused one of them.
func (s *Groups[W]) Block(r Request, until, now time.Time) {
	if len(r.Refs) > 0 && r.Place.shared == nil { // the shared store blocks its groups from the answer
		s.each(r, now, func(g *ratelimit.Group) bool { g.Block(until); return true })
	}
}

// Estimate returns the latest of r's slots (the window that will let it
// go last) and the limit it is, or false when r waits in no group.
func (s *Groups[W]) Estimate(r Request, now time.Time) (slot ratelimit.Slot, limit string, ok bool) {
	if len(r.Refs) == 0 {
		return slot, "", false
	}
	if sh := r.Place.shared; sh != nil {
		if gp := sh.place.Load(); gp != nil {
			return gp.slot, gp.limit, true
		}
		return slot, "", false
	}
	i := 0
	s.each(r, now, func(g *ratelimit.Group) bool {
		if sl, found := g.Estimate(now, r.ID); found && (!ok || sl.Start.After(slot.Start)) {
			slot, limit, ok = sl, r.Refs[i].Limit.Name, true
		}
		i++
		return true
	})
	return slot, limit, ok
}

// ReserveShared schedules r in its declared groups in the shared store of
// its window (r.Place.Shared; w names that store, for Recent): on the
// caller's goroutine, before the request reaches its actor, so places
// follow the order of submission across processes. A store that cannot
// be reached leaves r unscheduled: its Reserve still guards every send.
// A request that got its outcome meanwhile (Close, or its context) gives
// its place back here: its completion hook (Release) may have run before
// the place existed. clock is read when it reserves and again when it
// gives back.
func (s *Groups[W]) ReserveShared(ctx context.Context, r Request, w W, clock func() time.Time) {
	sh := r.Place.shared
	if sh == nil {
		return
	}
	now := clock()
	s.Recent.Add(w, r.Refs, now)
	sh.tracked.Store(true)
	slots, err := sh.store.ReserveGroups(ctx, now, sh.id, int8(r.Class), sh.groups)
	if err == nil {
		sh.set(slots)
	}
	if r.Req.Finished() {
		if sh.tracked.CompareAndSwap(true, false) {
			s.Recent.Done(w, r.Refs, clock())
		}
		sh.store.ReleaseGroups(sh.id, sh.groups) // again if the hook did: a release of no place is a no-op
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
