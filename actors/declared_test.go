package actors

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/ratelimit"
)

// A refusal by the shared store moves a call's window only forward, and
// tells whether the call was placed again past the window it had (its
// wait is its own: the lane is not held for it) or waits inside it (the
// group's guard, or it came early: the lane waits too).
func TestSharedPlaceRefused(t *testing.T) {
	now := time.Unix(1000, 0)
	win := 500 * time.Millisecond
	place := func(start time.Time) *sharedPlace {
		sh := &sharedPlace{groups: []ratelimit.SharedGroup{{Key: "g", Count: 1, Window: win}}, names: []string{"member_roles"}}
		sh.set([]ratelimit.Slot{{Start: start, End: start.Add(win), Position: 3}})
		return sh
	}

	sh := place(now.Add(-100 * time.Millisecond)) // its window is under way
	assert.False(t, sh.refused(now, 20*time.Millisecond), "the guard: a wait inside its window")
	assert.Equal(t, now.Add(20*time.Millisecond), sh.place.Load().slot.Start)
	assert.Equal(t, 3, sh.place.Load().slot.Position)

	sh = place(now.Add(-100 * time.Millisecond))
	assert.True(t, sh.refused(now, 2*time.Second), "placed again, after the end of its window")
	p := sh.place.Load()
	assert.Equal(t, now.Add(2*time.Second), p.slot.Start)
	assert.Equal(t, win, p.slot.End.Sub(p.slot.Start))
	assert.Equal(t, "member_roles", p.limit)

	sh = place(now.Add(time.Second))
	assert.False(t, sh.refused(now, 10*time.Millisecond), "a wait shorter than its place's moves nothing")
	assert.Equal(t, now.Add(time.Second), sh.place.Load().slot.Start)

	sh = &sharedPlace{groups: []ratelimit.SharedGroup{{Key: "g", Count: 1, Window: win}}, names: []string{"member_roles"}}
	assert.False(t, sh.refused(now, time.Second), "no place known: the lane waits")
	assert.Equal(t, now.Add(time.Second), sh.place.Load().slot.Start)
}
