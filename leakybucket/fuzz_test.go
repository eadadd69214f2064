package leakybucket

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// FuzzModel drives a Bucket, a Memory store and the reference model with
// the same limits and the same schedule of calls, over two keys and two
// limits, and checks that:
//
//   - Bucket gives exactly the reference model's result for every call
//     (Blocked, Level, Remaining, RetryAfter, ClearAfter, NextDrip), at the
//     schedule's times, and Memory.CheckAt at the store's times (which never
//     run backwards), while it sweeps;
//   - Memory.CheckAllAt with both limits gives each reference bucket's
//     result, admitting a call only if neither limit blocks it;
//   - every result keeps the invariants (Remaining = max(Size-Level, 0),
//     Blocked implies a positive RetryAfter, ...);
//   - no interval of length w between two admissions holds more than
//     S - 1 + min(D, S)·(floor(w/R) + 1) admissions (S + floor(w/R) for
//     D = 1), for every pair of admissions: always for Memory, for the
//     Bucket whenever the clock never went back.
//
// Each byte of schedule is one call: its low 6 bits step the clock forward
// by eighths of the first limit's drip interval, 0xF8 and above step it back
// (a clock stepped back must only make buckets stricter), bit 6 picks the
// key and bit 7 picks a two-limit check. Call i costs costs[i % len(costs)]
// modulo one more than the least Size of its limits (0 included: a call
// that takes nothing), or 1 if costs is empty; the bound is then checked
// in units.
//
// Call i is an operation picked by ops[i % len(ops)] modulo 8 (always a
// check if ops is empty): 0 to 4 a check as above, 5 Memory.PeekAt, 6
// Memory.Reset, 7 Memory.SetAt to the level op>>3 modulo one more than the
// least Size of its limits; each compared with the reference buckets
// (peeked without charging, emptied, or set to the level from the store's
// time). Peek, Reset and Set do not touch the Bucket. Reset takes no time,
// so it does not move the store's. A Reset or Set starts a new stretch of
// the key's admissions for the bound (an operator lifted or imposed the
// limit by hand): the bound holds within each stretch.
func FuzzModel(f *testing.F) {
	f.Add(uint16(10), uint16(1), uint32(100_000), uint16(3), uint16(2), uint32(7_000), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 4, 4, 4, 63, 0, 0}, []byte{}, []byte{})
	f.Add(uint16(5), uint16(2), uint32(1_000_000), uint16(1), uint16(0), uint32(1), []byte{0x80, 0x80, 0x80, 1, 7, 8, 0x88, 0xc0, 0xc0, 0x40, 0xff, 0, 0, 12}, []byte{1}, []byte{})
	f.Add(uint16(2), uint16(5), uint32(10_000), uint16(40), uint16(8), uint32(333), []byte{0, 0, 0, 8, 0, 0, 0xf8, 0xf8, 0, 0, 9, 9, 9, 0x49, 0x49}, []byte{}, []byte{})
	f.Add(uint16(63), uint16(8), uint32(1), uint16(0), uint16(7), uint32(19_999), []byte("a burst, then a trickle, then a burst again: 0000000000000000000000000000000000000000"), []byte{}, []byte{})
	f.Add(uint16(0), uint16(0), uint32(0), uint16(0), uint16(0), uint32(0), []byte{0xff, 0xfe, 0, 0, 1, 2, 3}, []byte{}, []byte{})
	// Costs: mixed 1–10 on buckets of 10, a cost of 0, a full-size cost.
	f.Add(uint16(9), uint16(2), uint32(10_000), uint16(19), uint16(0), uint32(3_000), []byte{0, 0, 0, 0x80, 0x80, 4, 8, 0x48, 0xc8, 1, 2, 0, 0, 0x80, 9, 16}, []byte{3, 7, 10, 1, 0, 10, 5, 2, 9, 4, 6, 8}, []byte{})
	f.Add(uint16(4), uint16(0), uint32(500), uint16(7), uint16(3), uint32(900), []byte{0, 0x80, 0, 0x80, 0xf9, 0, 3, 0x83, 0x43, 0xc3, 12, 0}, []byte{5, 0, 255, 3}, []byte{})
	// Peek, Reset and Set interleaved with checks (the first keeping
	// drained buckets: drip2 has bit 8).
	f.Add(uint16(9), uint16(1), uint32(10_000), uint16(4), uint16(0x102), uint32(3_000), []byte{0, 0, 0, 0x80, 1, 0x41, 0xc1, 2, 0x82, 0, 0, 8, 0x88, 0xf9, 3, 0x43, 0, 0, 0x80, 16}, []byte{}, []byte{0, 5, 0, 6, 5, 0, 7 | 3<<3, 5, 0, 0, 7 | 10<<3, 5, 7, 0, 6, 5, 1, 2, 7 | 9<<3, 5})
	f.Add(uint16(3), uint16(2), uint32(1_000), uint16(5), uint16(0), uint32(800), []byte{0x80, 0x80, 0, 0x40, 0xc0, 2, 0x82, 0xff, 0x80, 0, 1, 0xc1, 8, 0x48}, []byte{2, 1, 0, 3}, []byte{7 | 2<<3, 0, 0, 5, 6, 0, 5, 7 | 31<<3, 1, 5})
	f.Fuzz(func(t *testing.T, size, drip uint16, intervalUS uint32, size2, drip2 uint16, interval2US uint32, schedule, costs, ops []byte) {
		limA := Limit{Name: "a", Size: 1 + int(size%64), DripSize: int(drip % 9), DripRate: time.Duration(1+intervalUS%20_000) * time.Microsecond}
		limB := Limit{Name: "b", Size: 1 + int(size2%64), DripSize: int(drip2 % 9), DripRate: time.Duration(1+interval2US%20_000) * time.Microsecond}
		if len(schedule) > 400 {
			schedule = schedule[:400]
		}
		step := newRef(limA).interval / 8
		// One shard: both keys meet in its sweeps. Drained buckets are
		// forgotten as the sweeps meet them (and their entries reused),
		// or, with bit 8 of drip2, kept (KeepDrained's default).
		keep := -1
		if drip2&0x100 != 0 {
			keep = 0
		}
		mem := &Memory{Shards: 1, MaxKeys: -1, KeepDrained: keep}
		type keyState struct {
			bucket      Bucket
			refRaw      *refBucket // limA, at the schedule's times: the Bucket's reference
			refA, refB  *refBucket // limA and limB at the store's times: Memory's references
			admitted    []time.Time
			units       []int // of admitted
			memAdmitted []time.Time
			memUnits    []int // of memAdmitted
		}
		keys := [2]*keyState{
			{refRaw: newRef(limA), refA: newRef(limA), refB: newRef(limB)},
			{refRaw: newRef(limA), refA: newRef(limA), refB: newRef(limB)},
		}
		now, latest, monotonic := t0, time.Time{}, true
		for i, c := range schedule {
			if c >= 0xf8 {
				now = now.Add(-time.Duration(c-0xf7) * 2 * step)
				monotonic = false
			} else {
				now = now.Add(time.Duration(c&0x3f) * step)
			}
			kind := 0 // a check
			var op byte
			if len(ops) > 0 {
				op = ops[i%len(ops)]
				kind = int(op % 8)
			}
			if kind != opReset && (latest.IsZero() || now.After(latest)) {
				latest = now // the store's time: it never runs backwards
			}
			ks := keys[c>>6&1]
			key := fmt.Sprint("key", c>>6&1)
			single := c&0x80 == 0 || c >= 0xf8
			cost := 1
			if len(costs) > 0 {
				most := limA.Size
				if !single {
					most = min(most, limB.Size)
				}
				cost = int(costs[i%len(costs)]) % (most + 1)
			}
			what := fmt.Sprintf("call %d (byte %#x, cost %d, op %d) on %s at %v (store at %v)", i, c, cost, kind, key, now.Sub(t0), latest.Sub(t0))
			if kind >= opPeek {
				lims, refs := []Limit{limA}, []*refBucket{ks.refA}
				if !single {
					lims, refs = []Limit{limA, limB}, []*refBucket{ks.refA, ks.refB}
				}
				adminModel(t, what, mem, key, kind, int(op>>3)%(minLimitSize(lims)+1), lims, refs, now, latest)
				if kind != opPeek { // a new stretch for the bound
					checkBoundUnits(t, limA, ks.memAdmitted, ks.memUnits)
					ks.memAdmitted, ks.memUnits = nil, nil
				}
				continue
			}

			if single {
				// limA alone: the Bucket at the schedule's time, Memory at
				// its own.
				got, err := ks.bucket.CheckN(limA, cost, now)
				if err != nil {
					t.Fatal(err)
				}
				sameAsRef(t, what+" (Bucket)", got, ks.refRaw.checkN(now, cost))
				invariants(t, what, got)
				if !got.Blocked {
					ks.admitted = append(ks.admitted, now)
					ks.units = append(ks.units, cost)
				}
				var m Result
				if cost == 1 {
					m, err = mem.CheckAt(key, limA, now)
				} else {
					var ms []Result
					ms, err = mem.CheckNAt(key, cost, []Limit{limA}, nil, now)
					if err == nil {
						m = ms[0]
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				sameAsRef(t, what+" (Memory)", m, ks.refA.checkN(latest, cost))
				if !m.At.Equal(latest) || m.Cost != cost {
					t.Fatalf("%s: Memory decided at %v, cost %d", what, m.At.Sub(t0), m.Cost)
				}
				if !m.Blocked {
					ks.memAdmitted = append(ks.memAdmitted, latest)
					ks.memUnits = append(ks.memUnits, cost)
				}
				continue
			}
			// Both limits at once: admitted only if neither blocks, and
			// then charged to both.
			blockA, blockB := ks.refA.wouldBlockN(latest, cost), ks.refB.wouldBlockN(latest, cost)
			admit := !blockA && !blockB
			if admit {
				ks.refA.chargeN(latest, cost)
				ks.refB.chargeN(latest, cost)
				ks.memAdmitted = append(ks.memAdmitted, latest)
				ks.memUnits = append(ks.memUnits, cost)
			}
			var got []Result
			var err error
			if cost == 1 {
				got, err = mem.CheckAllAt(key, []Limit{limA, limB}, nil, now)
			} else {
				got, err = mem.CheckNAt(key, cost, []Limit{limA, limB}, nil, now)
			}
			if err != nil {
				t.Fatal(err)
			}
			sameAsRef(t, what+" (CheckAllAt, a)", got[0], ks.refA.observeN(latest, blockA && !admit, cost))
			sameAsRef(t, what+" (CheckAllAt, b)", got[1], ks.refB.observeN(latest, blockB && !admit, cost))
			invariants(t, what, got[0])
			invariants(t, what, got[1])
		}
		checkChains(t, mem)
		for _, ks := range keys {
			checkBoundUnits(t, limA, ks.memAdmitted, ks.memUnits) // the store's times are monotonic
			if monotonic {
				checkBoundUnits(t, limA, ks.admitted, ks.units)
			}
		}
	})
}

// Operations of FuzzModel other than a check (op % 8).
const (
	opPeek  = 5
	opReset = 6
	opSet   = 7
)

func minLimitSize(limits []Limit) int {
	m := MaxSize
	for _, lim := range limits {
		m = min(m, lim.Size)
	}
	return m
}

// adminModel runs one Peek, Reset or Set (kind) of key under lims on mem,
// at now (the store's time: latest), applies it to the reference buckets
// refs (one per limit) and compares every result.
func adminModel(t *testing.T, what string, mem *Memory, key string, kind, level int, lims []Limit, refs []*refBucket, now, latest time.Time) {
	t.Helper()
	var got []Result
	var err error
	switch kind {
	case opPeek:
		got, err = mem.PeekAt(key, lims, nil, now)
	case opReset:
		err = mem.Reset(context.Background(), key, lims)
		for _, ref := range refs {
			ref.level = 0
		}
		return
	case opSet:
		got, err = mem.SetAt(key, level, lims, nil, now)
		for _, ref := range refs {
			ref.level = 0
			ref.chargeN(latest, level)
		}
	}
	if err != nil || len(got) != len(lims) {
		t.Fatalf("%s: %v %v", what, got, err)
	}
	for j, ref := range refs {
		blocked := ref.wouldBlockN(latest, 1)
		sameAsRef(t, fmt.Sprintf("%s (op %d, level %d, limit %s)", what, kind, level, lims[j].Name), got[j], ref.observeN(latest, blocked, 1))
		invariants(t, what, got[j])
		if !got[j].At.Equal(latest) || got[j].Cost != 1 {
			t.Fatalf("%s: decided at %v, cost %d", what, got[j].At.Sub(t0), got[j].Cost)
		}
	}
}

// invariants checks what every Result must satisfy.
func invariants(t *testing.T, what string, r Result) {
	t.Helper()
	size := r.Limit.Size
	switch {
	case r.Remaining < 0 || r.Remaining > size || r.Remaining != max(size-r.Level, 0):
		t.Fatalf("%s: Remaining %d with Level %d of %d", what, r.Remaining, r.Level, size)
	case r.Blocked && (r.Remaining >= max(r.Cost, 1) || r.RetryAfter <= 0):
		t.Fatalf("%s: blocked with Remaining %d, RetryAfter %v, cost %d", what, r.Remaining, r.RetryAfter, r.Cost)
	case (r.RetryAfter > 0) != (r.Level+r.Cost > size):
		t.Fatalf("%s: RetryAfter %v with Level %d of %d, cost %d", what, r.RetryAfter, r.Level, size, r.Cost)
	case r.ClearAfter < r.RetryAfter || (r.ClearAfter > 0) != (r.Level > 0) || (r.NextDrip > 0) != (r.Level > 0):
		t.Fatalf("%s: ClearAfter %v, RetryAfter %v, NextDrip %v, Level %d", what, r.ClearAfter, r.RetryAfter, r.NextDrip, r.Level)
	case r.NextDrip > r.ClearAfter:
		t.Fatalf("%s: NextDrip %v after ClearAfter %v", what, r.NextDrip, r.ClearAfter)
	}
}
