package declared

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/ratelimit"
)

// request returns request id of class under refs, its place in st (nil:
// this process's groups).
func request(id uint64, class admission.Class, refs []Ref, st ratelimit.SharedGroups) Request {
	p := NewPlace(id, refs, st)
	return Request{Refs: refs, ID: id, Class: class, Req: &req{}, Place: &p}
}

// held returns the guard's slots held at now in the group of limit name
// (0: the group is idle).
func held(s *Groups[string], name string, now time.Time) int {
	for _, g := range s.Snapshot(now) {
		if g.Limit == name {
			return g.Held
		}
	}
	return 0
}

// A request under two groups in this process: it waits for the latest of
// its windows, is told which limit that is, takes its slot in every group
// or in none, gives back a slot it did not use keeping its place, and
// leaves its groups when answered or released.
func TestGroupsLocal(t *testing.T) {
	t0 := time.Unix(1000, 0)
	roles := &Limit{Name: "roles", Count: 1, Window: time.Second}
	dms := &Limit{Name: "dms", Count: 1, Window: 10 * time.Second}
	var s Groups[string]
	a := request(1, admission.Normal, []Ref{{Limit: dms}}, nil)
	b := request(2, admission.Normal, []Ref{{Limit: roles, Group: "guild_id=9"}, {Limit: dms}}, nil)
	require.Nil(t, b.Place.Shared(), "no store: this process counts its groups")

	_, known := b.Place.Start()
	assert.False(t, known, "not reserved yet")
	assert.Equal(t, time.Duration(0), s.Reserve(a, t0), "a has dms' first window")
	assert.Equal(t, 10*time.Second, s.Reserve(b, t0), "b waits for the latest of its windows: dms', behind a")
	start, known := b.Place.Start()
	assert.True(t, known)
	assert.Equal(t, t0.Add(10*time.Second), start)
	sl, limit, ok := s.Estimate(b, t0)
	require.True(t, ok)
	assert.Equal(t, t0.Add(10*time.Second), sl.Start)
	assert.Equal(t, "dms", limit, "the limit of the latest window")
	assert.Equal(t, 1, sl.Position)
	// c's latest window is its first group's.
	c := request(3, admission.Normal, []Ref{{Limit: dms}, {Limit: roles, Group: "guild_id=9"}}, nil)
	assert.Equal(t, 20*time.Second, s.Reserve(c, t0), "the latest of its windows, whichever group's")
	ready, wait, _ := s.Ready(c, t0)
	assert.False(t, ready)
	assert.Equal(t, 20*time.Second, wait, "the longest wait")
	start, _ = c.Place.Start()
	assert.Equal(t, t0.Add(20*time.Second), start)

	// roles lets b go, dms does not: it takes neither.
	ready, wait, moved := s.Ready(b, t0)
	assert.False(t, ready)
	assert.Equal(t, 10*time.Second, wait)
	assert.False(t, moved, "its window is where it was")
	taken, wait := s.Take(b, t0)
	assert.False(t, taken)
	assert.Equal(t, 10*time.Second, wait)
	assert.Equal(t, 0, held(&s, "roles", t0), "the slot b took in roles is given back")

	// a takes its slot, gives it back unused (keeping its place), takes
	// it again and is answered.
	ready, _, _ = s.Ready(a, t0)
	require.True(t, ready)
	taken, _ = s.Take(a, t0)
	require.True(t, taken)
	assert.Equal(t, 1, held(&s, "dms", t0))
	s.Cancel(a, t0)
	assert.Equal(t, 0, held(&s, "dms", t0), "the slot is given back")
	sl, _, ok = s.Estimate(a, t0)
	assert.True(t, ok, "a keeps its place")
	assert.Equal(t, t0, sl.Start)
	taken, _ = s.Take(a, t0)
	require.True(t, taken)
	s.Settle(a, t0, t0.Add(50*time.Millisecond))
	_, _, ok = s.Estimate(a, t0.Add(50*time.Millisecond))
	assert.False(t, ok, "answered: its reservation ended")
	assert.Equal(t, 1, held(&s, "dms", t0.Add(50*time.Millisecond)), "its slot counts for the window")

	// The API refused dms anyway: b's groups are held.
	until := t0.Add(30 * time.Second)
	s.Block(b, until, t0.Add(time.Second))
	sl, limit, _ = s.Estimate(b, t0.Add(time.Second))
	assert.Equal(t, until, sl.Start, "b waits for the block's end, in both groups")
	assert.Equal(t, "roles", limit, "the first of equal windows")

	// b gets its outcome: its places go.
	s.Release(b, "bot", false, t0.Add(time.Second))
	s.Release(c, "bot", false, t0.Add(time.Second))
	_, _, ok = s.Estimate(b, t0.Add(time.Second))
	assert.False(t, ok)
	for _, g := range s.Snapshot(t0.Add(time.Second)) {
		assert.Equal(t, 0, g.Waiting, "%s: nobody waits", g.Limit)
	}
}

// A request of a higher class takes a waiting request's window: Ready
// tells the one moved back, once, and its place says so.
func TestGroupsReadyMoved(t *testing.T) {
	t0 := time.Unix(1000, 0)
	refs := []Ref{{Limit: &Limit{Name: "roles", Count: 1, Window: time.Second}}}
	var s Groups[string]
	bulk := request(1, admission.Bulk, refs, nil)
	urgent := request(2, admission.Interactive, refs, nil)
	assert.Equal(t, time.Duration(0), s.Reserve(bulk, t0))
	assert.Equal(t, time.Duration(0), s.Reserve(urgent, t0), "it passes the bulk request")

	ready, wait, moved := s.Ready(bulk, t0)
	assert.False(t, ready)
	assert.Equal(t, time.Second, wait)
	assert.True(t, moved, "its window moved back")
	start, _ := bulk.Place.Start()
	assert.Equal(t, t0.Add(time.Second), start, "its place says where it is now")
	_, _, moved = s.Ready(bulk, t0)
	assert.False(t, moved, "told once")
}

// A request under no declared limit goes at once and waits in no group.
func TestGroupsNone(t *testing.T) {
	now := time.Unix(1000, 0)
	var s Groups[string]
	p := request(1, admission.Normal, nil, &store{})
	assert.Nil(t, p.Place.Shared(), "no group: nothing in the store")
	assert.Equal(t, time.Duration(0), s.Reserve(p, now))
	ready, _, _ := s.Ready(p, now)
	assert.True(t, ready)
	taken, _ := s.Take(p, now)
	assert.True(t, taken)
	_, _, ok := s.Estimate(p, now)
	assert.False(t, ok)
	_, known := p.Place.Start()
	assert.False(t, known)
	assert.Empty(t, s.Snapshot(now))
}

// A retried request (its attempt settled, so its reservation ended)
// reserves again with its own class: a bulk request does not pass the
// bulk requests that reserved after its first attempt, as a normal one
// would.
func TestDeclaredRetryKeepsItsClass(t *testing.T) {
	var s Groups[string]
	lim := []Ref{{Limit: &Limit{Name: "roles", Count: 1, Window: time.Second}, Group: "guild_id=9"}}
	t0 := time.Unix(1000, 0)
	a, b := request(1, admission.Bulk, lim, nil), request(2, admission.Bulk, lim, nil)
	s.Reserve(a, t0)
	s.Reserve(b, t0)
	before, _, ok := s.Estimate(b, t0)
	assert.True(t, ok)
	ready, _, _ := s.Ready(a, t0)
	assert.True(t, ready)
	taken, _ := s.Take(a, t0)
	assert.True(t, taken)
	s.Settle(a, t0, t0.Add(10*time.Millisecond)) // answered: a 5xx, to be retried
	t1 := t0.Add(20 * time.Millisecond)
	s.Ready(a, t1) // the retry reserves again
	after, _, _ := s.Estimate(b, t1)
	assert.Equal(t, before.Start, after.Start, "b keeps its window")
	sa, _, _ := s.Estimate(a, t1)
	assert.True(t, sa.Start.After(after.Start), "the retried bulk request goes after b")
	assert.Equal(t, after.Start.Add(time.Second+10*time.Millisecond), sa.Start, "a window and the round trip its answer took later")
}

// store is a shared store's declared groups (ratelimit.SharedGroups): it
// gives the slots set, and records the releases.
type store struct {
	slots    []ratelimit.Slot
	found    []bool
	err      error
	class    int8
	released int
	onRes    func() // run as it reserves
}

func (st *store) ReserveGroups(_ context.Context, _ time.Time, _ string, class int8, _ []ratelimit.SharedGroup) ([]ratelimit.Slot, error) {
	st.class = class
	if st.onRes != nil {
		st.onRes()
	}
	return st.slots, st.err
}

func (st *store) EstimateGroups(context.Context, time.Time, string, []ratelimit.SharedGroup) ([]ratelimit.Slot, []bool, error) {
	return st.slots, st.found, st.err
}

func (st *store) ReleaseGroups(string, []ratelimit.SharedGroup) { st.released++ }

// calls returns the requests of store w counted in r's group of ref.
func calls(r *Recent[string], w string, ref Ref) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.m[RecentKey[string]{w, ref.Limit, ref.Group}]; g != nil {
		return g.calls
	}
	return -1
}

// A request whose groups a shared store counts waits for the latest
// window the store gave, takes nothing here (the store takes the guard's
// slot with the bucket's), and is counted in Recent while it has a place
// there; its place is given back once, unless an answer came after it took
// its place there (the report ends it).
func TestGroupsShared(t *testing.T) {
	t0 := time.Unix(1000, 0)
	roles := Ref{Limit: &Limit{Name: "roles", Count: 1, Window: time.Second}, Group: "guild_id=9"}
	dms := Ref{Limit: &Limit{Name: "dms", Count: 1, Window: 10 * time.Second}}
	st := &store{slots: []ratelimit.Slot{{Start: t0.Add(time.Second), End: t0.Add(2 * time.Second)},
		{Start: t0.Add(3 * time.Second), End: t0.Add(13 * time.Second), Position: 2}}}
	var s Groups[string]
	p := request(7, admission.Interactive, []Ref{roles, dms}, st)
	sh := p.Place.Shared()
	require.NotNil(t, sh)
	assert.Equal(t, "7", sh.id)
	assert.Equal(t, []ratelimit.SharedGroup{roles.Shared(), dms.Shared()}, sh.groups)

	var sr ratelimit.SharedRequest
	p.Place.FillShared(&sr, p.Class)
	assert.Equal(t, ratelimit.SharedRequest{Groups: sh.groups, GroupID: "7", GroupClass: 1}, sr)
	local := request(8, admission.Normal, []Ref{roles}, nil)
	sr = ratelimit.SharedRequest{}
	local.Place.FillShared(&sr, local.Class)
	assert.Equal(t, ratelimit.SharedRequest{}, sr, "no shared place: left as it is")

	// Unscheduled (not reserved yet, or the store was unreachable): the
	// store decides.
	assert.Equal(t, time.Duration(0), s.Reserve(p, t0))
	ready, _, _ := s.Ready(p, t0)
	assert.True(t, ready)
	_, _, ok := s.Estimate(p, t0)
	assert.False(t, ok)

	clock := func() time.Time { return t0 }
	s.ReserveShared(context.Background(), p, "bot", clock)
	assert.Equal(t, int8(1), st.class, "reserved with its class")
	assert.Equal(t, 1, calls(&s.Recent, "bot", roles))
	assert.Equal(t, 1, calls(&s.Recent, "bot", dms))
	assert.Zero(t, st.released)
	start, known := p.Place.Start()
	assert.True(t, known)
	assert.Equal(t, t0.Add(3*time.Second), start, "the latest of its windows")
	assert.Equal(t, 3*time.Second, s.Reserve(p, t0))
	ready, wait, moved := s.Ready(p, t0)
	assert.False(t, ready)
	assert.Equal(t, 3*time.Second, wait)
	assert.False(t, moved)
	ready, wait, _ = s.Ready(p, t0.Add(4*time.Second))
	assert.True(t, ready)
	assert.Zero(t, wait)
	sl, limit, ok := s.Estimate(p, t0)
	assert.True(t, ok)
	assert.Equal(t, st.slots[1], sl)
	assert.Equal(t, "dms", limit)
	assert.Equal(t, time.Duration(0), s.Reserve(p, t0.Add(4*time.Second)), "never negative")

	taken, _ := s.Take(p, t0.Add(4*time.Second))
	assert.True(t, taken)
	s.Cancel(p, t0)
	s.Settle(p, t0, t0.Add(5*time.Second))
	s.Block(p, t0.Add(time.Minute), t0)
	assert.Empty(t, s.m, "nothing counted in this process")

	// Answered after taking its place in the store: the report ends it.
	other := request(11, admission.Normal, []Ref{roles, dms}, st)
	s.ReserveShared(context.Background(), other, "bot", clock)
	assert.Equal(t, 2, calls(&s.Recent, "bot", roles))
	sh.SetTaken(true)
	s.Release(p, "bot", true, t0.Add(5*time.Second))
	assert.Zero(t, st.released)
	assert.Equal(t, 1, calls(&s.Recent, "bot", roles), "out of Recent")
	s.Release(p, "bot", true, t0.Add(5*time.Second))
	assert.Equal(t, 1, calls(&s.Recent, "bot", dms), "counted out once")
	s.Release(other, "bot", false, t0.Add(5*time.Second))
	st.released = 0

	// Not answered (or not taken): released in the store, once.
	st.slots = st.slots[:1]
	q := request(9, admission.Normal, []Ref{roles}, st)
	s.ReserveShared(context.Background(), q, "bot", clock)
	q.Place.Shared().SetTaken(true)
	s.Release(q, "bot", false, t0)
	assert.Equal(t, 1, st.released)
	s.Release(q, "bot", false, t0)
	assert.Equal(t, 1, st.released, "once")
	r := request(10, admission.Normal, []Ref{roles}, st)
	s.ReserveShared(context.Background(), r, "bot", clock)
	s.Release(r, "bot", true, t0)
	assert.Equal(t, 2, st.released, "answered without its place taken there")
	assert.Equal(t, 0, calls(&s.Recent, "bot", roles))
}

// A store that cannot be reached leaves the request unscheduled; one that
// got its outcome while it reserved gives its place back there and leaves
// Recent (its completion hook may have run before the place existed).
func TestReserveShared(t *testing.T) {
	t0 := time.Unix(1000, 0)
	roles := Ref{Limit: &Limit{Name: "roles", Count: 1, Window: time.Second}}
	clock := func() time.Time { return t0 }
	var s Groups[string]

	st := &store{err: errors.New("unreachable")}
	p := request(1, admission.Normal, []Ref{roles}, st)
	s.ReserveShared(context.Background(), p, "bot", clock)
	_, known := p.Place.Start()
	assert.False(t, known, "unscheduled")
	assert.Equal(t, 1, calls(&s.Recent, "bot", roles), "counted while it has a place to lose")
	assert.Zero(t, st.released)

	st = &store{slots: []ratelimit.Slot{{Start: t0, End: t0.Add(time.Second)}}}
	other := request(4, admission.Normal, []Ref{roles}, st)
	s.ReserveShared(context.Background(), other, "ip", clock)
	var done req
	st.onRes = func() { done.done.Store(true) } // its context ended meanwhile
	q := request(2, admission.Normal, []Ref{roles}, st)
	q.Req = &done
	s.ReserveShared(context.Background(), q, "ip", clock)
	assert.Equal(t, 1, st.released, "given back")
	assert.Equal(t, 1, calls(&s.Recent, "ip", roles), "counted out")
	assert.False(t, q.Place.Shared().tracked.Load())
	s.Release(q, "ip", false, t0) // the hook, late: counted out once
	assert.Equal(t, 1, calls(&s.Recent, "ip", roles))

	local := request(3, admission.Normal, []Ref{roles}, nil)
	s.ReserveShared(context.Background(), local, "bot", clock)
	assert.Equal(t, 1, calls(&s.Recent, "bot", roles), "no shared place: nothing to reserve there")
}
