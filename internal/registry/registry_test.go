package registry

import (
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type item struct{ id uint64 }

func TestAddGetRemove(t *testing.T) {
	var s Sharded[*item]
	_, ok := s.Get(1)
	assert.False(t, ok, "empty")
	s.Remove(1) // nothing there: nothing happens

	a, b := &item{1}, &item{1 + Shards} // the same shard
	s.Add(a.id, a)
	s.Add(b.id, b)
	got, ok := s.Get(1)
	require.True(t, ok)
	assert.Same(t, a, got)
	got, _ = s.Get(1 + Shards)
	assert.Same(t, b, got)

	c := &item{1}
	s.Add(1, c)
	got, _ = s.Get(1)
	assert.Same(t, c, got, "Add replaces")

	s.Remove(1)
	_, ok = s.Get(1)
	assert.False(t, ok)
	got, ok = s.Get(1 + Shards)
	assert.True(t, ok, "its neighbour in the shard stays")
	assert.Same(t, b, got)
}

func collect(s *Sharded[*item]) map[uint64]bool {
	seen := map[uint64]bool{}
	s.Each(func(it *item) bool {
		seen[it.id] = true
		return true
	})
	return seen
}

func TestEach(t *testing.T) {
	var s Sharded[*item]
	assert.Empty(t, collect(&s))
	want := map[uint64]bool{}
	for id := range uint64(100) {
		s.Add(id, &item{id})
		want[id] = true
	}
	assert.Equal(t, want, collect(&s), "every value once")

	// f may remove what it is given (Close completes calls): no lock is
	// held while it runs.
	n := 0
	s.Each(func(it *item) bool {
		s.Remove(it.id)
		n++
		return true
	})
	assert.Equal(t, 100, n)
	assert.Empty(t, collect(&s))
}

func TestEachStopsEarly(t *testing.T) {
	var s Sharded[*item]
	for id := range uint64(100) {
		s.Add(id, &item{id})
	}
	n := 0
	s.Each(func(*item) bool {
		n++
		return n < 3
	})
	assert.Equal(t, 3, n, "no call after f returned false")
}

// Concurrent adds, gets, removes and walks (run under -race): each
// goroutine's own values are there between its Add and its Remove, and
// only then.
func TestConcurrent(t *testing.T) {
	var s Sharded[*item]
	const goroutines, per = 8, 500
	var wg sync.WaitGroup
	for g := range uint64(goroutines) {
		wg.Go(func() {
			for i := range uint64(per) {
				id := g*per + i
				it := &item{id}
				s.Add(id, it)
				got, ok := s.Get(id)
				if !assert.True(t, ok) || !assert.Same(t, it, got) {
					return
				}
				if i%3 == 0 {
					s.Each(func(v *item) bool { return v.id%7 != 0 })
				}
				s.Remove(id)
				if _, ok := s.Get(id); !assert.False(t, ok) {
					return
				}
			}
		})
	}
	wg.Wait()
	assert.Empty(t, collect(&s))
}

// A shard fills one cache line, whatever V (a pointer or a word).
func TestShardSize(t *testing.T) {
	assert.Equal(t, uintptr(64), unsafe.Sizeof(shard[*item]{}))
	assert.Equal(t, uintptr(64), unsafe.Sizeof(shard[uint64]{}))
}
