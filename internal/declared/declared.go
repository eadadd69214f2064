// Package declared holds the declared limits (sluice.Limit, compiled) and
// their rules: the limits and the group a request counts in (Limit, Ref),
// the live ratelimit.Group of every group in use in this process (Set),
// the groups of shared stores a process reserved in lately, and its
// snapshot of them read from the stores (Recent, Recent.Snapshot), where
// a request waits in its groups (Place; SharedPlace when a shared store such as Redis counts them), and what a
// request does in its groups as it goes (Groups, reading it through a
// Request: reserve, ready, take all or none, cancel, settle, release,
// block, estimate, and the reservation in a shared store).
//
// A declared group may span bucket actors (a bot's "100 DMs a minute"
// covers every DM channel), so its count cannot live in one actor: Set and
// Recent are synchronized structures, like the global window
// (ratelimit.SlidingWindow), each under its own lock, never held while
// sending. Each request finds its place in a Group by itself: FIFO across
// actors comes from the order of reservations. Time is an argument.
//
// The actors call it: System.Submit makes each call's Place (NewPlace,
// before the call is registered) and reserves it in a shared store
// (Groups.ReserveShared, on the caller's goroutine); the bucket actor
// holding the call reserves, readies, takes, cancels, settles and blocks
// it (Place.Start orders its lane's queue); the completion hook releases
// it, on any goroutine; the ETAs read Groups.Estimate and
// SharedPlace.Refresh, the worker SharedPlace.SetTaken, and
// System.SharedGroups reads Recent.Snapshot. It knows no actor and no
// call: a Request (the call's fields and its Place) is all it reads of
// one.
package declared

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// Limit is a limit the API enforces without announcing it in headers
// (sluice.Limit, compiled): Count requests per Window in each of its
// groups.
type Limit struct {
	Name   string
	Count  int
	Window time.Duration
}

// Ref is a declared limit a request is under, and the group it counts in
// ("guild_id=9"; "" when the limit has one group).
type Ref struct {
	Limit *Limit
	Group string
}

// Shared is the group in a shared store (ratelimit.SharedGroups): its key
// there is the limit's name and the group's key, which every process
// names alike.
func (r Ref) Shared() ratelimit.SharedGroup {
	return ratelimit.SharedGroup{Key: r.Limit.Name + "|" + r.Group, Count: r.Limit.Count, Window: r.Limit.Window}
}

// Snapshot is one live group (a request waiting, or a slot held):
// sluice.LimitSnapshot, which documents every field, is converted from it
// (the two must stay identical).
type Snapshot struct {
	Limit   string
	Group   string
	Count   int
	Window  time.Duration
	Waiting int
	Held    int
}

// Finisher is a request that may get its outcome at any time (its
// context ended, on another goroutine).
type Finisher interface{ Finished() bool }

// Set holds the live ratelimit.Group of every group of the declared
// limits, made on first use and dropped once idle. The zero Set is ready.
// Safe for concurrent use.
//
// Invariant: one Group per (limit, group) at a time; a group is dropped
// only while idle (no reservation, no slot held), under mu, so no request
// holds a place in a dropped group.
type Set struct {
	mu  sync.Mutex
	m   map[key]*ratelimit.Group
	ops int // since the last sweep
}

type key struct {
	limit *Limit
	group string
}

// sweepEvery is how many operations pass between two sweeps of idle
// groups: memory follows the groups in use.
const sweepEvery = 1024

// Each runs f on every group of refs, in order, under the set's lock,
// creating them, until f returns false. req is the request whose id is
// id: if it has its outcome once f has run (its context ended meanwhile,
// on another goroutine), its reservations in the groups f saw are
// released, since the release its outcome made may have come before a
// reservation f made, which would then stay for good.
func (s *Set) Each(now time.Time, refs []Ref, id uint64, req Finisher, f func(g *ratelimit.Group) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[key]*ratelimit.Group{}
	}
	groups := make([]*ratelimit.Group, 0, len(refs))
	for _, ref := range refs {
		k := key{ref.Limit, ref.Group}
		g := s.m[k]
		if g == nil {
			g = ratelimit.NewGroup(ref.Limit.Count, ref.Limit.Window)
			s.m[k] = g
		}
		groups = append(groups, g)
		if !f(g) {
			break
		}
	}
	if req.Finished() {
		for _, g := range groups {
			g.Release(id)
		}
	}
	if s.ops++; s.ops >= sweepEvery {
		s.ops = 0
		for k, g := range s.m {
			if g.Idle(now) {
				delete(s.m, k)
			}
		}
	}
}

// Snapshot lists the groups live at now (a request waiting, or a slot
// held), in no order.
func (s *Set) Snapshot(now time.Time) []Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Snapshot, 0, len(s.m))
	for k, g := range s.m {
		if g.Idle(now) {
			continue
		}
		out = append(out, Snapshot{Limit: k.limit.Name, Group: k.group, Count: k.limit.Count, Window: k.limit.Window,
			Waiting: g.Waiting(), Held: g.Held(now)})
	}
	return out
}

// Sum merges snapshots of the same group (counted in several places: its
// requests went with and without a token, or locally too) into one entry,
// the sum of them, sorted by limit and group.
func Sum(groups []Snapshot) []Snapshot {
	type id struct{ limit, group string }
	var out []Snapshot
	at := map[id]int{} // index in out
	for _, g := range groups {
		j, seen := at[id{g.Limit, g.Group}]
		if !seen {
			at[id{g.Limit, g.Group}] = len(out)
			out = append(out, g)
			continue
		}
		out[j].Waiting += g.Waiting
		out[j].Held += g.Held
	}
	slices.SortFunc(out, func(a, b Snapshot) int {
		return cmp.Or(strings.Compare(a.Limit, b.Limit), strings.Compare(a.Group, b.Group))
	})
	return out
}
