package conformance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/ratelimit"
)

// TestGroupsGroup runs the group table on ratelimit.Group.
func TestGroupsGroup(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	for _, c := range Groups {
		t.Run(c.Name, func(t *testing.T) {
			g := ratelimit.NewGroup(c.Count, GroupWindow)
			for _, s := range c.Steps {
				if s.Release {
					g.Release(uint64(s.ID))
				} else {
					g.ReserveClass(start, uint64(s.ID), s.Class)
				}
			}
			require.Equal(t, len(c.Want), g.Waiting(), "waiting requests")
			for id, want := range c.Want {
				s, ok := g.Estimate(start, uint64(id))
				require.True(t, ok, "request %d", id)
				assert.Equal(t, GroupPlace{int(s.Start.Sub(start) / GroupWindow), s.Position}, want, "request %d", id)
				assert.Equal(t, time.Duration(want.Window)*GroupWindow, s.Start.Sub(start), "request %d", id)
			}
		})
	}
}

// TestDocsGroupTableCurrent keeps the group table in docs/architecture.md
// equal to Groups.
func TestDocsGroupTableCurrent(t *testing.T) {
	docTableCurrent(t, "group-table", GroupTable())
}
