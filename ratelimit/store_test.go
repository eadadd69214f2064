package ratelimit

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

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

			_, ok = s.Alias("GET /x ")
			assert.False(t, ok)
			s.SetAlias("GET /x ", "abc")
			h, ok := s.Alias("GET /x ")
			assert.True(t, ok)
			assert.Equal(t, "abc", h)
			s.SetAlias("GET /x ", "")
			_, ok = s.Alias("GET /x ")
			assert.False(t, ok)

			buckets, aliases := s.Len()
			assert.Zero(t, buckets)
			assert.Zero(t, aliases)
		})
	}
}

func TestMemoryStoreConcurrent(t *testing.T) {
	s := NewMemoryStore()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				k := fmt.Sprint(g, "/", i%10)
				s.Save(k, Bucket{Limit: i + 1})
				s.Load(k)
				s.SetAlias(k, "h")
				s.Alias(k)
				if i%3 == 0 {
					s.Delete(k)
				}
			}
		}()
	}
	wg.Wait()
	buckets, aliases := s.Len()
	assert.LessOrEqual(t, buckets, 80)
	assert.Equal(t, 80, aliases)
}
