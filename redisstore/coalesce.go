package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// Refusals told once per process.
//
// A bucket actor sends what its own view of a bucket allows, all at once:
// when a window opens, a process's whole share of a hot bucket (and more:
// it does not know what the other processes will take). Each request asks
// Redis for its slot, and on a contended bucket most are refused: four
// processes on one bucket of 50 per 500 ms made three reservation calls
// per request (bench/cmd/shared, 2026-11-27), refused by a full window they
// all asked about in the same millisecond. The global window, when it
// binds, did the same.
//
// So a process remembers what Redis told it. A key (a bucket, or the
// global window) refused for a wait is refused here, with the rest of that
// wait, without asking Redis again until it ends; and while a key is
// contended (refused within the last wait, or a second), its reservations
// go to Redis one at a time (globalTurns at a time for the global window,
// which every request asks for), so that the first refusal is known before
// the next one asks. A window's share then costs one call per request and
// one refusal.
//
// Only refusals that end at a known time are remembered: a full window,
// a turn, the global window's first slot. A refusal that waits for
// another process's answer (SharedGrant.Notify) ends with a wake-up, and
// is asked again each time. A refusal here never admits anything: at
// worst it holds a request until the wait Redis told, as Redis would have.
type refusals struct {
	mu   sync.Mutex
	keys map[string]*keyGate
}

// keyGate is what a process knows of one key.
//
// Invariants (under refusals.mu): until is after refused only when a
// refusal of scope, told at refused, holds the key until then (local
// clock); the key is contended until contended; turn holds a token while
// a reservation of the key is being asked of Redis (its capacity is 1,
// globalTurns for the global window);
// users counts the reservations holding or waiting for the gate, which
// keep the entry in the map.
type keyGate struct {
	scope     string
	until     time.Time
	contended time.Time
	turn      chan struct{}
	users     int
}

// refusalSweep is the number of keys above which a new one first drops
// the keys neither held, contended nor used.
const refusalSweep = 4096

// contendedFor is how long, at least, a key stays contended after a
// refusal ends.
const contendedFor = time.Second

// globalTurns is how many reservations of a contended global window go to
// Redis at once: every request of the process asks for it, so one at a
// time would space a window's sends by Redis's round trip.
const globalTurns = 4

// globalKey is the key of the global window among the bucket keys.
const globalKey = "\x00global"

// keysOf returns the keys a reservation of r asks for: its bucket, as the
// fallback names it, and the global window if r wants a slot of it.
func keysOf(r ratelimit.SharedRequest) []string {
	key := r.Route
	if r.Hash != "" {
		key = routes.BucketKey(r.Hash, r.Major)
	}
	if r.Global {
		return []string{globalKey, key}
	}
	return []string{key}
}

// enter is called before a reservation of keys is asked of Redis, at now.
// If a key is refused still, it returns that refusal (and done is nil).
// Otherwise it takes the turn of every contended key, in order (waiting
// for the reservations under way), and returns done, which the caller
// must call with Redis's answer, or with ok false if it asked nothing in
// the end. It returns ctx's refusal if ctx ends while it waits.
func (rf *refusals) enter(ctx context.Context, keys []string, now func() time.Time) (refused ratelimit.SharedGrant, done func(g ratelimit.SharedGrant, asked bool)) {
	var held []*keyGate
	release := func() {
		for _, k := range held {
			<-k.turn
		}
		held = nil
	}
	rf.mu.Lock()
	gates := make([]*keyGate, len(keys))
	for i, k := range keys {
		gates[i] = rf.gate(k, now())
		gates[i].users++
	}
	rf.mu.Unlock()
	leave := func() {
		rf.mu.Lock()
		for _, g := range gates {
			g.users--
		}
		rf.mu.Unlock()
	}
	// check returns g's refusal at now, if any, and whether g is contended.
	check := func(g *keyGate) (ratelimit.SharedGrant, bool) {
		rf.mu.Lock()
		defer rf.mu.Unlock()
		t := now()
		if g.until.After(t) {
			return ratelimit.SharedGrant{Scope: g.scope, Wait: g.until.Sub(t)}, true
		}
		return ratelimit.SharedGrant{}, g.contended.After(t)
	}
	for _, g := range gates {
		refused, contended := check(g)
		if refused.Scope == "" && contended {
			select {
			case g.turn <- struct{}{}:
				held = append(held, g)
			case <-ctx.Done():
				refused = ratelimit.SharedGrant{Scope: "bucket"}
			}
			if refused.Scope == "" {
				refused, _ = check(g) // refused while this one waited for its turn?
			}
		}
		if refused.Scope != "" {
			release()
			leave()
			return refused, nil
		}
	}
	return ratelimit.SharedGrant{}, func(ans ratelimit.SharedGrant, asked bool) {
		if asked && !ans.OK && !ans.Notify && ans.Wait > 0 && !ans.Local {
			t := now()
			rf.mu.Lock()
			for i, k := range keys {
				// A global refusal names the global window; any other
				// names the bucket (a turn, a full window, a pause).
				if (k == globalKey) == (ans.Scope == "global") && (ans.Scope == "global" || ans.Scope == "bucket") {
					g := gates[i]
					g.scope, g.until = ans.Scope, t.Add(ans.Wait)
					g.contended = g.until.Add(max(contendedFor, ans.Wait))
				}
			}
			rf.mu.Unlock()
		}
		release()
		leave()
	}
}

// gate returns the gate of key, made if needed (under rf.mu, at now).
func (rf *refusals) gate(key string, now time.Time) *keyGate {
	if rf.keys == nil {
		rf.keys = map[string]*keyGate{}
	}
	g := rf.keys[key]
	if g != nil {
		return g
	}
	if len(rf.keys) >= refusalSweep {
		for k, x := range rf.keys {
			if x.users == 0 && !x.contended.After(now) {
				delete(rf.keys, k)
			}
		}
	}
	n := 1
	if key == globalKey {
		n = globalTurns
	}
	g = &keyGate{turn: make(chan struct{}, n)}
	rf.keys[key] = g
	return g
}

// lift drops the refusals of keys: what Redis holds of them changed since
// (contention stays: their reservations still go one at a time).
func (rf *refusals) lift(keys ...string) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	for _, k := range keys {
		if g := rf.keys[k]; g != nil {
			g.until = time.Time{}
		}
	}
}

// forget drops every refusal and contention: the store changed mode, and
// what Redis told before may no longer hold.
func (rf *refusals) forget() {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	for _, g := range rf.keys {
		g.until, g.contended = time.Time{}, time.Time{}
	}
}
