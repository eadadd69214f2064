package lanes

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

type lane = Lane[*item, itemRules]

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// transition is one the hook saw, with the lane's key at that time.
type transition struct {
	key      string
	from, to fsm.BucketState
}

// newLane makes a lane as a bucket actor does, its machine's transitions
// recorded in seen (nil: not recorded).
func newLane(key, template string, st ratelimit.Bucket, now time.Time, seen *[]transition) *lane {
	m, tpl, _ := strings.Cut(template, " ")
	return NewLane(key, template, true, true, routes.Route{Method: m, Template: tpl}, st, func(l *lane) *fsm.Bucket {
		return fsm.NewBucket(func(_ fsm.BucketEvent, from, to fsm.BucketState) {
			if seen != nil {
				*seen = append(*seen, transition{l.Key, from, to})
			}
		})
	}, now)
}

// queueN queues n requests of class Normal, submitted at t0, with ids from
// first.
func queueN(l *lane, first uint64, n int) []*item {
	out := make([]*item, n)
	for i := range out {
		out[i] = &item{id: first + uint64(i), submitted: t0}
		join(&l.Line, out[i])
	}
	return out
}

// The machine follows the count at each Sync: initial while unknown,
// limited in a pause, exhausted with nothing left before the reset, open
// otherwise (from exhausted, limited or idle too); the hook, the owner's,
// reads the lane's key as it is at the transition.
func TestLaneSyncFollowsTheCount(t *testing.T) {
	var seen []transition
	l := newLane("GET /x", "GET /x", ratelimit.Bucket{}, t0, &seen)
	assert.Equal(t, fsm.Initial, l.Machine.Current(), "unknown")
	assert.Empty(t, seen)
	assert.True(t, l.RouteKeyed)
	assert.True(t, l.First)

	l.State = ratelimit.Bucket{Known: true, Limit: 5, Remaining: 0, ResetAt: t0.Add(time.Second)}
	l.Key = "bucket h"
	l.Sync(t0)
	assert.Equal(t, fsm.Exhausted, l.Machine.Current(), "nothing left before the reset")
	require.NotEmpty(t, seen)
	assert.Equal(t, "bucket h", seen[len(seen)-1].key, "the hook reads the key at the transition")

	l.Sync(t0.Add(time.Second))
	assert.Equal(t, fsm.Open, l.Machine.Current(), "the reset passed: refilled")

	l.State.Remaining = 1
	l.State.ResetAt = t0.Add(3 * time.Second)
	l.Sync(t0.Add(2 * time.Second))
	assert.Equal(t, fsm.Open, l.Machine.Current(), "some left")

	l.State.PausedUntil = t0.Add(4 * time.Second)
	l.Sync(t0.Add(3 * time.Second))
	assert.Equal(t, fsm.Limited, l.Machine.Current(), "paused")
	l.State.Remaining = 0
	l.Sync(t0.Add(3500 * time.Millisecond))
	assert.Equal(t, fsm.Limited, l.Machine.Current(), "a pause wins over an empty window")

	l.Sync(t0.Add(4 * time.Second))
	assert.Equal(t, fsm.Open, l.Machine.Current(), "the pause is over")

	l.Fire(fsm.Quiet)
	require.Equal(t, fsm.Idle, l.Machine.Current())
	l.Fire(fsm.Drained) // not allowed from idle: ignored
	assert.Equal(t, fsm.Idle, l.Machine.Current())
	l.Sync(t0.Add(5 * time.Second))
	assert.Equal(t, fsm.Open, l.Machine.Current(), "woken")

	// A count known from the start (the store's): synced at once.
	k := newLane("bucket k", "GET /k", ratelimit.Bucket{Known: true, Limit: 5, Remaining: 5, ResetAt: t0.Add(time.Second)}, t0, nil)
	assert.Equal(t, fsm.Open, k.Machine.Current())
	k = newLane("bucket k", "GET /k", ratelimit.Bucket{Known: true, Limit: 5, PausedUntil: t0.Add(time.Second)}, t0, nil)
	assert.Equal(t, fsm.Limited, k.Machine.Current())
}

// NewLane reads its flags from the route.
func TestNewLaneFlags(t *testing.T) {
	l := NewLane("k", "PATCH /channels/{channel_id}", false, false,
		routes.Route{Method: "PATCH", Template: "/channels/{channel_id}", PerToken: true, HiddenSublimit: true},
		ratelimit.Bucket{}, func(*lane) *fsm.Bucket { return fsm.NewBucket(nil) }, t0)
	assert.True(t, l.PerToken)
	assert.True(t, l.Serial, "hidden sublimits: one at a time")
	assert.False(t, l.RouteKeyed)
	assert.False(t, l.First)
}

// A lane is idle with nothing queued, retrying, running or in flight, once
// its window and pause are over plus the grace.
func TestLaneIdle(t *testing.T) {
	const grace = time.Second
	l := newLane("k", "GET /x", ratelimit.Bucket{Known: true, Limit: 5, Remaining: 5, ResetAt: t0.Add(time.Second)}, t0, nil)

	idle, wait := l.Idle(t0, grace)
	assert.False(t, idle)
	assert.Equal(t, 2*time.Second, wait, "until the window's end plus the grace")
	idle, wait = l.Idle(t0.Add(2*time.Second), grace)
	assert.True(t, idle)
	assert.Zero(t, wait)

	l.State.PausedUntil = t0.Add(3 * time.Second)
	idle, wait = l.Idle(t0.Add(2*time.Second), grace)
	assert.False(t, idle)
	assert.Equal(t, 2*time.Second, wait, "until the pause's end plus the grace")
	l.State.PausedUntil = time.Time{}

	later := t0.Add(10 * time.Second)
	c := queueN(l, 1, 1)[0]
	idle, wait = l.Idle(later, grace)
	assert.False(t, idle, "queued")
	assert.Zero(t, wait)
	l.Line.Head()
	l.Line.Pop()

	c.notBefore = later.Add(time.Second)
	l.Line.Retry(c)
	idle, _ = l.Idle(later, grace)
	assert.False(t, idle, "retrying")
	c.done = true
	l.Line.DueRetries(later)
	require.True(t, l.Line.Empty())

	l.Running = 1
	idle, _ = l.Idle(later, grace)
	assert.False(t, idle, "running")
	l.Running = 0

	ok, _ := l.State.Take(later) // a hold another lane's pioneer took here
	require.True(t, ok)
	idle, wait = l.Idle(later, grace)
	assert.False(t, idle, "in flight")
	assert.Zero(t, wait)
	l.State.Refund(later)
	idle, _ = l.Idle(later.Add(3*time.Second), grace) // the window Take refilled is over
	assert.True(t, idle)
}

// A lane serves its own route (read from its template) and the routes it
// took; it may share the bucket of a lane one of whose routes is related
// to one of its own (routes.Related), either side's taken routes included.
func TestLaneServesAndMayShare(t *testing.T) {
	one := RouteRef{"GET", "/channels/{channel_id}/messages/{message_id}"}
	edit := RouteRef{"PATCH", "/channels/{channel_id}/messages/{message_id}"}
	l := &lane{Template: "GET /channels/{channel_id}/messages/{message_id}", Routes: []RouteRef{edit}}
	require.Equal(t, 2, l.NumRoutes())
	assert.Equal(t, one, l.Route(0), "a lane's own route is its template's")
	assert.Equal(t, edit, l.Route(1))
	assert.True(t, l.ServesRef(one))
	assert.True(t, l.ServesRef(edit))
	assert.True(t, l.Serves(routes.Route{Method: "PATCH", Template: "/channels/{channel_id}/messages/{message_id}"}))
	assert.False(t, l.Serves(routes.Route{Method: "DELETE", Template: "/channels/{channel_id}/messages/{message_id}"}), "same template, another method")
	assert.False(t, l.ServesRef(RouteRef{"GET", "/channels/{channel_id}/messages"}))

	react := &lane{Template: "GET /channels/{channel_id}/messages/{message_id}/reactions"}
	members := &lane{Template: "GET /guilds/{guild_id}/members"}
	msgs := &lane{Template: "GET /channels/{channel_id}/messages"}
	assert.True(t, react.MayShare(l), "a child of its route")
	assert.False(t, react.MayShare(members))
	assert.False(t, react.MayShare(msgs), "a grandchild is not related")

	// Through a route taken, on either side.
	members.Routes = []RouteRef{{"GET", "/channels/{channel_id}/messages/{message_id}"}}
	assert.True(t, react.MayShare(members), "k took a related route")
	pins := &lane{Template: "GET /guilds/{guild_id}/roles", Routes: []RouteRef{{"PUT", "/channels/{channel_id}/pins"}}}
	assert.True(t, pins.MayShare(msgs), "l took a related route: a sibling")
	pins.Routes = nil
	assert.False(t, pins.MayShare(msgs))

	// A first pioneer holds a slot only in another, known lane it may share.
	assert.False(t, react.HoldsIn(l), "its limit unknown")
	l.State.Known = true
	assert.True(t, react.HoldsIn(l))
	assert.False(t, l.HoldsIn(l), "not in its own lane")
	members.State.Known = true
	members.Routes = nil
	assert.False(t, react.HoldsIn(members), "unrelated")
}

// Merge hands a lane's work over once: its queue by class then
// submission, its retries, running and in-flight counts, serial flag,
// window and routes (each once); the merged lane resolves to the owner,
// through a chain of merges too.
func TestLaneMergeAndResolve(t *testing.T) {
	edit := RouteRef{"PATCH", "/channels/{channel_id}/messages/{message_id}"}
	owner := newLane("bucket h", "GET /channels/{channel_id}/messages",
		ratelimit.Bucket{Known: true, Limit: 5, Remaining: 5, ResetAt: t0.Add(time.Second)}, t0, nil)
	owner.Routes = []RouteRef{edit}
	owner.Window = time.Second
	l := newLane("GET /channels/{channel_id}/messages/{message_id} channel_id=1",
		"GET /channels/{channel_id}/messages/{message_id}", ratelimit.Bucket{}, t0, nil)
	l.Routes = []RouteRef{edit}
	l.Serial, l.Window, l.Running = true, 2*time.Second, 1
	ok, _ := l.State.Take(t0) // its pioneer
	require.True(t, ok)
	ok, _ = owner.State.Take(t0)
	require.True(t, ok)
	owner.Running = 1

	a := &item{id: 1}
	join(&owner.Line, a)
	b, c := &item{id: 2}, &item{id: 0}
	join(&l.Line, b)
	join(&l.Line, c)
	r := &item{id: 3, notBefore: t0.Add(time.Hour)}
	l.Line.Retry(r)

	owner.Merge(l)
	assert.Equal(t, []uint64{0, 1, 2}, ids(owner.Line.Items()), "by submission")
	assert.Equal(t, []*item{r}, owner.Line.Retries())
	assert.True(t, l.Line.Empty(), "the merged lane's queue is left empty")
	assert.Equal(t, int32(2), owner.Running)
	assert.Zero(t, l.Running)
	assert.Equal(t, 2, owner.State.InFlight(), "the pioneer reports to the owner")
	assert.True(t, owner.Serial)
	assert.Equal(t, 2*time.Second, owner.Window)
	assert.Equal(t, 3, owner.NumRoutes(), "each route once")
	for _, r := range []RouteRef{{"GET", "/channels/{channel_id}/messages"}, {"GET", "/channels/{channel_id}/messages/{message_id}"}, edit} {
		assert.True(t, owner.ServesRef(r), "%v", r)
	}
	assert.Same(t, owner, l.MergedInto)
	assert.Same(t, owner, l.Resolve())
	assert.Same(t, owner, owner.Resolve())

	top := &lane{}
	top.Merge(owner)
	assert.Same(t, top, l.Resolve(), "through two merges")
	assert.True(t, top.Serial, "the serial flag carries on")

	// A serial owner stays serial; the longer window stays.
	o2 := &lane{Serial: true, Pace: Pace{Window: 3 * time.Second}}
	o2.Merge(&lane{Pace: Pace{Window: time.Second}})
	assert.True(t, o2.Serial)
	assert.Equal(t, 3*time.Second, o2.Window)
}

// ProbeOut: a reopening window's probe is on the wire.
func TestLaneProbeOut(t *testing.T) {
	l := newLane("k", "GET /x", ratelimit.Bucket{Known: true, Limit: 5, Remaining: 0, ResetAt: t0}, t0, nil)
	assert.False(t, l.ProbeOut())
	ok, _ := l.State.Take(t0) // the reopening window's probe
	require.True(t, ok)
	require.True(t, l.State.Probing())
	assert.True(t, l.ProbeOut())
	l.State.Refund(t0)
	assert.False(t, l.ProbeOut(), "probing, none on the wire")

	// Peek takes nothing.
	ok, _ = Peek(l.State, t0)
	assert.True(t, ok)
	assert.Zero(t, l.State.InFlight())
}
