package ratelimit

import (
	"sync"
	"time"
)

// BucketStore holds learned bucket state by key, and the map from a route
// template to the X-RateLimit-Bucket hash Discord revealed for it.
//
// Bucket keys are those of package routes: routes.BucketKey(hash, major)
// once the bucket's hash is known, or the route's Route.Key() before
// discovery. Alias keys are route templates with their method, as
// routes.Route gives them: Method + " " + Template (for example
// "POST /channels/{channel_id}/messages"), never a particular channel or
// guild; an alias's value is the bare hash, which the caller combines with a
// route's major parameters.
//
// It is the seam for sharing state between processes. Implementations must
// be safe for concurrent use. A store may forget anything at any time (the
// in-memory one expires buckets and caps its size): forgetting only makes the
// limiter rediscover a bucket with a single pioneer request. The methods
// return no error: an implementation backed by a remote store decides and
// documents its own failure policy (typically: Load and Alias report "not
// found", and Save is best effort).
type BucketStore interface {
	// Load returns the bucket stored under key and true, or false.
	Load(key string) (Bucket, bool)
	// Save stores b under key, replacing what was there.
	Save(key string, b Bucket)
	// Delete removes the bucket stored under key, if any.
	Delete(key string)
	// Alias returns the X-RateLimit-Bucket hash recorded for template
	// (Method + " " + Template of a routes.Route) and true, or false.
	Alias(template string) (hash string, ok bool)
	// SetAlias records that the routes of template are limited by the
	// buckets of hash (one per value of their major parameters). An empty
	// hash removes the alias.
	SetAlias(template, hash string)
}

// GlobalLimiter is the bot-wide limit shared by all non-exempt routes. Its
// methods mirror [SlidingWindow], which is the in-memory implementation.
// Implementations must be safe for concurrent use; one backed by a remote
// store decides and documents its own failure policy.
type GlobalLimiter interface {
	// Reserve takes a slot for one request at now, or reports how long
	// to wait.
	Reserve(now time.Time) (ok bool, wait time.Duration)
	// Settle holds the slot of a reserved request, answered at now, for
	// one more period.
	Settle(now time.Time)
	// Cancel gives back the slot of a reserved request never sent.
	Cancel(now time.Time)
	// Block stops all reservations until until.
	Block(until time.Time)
	// Blocked reports how long from now the block lasts (0: none); slots
	// reserved earlier are not used meanwhile.
	Blocked(now time.Time) time.Duration
	// Wait reports how long from now until Reserve would succeed.
	Wait(now time.Time) time.Duration
}

var (
	_ BucketStore   = (*MemoryStore)(nil)
	_ GlobalLimiter = (*SlidingWindow)(nil)
)

// Defaults of [MemoryStore].
const (
	// DefaultBucketTTL is how long a MemoryStore keeps a bucket after its
	// window (or pause) ends.
	DefaultBucketTTL = 10 * time.Minute
	// DefaultMaxBuckets is how many buckets a MemoryStore holds at most.
	DefaultMaxBuckets = 100_000
	// DefaultMaxAliases is how many aliases a MemoryStore holds at most.
	DefaultMaxAliases = 10_000
)

const (
	// sweepBatch bounds how many expired buckets one operation drops, so
	// that no operation pays for a large expiry at once. It is above 1 so
	// that expiry keeps up with Save, which adds at most one bucket.
	sweepBatch = 16
	// shrinkMin is the peak size below which a map is never rebuilt.
	shrinkMin = 1024
)

// MemoryStore is an in-process [BucketStore] with bounded memory. Buckets
// are stored and returned by value.
//
// Learned state expires: a bucket saved at time t expires at the latest of
// t, its ResetAt and its PausedUntil, plus TTL, and Load never returns an
// expired bucket. Saving a bucket again sets its expiry anew; Load does not
// extend it. On top of that the store holds at most MaxBuckets buckets and
// MaxAliases aliases, evicting the least recently used (saved, loaded or
// looked up) first. Aliases do not expire: there is one per route template,
// so they are few.
//
// The store starts no goroutine. It drops expired buckets lazily: every
// operation first drops a few (at most 16) of those whose expiry passed
// longest ago, so a store that is used keeps freeing memory at a bounded
// cost per operation (logarithmic in the number of buckets);
// [MemoryStore.Sweep] drops them all at once. A map that held more than
// 1,024 entries is rebuilt once it has shrunk to a quarter of its peak
// size, because a Go map never gives back the memory of deleted entries;
// the copy's cost is amortized over those deletions.
//
// The zero value is an empty store with the defaults, ready to use.
// NewMemoryStore returns the same. The exported fields are options: set them
// before the first use and do not change them afterwards. A MemoryStore is
// safe for concurrent use and must not be copied after first use.
type MemoryStore struct {
	// TTL is how long a bucket is kept after the later of its window's end
	// (ResetAt), its pause's end (PausedUntil) and the Save that stored it.
	// If TTL is zero or negative, DefaultBucketTTL (10 minutes) is used.
	TTL time.Duration

	// MaxBuckets is the most buckets the store holds; saving a new one
	// into a full store evicts the least recently used (expired buckets go
	// first, see above). If MaxBuckets is zero or negative,
	// DefaultMaxBuckets (100,000) is used.
	MaxBuckets int

	// MaxAliases is the most aliases the store holds; recording a new one
	// into a full store evicts the least recently used. If MaxAliases is
	// zero or negative, DefaultMaxAliases (10,000) is used.
	MaxAliases int

	// Clock returns the current time, against which expiry is measured.
	// It must be the clock the saved buckets' times come from (the
	// limiter's Options.Clock), within 292 years of the process's start
	// like theirs (see Bucket). If Clock is nil, time.Now is used.
	Clock func() time.Time

	mu      sync.Mutex
	buckets lru[storedBucket]
	expiry  expiryHeap // the buckets, earliest expiry first
	aliases lru[string]
}

// storedBucket is a bucket with its expiry.
type storedBucket struct {
	b   Bucket
	exp stamp // a stamp, like the Bucket's own times: 16 bytes less a bucket
	idx int   // index in MemoryStore.expiry
}

// NewMemoryStore returns an empty MemoryStore with the default options: the
// same as new(MemoryStore).
func NewMemoryStore() *MemoryStore { return new(MemoryStore) }

func (s *MemoryStore) now() time.Time {
	if s.Clock != nil {
		return s.Clock()
	}
	return time.Now()
}

func (s *MemoryStore) ttl() time.Duration {
	if s.TTL > 0 {
		return s.TTL
	}
	return DefaultBucketTTL
}

func (s *MemoryStore) maxBuckets() int {
	if s.MaxBuckets > 0 {
		return s.MaxBuckets
	}
	return DefaultMaxBuckets
}

func (s *MemoryStore) maxAliases() int {
	if s.MaxAliases > 0 {
		return s.MaxAliases
	}
	return DefaultMaxAliases
}

// Load implements BucketStore. It never returns an expired bucket.
func (s *MemoryStore) Load(key string) (Bucket, bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now, sweepBatch)
	n := s.buckets.get(key)
	if n == nil {
		return Bucket{}, false
	}
	if stampOf(now) >= n.val.exp {
		s.removeBucket(n)
		return Bucket{}, false
	}
	s.buckets.touch(n)
	return n.val.b, true
}

// Save implements BucketStore. The bucket expires TTL after the latest of
// now, b.ResetAt and b.PausedUntil.
func (s *MemoryStore) Save(key string, b Bucket) {
	now := s.now()
	exp := now
	if b.ResetAt.After(exp) {
		exp = b.ResetAt
	}
	if b.PausedUntil.After(exp) {
		exp = b.PausedUntil
	}
	exp = exp.Add(s.ttl())
	at := stampIn(exp, now) // in the frame of the store's clock, which expire compares with

	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now, sweepBatch)
	if n := s.buckets.get(key); n != nil {
		n.val.b, n.val.exp = b, at
		s.expiry.fix(n.val.idx)
		s.buckets.touch(n)
		return
	}
	// The sweep above left no expired bucket in a full store: it drops
	// sweepBatch of them, or all if there are fewer.
	for limit := s.maxBuckets(); s.buckets.len() >= limit; {
		s.removeBucket(s.buckets.oldest())
	}
	n := s.buckets.insert(key, storedBucket{b: b, exp: at})
	s.expiry.push(n)
}

// Delete implements BucketStore.
func (s *MemoryStore) Delete(key string) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now, sweepBatch)
	if n := s.buckets.get(key); n != nil {
		s.removeBucket(n)
	}
}

// Alias implements BucketStore.
func (s *MemoryStore) Alias(template string) (hash string, ok bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now, sweepBatch)
	n := s.aliases.get(template)
	if n == nil {
		return "", false
	}
	s.aliases.touch(n)
	return n.val, true
}

// SetAlias implements BucketStore.
func (s *MemoryStore) SetAlias(template, hash string) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now, sweepBatch)
	n := s.aliases.get(template)
	switch {
	case hash == "":
		if n != nil {
			s.aliases.remove(n)
		}
	case n != nil:
		n.val = hash
		s.aliases.touch(n)
	default:
		for limit := s.maxAliases(); s.aliases.len() >= limit; {
			s.aliases.remove(s.aliases.oldest())
		}
		s.aliases.insert(template, hash)
	}
}

// Len returns the number of buckets and aliases stored. Buckets that have
// expired but were not dropped yet are counted; call Sweep first to count
// only the live ones.
func (s *MemoryStore) Len() (buckets, aliases int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buckets.len(), s.aliases.len()
}

// Sweep drops every expired bucket now, and returns how many it dropped.
// The store's operations drop expired buckets by themselves, a few at a
// time; Sweep is for when the store is idle and its memory should be
// returned at once, and for tests. Its cost is proportional to the number
// of buckets it drops (times their logarithm).
func (s *MemoryStore) Sweep() (dropped int) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expire(now, -1)
}

// expire drops up to limit expired buckets (all if limit < 0), those that
// expired first, and returns how many it dropped. s.mu is held.
func (s *MemoryStore) expire(now time.Time, limit int) int {
	dropped := 0
	for len(s.expiry) > 0 && dropped != limit && stampOf(now) >= s.expiry[0].val.exp {
		s.removeBucket(s.expiry[0])
		dropped++
	}
	return dropped
}

// removeBucket removes n from the bucket map, the recency list and the
// expiry heap. s.mu is held.
func (s *MemoryStore) removeBucket(n *node[storedBucket]) {
	s.expiry.remove(n.val.idx)
	s.buckets.remove(n)
}

// node is an entry of an lru.
type node[V any] struct {
	key        string
	val        V
	prev, next *node[V]
}

// lru is a map whose entries are also kept in order of use, in a doubly
// linked list. It rebuilds its map once it has fallen to a quarter of its
// peak size, so that the memory of deleted entries is returned (a Go map
// never shrinks). The zero value is empty and ready to use.
type lru[V any] struct {
	m    map[string]*node[V]
	root node[V] // sentinel: root.next is the most recently used, root.prev the least
	peak int     // the largest len(m) since m was made
}

func (l *lru[V]) len() int { return len(l.m) }

func (l *lru[V]) get(key string) *node[V] { return l.m[key] }

// oldest returns the least recently used entry; the lru must not be empty.
func (l *lru[V]) oldest() *node[V] { return l.root.prev }

// insert adds a new entry as the most recently used; key must be absent.
func (l *lru[V]) insert(key string, v V) *node[V] {
	if l.m == nil {
		l.m = make(map[string]*node[V])
		l.root.next, l.root.prev = &l.root, &l.root
	}
	n := &node[V]{key: key, val: v}
	l.m[key] = n
	l.link(n)
	if len(l.m) > l.peak {
		l.peak = len(l.m)
	}
	return n
}

// touch makes n the most recently used entry.
func (l *lru[V]) touch(n *node[V]) {
	if l.root.next == n {
		return
	}
	l.unlink(n)
	l.link(n)
}

func (l *lru[V]) remove(n *node[V]) {
	l.unlink(n)
	n.prev, n.next = nil, nil
	delete(l.m, n.key)
	if l.peak >= shrinkMin && len(l.m) <= l.peak/4 {
		m := make(map[string]*node[V], len(l.m))
		for k, v := range l.m {
			m[k] = v
		}
		l.m, l.peak = m, len(m)
	}
}

func (l *lru[V]) link(n *node[V]) {
	n.prev, n.next = &l.root, l.root.next
	n.prev.next, n.next.prev = n, n
}

func (l *lru[V]) unlink(n *node[V]) {
	n.prev.next, n.next.prev = n.next, n.prev
}

// expiryHeap is a binary min-heap of stored buckets by expiry; each entry
// knows its index.
type expiryHeap []*node[storedBucket]

func (h expiryHeap) less(i, j int) bool { return h[i].val.exp < h[j].val.exp }

func (h expiryHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].val.idx, h[j].val.idx = i, j
}

func (h *expiryHeap) push(n *node[storedBucket]) {
	n.val.idx = len(*h)
	*h = append(*h, n)
	h.up(n.val.idx)
}

// remove removes the entry at index i.
func (h *expiryHeap) remove(i int) {
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	if i != last {
		h.fix(i)
	}
	if c := cap(*h); c >= shrinkMin && len(*h) <= c/4 {
		*h = append(make(expiryHeap, 0, 2*len(*h)), *h...)
	}
}

// fix restores the heap order after the expiry at index i changed.
func (h expiryHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h expiryHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down moves the entry at i down to its place and reports whether it moved.
func (h expiryHeap) down(i int) bool {
	start := i
	for {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if r := c + 1; r < len(h) && h.less(r, c) {
			c = r
		}
		if !h.less(c, i) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}
