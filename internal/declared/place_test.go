package declared

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/ratelimit"
)

// sharedPlace returns a place in one group of window win, of limit
// member_roles.
func sharedPlace(win time.Duration, st ratelimit.SharedGroups) *SharedPlace {
	return &SharedPlace{store: st, groups: []ratelimit.SharedGroup{{Key: "g", Count: 1, Window: win}}, names: []string{"member_roles"}}
}

// A refusal by the shared store moves a request's window only forward,
// and tells whether the request was placed again past the window it had
// (its wait is its own: the lane is not held for it) or waits inside it
// (the group's guard, or it came early: the lane waits too).
func TestSharedPlaceRefused(t *testing.T) {
	now := time.Unix(1000, 0)
	win := 500 * time.Millisecond
	place := func(start time.Time) *SharedPlace {
		sh := sharedPlace(win, nil)
		sh.set([]ratelimit.Slot{{Start: start, End: start.Add(win), Position: 3}})
		return sh
	}

	sh := place(now.Add(-100 * time.Millisecond)) // its window is under way
	assert.False(t, sh.Refused(now, 20*time.Millisecond), "the guard: a wait inside its window")
	assert.Equal(t, now.Add(20*time.Millisecond), sh.place.Load().slot.Start)
	assert.Equal(t, 3, sh.place.Load().slot.Position)

	sh = place(now.Add(-100 * time.Millisecond))
	assert.True(t, sh.Refused(now, 2*time.Second), "placed again, after the end of its window")
	p := sh.place.Load()
	assert.Equal(t, now.Add(2*time.Second), p.slot.Start)
	assert.Equal(t, win, p.slot.End.Sub(p.slot.Start))
	assert.Equal(t, "member_roles", p.limit)

	sh = place(now.Add(-100 * time.Millisecond))
	assert.True(t, sh.Refused(now, 400*time.Millisecond), "a wait ending just at the end of its window is past it")

	sh = place(now.Add(time.Second))
	assert.False(t, sh.Refused(now, 10*time.Millisecond), "a wait shorter than its place's moves nothing")
	assert.Equal(t, now.Add(time.Second), sh.place.Load().slot.Start)
	assert.False(t, sh.Refused(now, time.Second), "nor one ending at its start")
	assert.Equal(t, now.Add(time.Second), sh.place.Load().slot.Start)

	sh = sharedPlace(win, nil)
	assert.False(t, sh.Refused(now, time.Second), "no place known: the lane waits")
	p = sh.place.Load()
	assert.Equal(t, now.Add(time.Second), p.slot.Start)
	assert.Equal(t, now.Add(time.Second+win), p.slot.End, "a window of its group")
	assert.Equal(t, "member_roles", p.limit)
}

// set keeps the latest of the windows the store gave (the first of equal
// ones) and the limit whose window it is; no slot leaves the place as it
// was.
func TestSharedPlaceSet(t *testing.T) {
	now := time.Unix(1000, 0)
	sh := &SharedPlace{names: []string{"a", "b", "c"}}
	sh.set(nil)
	assert.Nil(t, sh.place.Load())
	sh.set([]ratelimit.Slot{{Start: now.Add(2 * time.Second)}, {Start: now.Add(5 * time.Second)}, {Start: now.Add(time.Second)}})
	assert.Equal(t, groupPlace{slot: ratelimit.Slot{Start: now.Add(5 * time.Second)}, limit: "b"}, *sh.place.Load())
	sh.set([]ratelimit.Slot{{Start: now}, {Start: now}, {Start: now}})
	assert.Equal(t, "a", sh.place.Load().limit, "the first of equal windows")
	sh.set(nil)
	assert.Equal(t, now, sh.place.Load().slot.Start, "nothing given: kept")
}

// Refresh takes the store's slots now; a group where the request has no
// reservation counts as a window from now; an error changes nothing.
func TestSharedPlaceRefresh(t *testing.T) {
	now := time.Unix(1000, 0)
	st := &store{slots: []ratelimit.Slot{{Start: now.Add(time.Second), End: now.Add(2 * time.Second)}, {}},
		found: []bool{true, false}}
	sh := &SharedPlace{store: st, names: []string{"a", "b"},
		groups: []ratelimit.SharedGroup{{Key: "a", Window: time.Second}, {Key: "b", Window: 10 * time.Second}}}
	sh.Refresh(context.Background(), now)
	assert.Equal(t, groupPlace{slot: ratelimit.Slot{Start: now.Add(time.Second), End: now.Add(2 * time.Second)}, limit: "a"}, *sh.place.Load())

	st.found = []bool{false, false}
	sh.Refresh(context.Background(), now.Add(3*time.Second))
	assert.Equal(t, groupPlace{slot: ratelimit.Slot{Start: now.Add(3 * time.Second), End: now.Add(4 * time.Second)}, limit: "a"}, *sh.place.Load(),
		"no reservation: a window from now (the first of equal ones)")

	st.err = context.DeadlineExceeded
	st.found = []bool{true, true}
	sh.Refresh(context.Background(), now)
	assert.Equal(t, now.Add(3*time.Second), sh.place.Load().slot.Start, "unreachable: kept")
}
