package actors

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/lanes"
)

// rekey merges a route's lane into the lane that has its bucket's key
// (lanes.Lane.Merge: every route once) and drops it from the actor.
func TestRekeyCarriesTheMergedLanesRoutes(t *testing.T) {
	msgs := lanes.RouteRef{Method: "GET", Template: "/channels/{channel_id}/messages"}
	one := lanes.RouteRef{Method: "GET", Template: "/channels/{channel_id}/messages/{message_id}"}
	edit := lanes.RouteRef{Method: "PATCH", Template: "/channels/{channel_id}/messages/{message_id}"}
	owner := &lane{Key: "bucket h channel_id=1", Template: "GET /channels/{channel_id}/messages", Routes: []lanes.RouteRef{edit}}
	l := &lane{Key: "GET /channels/{channel_id}/messages/{message_id} channel_id=1", RouteKeyed: true,
		Template: "GET /channels/{channel_id}/messages/{message_id}", Routes: []lanes.RouteRef{edit}}

	b := &bucket{lanes: []*lane{owner, l}}
	require.True(t, b.rekey(l, owner.Key))
	assert.Equal(t, []*lane{owner}, b.lanes)
	assert.Same(t, owner, l.Resolve())
	for _, r := range []lanes.RouteRef{msgs, one, edit} {
		assert.True(t, owner.ServesRef(r), "%v", r)
	}
	assert.Equal(t, 3, owner.NumRoutes(), "each route once")

	// A lane whose bucket no other lane has takes its key.
	solo := &lane{Key: "GET /guilds/{guild_id}/members guild_id=1", RouteKeyed: true, Template: "GET /guilds/{guild_id}/members"}
	b.lanes = append(b.lanes, solo)
	require.False(t, b.rekey(solo, "bucket g guild_id=1"))
	assert.Equal(t, "bucket g guild_id=1", solo.Key)
	assert.False(t, solo.RouteKeyed)
	assert.Len(t, b.lanes, 2)
}

// TestFirstTurnsReadTheCall: the System's first pioneer turns (rules in
// internal/pioneers) read a call's outcome and its first pioneer's wire
// flag: a call finished unsent holds nothing, one on the wire holds the
// turn, finished or not.
func TestFirstTurnsReadTheCall(t *testing.T) {
	var s System
	la, lb := &lane{}, &lane{}
	a, b := &Call{}, &Call{}
	pa, pb := actor.NewPID("local", "a"), actor.NewPID("local", "b")
	const tpl = "GET /channels/{channel_id}/pins"

	require.True(t, s.firsts.Take(tpl, a, la, pa))
	assert.False(t, s.firsts.Take(tpl, b, lb, pb))
	a.firstWire.Store(true)
	a.fin.Store(true)
	assert.False(t, s.firsts.Take(tpl, b, lb, pb), "on the wire")
	a.firstWire.Store(false)
	assert.True(t, s.firsts.Take(tpl, b, lb, pb), "finished unsent")
	told := s.firsts.Done(tpl, b)
	require.Len(t, told, 1, "told once, however often it asked")
	assert.True(t, told[0].Equal(pb))
}
