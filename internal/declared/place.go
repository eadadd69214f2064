package declared

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/ratelimit"
)

// Request is what Groups reads of a request: the limits it is under, its
// id and class there, whether it has its outcome, and its Place. The
// request's holder builds it from its own fields (actors.Call) at each
// use: a view, not state; everything but Place is set before the request
// is registered and never changes, so a Request is built on any
// goroutine (the completion hook's Groups.Release).
type Request struct {
	// Refs are the declared limits the request is under, each with its
	// group.
	Refs []Ref
	// ID is the request's id, unique per limiter.
	ID uint64
	// Class is its priority class (ratelimit.Group's classes).
	Class admission.Class
	// Req is the request: whether it has its outcome (Set.Each).
	Req Finisher
	// Place is where it waits in its groups.
	Place *Place
}

// Place is where a request waits in its declared groups: in this
// process's (Groups) or in a shared store's (SharedPlace). The request
// holds it (actors.Call), made by NewPlace before the request is
// registered; the zero Place is a request whose groups this process
// counts, not reserved yet.
//
// Invariant: shared is set by NewPlace and never changes, so it is read
// on any goroutine (the completion hook's Groups.Release); at is the
// bucket actor's only; the shared place's own state is atomic
// (SharedPlace).
type Place struct {
	// shared is set when a shared store counts the request's declared
	// groups (NewPlace, before the request reaches its actor); nil
	// otherwise.
	shared *SharedPlace
	// at is the start of the request's window in its declared groups
	// counted in this process (the latest of them), as reserved when it
	// was queued: its lane keeps its queue in that order
	// (lanes.Queue.Order). Zero without such groups. The bucket actor's
	// only.
	at time.Time
}

// NewPlace returns the place, not reserved yet, of request id under refs.
// store is the shared store of the request's global window when it
// counts declared groups (ratelimit.SharedGroups), else nil: with it and
// some refs, the place is in that store (Shared). The caller makes the
// place before the request is registered, so the completion hook
// (Groups.Release), which may run on another goroutine as soon as it is,
// reads it without a race.
func NewPlace(id uint64, refs []Ref, store ratelimit.SharedGroups) Place {
	if len(refs) == 0 || store == nil {
		return Place{}
	}
	sh := &SharedPlace{store: store, id: strconv.FormatUint(id, 10),
		groups: make([]ratelimit.SharedGroup, len(refs)), names: make([]string, len(refs))}
	for i, ref := range refs {
		sh.groups[i] = ref.Shared()
		sh.names[i] = ref.Limit.Name
	}
	return Place{shared: sh}
}

// Shared returns the request's place in a shared store, or nil when this
// process counts its groups (or it has none).
func (p *Place) Shared() *SharedPlace { return p.shared }

// Start returns the start of the request's reserved window in its
// declared groups, if it has one: in a shared store, or in this process's
// (as reserved when it was queued).
func (p *Place) Start() (time.Time, bool) {
	if p.shared == nil {
		return p.at, !p.at.IsZero()
	}
	gp := p.shared.place.Load()
	if gp == nil {
		return time.Time{}, false
	}
	return gp.slot.Start, true
}

// FillShared sets sr's declared groups (the groups, the request's id and
// its class) when a shared store counts them; it leaves sr as it is
// otherwise.
func (p *Place) FillShared(sr *ratelimit.SharedRequest, class admission.Class) {
	if sh := p.shared; sh != nil {
		sr.Groups, sr.GroupID, sr.GroupClass = sh.groups, sh.id, int8(class)
	}
}

// SharedPlace is a request's part in the declared groups a shared store
// counts (ratelimit.SharedGroups, the Redis store): every process's
// requests reserve their (window, place) there, in the order they are
// submitted, and the store's Reserve takes the guard's slot atomically
// with the bucket's and the global one. The bucket actor holds the
// request until the latest of its reserved windows begins; the store
// refuses it ("declared") if it comes early or the guard is full, and
// says until when.
//
// The groups and id are set before the request reaches its actor and
// never change; place changes (a refusal moved the window, an ETA asked
// the store again) and is read on any goroutine.
type SharedPlace struct {
	store    ratelimit.SharedGroups
	groups   []ratelimit.SharedGroup // one per Request.Refs, in order
	names    []string                // their limits' names
	id       string
	place    atomic.Pointer[groupPlace] // nil: not scheduled (the store was unreachable)
	released atomic.Bool
	// taken is set while the latest attempt holds its places in the store
	// (granted there, not from the local fallback): its report, not a
	// release, ends them.
	taken atomic.Bool
	// tracked is set while the request counts in Groups.Recent.
	tracked atomic.Bool
}

// groupPlace is the latest window among a request's groups and the limit
// whose window it is.
type groupPlace struct {
	slot  ratelimit.Slot
	limit string
}

// wait returns how long until the latest of the reserved windows begins
// (negative: it has); 0 when the request has none (the store decides).
func (sh *SharedPlace) wait(now time.Time) time.Duration {
	if p := sh.place.Load(); p != nil {
		return p.slot.Start.Sub(now)
	}
	return 0
}

// set records the slots the store gave, one per group.
func (sh *SharedPlace) set(slots []ratelimit.Slot) {
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

// SetTaken records whether the latest attempt holds its places in the
// store: granted there (not from the local fallback), its report, not a
// release, ends them. The worker sets it with the store's grant.
func (sh *SharedPlace) SetTaken(taken bool) { sh.taken.Store(taken) }

// Refused records that the store refused the request until now+wait
// ("declared"): its window moved (it had missed it), or the guard is full
// (or it came before its window). moved reports the first: the wait ends
// past the end of the window it had, so it is the request's own, not the
// group's.
func (sh *SharedPlace) Refused(now time.Time, wait time.Duration) (moved bool) {
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

// Refresh asks the store for the request's slots now (an ETA): places
// ahead that ended move it forward, a missed window is reserved again.
func (sh *SharedPlace) Refresh(ctx context.Context, now time.Time) {
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

// release drops the request's places (it has its outcome), once.
func (sh *SharedPlace) release() {
	if sh.released.CompareAndSwap(false, true) {
		sh.store.ReleaseGroups(sh.id, sh.groups)
	}
}
