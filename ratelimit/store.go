package ratelimit

import (
	"sync"
	"time"
)

// BucketStore holds bucket state by key, and the map from a route's
// pre-discovery key to the X-RateLimit-Bucket hash Discord revealed for it.
// Keys are those of package routes: Route.Key() before discovery,
// routes.BucketKey(hash, major) after.
//
// It is the seam for sharing state between processes. Implementations must
// be safe for concurrent use. The methods return no error: an implementation
// backed by a remote store decides and documents its own failure policy
// (typically: Load and Alias report "not found", which makes the limiter
// rediscover the bucket with a single pioneer, and Save is best effort).
type BucketStore interface {
	// Load returns the bucket stored under key and true, or false.
	Load(key string) (Bucket, bool)
	// Save stores b under key, replacing what was there.
	Save(key string, b Bucket)
	// Delete removes the bucket stored under key, if any.
	Delete(key string)
	// Alias returns the bucket key recorded for routeKey (the
	// routes.BucketKey of the hash its responses reported and its major
	// parameters) and true, or false.
	Alias(routeKey string) (bucketKey string, ok bool)
	// SetAlias records that routeKey is limited by the bucket bucketKey.
	// An empty bucketKey removes the alias.
	SetAlias(routeKey, bucketKey string)
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
	// Wait reports how long from now until Reserve would succeed.
	Wait(now time.Time) time.Duration
}

var (
	_ BucketStore   = (*MemoryStore)(nil)
	_ GlobalLimiter = (*SlidingWindow)(nil)
)

// MemoryStore is an in-process BucketStore: two maps behind a mutex. Buckets
// are stored and returned by value. The zero value is an empty store ready to
// use; a MemoryStore is safe for concurrent use.
type MemoryStore struct {
	mu      sync.Mutex
	buckets map[string]Bucket
	aliases map[string]string
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{buckets: make(map[string]Bucket), aliases: make(map[string]string)}
}

// Load implements BucketStore.
func (s *MemoryStore) Load(key string) (Bucket, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.buckets[key]
	return b, ok
}

// Save implements BucketStore.
func (s *MemoryStore) Save(key string, b Bucket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buckets == nil {
		s.buckets = make(map[string]Bucket)
	}
	s.buckets[key] = b
}

// Delete implements BucketStore.
func (s *MemoryStore) Delete(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.buckets, key)
}

// Alias implements BucketStore.
func (s *MemoryStore) Alias(routeKey string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.aliases[routeKey]
	return h, ok
}

// SetAlias implements BucketStore.
func (s *MemoryStore) SetAlias(routeKey, hash string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hash == "" {
		delete(s.aliases, routeKey)
		return
	}
	if s.aliases == nil {
		s.aliases = make(map[string]string)
	}
	s.aliases[routeKey] = hash
}

// Len returns the number of buckets and aliases stored.
func (s *MemoryStore) Len() (buckets, aliases int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buckets), len(s.aliases)
}
