package actors

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/actorhost"
)

// TestBucketActorsRegistrySlices: every live bucket actor's id is kept in
// one of the first actorhost.RegistryUsed slices of protoactor's process
// registry (see internal/actorhost, whose TestRegistrySlices checks the
// registry's layout). Fails when bucket actors are named without the
// supervisor's actorhost.Namer.
func TestBucketActorsRegistrySlices(t *testing.T) {
	sys, _ := startWith(t, channelRules(), func(c *Config) {
		c.IdleAfter = time.Hour // every bucket actor stays registered until Close
	})
	reg := sys.actors.ProcessRegistry.LocalPIDs

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
			assert.Less(t, i, actorhost.RegistryUsed, "bucket actor %s in registry slice %d", id, i)
			assert.Equal(t, i, actorhost.Slice([]byte(id)))
		}
	}
	assert.GreaterOrEqual(t, buckets, 200, "every bucket actor found in the registry")
}
