package actors

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDominanceMatchesBruteForce checks the Fenwick count of the global
// forecast against its definition: for each call, the others with a smaller
// id and a due time no later.
func TestDominanceMatchesBruteForce(t *testing.T) {
	type item struct {
		id  uint64
		due int64
	}
	rng := rand.New(rand.NewPCG(3, 9))
	for round := range 200 {
		n := rng.IntN(60)
		items := make([]item, n)
		ids := rng.Perm(n)
		for i := range items {
			items[i] = item{id: uint64(ids[i]), due: int64(rng.IntN(8))} // ties in due on purpose
		}
		got := dominance(items, func(x item) (uint64, int64) { return x.id, x.due })
		require.Len(t, got, n)
		for i, a := range items {
			want := 0
			for _, b := range items {
				if b.id < a.id && b.due <= a.due {
					want++
				}
			}
			assert.Equal(t, want, got[i], "round %d, item %d", round, i)
		}
	}
}

func TestStageString(t *testing.T) {
	for s, want := range map[Stage]string{StagePending: "pending", StageQueued: "queued", StageRetrying: "retrying",
		StageSent: "sent", StageDone: "done", Stage(9): "Stage(9)"} {
		assert.Equal(t, want, s.String())
	}
}
