package actors

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/declared"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
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

func classCall(id uint64, class admission.Class) *Call {
	c := NewCall(id, context.Background(), &http.Request{}, routes.Route{}, false, time.Unix(0, 0))
	c.Class = class
	return c
}

// A retried call (its attempt settled, so its reservation ended) reserves
// again with its own class: a bulk call does not pass the bulk calls that
// reserved after its first attempt, as a normal one would.
func TestDeclaredRetryKeepsItsClass(t *testing.T) {
	var s groupSet
	lim := []declared.Ref{{Limit: &declared.Limit{Name: "roles", Count: 1, Window: time.Second}, Group: "guild_id=9"}}
	t0 := time.Unix(1000, 0)
	a, b := classCall(1, admission.Bulk), classCall(2, admission.Bulk)
	a.Limits, b.Limits = lim, lim
	s.reserve(a, t0)
	s.reserve(b, t0)
	before, _, ok := s.estimate(b, t0)
	assert.True(t, ok)
	ready, _, _ := s.ready(a, t0)
	assert.True(t, ready)
	taken, _ := s.take(a, t0)
	assert.True(t, taken)
	a.sentAt = t0
	s.settle(a, t0.Add(10*time.Millisecond)) // answered: a 5xx, to be retried
	t1 := t0.Add(20 * time.Millisecond)
	s.ready(a, t1) // the retry reserves again
	after, _, _ := s.estimate(b, t1)
	assert.Equal(t, before.Start, after.Start, "b keeps its window")
	sa, _, _ := s.estimate(a, t1)
	assert.True(t, sa.Start.After(after.Start), "the retried bulk call goes after b")
}
