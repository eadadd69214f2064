package ratelimit

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// storeT0 is the fake clock's start in the store's tests.
var storeT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeClock is a clock for MemoryStore.Clock that moves only when told;
// safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock { return new(fakeClock) }

func (c *fakeClock) Now() time.Time                  { return storeT0.Add(time.Duration(c.ns.Load())) }
func (c *fakeClock) Advance(d time.Duration)         { c.ns.Add(int64(d)) }
func (c *fakeClock) Set(t time.Time)                 { c.ns.Store(int64(t.Sub(storeT0))) }
func (c *fakeClock) After(d time.Duration) time.Time { return c.Now().Add(d) }

// checkStore verifies the store's internal invariants: the map, the recency
// list and the expiry heap hold the same entries, and the heap is ordered.
func checkStore(t *testing.T, s *MemoryStore) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	checkLRU(t, &s.buckets)
	checkLRU(t, &s.aliases)
	require.Len(t, s.expiry, s.buckets.len(), "expiry heap and bucket map")
	for i, n := range s.expiry {
		require.Equal(t, i, n.val.idx, "heap index")
		require.Same(t, n, s.buckets.get(n.key), "heap entry %q is in the map", n.key)
		if i > 0 {
			require.False(t, s.expiry.less(i, (i-1)/2), "heap order at %d", i)
		}
	}
}

func checkLRU[V any](t *testing.T, l *lru[V]) {
	t.Helper()
	if l.m == nil {
		return
	}
	n, count := l.root.next, 0
	for ; n != &l.root; n = n.next {
		require.Same(t, n, n.next.prev, "list links")
		require.Same(t, n, l.m[n.key], "list entry %q is in the map", n.key)
		count++
		require.LessOrEqual(t, count, len(l.m), "list longer than the map")
	}
	require.Equal(t, len(l.m), count, "list and map lengths")
	require.LessOrEqual(t, len(l.m), l.peak)
}

func TestMemoryStore(t *testing.T) {
	for name, s := range map[string]*MemoryStore{"constructed": NewMemoryStore(), "zero value": {}} {
		t.Run(name, func(t *testing.T) {
			_, ok := s.Load("k")
			assert.False(t, ok)

			b := Bucket{Limit: 5, Remaining: 3, Known: true, Hash: "h"}
			s.Save("k", b)
			got, ok := s.Load("k")
			assert.True(t, ok)
			assert.Equal(t, b, got)

			got.Remaining = 0 // buckets are stored by value
			again, _ := s.Load("k")
			assert.Equal(t, 3, again.Remaining)

			s.Delete("k")
			_, ok = s.Load("k")
			assert.False(t, ok)
			s.Delete("absent")

			const tmpl = "POST /channels/{channel_id}/messages"
			_, ok = s.Alias(tmpl)
			assert.False(t, ok)
			s.SetAlias(tmpl, "abc")
			h, ok := s.Alias(tmpl)
			assert.True(t, ok)
			assert.Equal(t, "abc", h)
			s.SetAlias(tmpl, "def") // Discord moved the route to another bucket
			h, _ = s.Alias(tmpl)
			assert.Equal(t, "def", h)
			s.SetAlias(tmpl, "")
			_, ok = s.Alias(tmpl)
			assert.False(t, ok)
			s.SetAlias("GET /absent", "") // removing an absent alias is a no-op

			buckets, aliases := s.Len()
			assert.Zero(t, buckets)
			assert.Zero(t, aliases)
			assert.Zero(t, s.Sweep())
			checkStore(t, s)
		})
	}
}

func TestMemoryStoreZeroValueDefaults(t *testing.T) {
	var s MemoryStore
	assert.Equal(t, DefaultBucketTTL, s.ttl())
	assert.Equal(t, 10*time.Minute, s.ttl())
	assert.Equal(t, DefaultMaxBuckets, s.maxBuckets())
	assert.Equal(t, 100_000, s.maxBuckets())
	assert.Equal(t, DefaultMaxAliases, s.maxAliases())
	assert.Equal(t, 10_000, s.maxAliases())
	before := time.Now()
	now := s.now()
	assert.False(t, now.Before(before), "a nil Clock is time.Now")

	neg := MemoryStore{TTL: -time.Second, MaxBuckets: -1, MaxAliases: -1}
	assert.Equal(t, DefaultBucketTTL, neg.ttl())
	assert.Equal(t, DefaultMaxBuckets, neg.maxBuckets())
	assert.Equal(t, DefaultMaxAliases, neg.maxAliases())

	// The zero value reads the real clock: a bucket whose window ends
	// now is kept for the default TTL.
	s.Save("k", Bucket{Known: true, Limit: 1, ResetAt: time.Now()})
	_, ok := s.Load("k")
	assert.True(t, ok)
	assert.Zero(t, s.Sweep())
}

func TestMemoryStoreExpiry(t *testing.T) {
	const ttl = 10 * time.Minute
	tests := []struct {
		name   string
		ttl    time.Duration // MemoryStore.TTL
		bucket func(now time.Time) Bucket
		expiry time.Duration // after the Save
	}{
		{
			name:   "zero ResetAt: save time plus TTL",
			bucket: func(time.Time) Bucket { return Bucket{Known: true, Limit: 5} },
			expiry: ttl,
		},
		{
			name:   "ResetAt plus TTL",
			bucket: func(now time.Time) Bucket { return Bucket{Known: true, Limit: 5, ResetAt: now.Add(30 * time.Second)} },
			expiry: 30*time.Second + ttl,
		},
		{
			name: "PausedUntil when later than ResetAt",
			bucket: func(now time.Time) Bucket {
				return Bucket{Known: true, Limit: 5, ResetAt: now.Add(time.Second), PausedUntil: now.Add(time.Hour)}
			},
			expiry: time.Hour + ttl,
		},
		{
			name: "ResetAt when later than PausedUntil",
			bucket: func(now time.Time) Bucket {
				return Bucket{Known: true, Limit: 5, ResetAt: now.Add(time.Hour), PausedUntil: now.Add(time.Second)}
			},
			expiry: time.Hour + ttl,
		},
		{
			name:   "PausedUntil with zero ResetAt",
			bucket: func(now time.Time) Bucket { return Bucket{PausedUntil: now.Add(2 * time.Minute)} },
			expiry: 2*time.Minute + ttl,
		},
		{
			name: "a window that ended before the Save counts from the Save",
			bucket: func(now time.Time) Bucket {
				return Bucket{Known: true, Limit: 5, ResetAt: now.Add(-time.Hour), PausedUntil: now.Add(-time.Hour)}
			},
			expiry: ttl,
		},
		{
			name:   "custom TTL",
			ttl:    time.Second,
			bucket: func(now time.Time) Bucket { return Bucket{Known: true, Limit: 5, ResetAt: now.Add(time.Second)} },
			expiry: 2 * time.Second,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			s := &MemoryStore{TTL: tt.ttl, Clock: clock.Now}
			saved := clock.Now()
			b := tt.bucket(saved)
			s.Save("k", b)
			s.Save("other", Bucket{Known: true, Limit: 1, ResetAt: saved.Add(100 * time.Hour)})

			clock.Set(saved.Add(tt.expiry - time.Nanosecond))
			got, ok := s.Load("k")
			require.True(t, ok, "alive until its expiry")
			assert.Equal(t, b, got)
			assert.Zero(t, s.Sweep())

			clock.Set(saved.Add(tt.expiry))
			_, ok = s.Load("k")
			assert.False(t, ok, "Load never returns an expired bucket")
			n, _ := s.Len()
			assert.Equal(t, 1, n, "the expired bucket was dropped")
			_, ok = s.Load("other")
			assert.True(t, ok)
			checkStore(t, s)
		})
	}
}

func TestMemoryStoreExpiryUpdates(t *testing.T) {
	clock := newFakeClock()
	s := &MemoryStore{TTL: time.Minute, Clock: clock.Now}

	t.Run("Load does not extend", func(t *testing.T) {
		s.Save("k", Bucket{Limit: 1})
		clock.Advance(59 * time.Second)
		_, ok := s.Load("k")
		require.True(t, ok)
		clock.Advance(time.Second)
		_, ok = s.Load("k")
		assert.False(t, ok)
	})
	t.Run("Save again extends", func(t *testing.T) {
		s.Save("k", Bucket{Limit: 1})
		clock.Advance(59 * time.Second)
		s.Save("k", Bucket{Limit: 2})
		clock.Advance(59 * time.Second)
		b, ok := s.Load("k")
		require.True(t, ok)
		assert.Equal(t, 2, b.Limit)
		clock.Advance(time.Second)
		_, ok = s.Load("k")
		assert.False(t, ok)
	})
	t.Run("Save again can shorten", func(t *testing.T) {
		s.Save("k", Bucket{Limit: 1, PausedUntil: clock.After(time.Hour)})
		s.Save("k", Bucket{Limit: 1})
		clock.Advance(time.Minute)
		_, ok := s.Load("k")
		assert.False(t, ok)
	})
	t.Run("Sweep and other operations drop expired buckets", func(t *testing.T) {
		for i := range 10 {
			s.Save(fmt.Sprint("a", i), Bucket{Limit: 1})
		}
		clock.Advance(30 * time.Second)
		for i := range 10 {
			s.Save(fmt.Sprint("b", i), Bucket{Limit: 1})
		}
		clock.Advance(30 * time.Second) // the a's expire, the b's do not
		n, _ := s.Len()
		assert.Equal(t, 20, n, "nothing happens without an operation")
		assert.Equal(t, 10, s.Sweep())
		n, _ = s.Len()
		assert.Equal(t, 10, n)
		clock.Advance(30 * time.Second)
		s.Alias("GET /x") // any operation drops expired buckets
		n, _ = s.Len()
		assert.Zero(t, n)
	})
	checkStore(t, s)
}

// TestMemoryStoreSweepIsBounded checks that one operation drops a bounded
// number of expired buckets, the earliest first.
func TestMemoryStoreSweepIsBounded(t *testing.T) {
	clock := newFakeClock()
	s := &MemoryStore{TTL: time.Minute, Clock: clock.Now}
	for i := range 100 {
		// Saved in reverse order of expiry: the heap, not the save
		// order, decides what goes first.
		s.Save(fmt.Sprint(i), Bucket{ResetAt: clock.After(time.Duration(100-i) * time.Second)})
	}
	clock.Advance(time.Hour)
	s.Load("absent")
	n, _ := s.Len()
	assert.Equal(t, 100-sweepBatch, n)
	for i := range 100 - sweepBatch { // the latest expiries are left
		_, ok := s.buckets.m[fmt.Sprint(i)]
		assert.True(t, ok, "%d", i)
	}
	checkStore(t, s)
	for range (100 + sweepBatch - 1) / sweepBatch {
		s.Delete("absent")
	}
	n, _ = s.Len()
	assert.Zero(t, n)
}

func TestMemoryStoreLRU(t *testing.T) {
	type op struct {
		do  string // "save", "load", "delete", "advance"
		key string
	}
	tests := []struct {
		name string
		ops  []op
		want []string // the keys stored at the end, most recently used first
	}{
		{
			name: "the least recently saved goes first",
			ops:  []op{{"save", "a"}, {"save", "b"}, {"save", "c"}, {"save", "d"}},
			want: []string{"d", "c", "b"},
		},
		{
			name: "Load makes a bucket recently used",
			ops:  []op{{"save", "a"}, {"save", "b"}, {"save", "c"}, {"load", "a"}, {"save", "d"}},
			want: []string{"d", "a", "c"},
		},
		{
			name: "saving an existing key evicts nothing",
			ops:  []op{{"save", "a"}, {"save", "b"}, {"save", "c"}, {"save", "a"}, {"save", "b"}},
			want: []string{"b", "a", "c"},
		},
		{
			name: "a missed Load changes nothing",
			ops:  []op{{"save", "a"}, {"save", "b"}, {"save", "c"}, {"load", "x"}, {"save", "d"}},
			want: []string{"d", "c", "b"},
		},
		{
			name: "Delete makes room",
			ops:  []op{{"save", "a"}, {"save", "b"}, {"save", "c"}, {"delete", "b"}, {"save", "d"}},
			want: []string{"d", "c", "a"},
		},
		{
			name: "an expired bucket goes before the least recently used",
			ops: []op{
				{"save", "a"}, {"save", "short"}, {"save", "b"}, {"load", "short"},
				{"advance", ""}, {"save", "d"},
			},
			want: []string{"d", "b", "a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			// Every bucket is paused for an hour, except "short",
			// which lives for the TTL, a minute; "advance" moves
			// the clock by a minute.
			s := &MemoryStore{MaxBuckets: 3, TTL: time.Minute, Clock: clock.Now}
			for _, o := range tt.ops {
				switch o.do {
				case "save":
					b := Bucket{Known: true, Limit: 1, Hash: o.key}
					if o.key != "short" {
						b.PausedUntil = clock.After(time.Hour)
					}
					s.Save(o.key, b)
				case "load":
					s.Load(o.key)
				case "delete":
					s.Delete(o.key)
				case "advance":
					clock.Advance(time.Minute)
				}
			}
			checkStore(t, s)
			var got []string
			for n := s.buckets.root.next; n != &s.buckets.root; n = n.next {
				got = append(got, n.key)
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestMemoryStoreAliasCap(t *testing.T) {
	s := &MemoryStore{MaxAliases: 3}
	tmpl := func(i int) string { return fmt.Sprintf("GET /route%d/{channel_id}", i) }
	for i := range 3 {
		s.SetAlias(tmpl(i), fmt.Sprint("h", i))
	}
	s.Alias(tmpl(0))             // 0 is now the most recently used
	s.SetAlias(tmpl(1), "h1bis") // and then 1
	s.SetAlias(tmpl(3), "h3")    // evicts 2
	_, ok := s.Alias(tmpl(2))
	assert.False(t, ok)
	for i, want := range map[int]string{0: "h0", 1: "h1bis", 3: "h3"} {
		h, ok := s.Alias(tmpl(i))
		assert.True(t, ok, "%d", i)
		assert.Equal(t, want, h)
	}
	_, n := s.Len()
	assert.Equal(t, 3, n)

	// The default cap.
	var d MemoryStore
	for i := range DefaultMaxAliases + 10 {
		d.SetAlias(tmpl(i), "h")
	}
	_, n = d.Len()
	assert.Equal(t, DefaultMaxAliases, n)
	_, ok = d.Alias(tmpl(9))
	assert.False(t, ok)
	_, ok = d.Alias(tmpl(10))
	assert.True(t, ok)
	checkStore(t, s)
	checkStore(t, &d)

	// Aliases do not expire.
	clock := newFakeClock()
	e := &MemoryStore{TTL: time.Second, Clock: clock.Now}
	e.SetAlias(tmpl(0), "h")
	clock.Advance(24 * time.Hour)
	e.Sweep()
	_, ok = e.Alias(tmpl(0))
	assert.True(t, ok)
}

// TestMemoryStoreModel runs random operations against the store and a
// simple model of its documented behaviour.
func TestMemoryStoreModel(t *testing.T) {
	type modelBucket struct {
		b   Bucket
		exp time.Time
		use int
	}
	type modelAlias struct {
		hash string
		use  int
	}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		clock := newFakeClock()
		const maxBuckets, maxAliases = 20, 5
		s := &MemoryStore{TTL: 10 * time.Second, MaxBuckets: maxBuckets, MaxAliases: maxAliases, Clock: clock.Now}
		buckets := map[string]*modelBucket{}
		aliases := map[string]*modelAlias{}
		use := 0
		oldest := func(keys []string, useOf func(string) int) string {
			best := ""
			for _, k := range keys {
				if best == "" || useOf(k) < useOf(best) {
					best = k
				}
			}
			return best
		}
		for range 3000 {
			use++
			now := clock.Now()
			for k, m := range buckets { // the model drops expired buckets at once
				if !now.Before(m.exp) {
					delete(buckets, k)
				}
			}
			key := fmt.Sprint(rng.IntN(40))
			switch rng.IntN(7) {
			case 0, 1:
				b := Bucket{Known: true, Limit: rng.IntN(100) + 1}
				if rng.IntN(2) == 0 {
					b.ResetAt = now.Add(time.Duration(rng.IntN(20)-5) * time.Second)
				}
				if rng.IntN(4) == 0 {
					b.PausedUntil = now.Add(time.Duration(rng.IntN(20)) * time.Second)
				}
				exp := now
				for _, t := range []time.Time{b.ResetAt, b.PausedUntil} {
					if t.After(exp) {
						exp = t
					}
				}
				if buckets[key] == nil && len(buckets) >= maxBuckets {
					var keys []string
					for k := range buckets {
						keys = append(keys, k)
					}
					delete(buckets, oldest(keys, func(k string) int { return buckets[k].use }))
				}
				buckets[key] = &modelBucket{b: b, exp: exp.Add(10 * time.Second), use: use}
				s.Save(key, b)
			case 2, 3:
				got, ok := s.Load(key)
				m := buckets[key]
				require.Equal(t, m != nil, ok, "seed %d: Load(%s)", seed, key)
				if m != nil {
					require.Equal(t, m.b, got)
					m.use = use
				}
			case 4:
				delete(buckets, key)
				s.Delete(key)
			case 5:
				hash := ""
				if rng.IntN(4) != 0 {
					hash = fmt.Sprint("h", rng.IntN(100))
				}
				switch {
				case hash == "":
					delete(aliases, key)
				case aliases[key] != nil:
					aliases[key].hash, aliases[key].use = hash, use
				default:
					if len(aliases) >= maxAliases {
						var keys []string
						for k := range aliases {
							keys = append(keys, k)
						}
						delete(aliases, oldest(keys, func(k string) int { return aliases[k].use }))
					}
					aliases[key] = &modelAlias{hash: hash, use: use}
				}
				s.SetAlias(key, hash)
			case 6:
				h, ok := s.Alias(key)
				m := aliases[key]
				require.Equal(t, m != nil, ok, "seed %d: Alias(%s)", seed, key)
				if m != nil {
					require.Equal(t, m.hash, h)
					m.use = use
				}
			}
			clock.Advance(time.Duration(rng.IntN(500)) * time.Millisecond)
		}
		checkStore(t, s)
		s.Sweep()
		now := clock.Now()
		live := 0
		for _, m := range buckets {
			if now.Before(m.exp) {
				live++
			}
		}
		nb, na := s.Len()
		assert.Equal(t, live, nb, "seed %d", seed)
		assert.Equal(t, len(aliases), na, "seed %d", seed)
	}
}

func TestMemoryStoreConcurrent(t *testing.T) {
	clock := newFakeClock()
	s := &MemoryStore{TTL: time.Second, MaxBuckets: 50, MaxAliases: 30, Clock: clock.Now}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				k := fmt.Sprint(g, "/", i%10)
				s.Save(k, Bucket{Limit: i + 1, ResetAt: clock.Now()})
				if b, ok := s.Load(k); ok {
					assert.Positive(t, b.Limit)
				}
				s.SetAlias(fmt.Sprint("GET /r", g, "/", i%5), "h")
				s.Alias(k)
				if i%3 == 0 {
					s.Delete(k)
				}
				if i%50 == 0 {
					clock.Advance(100 * time.Millisecond)
					s.Sweep()
					s.Len()
				}
			}
		})
	}
	wg.Wait()
	checkStore(t, s)
	buckets, aliases := s.Len()
	assert.LessOrEqual(t, buckets, 50)
	assert.Equal(t, 30, aliases)
}

// saveMany saves n buckets under distinct keys shaped like the limiter's
// (routes.BucketKey of a 32-character hash and a channel id), alive for the
// store's TTL after a window that ends a few seconds from now.
func saveMany(s *MemoryStore, now time.Time, n int) {
	for i := range n {
		key := fmt.Sprintf("%032x %d", i*7919, 100000000000000000+i)
		s.Save(key, Bucket{Known: true, Limit: 5, Remaining: 4, Hash: key[:32], ResetAt: now.Add(5 * time.Second)})
	}
}

// TestMemoryStoreForgetsFiftyThousandChannels is the bot that touches 50,000
// channels once: after the TTL, ordinary operations free them all and the
// maps shrink.
func TestMemoryStoreForgetsFiftyThousandChannels(t *testing.T) {
	clock := newFakeClock()
	s := &MemoryStore{Clock: clock.Now}
	saveMany(s, clock.Now(), 50_000)
	n, _ := s.Len()
	require.Equal(t, 50_000, n)
	assert.Equal(t, 50_000, s.buckets.peak)

	clock.Advance(5*time.Second + DefaultBucketTTL)
	// A bot that keeps working: a few live buckets, saved and loaded.
	ops := 0
	for ; ops < 10_000; ops++ {
		k := fmt.Sprint("live", ops%20)
		if ops%2 == 0 {
			s.Save(k, Bucket{Known: true, Limit: 1})
		} else {
			s.Load(k)
		}
		if n, _ := s.Len(); n <= 20 {
			break
		}
	}
	n, _ = s.Len()
	assert.LessOrEqual(t, n, 20)
	assert.LessOrEqual(t, ops, 50_000/sweepBatch+1, "each operation drops a batch")
	t.Logf("%d operations dropped 50,000 expired buckets", ops)

	s.mu.Lock()
	peak, heapCap := s.buckets.peak, cap(s.expiry)
	s.mu.Unlock()
	assert.Less(t, peak, shrinkMin, "the map was rebuilt smaller")
	assert.Less(t, heapCap, shrinkMin, "the heap's array was reallocated smaller")
	checkStore(t, s)
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMemoryStoreReturnsMemory measures the heap: 50,000 buckets saved once
// take megabytes, and after their TTL, operations on the store give them
// back. The bound, 1 MB above the baseline, is 25 times what remains
// (about 40 KB); a map that was never rebuilt would keep 1.7 MB.
func TestMemoryStoreReturnsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	clock := newFakeClock()
	s := &MemoryStore{Clock: clock.Now}
	base := heapInUse()
	saveMany(s, clock.Now(), 50_000)
	full := heapInUse()
	clock.Advance(5*time.Second + DefaultBucketTTL)
	for i := range 50_000/sweepBatch + 1 {
		s.Load(fmt.Sprint("absent", i%10))
	}
	after := heapInUse()
	n, _ := s.Len()
	require.Zero(t, n)
	runtime.KeepAlive(s)
	mb := func(b uint64) float64 { return float64(b) / (1 << 20) }
	t.Logf("heap: baseline %.2f MB, 50,000 buckets %.2f MB (+%.2f), after expiry %.2f MB", mb(base), mb(full), mb(full)-mb(base), mb(after))
	assert.Greater(t, full, base+5<<20, "the measure is meaningful: 50,000 buckets take more than 5 MB")
	assert.Less(t, after, base+1<<20, "the memory of expired buckets is returned")
}
