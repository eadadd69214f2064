package actors

import (
	"context"
	"slices"

	"github.com/sluicehq/sluice/internal/declared"
	"github.com/sluicehq/sluice/ratelimit"
)

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
func (s *System) SharedGroups(ctx context.Context, local []declared.Snapshot) ([]declared.Snapshot, error) {
	now := s.now()
	groups := slices.Clone(local)
	for w, win := range s.windows {
		store, counts := win.Shared.(ratelimit.SharedGroups)
		st, reads := store.(ratelimit.SharedGroupStates)
		if !counts || !reads {
			continue
		}
		keys := s.groups.Recent.Of(Window(w), now)
		if len(keys) == 0 {
			continue
		}
		gs := make([]ratelimit.SharedGroup, len(keys))
		for i, k := range keys {
			gs[i] = declared.Ref{Limit: k.Limit, Group: k.Group}.Shared()
		}
		states, err := st.GroupStates(ctx, gs)
		if err != nil {
			return local, err
		}
		for i, k := range keys {
			if i >= len(states) || states[i] == (ratelimit.SharedGroupState{}) {
				continue // idle, as declared.Set.Snapshot leaves them out
			}
			groups = append(groups, declared.Snapshot{Limit: k.Limit.Name, Group: k.Group, Count: k.Limit.Count, Window: k.Limit.Window,
				Waiting: states[i].Waiting, Held: states[i].Held})
		}
	}
	return declared.Sum(groups), nil
}
