package leakybucket

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestMemorySimultaneous(t *testing.T) {
	// 16 goroutines, 100 calls each, at one instant: exactly Size admitted
	// per key, whatever the interleaving.
	lim := Limit{Size: 25, DripRate: time.Second, DripSize: 5}
	var m Memory
	var admitted [4]atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 100 {
				k := (g + i) % len(admitted)
				r, err := m.CheckAt(fmt.Sprint("client-", k), lim, t0)
				if err != nil {
					t.Error(err)
					return
				}
				if !r.Blocked {
					admitted[k].Add(1)
				}
			}
		})
	}
	wg.Wait()
	for k := range admitted {
		if n := admitted[k].Load(); n != int64(lim.Size) {
			t.Errorf("key %d: %d admitted at one instant, want %d", k, n, lim.Size)
		}
	}
}

func TestMemoryConcurrentClock(t *testing.T) {
	// Goroutines share a fake clock that they advance as they go: every key's
	// admissions, in the store's time, stay within the bound.
	lim := Limit{Size: 8, DripRate: 3 * time.Millisecond, DripSize: 2}
	var clock atomic.Int64 // µs since t0
	m := &Memory{Shards: 2, Clock: func() time.Time { return t0.Add(time.Duration(clock.Add(7)) * time.Microsecond) }}
	var mu sync.Mutex
	admitted := map[string][]time.Time{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				key := fmt.Sprint("k", (g*7+i)%3)
				r, err := m.Check(context.Background(), key, lim)
				if err != nil {
					t.Error(err)
					return
				}
				if !r.Blocked {
					mu.Lock()
					admitted[key] = append(admitted[key], r.At)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for key, times := range admitted {
		// Decisions of one shard are in lock order and At never runs
		// backwards within a shard; keys may share a shard, so sort.
		sortTimes(times)
		checkBound(t, lim, times)
		if len(times) < lim.Size {
			t.Errorf("%s: only %d admitted", key, len(times))
		}
	}
}

func TestMemoryClockAndZeroValue(t *testing.T) {
	now := t0
	m := &Memory{Clock: func() time.Time { return now }}
	lim := Limit{Size: 1, DripRate: 10 * time.Millisecond}
	if r, _ := m.Check(context.Background(), "a", lim); r.Blocked || !r.At.Equal(t0) {
		t.Fatalf("first call: %+v", r)
	}
	if r, _ := m.Check(context.Background(), "a", lim); !r.Blocked || r.RetryAfter != 10*time.Millisecond {
		t.Fatalf("second call: %+v", r)
	}
	now = now.Add(10 * time.Millisecond)
	if r, _ := m.Check(context.Background(), "a", lim); r.Blocked {
		t.Fatalf("after a drip: %+v", r)
	}
	// The zero value reads time.Now and works at once.
	var z Memory
	if r, err := z.Check(context.Background(), "a", lim); err != nil || r.Blocked || time.Since(r.At) > time.Minute {
		t.Fatalf("zero Memory: %+v %v", r, err)
	}
}

func TestMemoryStoreTimeNeverRunsBackwards(t *testing.T) {
	lim := Limit{Size: 1, DripRate: 100 * time.Millisecond}
	var m Memory
	m.CheckAt("a", lim, at(0))
	m.CheckAt("b", lim, at(100)) // the shard's time is now 100 ms (if a and b share it)
	r, _ := m.CheckAt("a", lim, at(50))
	// Either the store moved 50 to its own time (100: a has drained) or a
	// and b are in different shards (50: a is still full). Both are
	// consistent with the store's time, which At reports.
	switch {
	case r.At.Equal(at(100)) && !r.Blocked:
	case r.At.Equal(at(50)) && r.Blocked && r.RetryAfter == 50*time.Millisecond:
	default:
		t.Fatalf("%+v", r)
	}
	one := &Memory{Shards: 1}
	one.CheckAt("a", lim, at(0))
	one.CheckAt("b", lim, at(100))
	if r, _ := one.CheckAt("a", lim, at(50)); r.Blocked || !r.At.Equal(at(100)) {
		t.Fatalf("one shard: %+v", r)
	}
}

func TestMemoryCheckAllAtomic(t *testing.T) {
	var m Memory
	burst := Limit{Name: "burst", Size: 2, DripRate: time.Second}
	slow := Limit{Name: "slow", Size: 1, DripRate: time.Minute}
	limits := []Limit{burst, slow}
	res, err := m.CheckAllAt("u", limits, nil, t0)
	if err != nil || res[0].Blocked || res[1].Blocked || res[0].Remaining != 1 || res[1].Remaining != 0 {
		t.Fatalf("first: %+v %v", res, err)
	}
	// slow blocks: the call is refused and burst is not charged.
	res, _ = m.CheckAllAt("u", limits, res[:0], at(1))
	if res[0].Blocked || res[0].Level != 1 || res[0].Remaining != 1 || !res[1].Blocked || res[1].RetryAfter != time.Minute-time.Millisecond {
		t.Fatalf("second: %+v", res)
	}
	if r, _ := m.CheckAt("u", burst, at(2)); r.Blocked || r.Level != 2 {
		t.Fatalf("burst alone after the refused call: %+v", r)
	}
	// The limits of a check must have distinct names; nothing is charged.
	_, err = m.CheckAllAt("v", []Limit{burst, {Name: "burst", Size: 9}}, nil, t0)
	if !errors.Is(err, ErrInvalidLimit) {
		t.Fatalf("duplicate names: %v", err)
	}
	if _, err = m.CheckAllAt("v", []Limit{burst, {Name: "x"}}, nil, t0); !errors.Is(err, ErrInvalidLimit) {
		t.Fatalf("an invalid limit: %v", err)
	}
	if m.Len() != 2 {
		t.Fatalf("Len %d after refused checks of v, want 2", m.Len())
	}
	// More limits than the stack holds.
	var many []Limit
	for i := range 12 {
		many = append(many, Limit{Name: fmt.Sprint("l", i), Size: 1 + i})
	}
	res, err = m.CheckAllAt("w", many, nil, t0)
	if err != nil || len(res) != 12 || res[0].Remaining != 0 || res[11].Remaining != 11 {
		t.Fatalf("12 limits: %+v %v", res, err)
	}
	res, _ = m.CheckAllAt("w", many, res[:0], t0)
	if !res[0].Blocked || res[1].Blocked || res[1].Level != 1 {
		t.Fatalf("12 limits, second call: %+v", res)
	}
}

func TestMemoryExpiry(t *testing.T) {
	// 3,000 one-call buckets in one shard drain 10 ms later. Nothing runs
	// in the background: each check that adds a bucket examines two, so
	// about 2,000 new clients forget them all (some of the examined are
	// the new clients' own), and the map is rebuilt on the way; checks of
	// an existing bucket sweep one time in 16. KeepDrained -1: no drained
	// bucket is kept for its key's return (TestMemoryKeepDrained).
	m := &Memory{Shards: 1, KeepDrained: -1}
	short := Limit{Name: "short", Size: 1, DripRate: 10 * time.Millisecond}
	for i := range 3000 {
		m.CheckAt(fmt.Sprint("client-", i), short, t0)
	}
	if m.Len() != 3000 {
		t.Fatalf("Len %d", m.Len())
	}
	long := Limit{Name: "long", Size: 1, DripRate: time.Hour}
	n := 0
	for m.Len() > n {
		if n++; n > 2100 {
			t.Fatalf("still %d buckets after %d new ones", m.Len(), n)
		}
		m.CheckAt(fmt.Sprint("new-", n), long, at(10))
	}
	m.Sweep(at(10)) // leaves only the new clients' buckets
	if m.Len() != n {
		t.Fatalf("Len %d, want %d", m.Len(), n)
	}
	for i := range 3000 {
		m.CheckAt(fmt.Sprint("client-", i), short, at(20))
	}
	driver := Limit{Name: "driver", Size: 1 << 20, DripRate: time.Millisecond}
	// One round of the sweep over every bucket takes Len/2 sweeps, 16
	// checks each.
	checks, budget := 0, sweepEvery*(m.Len()/sweepPerCheck+50)
	for m.Len() > n+1 {
		if checks++; checks > budget {
			t.Fatalf("still %d buckets after %d checks", m.Len(), checks)
		}
		if r, err := m.CheckAt("driver", driver, at(30)); err != nil || r.Blocked {
			t.Fatalf("driver: %+v %v", r, err)
		}
	}
	// The forgotten buckets had drained: a client comes back to an empty
	// bucket, exactly as if it had been kept.
	var b Bucket
	b.Check(short, at(20))
	want, _ := b.Check(short, at(40))
	if got, _ := m.CheckAt("client-7", short, at(40)); got != want {
		t.Fatalf("after expiry: %+v, want %+v", got, want)
	}
	// Sweep drops every drained bucket at once.
	for i := range 100 {
		m.CheckAt(fmt.Sprint("late-", i), short, at(50))
	}
	// Before they drain, Sweep drops only client-7's bucket (drained at 50)
	// if the late calls have not swept it already.
	if d := m.Sweep(at(59)); d > 1 {
		t.Fatalf("Sweep before they drained dropped %d", d)
	}
	if d := m.Sweep(at(60)); d != 100 || m.Len() != n+1 {
		t.Fatalf("Sweep dropped %d, Len %d, want 100 dropped and %d left", d, m.Len(), n+1)
	}
	if m.Evictions() != 0 {
		t.Fatalf("Evictions %d", m.Evictions())
	}
	checkChains(t, m)
}

// TestMemoryKeepDrained: a shard keeps drained buckets while it holds no
// more than its part of KeepDrained, and forgets them above it; a kept
// bucket is found again, and gives the same results as a forgotten one.
func TestMemoryKeepDrained(t *testing.T) {
	m := &Memory{Shards: 1, KeepDrained: 100}
	short := Limit{Name: "short", Size: 2, DripRate: 10 * time.Millisecond}
	for i := range 300 {
		m.CheckAt(fmt.Sprint("client-", i), short, t0)
	}
	// All drained at 10 ms: checks of new keys sweep down to 100, and no
	// further.
	long := Limit{Name: "long", Size: 1, DripRate: time.Hour}
	for i := range 400 {
		m.CheckAt(fmt.Sprint("new-", i), long, at(10))
	}
	if m.Len() < 400 || m.Len() > 400+100 {
		t.Fatalf("Len %d, want 400 live buckets and at most 100 drained ones", m.Len())
	}
	if before, d := m.Len(), m.Sweep(at(10)); d != before-400 || m.Len() != 400 {
		t.Fatalf("Sweep dropped %d, left %d", d, m.Len())
	}
	// Under the threshold nothing drained is forgotten, and a kept
	// bucket's key comes back to an empty bucket.
	k := &Memory{Shards: 1, KeepDrained: 1000}
	for i := range 300 {
		k.CheckAt(fmt.Sprint("client-", i), short, t0)
	}
	for i := range 300 {
		r, _ := k.CheckAt(fmt.Sprint("client-", i), short, at(20))
		var b Bucket
		b.Check(short, t0)
		want, _ := b.Check(short, at(20))
		if r != want {
			t.Fatalf("kept bucket: %+v, want %+v", r, want)
		}
	}
	if k.Len() != 300 {
		t.Fatalf("Len %d, want 300 (none forgotten, none added)", k.Len())
	}
	checkChains(t, m)
	checkChains(t, k)
}

func TestMemoryMaxKeys(t *testing.T) {
	m := &Memory{Shards: 1, MaxKeys: 10}
	lim := Limit{Size: 3, DripRate: time.Minute}
	for i := range 15 {
		m.CheckAt(fmt.Sprint("spray-", i), lim, t0)
	}
	if m.Len() != 10 || m.Evictions() != 5 {
		t.Fatalf("Len %d Evictions %d, want 10 and 5", m.Len(), m.Evictions())
	}
	// Drained buckets make room without an eviction.
	short := Limit{Size: 1, DripRate: time.Millisecond}
	m = &Memory{Shards: 1, MaxKeys: 10}
	for i := range 10 {
		m.CheckAt(fmt.Sprint("short-", i), short, t0)
	}
	for i := range 5 {
		m.CheckAt(fmt.Sprint("late-", i), lim, at(2))
	}
	if m.Len() > 10 || m.Evictions() != 0 {
		t.Fatalf("Len %d Evictions %d, want at most 10 and 0", m.Len(), m.Evictions())
	}
	// With none drained, the bucket that would drain first goes.
	m = &Memory{Shards: 1, MaxKeys: 5}
	for i := range 4 {
		m.CheckAt(fmt.Sprint("long-", i), lim, t0)
	}
	m.CheckAt("short", Limit{Size: 1, DripRate: 10 * time.Millisecond}, t0)
	m.CheckAt("new", lim, t0)
	if r, _ := m.CheckAt("short", Limit{Size: 1, DripRate: 10 * time.Millisecond}, t0); r.Blocked || m.Evictions() != 2 {
		t.Fatalf("short was not the one evicted: %+v, %d evictions", r, m.Evictions())
	}
	// A check never evicts a bucket of its own key, even if that exceeds
	// the bound.
	one := &Memory{Shards: 1, MaxKeys: 1}
	two := []Limit{{Name: "a", Size: 2}, {Name: "b", Size: 2}}
	one.CheckAllAt("k", two, nil, t0)
	res, _ := one.CheckAllAt("k", two, nil, t0)
	if one.Len() != 2 || res[0].Level != 2 || res[1].Level != 2 {
		t.Fatalf("Len %d, results %+v", one.Len(), res)
	}
	checkChains(t, m)
	checkChains(t, one)
}

func TestMemoryAllocs(t *testing.T) {
	m := &Memory{}
	lim := Limit{Name: "api", Size: 1 << 20, DripRate: time.Millisecond}
	m.CheckAt("client", lim, t0)
	now := t0
	if n := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Microsecond)
		if _, err := m.CheckAt("client", lim, now); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("CheckAt allocates %v times per call", n)
	}
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { m.Check(ctx, "client", lim) }); n != 0 {
		t.Errorf("Check allocates %v times per call", n)
	}
	limits := []Limit{lim, {Name: "hour", Size: 1 << 20, DripRate: time.Second}}
	dst := make([]Result, 0, len(limits))
	m.CheckAllAt("client", limits, dst, now)
	if n := testing.AllocsPerRun(1000, func() { dst, _ = m.CheckAllAt("client", limits, dst[:0], now) }); n != 0 {
		t.Errorf("CheckAllAt allocates %v times per call", n)
	}
	var b Bucket
	if n := testing.AllocsPerRun(1000, func() { b.Check(lim, now) }); n != 0 {
		t.Errorf("Bucket.Check allocates %v times per call", n)
	}

	// Keys whose buckets drained between visits, kept (KeepDrained) or
	// forgotten and created anew (KeepDrained -1, from the entries of
	// dropped buckets), with one limit or two, CheckN with a cost, Peek
	// and Set: no allocation once the store has grown.
	drained := []Limit{{Name: "a", Size: 10, DripRate: time.Microsecond, DripSize: 10}, {Name: "b", Size: 10, DripRate: time.Microsecond}}
	keys := make([]string, 4000)
	for i := range keys {
		keys[i] = fmt.Sprint("client-", i)
	}
	for _, keep := range []int{0, -1} {
		m := &Memory{Shards: 4, KeepDrained: keep}
		now := t0
		i := 0
		visit := func() {
			now = now.Add(time.Millisecond)
			k := keys[i%len(keys)]
			i++
			if r, _ := m.CheckAt(k, drained[0], now); r.Blocked || r.Level != 1 {
				t.Fatalf("KeepDrained %d: %+v", keep, r)
			}
			dst, _ = m.CheckNAt(k, 3, drained, dst[:0], now)
			dst, _ = m.PeekAt(k, drained, dst[:0], now)
			dst, _ = m.SetAt(k, 2, drained, dst[:0], now)
		}
		for range 3 * len(keys) { // grow the store to its steady size
			visit()
		}
		if n := testing.AllocsPerRun(2*len(keys), visit); n != 0 {
			t.Errorf("KeepDrained %d: a drained key's checks allocate %v times per visit", keep, n)
		}
	}
}

func sortTimes(ts []time.Time) {
	for i := 1; i < len(ts); i++ { // insertion sort: nearly sorted already
		for j := i; j > 0 && ts[j].Before(ts[j-1]); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

func TestMemoryOneKeysBucketsDrainApart(t *testing.T) {
	// A key's buckets share a place in the shard's map (a chain by the
	// key's hash): dropping one, first, last or in the middle of the
	// chain, must leave the others as they were.
	m := &Memory{Shards: 1}
	limits := []Limit{
		{Name: "a", Size: 3, DripRate: time.Millisecond},
		{Name: "b", Size: 3, DripRate: 10 * time.Millisecond},
		{Name: "c", Size: 3, DripRate: 5 * time.Millisecond},
		{Name: "d", Size: 3, DripRate: time.Hour},
	}
	ref := make([]Bucket, len(limits))
	other := Limit{Name: "a", Size: 3, DripRate: 7 * time.Millisecond}
	var otherRef Bucket
	check := func(ms float64) {
		t.Helper()
		for i, lim := range limits {
			want, _ := ref[i].Check(lim, at(ms))
			if got, _ := m.CheckAt("k", lim, at(ms)); got != want {
				t.Fatalf("at %v ms, %s: %+v, want %+v", ms, lim.Name, got, want)
			}
		}
		want, _ := otherRef.Check(other, at(ms))
		if got, _ := m.CheckAt("j", other, at(ms)); got != want {
			t.Fatalf("at %v ms, j: %+v, want %+v", ms, got, want)
		}
	}
	check(0)
	for _, step := range []struct {
		ms            float64
		dropped, left int
	}{
		{1, 1, 4},  // a, the first of k's chain
		{5, 1, 3},  // c, in the middle
		{7, 1, 2},  // j's only bucket
		{10, 1, 1}, // b, the last
	} {
		if d := m.Sweep(at(step.ms)); d != step.dropped || m.Len() != step.left {
			t.Fatalf("Sweep at %v ms dropped %d and left %d, want %d and %d", step.ms, d, m.Len(), step.dropped, step.left)
		}
		checkChains(t, m)
	}
	check(11) // every bucket but d comes back empty; d holds 2
	if r, _ := m.CheckAt("k", limits[3], at(12)); r.Level != 3 || r.Blocked {
		t.Fatalf("d: %+v", r)
	}
}

// checkChains checks the invariant of m's shards: the buckets reachable
// from the map, each under its key's hash, are exactly those of the round
// robin's list, once each.
func checkChains(t *testing.T, m *Memory) {
	t.Helper()
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		inList := make(map[*entry]bool, len(sh.all))
		for _, e := range sh.all {
			inList[e] = true
		}
		seen := 0
		for h, e := range sh.m {
			for ; e != nil; e = e.chain {
				if !inList[e] || e.hash != h || maphash.String(m.seed, e.id.key) != h {
					t.Errorf("shard %d: bucket %v in the map under %x is not in the list, or is under a wrong hash", i, e.id, h)
				}
				seen++
			}
		}
		if seen != len(sh.all) {
			t.Errorf("shard %d: %d buckets reachable from the map, %d in the list", i, seen, len(sh.all))
		}
		sh.mu.Unlock()
	}
}
