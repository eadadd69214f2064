package actors

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRegistrySlices: protoactor's process registry has the slices the
// names are drawn for, and every live bucket actor's id is kept in one of
// the first registryUsed of them (see spawn.go). Fails when a protoactor
// upgrade changes the registry's layout, or when bucket actors are named
// without the namer.
func TestRegistrySlices(t *testing.T) {
	sys, _ := startWith(t, channelRules(), func(c *Config) {
		c.IdleAfter = time.Hour // every bucket actor stays registered until Close
	})
	reg := sys.actors.ProcessRegistry.LocalPIDs
	require.Len(t, reg.LocalPIDs, registrySlices, "protoactor's registry layout changed: update registrySlices")

	var calls []*Call
	for i := range 200 {
		calls = append(calls, submit(sys, "GET", fmt.Sprintf("/channels/%d/messages/1", 1000+i)))
	}
	for _, c := range calls {
		<-c.Done()
		resp, err := c.Result()
		require.NoError(t, err)
		resp.Body.Close()
	}
	buckets := 0
	for i, m := range reg.LocalPIDs {
		for _, id := range m.Keys() {
			if !strings.Contains(id, "/b") {
				continue // the supervisor, futures and other systems' actors
			}
			buckets++
			assert.Less(t, i, registryUsed, "bucket actor %s in registry slice %d", id, i)
			assert.Equal(t, i, registrySlice([]byte(id)))
		}
	}
	assert.GreaterOrEqual(t, buckets, 200, "every bucket actor found in the registry")
}

func TestNamerNames(t *testing.T) {
	var nm namer
	seen := map[string]bool{}
	for range 1000 {
		name := nm.next("$7")
		require.True(t, strings.HasPrefix(name, "b"), name)
		require.False(t, seen[name], "names are unique: %s", name)
		seen[name] = true
		assert.Less(t, registrySlice([]byte("$7/"+name)), registryUsed)
	}
	// About registrySlices/registryUsed counter values per name.
	assert.InDelta(t, float64(registrySlices/registryUsed), float64(nm.n)/1000, 8)
}

// BenchmarkNamerNext: what drawing a name costs a spawn.
func BenchmarkNamerNext(b *testing.B) {
	var nm namer
	for b.Loop() {
		_ = nm.next("$12")
	}
}
