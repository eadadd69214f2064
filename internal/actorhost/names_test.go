package actorhost

import (
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spawnChildren asks a parent actor to spawn n children named by its Namer.
type spawnChildren struct{ n int }

// parent spawns the children it is asked for, as the supervisor spawns
// bucket actors: ctx.SpawnNamed with the Namer's next name under its id.
type parent struct{ names Namer }

func (p *parent) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(spawnChildren); ok {
		props := actor.PropsFromFunc(func(actor.Context) {}, actor.WithMailbox(Mailbox))
		for range m.n {
			if _, err := ctx.SpawnNamed(props, p.names.Next(ctx.Self().Id)); err != nil {
				ctx.Respond(err)
				return
			}
		}
		ctx.Respond(m.n)
	}
}

// TestRegistrySlices: protoactor's process registry has the slices the
// names are drawn for, and every child named by a Namer is kept in one of
// the first RegistryUsed of them. Fails when a protoactor upgrade changes
// the registry's layout or how it picks a slice. (That the supervisor
// names bucket actors with a Namer is checked in package actors,
// TestBucketActorsRegistrySlices.)
func TestRegistrySlices(t *testing.T) {
	as := Acquire()
	defer Release()
	reg := as.ProcessRegistry.LocalPIDs
	require.Len(t, reg.LocalPIDs, RegistrySlices, "protoactor's registry layout changed: update RegistrySlices")

	pid := as.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return &parent{} }))
	defer func() { require.NoError(t, as.Root.PoisonFuture(pid).Wait()) }()
	res, err := as.Root.RequestFuture(pid, spawnChildren{200}, 10*time.Second).Result()
	require.NoError(t, err)
	require.Equal(t, 200, res)

	children := 0
	for i, m := range reg.LocalPIDs {
		for _, id := range m.Keys() {
			if !strings.HasPrefix(id, pid.Id+"/") {
				continue // the parent, futures
			}
			children++
			assert.Less(t, i, RegistryUsed, "child %s in registry slice %d", id, i)
			assert.Equal(t, i, Slice([]byte(id)))
		}
	}
	assert.Equal(t, 200, children, "every child found in the registry")
}

func TestNamerNames(t *testing.T) {
	var nm Namer
	seen := map[string]bool{}
	for range 1000 {
		name := nm.Next("$7")
		require.True(t, strings.HasPrefix(name, "b"), name)
		require.False(t, seen[name], "names are unique: %s", name)
		seen[name] = true
		assert.Less(t, Slice([]byte("$7/"+name)), RegistryUsed)
	}
	// About RegistrySlices/RegistryUsed counter values per name.
	assert.InDelta(t, float64(RegistrySlices/RegistryUsed), float64(nm.n)/1000, 8)
}

// TestNamerPerParent: a name is drawn for its parent's id: the same
// counter gives names whose full ids all land in the first slices, under
// either parent.
func TestNamerPerParent(t *testing.T) {
	var nm Namer
	for i := range 100 {
		parent := "$" + string(rune('1'+i%9))
		name := nm.Next(parent)
		assert.Less(t, Slice([]byte(parent+"/"+name)), RegistryUsed, "%s/%s", parent, name)
	}
}

// BenchmarkNamerNext: what drawing a name costs a spawn.
func BenchmarkNamerNext(b *testing.B) {
	var nm Namer
	for b.Loop() {
		_ = nm.Next("$12")
	}
}
