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
			now := start
			taken := map[int]time.Time{}
			for i, s := range c.Steps {
				id := uint64(s.ID)
				switch s.Op {
				case Reserve:
					g.ReserveClass(now, id, s.Class)
				case Release:
					g.Release(id)
				case Take:
					ok, wait := g.Take(now, id)
					require.Equal(t, s.OK, ok, "step %d: take %d", i, s.ID)
					require.Equal(t, s.Wait, wait, "step %d: take %d's wait", i, s.ID)
					taken[s.ID] = now
				case Cancel:
					g.Cancel(now, id)
				case Settle:
					g.Settle(now, taken[s.ID], id)
				case Block:
					g.Block(start.Add(s.At))
				case Move:
					now = start.Add(s.At)
				}
			}
			for _, id := range c.IDs() {
				s, ok := g.Estimate(now, uint64(id))
				require.True(t, ok, "request %d", id)
				assert.Equal(t, c.Want[id], PlaceAt(s.Start.Sub(start), s.Position), "request %d", id)
				assert.Equal(t, GroupWindow, s.End.Sub(s.Start), "request %d", id)
			}
			for _, id := range c.Gone() {
				_, ok := g.Estimate(now, uint64(id))
				assert.False(t, ok, "request %d has no reservation", id)
			}
			assert.Equal(t, c.Waiting(), g.Waiting(), "waiting requests")
		})
	}
}

// TestDocsGroupTableCurrent keeps the group table in docs/architecture.md
// equal to Groups.
func TestDocsGroupTableCurrent(t *testing.T) {
	docTableCurrent(t, "group-table", GroupTable())
}
