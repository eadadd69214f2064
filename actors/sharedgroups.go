package actors

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// The declared groups a shared store counts (Config.Shared, the Redis
// store) live in the store, not in groupSet: a process snapshots those it
// reserved in lately, read from the store, every process's requests
// counted. It never lists the store's groups (a scan of every process's
// keys): only those it remembers, a bounded set that forgets a group once
// idle here.

const (
	// maxRecentGroups bounds the shared groups a process remembers; past
	// it, the one used least recently is forgotten (those without a
	// request of this process first).
	maxRecentGroups = 256
	// recentGroupKeep is how long a shared group is remembered after the
	// last of this process's requests in it ended, beyond its Window
	// (while its slots are held): the other processes' requests there
	// stay in the snapshot that long.
	recentGroupKeep = time.Minute
)

// recentGroups remembers the shared groups this process reserved in:
// each while a request of this process has a place in it, and for its
// Window plus recentGroupKeep after the last one ended. Safe for
// concurrent use.
type recentGroups struct {
	mu sync.Mutex
	m  map[recentKey]*recentGroup
}

// recentKey is a group of a window's shared store.
type recentKey struct {
	window Window
	limit  *DeclaredLimit
	group  string
}

type recentGroup struct {
	calls int       // this process's requests with a place in it, not ended
	last  time.Time // the latest reservation or end of one of them
}

// expired reports whether g may be forgotten at now.
func (g *recentGroup) expired(k recentKey, now time.Time) bool {
	return g.calls == 0 && now.Sub(g.last) > k.limit.Window+recentGroupKeep
}

// add counts a request of window w reserving in refs' groups at now.
func (r *recentGroups) add(w Window, refs []LimitRef, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[recentKey]*recentGroup{}
	}
	for _, ref := range refs {
		k := recentKey{w, ref.Limit, ref.Group}
		g := r.m[k]
		if g == nil {
			r.makeRoom(now)
			g = &recentGroup{}
			r.m[k] = g
		}
		g.calls++
		g.last = now
	}
}

// makeRoom forgets groups until one more fits: the expired ones, then,
// if none was, the least recently used (one without a request here
// first). Called under mu.
func (r *recentGroups) makeRoom(now time.Time) {
	if len(r.m) < maxRecentGroups {
		return
	}
	for k, g := range r.m {
		if g.expired(k, now) {
			delete(r.m, k)
		}
	}
	if len(r.m) < maxRecentGroups {
		return
	}
	// first reports whether g goes before v: without a request here, then
	// used least recently.
	first := func(g, v *recentGroup) bool {
		if (g.calls == 0) != (v.calls == 0) {
			return g.calls == 0
		}
		return g.last.Before(v.last)
	}
	var victim recentKey
	var worst *recentGroup
	for k, g := range r.m {
		if worst == nil || first(g, worst) {
			victim, worst = k, g
		}
	}
	delete(r.m, victim)
}

// done counts the end of a request of window w in refs' groups at now.
func (r *recentGroups) done(w Window, refs []LimitRef, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ref := range refs {
		if g := r.m[recentKey{w, ref.Limit, ref.Group}]; g != nil { // nil: forgotten meanwhile
			g.calls = max(0, g.calls-1)
			g.last = now
		}
	}
}

// of returns the groups of window w remembered at now, forgetting the
// expired ones.
func (r *recentGroups) of(w Window, now time.Time) []recentKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recentKey
	for k, g := range r.m {
		switch {
		case g.expired(k, now):
			delete(r.m, k)
		case k.window == w:
			out = append(out, k)
		}
	}
	return out
}

// SharedGroups returns local, the groups System.Snapshot counted in this
// process (Snapshot.Groups), with the live groups (a request waiting, or a
// slot held) among the declared groups of the shared stores
// (Config.Shared, Config.IPShared) this process reserved in lately: their
// Waiting and Held read from each store, every process's requests
// counted, in one round trip per store that has such groups (bounded by
// ctx and the store's timeout), sorted by limit and group. A group counted
// in two places (its requests went with and without a token, or locally
// too) is one entry, the sum of them. When a store cannot be read it
// returns local as it is, with the error.
func (s *System) SharedGroups(ctx context.Context, local []GroupSnapshot) ([]GroupSnapshot, error) {
	now := s.now()
	type id struct{ limit, group string }
	var groups []GroupSnapshot
	at := map[id]int{} // index in groups
	put := func(g GroupSnapshot) {
		j, seen := at[id{g.Limit, g.Group}]
		if !seen {
			at[id{g.Limit, g.Group}] = len(groups)
			groups = append(groups, g)
			return
		}
		groups[j].Waiting += g.Waiting
		groups[j].Held += g.Held
	}
	for _, g := range local {
		put(g)
	}
	for w, win := range s.windows {
		store, counts := win.shared.(ratelimit.SharedGroups)
		st, reads := store.(ratelimit.SharedGroupStates)
		if !counts || !reads {
			continue
		}
		keys := s.groups.recent.of(Window(w), now)
		if len(keys) == 0 {
			continue
		}
		gs := make([]ratelimit.SharedGroup, len(keys))
		for i, k := range keys {
			gs[i] = LimitRef{Limit: k.limit, Group: k.group}.shared()
		}
		states, err := st.GroupStates(ctx, gs)
		if err != nil {
			return local, err
		}
		for i, k := range keys {
			if i >= len(states) || states[i] == (ratelimit.SharedGroupState{}) {
				continue // idle, as groupSet.snapshot leaves them out
			}
			put(GroupSnapshot{Limit: k.limit.Name, Group: k.group, Count: k.limit.Count, Window: k.limit.Window,
				Waiting: states[i].Waiting, Held: states[i].Held})
		}
	}
	slices.SortFunc(groups, func(a, b GroupSnapshot) int {
		return cmp.Or(strings.Compare(a.Limit, b.Limit), strings.Compare(a.Group, b.Group))
	})
	return groups, nil
}
