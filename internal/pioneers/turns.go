// Package pioneers lets one first pioneer go at a time per route template,
// across every bucket actor (Turns). A template's hash, learned from its
// first answer, holds for every channel (the store's aliases), but before
// that answer no actor knows which bucket its route shares: a first
// pioneer holds a slot only in the related known buckets of its own
// channel (lanes.Lane.MayShare), and one that lands in an unrelated known
// bucket goes over that bucket's limit. With the template's requests on 50
// channels sent at once, 50 first pioneers each guessed, and each drew a
// 429 where its channel's window of a route sharing the hash was spent.
// One pioneer guesses now; the others wait for its answer (one round
// trip), then take their channel's real bucket (the actors' adoptLearned)
// and its count.
//
// Turns is a shared table, not actor messaging: a small map under its own
// lock, never held while sending, read and written by every bucket actor
// (package actors, System.firsts: Free and Take before a first pioneer
// goes, Settle and Done with its answer). It reads no clock, starts no
// goroutine and sends nothing: Done returns the waiters, and the caller
// tells each with a message (pioneeredMsg); a waiter told by nobody looks
// again after Poll.
//
// Invariants:
//   - one turn per template: at most one holder (a call, with its lane) at
//     a time; a call of another lane that asks is refused and becomes a
//     waiter;
//   - the turn is the lane's: whichever of its calls is at its head may
//     take it over, as long as the holder is not on the wire (a lane's
//     queue may be reordered, by a declared group's places, after its head
//     took the turn);
//   - a holder that finished without being sent (cancelled, failed, its
//     actor crashed) holds nothing: the next Take has the turn, and keeps
//     its waiters; one on the wire holds it, finished or not, until Done;
//   - Done by the holder ends the turn and returns its waiters, each once
//     however often it asked (compared with Equal); Done by anyone else
//     changes nothing and returns none;
//   - a settled template (its first answer named no bucket) needs no turn;
//   - both maps are bounded by maxTemplates: the turns by dropping those
//     whose holder finished without being sent (sweep) when a new template
//     comes at the bound, the settled templates by starting over.
package pioneers

import (
	"sync"
	"time"
)

// Rules is what Turns reads of a holder (H). Both are safe to call from
// any goroutine: the holder belongs to another actor.
type Rules[H any] interface {
	// Finished reports that the holder has its outcome.
	Finished(H) bool
	// OnWire reports that the holder is on the wire as its template's
	// first pioneer.
	OnWire(H) bool
}

// Waiter is what Turns reads of a waiter (W): whether two name the same
// actor, so each is told once.
type Waiter[W any] interface {
	Equal(W) bool
}

// Turns holds each route template's first pioneer turn. H is the holder
// (a call), L its lane (compared, never read: it belongs to the holder's
// actor), W a waiter (an actor's address, compared with Equal), and R a
// type whose zero value implements Rules[H] (a struct{} whose methods read
// H). The zero Turns is empty and ready; it is safe for concurrent use.
//
// Invariants: out[t] names the call (and its lane) that holds template t's
// turn: taken when its lane was ready (Take), kept while it waits for
// admission and while it is on the wire, given up when its attempt ends
// (Done). A holder that finished without being sent holds nothing: the
// next Take has the turn. waiters are the actors that found the turn
// taken; Done returns them to be told.
type Turns[H, L comparable, W Waiter[W], R Rules[H]] struct {
	mu  sync.Mutex
	out map[string]*turn[H, L, W]
	// settled lists templates whose first answer named no bucket (a
	// route without rate-limit headers): there is no hash to learn, so
	// their first pioneers go at once, each alone in its actor, as before
	// any answer. Bounded: past maxTemplates it starts over (the cost is
	// one round trip of waiting).
	settled map[string]struct{}
}

// maxTemplates bounds the templates Turns keeps: routes are canonical
// templates, but a caller's paths are not to be trusted.
const maxTemplates = 4096

type turn[H, L comparable, W Waiter[W]] struct {
	holder H
	// lane is the holder's lane: the turn is the lane's, whichever of its
	// calls is at its head (its queue may be reordered, by a declared
	// group's places, after its head took the turn). Compared, never
	// read: it belongs to the holder's actor.
	lane    L
	waiters []W
}

// Poll is how often a lane waiting for another actor's first pioneer
// looks again if no message came: a holder that ended without being sent
// (its caller gave up while it waited for admission) tells nobody. Every
// other end of a turn is told at once (Done).
const Poll = time.Second

// Free reports whether c may take template's turn: nobody holds it, c
// does, or its holder finished without being sent. If not, self is told
// when the turn ends.
func (f *Turns[H, L, W, R]) Free(template string, c H, l L, self W) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.settled[template]; ok {
		return true
	}
	t := f.out[template]
	if t == nil || f.openTo(t, c, l) {
		return true
	}
	t.wait(self)
	return false
}

// openTo reports whether c, the head of lane l, may have the turn t holds:
// c holds it, or l does with nothing of it on the wire (the turn is the
// lane's), or its holder finished without being sent.
func (f *Turns[H, L, W, R]) openTo(t *turn[H, L, W], c H, l L) bool {
	var r R
	return t.holder == c || !r.OnWire(t.holder) && (t.lane == l || r.Finished(t.holder))
}

// wait adds self to the actors told when the turn ends, once.
func (t *turn[H, L, W]) wait(self W) {
	for _, w := range t.waiters {
		if w.Equal(self) {
			return
		}
	}
	t.waiters = append(t.waiters, self)
}

// Take gives c, the head of lane l, template's turn if free (or l's
// already); otherwise self is told when it ends.
func (f *Turns[H, L, W, R]) Take(template string, c H, l L, self W) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.settled[template]; ok {
		return true
	}
	t := f.out[template]
	switch {
	case t == nil:
		if f.out == nil {
			f.out = map[string]*turn[H, L, W]{}
		}
		if len(f.out) >= maxTemplates {
			f.sweep()
		}
		f.out[template] = &turn[H, L, W]{holder: c, lane: l}
		return true
	case f.openTo(t, c, l):
		t.holder, t.lane = c, l
		return true
	}
	t.wait(self)
	return false
}

// sweep drops the turns whose holder finished without being sent: nobody
// is on the wire for them. Called with mu held.
func (f *Turns[H, L, W, R]) sweep() {
	var r R
	for k, t := range f.out {
		if r.Finished(t.holder) && !r.OnWire(t.holder) {
			delete(f.out, k)
		}
	}
}

// Settle records that template's first answer named no bucket: its first
// pioneers need no turn from now on.
func (f *Turns[H, L, W, R]) Settle(template string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.settled == nil || len(f.settled) >= maxTemplates {
		f.settled = map[string]struct{}{}
	}
	f.settled[template] = struct{}{}
}

// Done ends c's turn on template, if it holds it, and returns the actors
// to tell.
func (f *Turns[H, L, W, R]) Done(template string, c H) []W {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.out[template]
	if t == nil || t.holder != c {
		return nil
	}
	delete(f.out, template)
	return t.waiters
}
