package leakybucket

import (
	"context"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Store checks calls against buckets kept by key. Memory and Redis
// implement it; the middleware uses it.
type Store interface {
	// CheckAll checks one call of key against every limit in limits, at
	// once: the call is admitted only if no limit's bucket is full, and
	// only then added to every bucket. It appends one Result per limit, in
	// order, to dst and returns the extended slice. Limits must have
	// distinct names (a key's bucket under a limit is (key, Name)).
	CheckAll(ctx context.Context, key string, limits []Limit, dst []Result) ([]Result, error)
}

var (
	_ Store = (*Memory)(nil)
	_ Store = (*Redis)(nil)
)

// Defaults of Memory.
const (
	// DefaultShards is the number of shards of a Memory whose Shards is 0.
	DefaultShards = 64
	// DefaultMaxKeys is the most buckets a Memory whose MaxKeys is 0 holds.
	DefaultMaxKeys = 1_000_000
	// DefaultKeepDrained is how many drained buckets a Memory whose
	// KeepDrained is 0 keeps for their keys' return.
	DefaultKeepDrained = 16_384

	// sweepPerCheck is how many buckets a sweeping check examines for
	// expiry. Above 1, so that expiry keeps up with checks that each add at
	// most one bucket per limit.
	sweepPerCheck = 2
	// sweepEvery is how often an admitted check that adds no bucket sweeps:
	// once every sweepEvery such checks of its shard. Sweeping touches
	// other buckets' memory, which costs a check on a busy store about a
	// fifth of its time; only new buckets make the store grow, and those
	// always sweep.
	sweepEvery = 16
	// shrinkMin is the peak size below which a shard's map is never
	// rebuilt.
	shrinkMin = 1024
	// evictSample is how many buckets a full shard examines to choose one
	// to evict.
	evictSample = 8
	// maxStackLimits is how many limits CheckAllAt handles without
	// allocating.
	maxStackLimits = 8
	// maxFree is how many dropped entries a shard keeps for reuse, so
	// that a check that creates a bucket in a shard that drops others
	// allocates nothing.
	maxFree = 32
)

// Memory is an in-process Store: buckets in a sharded map, safe for
// concurrent use. A check allocates nothing: not on an existing bucket,
// nor on a drained one, nor, once the store has grown, on a new one.
//
// Buckets are sharded by key, so all the limits of one key live in one
// shard and CheckAll decides them under one lock, atomically.
//
// A bucket may be forgotten once it has drained (its ClearAfter has
// passed, by the limit it was last charged under): forgetting an empty
// bucket changes nothing, so expiry is exact, not a cache policy. Memory
// starts no goroutine and needs no Close: each admitted check that adds a
// bucket, and one in 16 of the other admitted checks of a shard, examines
// two buckets of the shard, round robin, and drops those that have
// drained, unless the shard holds no more than its part of KeepDrained
// buckets: a client that comes back after its bucket drained then finds
// its bucket where it was, which costs a check no more than a bucket kept
// full (a new bucket costs a map insertion and, in a shard that drops
// others, a deletion; its memory is reused from dropped buckets, so no
// check allocates once the store has grown). Only new buckets make the
// store grow, and each pays for the expiry of two, so a store in use keeps
// its memory proportional to the buckets not yet drained, plus at most
// KeepDrained drained ones, at a bounded cost per check. Sweep drops all
// drained buckets at once. A shard's map is rebuilt once it has shrunk to a quarter of its
// peak (past 1,024 buckets), because a Go map never gives back the memory
// of deleted entries.
//
// MaxKeys bounds the memory against keys created faster than they drain
// (a spray of client addresses): a check that needs a new bucket in a full
// shard first drops a drained bucket if the next few round robin include
// one, and otherwise evicts, of the next 8, the bucket that would drain
// first (never one of its own key). The client of an evicted bucket may get
// up to Size calls early; Evictions counts them.
//
// The zero value is an empty store with the defaults, ready to use. The
// exported fields are options: set them before the first use and do not
// change them afterwards. A Memory must not be copied after first use.
type Memory struct {
	// Shards is the number of shards, rounded up to a power of two. 0 means
	// DefaultShards (64).
	Shards int
	// MaxKeys bounds the buckets the store holds (a key has one bucket per
	// limit name): each shard holds at most MaxKeys/Shards, rounded up (a
	// check may exceed it only with buckets of its own key). 0 means
	// DefaultMaxKeys (1,000,000); negative means no bound.
	MaxKeys int
	// KeepDrained is how many drained buckets the store keeps (each shard
	// its part, rounded up) rather than forget, so that clients coming
	// back after a pause find their buckets: the check of a kept bucket
	// touches no map and allocates nothing. 0 means DefaultKeepDrained
	// (16,384: about 2 MB); negative means none, every drained bucket
	// forgotten as soon as a sweep examines it.
	KeepDrained int
	// Clock is the time source of Check and CheckAll (the *At methods take
	// the time as an argument). nil means the monotonic clock: the time of
	// the store's first use plus the monotonic time elapsed since, which is
	// time.Now without its wall clock reading (half its cost) and is never
	// moved by a step of the wall clock.
	Clock func() time.Time

	once     sync.Once
	shards   []shard
	mask     uint64
	seed     maphash.Seed
	epoch    time.Time // times are kept as nanoseconds since epoch (monotonic when the caller's times are)
	perShard int       // most buckets per shard; 0: no bound
	keep     int       // a sweep drops drained buckets only from a shard holding more
	evicted  atomic.Uint64
}

// bucketID names one bucket: a key under a limit name.
type bucketID struct {
	key, name string
}

// entry is one bucket of a shard.
type entry struct {
	id     bucketID
	hash   uint64 // maphash of id.key: the entry's place in the shard's map
	chain  *entry // the next entry whose key has the same hash (the other limits of its key, mostly)
	level  int64  // calls in the bucket; > 0 while the entry is in the map, but 0 after Reset or Set (then clear has passed)
	anchor int64  // ns since the store's epoch of the last drip
	clear  int64  // ns since epoch when the bucket is empty: the entry may be dropped at or after it
}

type shard struct {
	mu     sync.Mutex
	latest int64             // the latest time seen, ns since epoch (MinInt64: none): the shard's clock never runs backwards
	m      map[uint64]*entry // by the hash of the key (which also chose the shard): the first of a chain, see find
	all    []*entry          // every entry, once, in any order: the round robin's list
	free   *entry            // dropped entries for reuse, chained by chain
	nfree  int               // len of free, at most maxFree
	cursor int               // the round robin examines all[cursor-1] next (see next)
	checks uint32            // admitted checks, for maybeSweep
	peak   int               // largest len(all) since the map was built
	_      [64]byte          // keep shards on separate cache lines
}

func (s *Memory) init() {
	s.once.Do(func() {
		n := s.Shards
		if n <= 0 {
			n = DefaultShards
		}
		n = 1 << bits.Len(uint(n-1))
		s.shards = make([]shard, n)
		for i := range s.shards {
			s.shards[i].m = make(map[uint64]*entry)
			s.shards[i].latest = math.MinInt64
		}
		s.mask = uint64(n - 1)
		s.seed = maphash.MakeSeed()
		s.epoch = time.Now()
		switch {
		case s.MaxKeys == 0:
			s.perShard = ceilDivInt(DefaultMaxKeys, n)
		case s.MaxKeys > 0:
			s.perShard = max(ceilDivInt(s.MaxKeys, n), 1)
		}
		switch {
		case s.KeepDrained == 0:
			s.keep = ceilDivInt(DefaultKeepDrained, n)
		case s.KeepDrained > 0:
			s.keep = ceilDivInt(s.KeepDrained, n)
		}
	})
}

// Check checks one call of key against lim at the Clock's time; see CheckAt.
// It never blocks and ignores ctx.
func (s *Memory) Check(_ context.Context, key string, lim Limit) (r Result, err error) {
	now, t := s.clock()
	err = s.checkAt(&r, key, lim, now, t)
	return r, err
}

// CheckAll implements Store at the Clock's time; see CheckAllAt. It never
// blocks and ignores ctx.
func (s *Memory) CheckAll(_ context.Context, key string, limits []Limit, dst []Result) ([]Result, error) {
	now, t := s.clock()
	return s.checkAllAt(key, 1, limits, dst, now, t)
}

// CheckN checks one call of cost n against every limit at the Clock's
// time; see CheckNAt. It never blocks and ignores ctx.
func (s *Memory) CheckN(_ context.Context, key string, n int, limits []Limit, dst []Result) ([]Result, error) {
	now, t := s.clock()
	return s.checkAllAt(key, n, limits, dst, now, t)
}

// clock returns the Clock's time, as a time and in ns since the epoch. With
// no Clock it reads only the monotonic clock (time.Since), which costs half
// of time.Now: the time is the epoch plus the monotonic time elapsed since,
// which is what the store's arithmetic uses anyway.
func (s *Memory) clock() (time.Time, int64) {
	s.init()
	if s.Clock != nil {
		now := s.Clock()
		return now, int64(now.Sub(s.epoch))
	}
	d := time.Since(s.epoch)
	return s.epoch.Add(d), int64(d)
}

// find returns the bucket (key, name) of sh (locked), whose key hashes to
// h, or nil.
func (sh *shard) find(h uint64, key, name string) *entry {
	for e := sh.m[h]; e != nil; e = e.chain {
		if e.id.name == name && e.id.key == key {
			return e
		}
	}
	return nil
}

// CheckAt checks one call of key against lim at now: the bucket (key,
// lim.Name) admits it, and adds it, unless it is full. The only error is an
// invalid limit.
//
// Times passed to one store should come from one clock. Each shard keeps
// the latest time it has seen, and a time earlier than that counts as that
// time (Result.At says so): the store's time never runs backwards, so the
// buckets it has forgotten as drained stay drained, and calls that reach
// the store out of order (time.Now read before waiting for the lock) are
// decided in the order they reach it.
func (s *Memory) CheckAt(key string, lim Limit, now time.Time) (r Result, err error) {
	s.init()
	err = s.checkAt(&r, key, lim, now, int64(now.Sub(s.epoch)))
	return r, err
}

// checkAt is CheckAt at now, which is t ns after the epoch, into *r (left
// zero on an error).
func (s *Memory) checkAt(r *Result, key string, lim Limit, now time.Time, t int64) error {
	p, err := lim.params()
	if err != nil {
		return err
	}
	id := bucketID{key, lim.name()}
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	sh.mu.Lock()
	now, t = sh.advance(now, t)
	e := sh.find(h, key, id.name)
	var level, elapsed int64
	if e != nil {
		level, elapsed = e.level, t-e.anchor
	}
	level, elapsed, blocked := step(p, level, elapsed, 1, true)
	fillResult(r, lim, p, now, level, elapsed, 1, blocked)
	if !blocked {
		s.commit(sh, e, h, id, level, t-elapsed, t+int64(r.ClearAfter), t)
		s.maybeSweep(sh, t, e == nil)
	}
	sh.mu.Unlock()
	return nil
}

// CheckAllAt checks one call of key against every limit at now, at once:
// the call is admitted only if no bucket (key, limit.Name) is full, and only
// then added to each. It appends one Result per limit to dst. The only error
// is an invalid limit (or two with one name), and then nothing is checked.
// With up to 8 limits and dst large enough, it allocates nothing (for a
// new bucket, once the store has grown).
func (s *Memory) CheckAllAt(key string, limits []Limit, dst []Result, now time.Time) ([]Result, error) {
	s.init()
	return s.checkAllAt(key, 1, limits, dst, now, int64(now.Sub(s.epoch)))
}

// CheckNAt checks one call of cost n of key against every limit at now, at
// once: the call is admitted only if every bucket (key, limit.Name) holds
// at most its Size - n, and only then adds n to each (see Bucket.CheckN).
// It appends one Result per limit to dst. The errors are CheckAllAt's, and
// a cost below 0 or above a limit's Size (ErrInvalidCost); then nothing is
// checked. A call of cost 0 is always admitted, changes nothing, and
// describes the buckets as they are.
func (s *Memory) CheckNAt(key string, n int, limits []Limit, dst []Result, now time.Time) ([]Result, error) {
	s.init()
	return s.checkAllAt(key, n, limits, dst, now, int64(now.Sub(s.epoch)))
}

// checkAllAt is CheckNAt at now, which is t ns after the epoch.
func (s *Memory) checkAllAt(key string, n int, limits []Limit, dst []Result, now time.Time, t int64) ([]Result, error) {
	var stack [maxStackLimits]params
	ps := stack[:0]
	if len(limits) > maxStackLimits {
		ps = make([]params, 0, len(limits))
	}
	ps, err := appendParams(ps, limits)
	if err != nil {
		return dst, err
	}
	for i, p := range ps {
		if err := checkCost(limits[i], p, n); err != nil {
			return dst, err
		}
	}
	cost := int64(n)
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&s.mask]
	type tentative struct {
		e              *entry
		level, elapsed int64
	}
	var tstack [maxStackLimits]tentative
	ts := tstack[:0]
	if len(limits) > maxStackLimits {
		ts = make([]tentative, 0, len(limits))
	}
	sh.mu.Lock()
	now, t = sh.advance(now, t)
	admit := true
	for i, lim := range limits {
		e := sh.find(h, key, lim.name())
		var level, elapsed int64
		if e != nil {
			level, elapsed = e.level, t-e.anchor
		}
		level, elapsed, blocked := step(ps[i], level, elapsed, cost, false)
		admit = admit && !blocked
		ts = append(ts, tentative{e, level, elapsed})
	}
	if admit {
		for i, lim := range limits {
			level, elapsed, _ := step(ps[i], ts[i].level, ts[i].elapsed, cost, true)
			ts[i].level, ts[i].elapsed = level, elapsed
			if ts[i].e != nil {
				s.commit(sh, ts[i].e, h, bucketID{key, lim.name()}, level, t-elapsed, t-elapsed+ps[i].drips(level)*ps[i].interval, t)
			}
		}
		// New buckets last: making room for them may drop drained
		// buckets, and the existing ones of this call are no longer
		// drained.
		inserted := false
		for i, lim := range limits {
			if ts[i].e == nil && ts[i].level > 0 { // a call of cost 0 adds no bucket
				inserted = true
				anchor := t - ts[i].elapsed
				s.commit(sh, nil, h, bucketID{key, lim.name()}, ts[i].level, anchor, anchor+ps[i].drips(ts[i].level)*ps[i].interval, t)
			}
		}
		s.maybeSweep(sh, t, inserted)
	}
	sh.mu.Unlock()
	for i, lim := range limits {
		dst = append(dst, Result{})
		fillResult(&dst[len(dst)-1], lim, ps[i], now, ts[i].level, ts[i].elapsed, cost, ts[i].level+cost > ps[i].size && !admit)
	}
	return dst, nil
}

// advance moves sh's (locked) clock to t (ns since epoch) of now, unless t
// is earlier: then it returns the shard's time instead, as a time and in ns.
func (sh *shard) advance(now time.Time, t int64) (time.Time, int64) {
	if t < sh.latest {
		return now.Add(time.Duration(sh.latest - t)), sh.latest
	}
	sh.latest = t
	return now, t
}

// commit stores the state of an admitted call in bucket id of sh (locked),
// whose key hashes to h: into e, or into a new entry if e is nil; clear is
// when it will have
// drained. It does not sweep: the caller sweeps once every bucket of its
// call is committed, when none of them has drained (a bucket that has just
// admitted a call holds it for at least one more drip), so the sweep cannot
// drop them.
func (s *Memory) commit(sh *shard, e *entry, h uint64, id bucketID, level, anchor, clear, now int64) {
	if e != nil {
		e.level, e.anchor, e.clear = level, anchor, clear
		return
	}
	if s.perShard > 0 && len(sh.all) >= s.perShard {
		s.evict(sh, id.key, now)
	}
	if e = sh.free; e != nil {
		sh.free, sh.nfree = e.chain, sh.nfree-1
		*e = entry{id: id, hash: h, chain: sh.m[h], level: level, anchor: anchor, clear: clear}
	} else {
		e = &entry{id: id, hash: h, chain: sh.m[h], level: level, anchor: anchor, clear: clear}
	}
	sh.m[h] = e
	sh.all = append(sh.all, e)
	sh.peak = max(sh.peak, len(sh.all))
}

// evict makes room in the full shard sh (locked) for a bucket of key. It
// examines buckets round robin, skipping key's own (the current check may be
// updating them): the first that has drained is dropped; otherwise, of the
// first evictSample examined, the one that would drain first (the least
// state lost) is evicted and counted.
func (s *Memory) evict(sh *shard, key string, now int64) {
	best, sampled := -1, 0
	for range len(sh.all) {
		if sampled == evictSample {
			break
		}
		i := sh.next()
		e := sh.all[i]
		if e.id.key == key {
			continue
		}
		if e.clear <= now {
			s.drop(sh, i)
			return
		}
		if best < 0 || e.clear < sh.all[best].clear {
			best = i
		}
		sampled++
	}
	if best >= 0 {
		s.evicted.Add(1)
		s.drop(sh, best)
	}
	// Otherwise every bucket of the shard is key's: go over the bound
	// rather than forget a bucket of the call being decided.
}

// maybeSweep sweeps sh (locked) after an admitted check: always if the
// check added a bucket, otherwise once every sweepEvery checks.
func (s *Memory) maybeSweep(sh *shard, now int64, inserted bool) {
	sh.checks++
	if inserted || sh.checks%sweepEvery == 0 {
		s.sweep(sh, now, sweepPerCheck, s.keep)
	}
}

// next returns the index of all that the round robin examines next. It
// walks down from the end, so that drop, which moves the last bucket into
// the hole, only ever moves one already examined in this round (or added
// since it began): every step of a round examines a bucket not yet seen.
func (sh *shard) next() int {
	if sh.cursor <= 0 || sh.cursor > len(sh.all) {
		sh.cursor = len(sh.all)
	}
	sh.cursor--
	return sh.cursor
}

// sweep examines up to n buckets of sh (locked), round robin, dropping
// those drained at now, while sh holds more than keep buckets.
func (s *Memory) sweep(sh *shard, now int64, n, keep int) {
	for ; n > 0 && len(sh.all) > keep; n-- {
		if i := sh.next(); sh.all[i].clear <= now {
			s.drop(sh, i)
		}
	}
	if sh.peak >= shrinkMin && len(sh.all) <= sh.peak/4 {
		m := make(map[uint64]*entry, len(sh.m)*2)
		for h, e := range sh.m {
			m[h] = e
		}
		sh.m = m
		sh.all = append(make([]*entry, 0, len(sh.all)*2), sh.all...)
		sh.peak = len(sh.all)
	}
}

// drop removes sh.all[i] from sh (locked).
func (s *Memory) drop(sh *shard, i int) {
	e := sh.all[i]
	if first := sh.m[e.hash]; first == e {
		if e.chain == nil {
			delete(sh.m, e.hash)
		} else {
			sh.m[e.hash] = e.chain
		}
	} else {
		for first.chain != e {
			first = first.chain
		}
		first.chain = e.chain
	}
	e.chain = nil
	if sh.nfree < maxFree {
		*e = entry{chain: sh.free} // no reference to the key kept
		sh.free, sh.nfree = e, sh.nfree+1
	}
	last := len(sh.all) - 1
	sh.all[i] = sh.all[last]
	sh.all[last] = nil
	sh.all = sh.all[:last]
}

// Sweep drops every bucket that has drained at now, and returns how many
// it dropped. Checks already sweep a little as they go; call Sweep to free
// the memory of a store that has stopped being used.
func (s *Memory) Sweep(now time.Time) int {
	s.init()
	t := int64(now.Sub(s.epoch))
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		_, t := sh.advance(now, t)
		before := len(sh.all)
		sh.cursor = len(sh.all)
		s.sweep(sh, t, before, 0)
		n += before - len(sh.all)
		sh.mu.Unlock()
	}
	return n
}

// Len returns the number of buckets the store holds, drained ones not yet
// swept included.
func (s *Memory) Len() int {
	s.init()
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.all)
		sh.mu.Unlock()
	}
	return n
}

// Evictions returns how many buckets that had not drained were evicted to
// respect MaxKeys.
func (s *Memory) Evictions() uint64 { return s.evicted.Load() }
