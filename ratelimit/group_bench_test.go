package ratelimit

import (
	"testing"
	"time"
)

// BenchmarkGroupReserve measures one reservation (or estimate) in a
// Group whose chain holds a backlog (the shapes of redisstore's
// BenchmarkGroupPass), the backlog made afresh before each:
//
//   - interactive-over-bulk: 5 per window, 500 bulk requests (100
//     windows): the interaction passes in the first window, and the
//     cascade moves one request back in each of the 100 windows;
//   - normal-over-normal: the same chain of normal requests;
//   - interactive-over-interactive: 100 per window, 10,000 interactions;
//   - interactive-over-interactive-then-bulk: the same, and one bulk
//     request at the end, which the newcomer passes;
//   - estimate-in-a-large-window: 10,000 per window, 10,000 normal
//     requests in one window: the last one's place.
func BenchmarkGroupReserve(b *testing.B) {
	now := time.Unix(1_700_000_000, 0)
	type fill struct {
		n     int
		class int8
	}
	run := func(b *testing.B, count int, fills []fill, class int8, estimate bool) {
		for b.Loop() {
			b.StopTimer()
			g := NewGroup(count, time.Minute)
			id := uint64(0)
			for _, f := range fills {
				for range f.n {
					id++
					g.ReserveClass(now, id, f.class)
				}
			}
			b.StartTimer()
			if estimate {
				if _, ok := g.Estimate(now, id); !ok {
					b.Fatal("no reservation")
				}
			} else {
				g.ReserveClass(now, id+1, class)
			}
		}
	}
	b.Run("interactive-over-bulk", func(b *testing.B) { run(b, 5, []fill{{500, -1}}, 1, false) })
	b.Run("normal-over-normal", func(b *testing.B) { run(b, 5, []fill{{500, 0}}, 0, false) })
	b.Run("interactive-over-interactive", func(b *testing.B) { run(b, 100, []fill{{10_000, 1}}, 1, false) })
	b.Run("interactive-over-interactive-then-bulk", func(b *testing.B) { run(b, 100, []fill{{10_000, 1}, {1, -1}}, 1, false) })
	b.Run("estimate-in-a-large-window", func(b *testing.B) { run(b, 10_000, []fill{{10_000, 0}}, 0, true) })
}
