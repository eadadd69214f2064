// Package registry is a concurrent map keyed by uint64, sharded so that
// many goroutines adding and removing at once rarely meet (Sharded).
//
// Its one user is package actors (System.live): every submitted call
// without an outcome, by its id. protoactor drops user messages still in a
// mailbox when an actor stops, so Close answers whatever is left there
// once every actor has stopped: every call gets exactly one outcome. The
// submitter adds a call, whoever completes it removes it, a call's
// Timeout timer looks it up (Get), and Close and the ETA's forecast walk
// it (Each).
//
// Invariants:
//   - an id is in exactly one shard (id mod Shards), under that shard's
//     lock for every read and write;
//   - no lock is held while Each's f runs, so f may Add, Get and Remove,
//     on any shard;
//   - a shard's map, once made, is kept: its room is reused from one
//     value to the next (a sync.Map allocated an entry and a boxed key per
//     value; these maps do not, once grown).
package registry

import "sync"

// Shards is how many maps a Sharded spreads its values over, each under
// its own lock, so that 64 callers adding at once rarely meet.
const Shards = 32

// Sharded maps ids to values (V: a pointer, typically). The zero value is
// empty and ready to use; it must not be copied after first use. Safe for
// concurrent use.
type Sharded[V any] struct {
	shards [Shards]shard[V]
}

type shard[V any] struct {
	mu sync.Mutex
	m  map[uint64]V // made at its first Add
	_  [48]byte     // a shard per cache line: callers on two cores do not share one
}

func (s *Sharded[V]) shard(id uint64) *shard[V] { return &s.shards[id%Shards] }

// Add maps id to v, replacing what id mapped to.
func (s *Sharded[V]) Add(id uint64, v V) {
	sh := s.shard(id)
	sh.mu.Lock()
	if sh.m == nil {
		sh.m = make(map[uint64]V)
	}
	sh.m[id] = v
	sh.mu.Unlock()
}

// Get returns the value of id, and whether there is one (the zero value
// and false if not).
func (s *Sharded[V]) Get(id uint64) (V, bool) {
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	v, ok := sh.m[id]
	return v, ok
}

// Remove forgets id; nothing happens if it is not there.
func (s *Sharded[V]) Remove(id uint64) {
	sh := s.shard(id)
	sh.mu.Lock()
	delete(sh.m, id)
	sh.mu.Unlock()
}

// Each calls f for the values present when it reads their shard, outside
// the shard's lock (f may complete a call, which removes it), until f
// returns false. Values added or removed meanwhile may be seen or not.
func (s *Sharded[V]) Each(f func(V) bool) {
	var batch []V
	for i := range s.shards {
		sh := &s.shards[i]
		batch = batch[:0]
		sh.mu.Lock()
		for _, v := range sh.m {
			batch = append(batch, v)
		}
		sh.mu.Unlock()
		for _, v := range batch {
			if !f(v) {
				return
			}
		}
	}
}
