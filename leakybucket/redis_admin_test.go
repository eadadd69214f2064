package leakybucket

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// adminSchedule runs n random operations (checks of cost 0 to 7, Peek,
// Reset, Set) over three keys and two limits through the Redis store r and
// the Memory m, and compares every result field by field; it returns how
// many of each kind it ran. Memory decides each operation at the time
// Redis reports for it (Result.At). advance moves the fake clock of r
// before each operation, or is nil when r runs on Redis's TIME.
func adminSchedule(t *testing.T, r *Redis, m *Memory, n int, advance func(rng *rand.Rand)) (counts [4]int) {
	t.Helper()
	limits := []Limit{
		{Name: "burst", Size: 7, DripRate: 3 * time.Millisecond, DripSize: 2},
		{Name: "steady", Size: 20, DripRate: 1500 * time.Microsecond},
	}
	rng := rand.New(rand.NewPCG(38, 3))
	ctx := context.Background()
	for i := range n {
		if advance != nil {
			advance(rng)
		}
		key := fmt.Sprint("client-", rng.IntN(3))
		lims := limits[:1+rng.IntN(2)]
		if rng.IntN(3) == 0 {
			lims = limits[1:]
		}
		op := rng.IntN(10) // 0-5 a check, 6-7 Peek, 8 Reset, 9 Set
		var got, want []Result
		var err error
		what := ""
		switch {
		case op < 6:
			cost := 1
			if rng.IntN(3) == 0 {
				cost = rng.IntN(8)
			}
			what = fmt.Sprint("CheckN ", cost)
			got, err = r.CheckN(ctx, key, cost, lims, nil)
			if err == nil {
				want, err = m.CheckNAt(key, cost, lims, nil, got[0].At)
			}
			counts[0]++
		case op < 8:
			what = "Peek"
			got, err = r.Peek(ctx, key, lims, nil)
			if err == nil {
				want, err = m.PeekAt(key, lims, nil, got[0].At)
			}
			counts[1]++
		case op == 8:
			what = "Reset"
			if err := r.Reset(ctx, key, lims); err != nil {
				t.Fatalf("op %d: Reset: %v", i, err)
			}
			if err := m.Reset(ctx, key, lims); err != nil {
				t.Fatal(err)
			}
			counts[2]++
			continue
		default:
			level := rng.IntN(8)
			what = fmt.Sprint("Set ", level)
			got, err = r.Set(ctx, key, level, lims, nil)
			if err == nil {
				want, err = m.SetAt(key, level, lims, nil, got[0].At)
			}
			counts[3]++
		}
		if err != nil {
			t.Fatalf("op %d (%s): %v", i, what, err)
		}
		if len(got) != len(lims) || len(want) != len(lims) {
			t.Fatalf("op %d (%s): %d and %d results for %d limits", i, what, len(got), len(want), len(lims))
		}
		for j := range want {
			if !sameResult(got[j], want[j]) {
				t.Fatalf("op %d (%s, %s, %d limits) at %v, limit %s: Redis %+v, Memory %+v", i, what, key, len(lims), got[j].At.Sub(t0), lims[j].Name, got[j], want[j])
			}
		}
	}
	return counts
}

// TestRedisAdminMatchesMemory: Peek, Reset and Set interleaved with checks
// give the same results in Redis and in Memory, on a fake clock (the
// script's time taken from an argument).
func TestRedisAdminMatchesMemory(t *testing.T) {
	s := redistest.Start(t)
	clock := &fakeClock{now: t0}
	r, err := NewRedis(newTestClient(t, s), RedisOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.now, r.minTTL = clock.Now, time.Hour
	now := t0
	counts := adminSchedule(t, r, &Memory{}, 1500, func(rng *rand.Rand) {
		switch d := rng.IntN(10); {
		case d < 5:
		case d < 9:
			now = now.Add(time.Duration(rng.IntN(300)) * time.Microsecond)
		default:
			now = now.Add(time.Duration(rng.IntN(8)) * time.Millisecond)
		}
		clock.Set(now)
	})
	if counts[1] < 100 || counts[2] < 50 || counts[3] < 50 {
		t.Fatalf("operations %v: too few of some kind", counts)
	}
}

// TestRedisAdminOnRedisClock: through the public API only, on Redis's own
// TIME and with keys expiring by Redis's clock, Redis and a Memory driven
// at the times Redis reports agree on every result of checks, Peek, Reset
// and Set.
func TestRedisAdminOnRedisClock(t *testing.T) {
	s := redistest.Start(t)
	r, err := NewRedis(newTestClient(t, s), RedisOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	adminSchedule(t, r, &Memory{}, 1500, nil)
}

// TestRedisAdmin: Peek writes nothing, Set writes the level with the
// bucket's expiry, Reset deletes, bad arguments never reach Redis, and with
// Redis stopped each returns an error wrapping ErrUnavailable within the
// Timeout.
func TestRedisAdmin(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, s)
	const timeout = 150 * time.Millisecond
	r, _ := NewRedis(c, RedisOptions{Timeout: timeout})
	ctx := context.Background()
	lim := Limit{Name: "api", Size: 10, DripRate: 100 * time.Millisecond, DripSize: 2}
	limits := []Limit{lim}
	const k = "leakybucket:{u1}:api"

	res, err := r.Peek(ctx, "u1", limits, nil)
	if err != nil || len(res) != 1 || res[0].Level != 0 || res[0].Remaining != 10 || res[0].Blocked || c.Exists(ctx, k).Val() != 0 {
		t.Fatalf("Peek of a new key: %+v %v, key exists: %d", res, err, c.Exists(ctx, k).Val())
	}
	sent := time.Now()
	res, err = r.Set(ctx, "u1", 10, limits, nil)
	if err != nil || !res[0].Blocked || res[0].Remaining != 0 || res[0].RetryAfter != 100*time.Millisecond || res[0].ClearAfter != 500*time.Millisecond {
		t.Fatalf("Set 10: %+v %v", res, err)
	}
	// The key expires when the bucket will have drained: 5 drips of 2.
	if v, pttl := c.Get(ctx, k).Val(), c.PTTL(ctx, k).Val(); v != fmt.Sprintf("10:%d", res[0].At.UnixMicro()) || pttl > 500*time.Millisecond || pttl < 500*time.Millisecond-time.Since(sent)-time.Millisecond {
		t.Fatalf("after Set: key %q, PTTL %v (%v since the call)", v, pttl, time.Since(sent))
	}
	if got, _ := r.Check(ctx, "u1", lim); !got.Blocked {
		t.Fatalf("a check after Set 10: %+v", got)
	}
	before := c.PTTL(ctx, k).Val()
	if res, err := r.Peek(ctx, "u1", limits, nil); err != nil || res[0].Level != 10 || c.PTTL(ctx, k).Val() > before {
		t.Fatalf("Peek of a full bucket: %+v %v", res, err)
	}
	if err := r.Reset(ctx, "u1", limits); err != nil || c.Exists(ctx, k).Val() != 0 {
		t.Fatalf("Reset: %v, key exists: %d", err, c.Exists(ctx, k).Val())
	}
	if got, _ := r.Check(ctx, "u1", lim); got.Blocked || got.Level != 1 {
		t.Fatalf("a check after Reset: %+v", got)
	}

	// Bad arguments never reach Redis.
	for _, level := range []int{-1, 11} {
		if _, err := r.Set(ctx, "u1", level, limits, nil); !errors.Is(err, ErrInvalidLevel) {
			t.Errorf("Set %d: %v", level, err)
		}
		if _, err := (&Memory{}).SetAt("u1", level, limits, nil, t0); !errors.Is(err, ErrInvalidLevel) {
			t.Errorf("Memory.SetAt %d: %v", level, err)
		}
	}
	for _, bad := range [][]Limit{{{}}, {{Size: 1}, {Size: 2}}} {
		if _, err := r.Peek(ctx, "u1", bad, nil); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("Peek %v: %v", bad, err)
		}
		if err := r.Reset(ctx, "u1", bad); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("Reset %v: %v", bad, err)
		}
		if err := (&Memory{}).Reset(ctx, "u1", bad); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("Memory.Reset %v: %v", bad, err)
		}
	}

	// A stopped Redis: each ends within the Timeout with ErrUnavailable.
	s.Pause()
	defer s.Resume()
	for _, op := range []struct {
		name string
		run  func() error
	}{
		{"Peek", func() error { _, err := r.Peek(ctx, "u1", limits, nil); return err }},
		{"Reset", func() error { return r.Reset(ctx, "u1", limits) }},
		{"Set", func() error { _, err := r.Set(ctx, "u1", 3, limits, nil); return err }},
	} {
		began := time.Now()
		err := op.run()
		if took := time.Since(began); !errors.Is(err, ErrUnavailable) || took > timeout+400*time.Millisecond {
			t.Fatalf("%s with Redis stopped: %v after %v", op.name, err, took)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := r.Peek(cctx, "u1", limits, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Peek: %v", err)
	}
}
