package transport

import "sync/atomic"

// Pick returns the connection of conns carrying the fewest requests,
// counting those Claimed and not yet sent, and Claims it (nil: conns is
// empty); among equally loaded ones, successive picks take turns, from
// turn, which the caller keeps for the pool: not nil (its zero value
// starts anywhere). The caller Unclaims it as it hands the request to RoundTrip
// (or gives the request up): requests dispatched together spread over the
// pool, so one reset ends fewer of them. Taking turns keeps them spread
// when the machine is so busy that each request of a burst is answered
// before the next is picked (every connection then carries none, and the
// first would take them all).
//
// A connection that died (its Done closed) is picked only when every one
// did, between the caller's AnyAlive and the pick: it carries no request,
// so it looks the least loaded, and every request sent on it comes back at
// once unsent, to be sent on it again. An owner that heard of the death
// only through a full mailbox resent its queue on it about 130,000 times a
// second (Sluice's TestChaosEveryRequestEndsAndNoUnsafeResend hung for its
// two minutes in about half of its runs after the first in one process).
//
// Safe for concurrent use with the same conns and turn.
func Pick(conns []*Conn, turn *atomic.Uint32) *Conn {
	var best *Conn
	least, bestAlive := 0, false
	n := len(conns)
	if n == 0 {
		return nil
	}
	start := int(turn.Add(1) % uint32(n))
	for i := range n {
		c := conns[(start+i)%n]
		a := !c.isDead()
		if l := c.Load(); best == nil || a && !bestAlive || a == bestAlive && l < least {
			best, least, bestAlive = c, l, a
		}
	}
	best.Claim()
	return best
}

// AnyAlive reports whether any of conns has not died (its Done is open):
// whether Pick would give one that can send. An owner may learn of a
// death a while after Done closes.
func AnyAlive(conns []*Conn) bool {
	for _, c := range conns {
		if !c.isDead() {
			return true
		}
	}
	return false
}
