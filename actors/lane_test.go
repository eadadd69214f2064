package actors

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A lane serves its own route (read from its template) and the routes it
// took; a merge hands all of the merged lane's over, once each.
func TestRekeyCarriesTheMergedLanesRoutes(t *testing.T) {
	msgs := routeRef{"GET", "/channels/{channel_id}/messages"}
	one := routeRef{"GET", "/channels/{channel_id}/messages/{message_id}"}
	edit := routeRef{"PATCH", "/channels/{channel_id}/messages/{message_id}"}
	owner := &lane{key: "bucket h channel_id=1", template: "GET /channels/{channel_id}/messages", routes: []routeRef{edit}}
	l := &lane{key: "GET /channels/{channel_id}/messages/{message_id} channel_id=1", routeKeyed: true,
		template: "GET /channels/{channel_id}/messages/{message_id}", routes: []routeRef{edit}}
	require.Equal(t, 2, l.numRoutes())
	require.Equal(t, one, l.route(0), "a lane's own route is its template's")
	assert.True(t, l.servesRef(one))
	assert.False(t, owner.servesRef(one))

	b := &bucket{lanes: []*lane{owner, l}}
	require.True(t, b.rekey(l, owner.key))
	assert.Equal(t, []*lane{owner}, b.lanes)
	for _, r := range []routeRef{msgs, one, edit} {
		assert.True(t, owner.servesRef(r), "%v", r)
	}
	assert.Equal(t, 3, owner.numRoutes(), "each route once")

	// A pioneer of a route related only to a route the merge brought.
	react := &lane{template: "GET /channels/{channel_id}/messages/{message_id}/reactions"}
	assert.True(t, mayShare(react, owner), "a child of the merged lane's route")
	assert.False(t, mayShare(react, &lane{template: "GET /guilds/{guild_id}/members"}))
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
