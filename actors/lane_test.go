package actors

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/routes"
)

func classCall(id uint64, class admission.Class) *Call {
	c := NewCall(id, context.Background(), &http.Request{}, routes.Route{}, false, time.Unix(0, 0))
	c.Class = class
	return c
}

func ids(cs []*Call) []uint64 {
	var out []uint64
	for _, c := range cs {
		if !c.Finished() {
			out = append(out, c.ID)
		}
	}
	return out
}

// join queues c as bucket.enqueue does.
func join(l *lane, c *Call) {
	l.noteClass(c)
	pos := l.placeOf(c)
	l.queue = append(l.queue[:pos], append([]*Call{c}, l.queue[pos:]...)...)
}

// A request joins behind its class and the higher ones, ahead of the lower
// ones, passing finished calls; FIFO within a class.
func TestLanePlacesByClass(t *testing.T) {
	l := &lane{}
	join(l, classCall(1, admission.Bulk))
	join(l, classCall(2, admission.Normal))
	join(l, classCall(3, admission.Bulk))
	join(l, classCall(4, admission.Interactive))
	join(l, classCall(5, admission.Normal))
	assert.Equal(t, []uint64{4, 2, 5, 1, 3}, ids(l.queue))
	// A cancelled call at the head is dropped as the next joins.
	l.queue[0].Complete(nil, context.Canceled)
	join(l, classCall(6, admission.Interactive))
	assert.Equal(t, []uint64{6, 2, 5, 1, 3}, ids(l.queue))
	assert.Equal(t, admission.Bulk, l.lowest)
	assert.Equal(t, admission.Interactive, l.topClass(2))
	assert.Equal(t, admission.Bulk, l.topClass(0), "no call: the lowest class")
}

// While a lower class waits, the eighth send in a row goes to its oldest
// request: the share (admission.Share).
func TestLaneShareMovesALowerClassToTheHead(t *testing.T) {
	l := &lane{}
	join(l, classCall(1, admission.Bulk))
	join(l, classCall(2, admission.Normal))
	for id := uint64(10); id < 30; id++ {
		join(l, classCall(id, admission.Interactive))
	}
	var sent []uint64
	for len(ids(l.queue)) > 0 {
		c := l.head()
		require.NotNil(t, c)
		l.pop()
		l.served(c)
		sent = append(sent, c.ID)
	}
	// Seven interactive, then the oldest lower one (bulk 1, submitted
	// first), seven more, then normal 2; the rest.
	assert.Equal(t, []uint64{10, 11, 12, 13, 14, 15, 16, 1, 17, 18, 19, 20, 21, 22, 23, 2, 24, 25, 26, 27, 28, 29}, sent)
}

// All of one class: no scan, no promotion.
func TestLaneOneClassKeepsFIFO(t *testing.T) {
	l := &lane{}
	for id := uint64(1); id <= 20; id++ {
		join(l, classCall(id, admission.Normal))
	}
	for want := uint64(1); want <= 20; want++ {
		c := l.head()
		l.pop()
		assert.False(t, l.served(c))
		assert.Equal(t, want, c.ID)
	}
}

// Interactive calls that keep arriving, one before each send, never keep
// the bulk ones waiting past their share: the oldest bulk call goes at
// least once in admission.ShareEvery sends, also when it is the head
// already when its share comes due.
func TestLaneShareHoldsWhileHigherClassesKeepArriving(t *testing.T) {
	l := &lane{}
	for id := uint64(1); id <= 5; id++ {
		join(l, classCall(id, admission.Bulk))
	}
	var sent []uint64
	next := uint64(100)
	for range 40 {
		join(l, classCall(next, admission.Interactive))
		next++
		c := l.head()
		require.NotNil(t, c)
		l.pop()
		l.served(c)
		sent = append(sent, c.ID)
	}
	run := 0
	for _, id := range sent {
		if id >= 100 {
			run++
			require.Less(t, run, admission.ShareEvery, "interactive calls in a row while bulk waited: %v", sent)
		} else {
			run = 0
		}
	}
	assert.Equal(t, []uint64{1, 2, 3, 4, 5}, lowIDs(sent), "the bulk calls go, in their order: %v", sent)
}

func lowIDs(sent []uint64) []uint64 {
	var out []uint64
	for _, id := range sent {
		if id < 100 {
			out = append(out, id)
		}
	}
	return out
}

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
