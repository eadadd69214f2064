package actors

import (
	"testing"

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
