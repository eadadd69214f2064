package actors

import (
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// firstPioneers lets one first pioneer go at a time per route template,
// across every bucket actor. A template's hash, learned from its first
// answer, holds for every channel (the store's aliases), but before that
// answer no actor knows which bucket its route shares: a first pioneer
// holds a slot only in the related known buckets of its own channel
// (mayShare), and one that lands in an unrelated known bucket goes over
// that bucket's limit. With the template's requests on 50 channels sent
// at once, 50 first pioneers each guessed, and each drew a 429 where its
// channel's window of a route sharing the hash was spent. One pioneer
// guesses now; the others wait for its answer (one round trip), then
// take their channel's real bucket (bucket.adoptLearned) and its count.
//
// It is shared by the actors as the store's aliases are, a small map under
// its own lock, never held while sending; waiters are told by a message.
//
// Invariants: out[t] names the call (and its lane) that holds template t's turn: taken
// when its lane was ready (take), kept while it waits for admission and
// while it is on the wire, given up when its attempt ends (done). A holder
// that finished without being sent (cancelled, failed, its actor crashed)
// holds nothing: the next take has the turn. waiters are the actors that
// found the turn taken; done tells each with a pioneeredMsg.
type firstPioneers struct {
	mu  sync.Mutex
	out map[string]*firstTurn
	// settled lists templates whose first answer named no bucket (a
	// route without rate-limit headers): there is no hash to learn, so
	// their first pioneers go at once, each alone in its actor, as before
	// any answer. Bounded: past maxFirstTemplates it starts over (the
	// cost is one round trip of waiting).
	settled map[string]struct{}
}

// maxFirstTemplates bounds the templates firstPioneers keeps: routes are
// canonical templates, but a caller's paths are not to be trusted.
const maxFirstTemplates = 4096

type firstTurn struct {
	holder *Call
	// lane is the holder's lane: the turn is the lane's, whichever of its
	// calls is at its head (its queue may be reordered, by a declared
	// group's places, after its head took the turn). Compared, never
	// read: it belongs to the holder's actor.
	lane    *lane
	waiters []*actor.PID
}

// firstPoll is how often a lane waiting for another actor's first pioneer
// looks again if no message came: a holder that ended without being sent
// (its caller gave up while it waited for admission) tells nobody. Every
// other end of a turn is told at once (done).
const firstPoll = time.Second

// free reports whether c may take template's turn: nobody holds it, c
// does, or its holder finished without being sent. If not, self is told
// when the turn ends.
func (f *firstPioneers) free(template string, c *Call, l *lane, self *actor.PID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.settled[template]; ok {
		return true
	}
	t := f.out[template]
	if t == nil || t.openTo(c, l) {
		return true
	}
	t.wait(self)
	return false
}

// openTo reports whether c, the head of lane l, may have the turn t holds:
// c holds it, or l does with nothing of it on the wire (the turn is the
// lane's), or its holder finished without being sent.
func (t *firstTurn) openTo(c *Call, l *lane) bool {
	return t.holder == c || !t.holder.onWire() && (t.lane == l || t.holder.Finished())
}

// wait adds self to the actors told when the turn ends, once.
func (t *firstTurn) wait(self *actor.PID) {
	for _, w := range t.waiters {
		if w.Equal(self) {
			return
		}
	}
	t.waiters = append(t.waiters, self)
}

// take gives c, the head of lane l, template's turn if free (or l's
// already); otherwise self is told when it ends.
func (f *firstPioneers) take(template string, c *Call, l *lane, self *actor.PID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.settled[template]; ok {
		return true
	}
	t := f.out[template]
	switch {
	case t == nil:
		if f.out == nil {
			f.out = map[string]*firstTurn{}
		}
		if len(f.out) >= maxFirstTemplates {
			f.sweep()
		}
		f.out[template] = &firstTurn{holder: c, lane: l}
		return true
	case t.openTo(c, l):
		t.holder, t.lane = c, l
		return true
	}
	t.wait(self)
	return false
}

// sweep drops the turns whose holder finished without being sent: nobody
// is on the wire for them. Called with mu held.
func (f *firstPioneers) sweep() {
	for k, t := range f.out {
		if t.holder.Finished() && !t.holder.onWire() {
			delete(f.out, k)
		}
	}
}

// settle records that template's first answer named no bucket: its first
// pioneers need no turn from now on.
func (f *firstPioneers) settle(template string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.settled == nil || len(f.settled) >= maxFirstTemplates {
		f.settled = map[string]struct{}{}
	}
	f.settled[template] = struct{}{}
}

// done ends c's turn on template, if it holds it, and returns the actors
// to tell.
func (f *firstPioneers) done(template string, c *Call) []*actor.PID {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.out[template]
	if t == nil || t.holder != c {
		return nil
	}
	delete(f.out, template)
	return t.waiters
}
