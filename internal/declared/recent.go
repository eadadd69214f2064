package declared

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// The declared groups a shared store counts (the Redis store) live in the
// store, not in a Set: a process snapshots those it reserved in lately,
// read from the store, every process's requests counted. It never lists
// the store's groups (a scan of every process's keys): only those it
// remembers, a bounded set that forgets a group once idle here.

const (
	// maxRecent bounds the shared groups a process remembers; past it,
	// the one used least recently is forgotten (those without a request
	// of this process first).
	maxRecent = 256
	// recentKeep is how long a shared group is remembered after the last
	// of this process's requests in it ended, beyond its Window (while its
	// slots are held): the other processes' requests there stay in the
	// snapshot that long.
	recentKeep = time.Minute
)

// Recent remembers the shared groups this process reserved in, per store
// (W names a store: the global window it is the shared count of): each
// while a request of this process has a place in it, and for its Window
// plus recentKeep after the last one ended. The zero Recent is ready.
// Safe for concurrent use.
type Recent[W comparable] struct {
	mu sync.Mutex
	m  map[RecentKey[W]]*recent
}

// RecentKey is a group of a store.
type RecentKey[W comparable] struct {
	Store W
	Limit *Limit
	Group string
}

type recent struct {
	calls int       // this process's requests with a place in it, not ended
	last  time.Time // the latest reservation or end of one of them
}

// expired reports whether g may be forgotten at now.
func (g *recent) expired(window time.Duration, now time.Time) bool {
	return g.calls == 0 && now.Sub(g.last) > window+recentKeep
}

// Add counts a request of store w reserving in refs' groups at now.
func (r *Recent[W]) Add(w W, refs []Ref, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[RecentKey[W]]*recent{}
	}
	for _, ref := range refs {
		k := RecentKey[W]{w, ref.Limit, ref.Group}
		g := r.m[k]
		if g == nil {
			r.makeRoom(now)
			g = &recent{}
			r.m[k] = g
		}
		g.calls++
		g.last = now
	}
}

// makeRoom forgets groups until one more fits: the expired ones, then,
// if none was, the least recently used (one without a request here
// first). Called under mu.
func (r *Recent[W]) makeRoom(now time.Time) {
	if len(r.m) < maxRecent {
		return
	}
	for k, g := range r.m {
		if g.expired(k.Limit.Window, now) {
			delete(r.m, k)
		}
	}
	if len(r.m) < maxRecent {
		return
	}
	// first reports whether g goes before v: without a request here, then
	// used least recently.
	first := func(g, v *recent) bool {
		if (g.calls == 0) != (v.calls == 0) {
			return g.calls == 0
		}
		return g.last.Before(v.last)
	}
	var victim RecentKey[W]
	var worst *recent
	for k, g := range r.m {
		if worst == nil || first(g, worst) {
			victim, worst = k, g
		}
	}
	delete(r.m, victim)
}

// Done counts the end of a request of store w in refs' groups at now.
func (r *Recent[W]) Done(w W, refs []Ref, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ref := range refs {
		if g := r.m[RecentKey[W]{w, ref.Limit, ref.Group}]; g != nil { // nil: forgotten meanwhile
			g.calls = max(0, g.calls-1)
			g.last = now
		}
	}
}

// Of returns the groups of store w remembered at now, forgetting the
// expired ones.
func (r *Recent[W]) Of(w W, now time.Time) []RecentKey[W] {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []RecentKey[W]
	for k, g := range r.m {
		switch {
		case g.expired(k.Limit.Window, now):
			delete(r.m, k)
		case k.Store == w:
			out = append(out, k)
		}
	}
	return out
}

// Store is a shared store of a process and what it counts for (W, as in
// Recent: the global window it is the shared count of), one of
// Recent.Snapshot's inputs.
type Store[W comparable] struct {
	W W
	// Shared is the store (nil: none). Only a store that counts declared
	// groups (ratelimit.SharedGroups) and can read them
	// (ratelimit.SharedGroupStates) is read.
	Shared ratelimit.Shared
}

// Snapshot returns local, the groups this process counts (Set.Snapshot),
// with the live groups (a request waiting, or a slot held) among the
// groups of stores remembered at now (Of): their Waiting and Held read
// from each store, every process's requests counted, in one round trip
// per store that has such groups (bounded by ctx and the store's
// timeout), sorted by limit and group. A group counted in two places (its
// requests went to two stores, or locally too) is one entry, the sum of
// them (Sum). When a store cannot be read it returns local as it is, with
// the error. The actors' System.SharedGroups calls it with the shared
// stores of its two global windows.
func (r *Recent[W]) Snapshot(ctx context.Context, now time.Time, local []Snapshot, stores []Store[W]) ([]Snapshot, error) {
	groups := slices.Clone(local)
	for _, store := range stores {
		_, counts := store.Shared.(ratelimit.SharedGroups)
		st, reads := store.Shared.(ratelimit.SharedGroupStates)
		if !counts || !reads {
			continue
		}
		keys := r.Of(store.W, now)
		if len(keys) == 0 {
			continue
		}
		gs := make([]ratelimit.SharedGroup, len(keys))
		for i, k := range keys {
			gs[i] = Ref{Limit: k.Limit, Group: k.Group}.Shared()
		}
		states, err := st.GroupStates(ctx, gs)
		if err != nil {
			return local, err
		}
		for i, k := range keys {
			if i >= len(states) || states[i] == (ratelimit.SharedGroupState{}) {
				continue // idle, as Set.Snapshot leaves them out
			}
			groups = append(groups, Snapshot{Limit: k.Limit.Name, Group: k.Group, Count: k.Limit.Count, Window: k.Limit.Window,
				Waiting: states[i].Waiting, Held: states[i].Held})
		}
	}
	return Sum(groups), nil
}
