// Package connpool is the policy of Sluice's pool of HTTP/2 connections
// (transport.Conn), as bookkeeping over counts and times with the time as
// an argument: which connections are live, when to dial another, when a
// connection that fails (a dial that failed, one that died young) grows a
// backoff, and when what waits for a connection fails rather than waits.
// It dials nothing, closes nothing, reads no clock and arms no timer: its
// methods return decisions, which the supervisor actor (package actors)
// applies. Which live connection a request goes on is transport.Pick.
package connpool

import (
	"errors"
	"slices"
	"time"

	"github.com/sluicehq/sluice/transport"
)

// MaxDialFailures is how many connections in a row may fail to reach the
// API (a dial that failed, or a connection that died young without being
// accepted, or in a GOAWAY) before the requests waiting for a connection
// fail (State.Unavailable); every further such failure fails what
// waits again, until a connection is accepted or serves answers.
const MaxDialFailures = 3

// YoungLife is the age under which a connection that delivered no answer
// counts as a failed connection when it dies, if no connection answered
// anything for as long (State.Died): a server that completes the
// handshake and closes, or sends GOAWAY before answering anything, must
// meet a growing backoff, not a reconnection storm; a connection reset
// while others answer is an ordinary fault, replaced at once.
const YoungLife = 10 * time.Second

// CallsPerConn is how many requests awaiting an outcome (queued, waiting
// for admission or on the wire) each connection of the pool serves at most
// while the pool can grow: one more beyond that dials another, up to the
// owner's cap (State.Dial). A reset ends every
// request in flight on its connection: with 4 connections for the bursts of
// 50 requests a global limit of 50/s lets through, one drop ended a dozen
// of them, and their channels' next windows with them; a pool that grows
// with the load keeps that to a few (Sluice's docs/failure-modes.md has the
// figures). A bot that sends a request now and then keeps one connection.
// The count is the callers' (the owner's pending count, Sluice's
// System.pending), exact when each request is submitted, not the buckets'
// view of what they are about to send.
const CallsPerConn = 4

// State is the policy of a pool of connections, as bookkeeping over
// counts and times, with the time as an argument: which connections are
// live, when to dial another, and when connections that fail (a dial that
// failed, one that died young) grow a backoff and fail what waits for a
// connection. It dials nothing, closes nothing, reads no clock and arms no
// timer: its methods return decisions, which the owner (Sluice's
// supervisor actor) applies. The zero value is an empty pool with no dial
// in flight and no failure. Not safe for concurrent use: one owner drives
// it.
//
// The owner's cycle: Dial says whether to dial (and counts the dial in
// flight); Dialed ends it, then Add records the new connection, or Failed
// counts the failed dial; a connection's death is Remove, then Died,
// which says whether it counts as a failed connection (then Failed);
// Failed gives the backoff's attempt and counts a backoff running until
// BackoffEnded; Unavailable says when what waits for a connection fails
// rather than waits.
type State struct {
	// conns are the live connections, at most the owner's cap: the
	// first is dialled at start, the others one after the other while
	// requests wait (unless a connection failed since), so one connection's death
	// ends only the requests it carried (the blast radius), not all.
	conns   []pooled
	dialing bool // a dial is in flight (at most one at a time)
	backoff bool // a redial waits for a backoff (Failed): Dial dials nothing
	// failures counts connections in a row that failed: dials that failed
	// and connections that died young (see YoungLife). It grows the
	// reconnection backoff. refused counts the last of them in a row that
	// showed the API refusing or out of reach: dials that failed, and
	// young deaths of connections the server never accepted
	// (transport.Conn.Accepted) or that ended in a GOAWAY. At
	// MaxDialFailures the requests waiting for a connection fail
	// (Unavailable). A connection the server accepted and then dropped
	// before answering (a reset, a crash under load) shows the API
	// reachable: it grows the backoff, and the requests it carried are
	// resent within their own retry budgets, so nothing waits forever.
	failures int
	refused  int
	lastErr  error // the last failed connection's error
}

// pooled is a live connection and when it came up.
type pooled struct {
	conn *transport.Conn
	upAt time.Time
}

// Death is what the pool's policy reads of a connection that died
// (State.Died).
type Death struct {
	// UpAt is when it came up (State.Remove).
	UpAt time.Time
	// Answered is how many answers it delivered (transport.Conn.Answered).
	Answered uint64
	// Accepted is whether the server accepted it (transport.Conn.Accepted).
	Accepted bool
	// Err is why it died (transport.Conn.Err): a GOAWAY (transport.ErrGoAway) shows the API
	// refusing.
	Err error
}

// Len returns how many connections are live.
func (p *State) Len() int { return len(p.conns) }

// Conns returns the live connections in a new slice (empty, not nil, when
// there is none), which the caller may keep: for transport.Pick.
func (p *State) Conns() []*transport.Conn {
	out := make([]*transport.Conn, len(p.conns))
	for i, c := range p.conns {
		out[i] = c.conn
	}
	return out
}

// Demand reports whether any request waits for an outcome (pending, the
// owner's count of requests without one): without one, a lost connection
// is not replaced, nor a connection dialled after a backoff, until a
// request comes.
func (p *State) Demand(pending int64) bool { return pending > 0 }

// crowded reports whether the open connections serve more than
// CallsPerConn requests awaiting an outcome each.
func (p *State) crowded(pending int64) bool {
	return pending > int64(CallsPerConn*len(p.conns))
}

// Dial reports whether to dial a connection now, and if so counts the
// dial in flight until Dialed. One dial at a time; none while a backoff
// runs. first: the owner has no connection and dials none (Sluice's
// supervisor is disconnected): the first connection is dialled whenever it
// may be. Otherwise (the pool is up) one more is, only while the pool is
// under max (the owner's cap), the count of failures is 0 (it starts over
// only when a connection dies an ordinary death, Died: after one failed
// dial the pool keeps its size until then), and the open ones are crowded
// (CallsPerConn: more than that many of the pending requests awaiting an
// outcome each, which implies Demand).
func (p *State) Dial(first bool, pending int64, max int) bool {
	if p.dialing || p.backoff {
		return false
	}
	if !first && (len(p.conns) >= max || p.failures > 0 || !p.crowded(pending)) {
		return false
	}
	p.dialing = true
	return true
}

// Dialed ends the dial in flight (Dial), whatever its outcome: then Add
// for a connection, Failed for a failed dial.
func (p *State) Dialed() { p.dialing = false }

// Add records c, which came up at now, as live.
func (p *State) Add(c *transport.Conn, now time.Time) {
	p.conns = append(p.conns, pooled{conn: c, upAt: now})
}

// Remove takes c out of the pool and returns when it came up (for Died);
// ok is false if c was not in it (already gone).
func (p *State) Remove(c *transport.Conn) (upAt time.Time, ok bool) {
	i := slices.IndexFunc(p.conns, func(x pooled) bool { return x.conn == c })
	if i < 0 {
		return time.Time{}, false
	}
	upAt = p.conns[i].upAt
	p.conns = slices.Delete(p.conns, i, i+1)
	return upAt, true
}

// Clear takes every connection out of the pool and returns them, for the
// owner to close.
func (p *State) Clear() []*transport.Conn {
	out := p.Conns()
	p.conns = nil
	return out
}

// Died judges the death at now of a connection taken out of the pool
// (Remove); lastAnswer is when any connection last delivered an answer. A
// connection that died young counts as a failed one (failed: the owner
// calls Failed with refused, which grows the backoff): it delivered no
// answer, came up less than YoungLife ago, and no connection answered
// anything for as long. refused: it showed the API refusing or out of
// reach, as the server never accepted it (Death.Accepted) or it ended in a
// GOAWAY. Otherwise it is an ordinary fault: the failure counts start
// over, and it is replaced at once if requests wait (Demand, then Dial).
func (p *State) Died(d Death, now, lastAnswer time.Time) (failed, refused bool) {
	silent := now.Sub(lastAnswer) >= YoungLife
	if d.Answered == 0 && now.Sub(d.UpAt) < YoungLife && silent {
		return true, !d.Accepted || errors.Is(d.Err, transport.ErrGoAway)
	}
	p.failures, p.refused = 0, 0
	return false, false
}

// Failed counts a failed connection (a dial, or one that died young;
// refused: it showed the API refusing or out of reach, see Died), with its
// error, and counts a backoff running until BackoffEnded. It returns the
// backoff's attempt (Backoff.Delay's, 0-based), which grows with the count
// of failures in a row. Unavailable then says whether what waits for a
// connection fails now.
func (p *State) Failed(err error, refused bool) (attempt int) {
	p.failures++
	if refused {
		p.refused++
	} else {
		p.refused = 0
	}
	p.lastErr = err
	p.backoff = true
	return p.failures - 1
}

// BackoffEnded records that the backoff Failed started ended: Dial may
// dial again (if Demand: the owner does not dial for nothing).
func (p *State) BackoffEnded() { p.backoff = false }

// Unavailable reports whether what waits for a connection fails now
// rather than waits (ok): connections keep failing (MaxDialFailures or
// more in a row refused), none is up and the next try is a backoff away.
// refused is how many in a row refused, last the last failed connection's
// error, for the error the waiting requests fail with.
func (p *State) Unavailable() (refused int, last error, ok bool) {
	if len(p.conns) == 0 && p.backoff && p.refused >= MaxDialFailures {
		return p.refused, p.lastErr, true
	}
	return 0, nil, false
}
