package actors

import (
	"context"

	"github.com/sluicehq/sluice/internal/declared"
)

// SharedGroups returns local, the groups System.Snapshot counted in this
// process (Snapshot.Groups), with the live groups (a request waiting, or a
// slot held) among the declared groups of the shared stores
// (Config.Shared, Config.IPShared) this process reserved in lately, read
// from each store (declared.Recent.Snapshot: every process's requests
// counted, bounded by ctx and the store's timeout, sorted by limit and
// group). A group counted in two places (its requests went with and
// without a token, or locally too) is one entry, the sum of them. When a
// store cannot be read it returns local as it is, with the error.
func (s *System) SharedGroups(ctx context.Context, local []declared.Snapshot) ([]declared.Snapshot, error) {
	var stores [numWindows]declared.Store[Window]
	for w, win := range s.windows {
		stores[w] = declared.Store[Window]{W: Window(w), Shared: win.Shared}
	}
	return s.groups.Recent.Snapshot(ctx, s.now(), local, stores[:])
}
