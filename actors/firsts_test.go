package actors

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
)

// TestFirstPioneerTurns: one turn per template; the lane that holds it
// keeps it whichever of its calls is at its head (a queue reordered after
// its head took the turn waited for a message nobody would send); other
// lanes wait and are told once when it ends; a holder that finished
// without being sent holds nothing; a settled template needs no turn.
func TestFirstPioneerTurns(t *testing.T) {
	var f firstPioneers
	la, lb := &lane{}, &lane{}
	a1, a2, b1 := &Call{}, &Call{}, &Call{}
	pa, pb := actor.NewPID("local", "a"), actor.NewPID("local", "b")
	const tpl = "GET /channels/{channel_id}/pins"

	assert.True(t, f.take(tpl, a1, la, pa))
	assert.False(t, f.free(tpl, b1, lb, pb), "another lane waits")
	assert.False(t, f.take(tpl, b1, lb, pb))
	assert.True(t, f.free(tpl, a2, la, pa), "the holder's lane, another call at its head")
	assert.True(t, f.take(tpl, a2, la, pa))
	assert.Nil(t, f.done(tpl, a1), "a1 no longer holds it")
	waiters := f.done(tpl, a2)
	assert.Len(t, waiters, 1, "told once, however often it asked")
	assert.True(t, waiters[0].Equal(pb))
	assert.True(t, f.take(tpl, b1, lb, pb), "free once done")

	// A holder whose caller gave up before it was sent holds nothing.
	b1.fin.Store(true)
	assert.True(t, f.take(tpl, a1, la, pa))
	// One on the wire keeps it, finished or not.
	a1.firstWire.Store(true)
	a1.fin.Store(true)
	assert.False(t, f.take(tpl, a2, la, pa), "its own pioneer is out")
	assert.False(t, f.take(tpl, b1, lb, pb))
	a1.firstWire.Store(false)

	f.settle(tpl)
	assert.True(t, f.free(tpl, b1, lb, pb), "settled: no turn needed")
}
