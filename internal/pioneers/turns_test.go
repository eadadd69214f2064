package pioneers

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// call is a holder as the tests see it.
type call struct {
	fin  bool // has its outcome
	wire bool // on the wire as its template's first pioneer
}

type callRules struct{}

func (callRules) Finished(c *call) bool { return c.fin }
func (callRules) OnWire(c *call) bool   { return c.wire }

// pid is a waiter: two pids with one id name the same actor.
type pid struct{ id string }

func (p *pid) Equal(o *pid) bool { return p.id == o.id }

// turns keys lanes by name: a lane is compared, never read.
type turns = Turns[*call, string, *pid, callRules]

const tpl = "GET /channels/{channel_id}/pins"

func ids(ws []*pid) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.id)
	}
	return out
}

// TestOneTurnPerTemplate: the first to take a template's turn holds it;
// a call of another lane is refused (Free and Take) until Done; another
// template's turn is its own.
func TestOneTurnPerTemplate(t *testing.T) {
	var f turns
	a, b := &call{}, &call{}
	pa, pb := &pid{"a"}, &pid{"b"}

	assert.True(t, f.Free(tpl, a, "la", pa), "nobody holds it")
	assert.True(t, f.Take(tpl, a, "la", pa))
	assert.True(t, f.Free(tpl, a, "la", pa), "its holder")
	assert.True(t, f.Take(tpl, a, "la", pa), "its holder, again")
	assert.False(t, f.Free(tpl, b, "lb", pb), "another lane waits")
	assert.False(t, f.Take(tpl, b, "lb", pb))
	assert.True(t, f.Take("GET /guilds/{guild_id}", b, "lb", pb), "another template")

	assert.Equal(t, []string{"b"}, ids(f.Done(tpl, a)))
	assert.True(t, f.Take(tpl, b, "lb", pb), "free once done")
	assert.False(t, f.Take(tpl, a, "la", pa), "now b's")
}

// TestTheLaneKeepsTheTurn: whichever call is at the head of the holder's
// lane may take the turn over (its queue was reordered after its head took
// it), unless the holder is on the wire; the old head's Done then changes
// nothing.
func TestTheLaneKeepsTheTurn(t *testing.T) {
	var f turns
	a1, a2, b := &call{}, &call{}, &call{}
	pa, pb := &pid{"a"}, &pid{"b"}

	require.True(t, f.Take(tpl, a1, "la", pa))
	assert.True(t, f.Free(tpl, a2, "la", pa), "the holder's lane, another call at its head")
	assert.False(t, f.Free(tpl, b, "lb", pb))
	assert.True(t, f.Take(tpl, a2, "la", pa))
	assert.Nil(t, f.Done(tpl, a1), "a1 no longer holds it")
	assert.False(t, f.Take(tpl, b, "lb", pb), "a1's Done did not end a2's turn")
	assert.Equal(t, []string{"b"}, ids(f.Done(tpl, a2)))

	// The holder on the wire keeps it, even from its own lane.
	require.True(t, f.Take(tpl, a1, "la", pa))
	a1.wire = true
	assert.False(t, f.Free(tpl, a2, "la", pa), "its own pioneer is out")
	assert.False(t, f.Take(tpl, a2, "la", pa))
	assert.True(t, f.Take(tpl, a1, "la", pa), "the holder itself, on the wire")
}

// TestAFinishedHolderUnsentHoldsNothing: a holder that finished without
// being sent (its caller gave up) leaves the turn to the next Take, of any
// lane, which keeps the waiters; one on the wire holds it, finished or
// not; one neither finished nor sent holds it.
func TestAFinishedHolderUnsentHoldsNothing(t *testing.T) {
	var f turns
	a, b, c := &call{}, &call{}, &call{}
	pa, pb, pc := &pid{"a"}, &pid{"b"}, &pid{"c"}

	require.True(t, f.Take(tpl, a, "la", pa))
	assert.False(t, f.Take(tpl, b, "lb", pb), "a waits for admission: it holds the turn")
	a.fin = true
	assert.True(t, f.Free(tpl, c, "lc", pc), "a gave up before it was sent")
	assert.True(t, f.Take(tpl, c, "lc", pc))
	assert.Nil(t, f.Done(tpl, a), "a holds nothing")
	assert.True(t, f.Free(tpl, &call{}, "lc", pc), "the turn is c's lane's now")
	assert.False(t, f.Free(tpl, &call{}, "la", pa), "no longer a's lane's")
	assert.Equal(t, []string{"b", "a"}, ids(f.Done(tpl, c)), "b, who waited for a, is told when c's turn ends")

	// On the wire: finished or not, it holds the turn until Done.
	a, b = &call{}, &call{}
	require.True(t, f.Take(tpl, a, "la", pa))
	a.wire, a.fin = true, true
	assert.False(t, f.Free(tpl, b, "lb", pb))
	assert.False(t, f.Take(tpl, b, "lb", pb))
	assert.Equal(t, []string{"b"}, ids(f.Done(tpl, a)))
}

// TestWaitersToldOnce: Done returns each actor that found the turn taken,
// once however often it asked (by Equal, not by pointer), in the order
// they first asked; a turn's waiters are not the next turn's.
func TestWaitersToldOnce(t *testing.T) {
	var f turns
	a, b, c := &call{}, &call{}, &call{}

	require.True(t, f.Take(tpl, a, "la", &pid{"a"}))
	assert.False(t, f.Free(tpl, b, "lb", &pid{"b"}))
	assert.False(t, f.Take(tpl, b, "lb", &pid{"b"}))
	assert.False(t, f.Free(tpl, c, "lc", &pid{"c"}))
	assert.False(t, f.Take(tpl, b, "lb", &pid{"b"}))
	assert.Nil(t, f.Done(tpl, b), "b does not hold it: nobody told")
	assert.Equal(t, []string{"b", "c"}, ids(f.Done(tpl, a)))
	assert.Nil(t, f.Done(tpl, a), "told once: the turn is over")

	require.True(t, f.Take(tpl, b, "lb", &pid{"b"}))
	assert.Empty(t, f.Done(tpl, b), "the last turn's waiters are not this one's")
}

// TestSettledNeedsNoTurn: a template whose first answer named no bucket
// lets every first pioneer go, even beside a holder; the settled
// templates start over past the bound.
func TestSettledNeedsNoTurn(t *testing.T) {
	var f turns
	a, b := &call{}, &call{}
	pa, pb := &pid{"a"}, &pid{"b"}

	require.True(t, f.Take(tpl, a, "la", pa))
	f.Settle(tpl)
	assert.True(t, f.Free(tpl, b, "lb", pb), "settled: no turn needed")
	assert.True(t, f.Take(tpl, b, "lb", pb))
	assert.Empty(t, f.Done(tpl, a), "b asked no turn: nobody waits")

	for i := 1; i < maxTemplates; i++ {
		f.Settle(fmt.Sprint("GET /t/", i))
	}
	assert.Len(t, f.settled, maxTemplates)
	require.True(t, f.Take(tpl, a, "la", pa))
	assert.True(t, f.Take(tpl, b, "lb", pb), "still settled at the bound")
	f.Settle("GET /one/more")
	assert.Len(t, f.settled, 1, "past the bound: over again")
	require.True(t, f.Take(tpl, a, "la", pa))
	assert.False(t, f.Take(tpl, b, "lb", pb), "no longer settled: a's turn")
}

// TestTheBoundSweepsFinishedHolders: a new template at the bound drops
// the turns whose holder finished without being sent, and only those;
// below the bound nothing is swept.
func TestTheBoundSweepsFinishedHolders(t *testing.T) {
	var f turns
	p := &pid{"a"}
	gone := &call{fin: true}            // finished, never sent
	out := &call{fin: true, wire: true} // finished, its answer not read yet
	waiting := &call{}                  // waits for admission
	name := func(i int) string { return fmt.Sprint("GET /t/", i) }

	holder := func(i int) *call {
		switch i % 3 {
		case 0:
			return gone
		case 1:
			return out
		}
		return waiting
	}

	for i := range maxTemplates - 1 {
		require.True(t, f.Take(name(i), holder(i), "l", p))
	}
	require.Len(t, f.out, maxTemplates-1, "below the bound: kept")
	require.True(t, f.Take(name(maxTemplates-1), holder(maxTemplates-1), "l", p))
	require.Len(t, f.out, maxTemplates, "at the bound: kept")

	require.True(t, f.Take("GET /new", waiting, "l", p))
	swept := 0
	for i := range maxTemplates {
		if holder(i) == gone {
			assert.Nil(t, f.out[name(i)], name(i))
			swept++
		} else {
			assert.NotNil(t, f.out[name(i)], name(i))
		}
	}
	require.Positive(t, swept)
	assert.NotNil(t, f.out["GET /new"])
	assert.Len(t, f.out, maxTemplates+1-swept)
}

// TestTurnsAllocateNothingOnAHeldTurn: asking a taken turn again, by its
// holder or a waiter already listed, allocates nothing.
func TestTurnsAllocateNothingOnAHeldTurn(t *testing.T) {
	var f turns
	a, b := &call{}, &call{}
	pa, pb := &pid{"a"}, &pid{"b"}
	require.True(t, f.Take(tpl, a, "la", pa))
	require.False(t, f.Take(tpl, b, "lb", pb))
	allocs := testing.AllocsPerRun(100, func() {
		f.Free(tpl, a, "la", pa)
		f.Take(tpl, a, "la", pa)
		f.Free(tpl, b, "lb", pb)
		f.Take(tpl, b, "lb", pb)
	})
	assert.Zero(t, allocs)
}
