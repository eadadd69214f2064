package actors

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/actorhost"
	"github.com/sluicehq/sluice/internal/workers"
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

// TestDispatcherRunsMailboxesOnThePool: a mailbox's run goes to an idle
// worker of the System's pool when one waits (the pool's Wait then waits
// for it), and otherwise, or once the pool is stopped (Close), runs on a
// goroutine of its own, starting no worker.
func TestDispatcherRunsMailboxesOnThePool(t *testing.T) {
	closedOn := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	waitFor := func(s *System) chan struct{} {
		waited := make(chan struct{})
		go func() { s.workers.Wait(); close(waited) }()
		synctest.Wait()
		return waited
	}
	synctest.Test(t, func(t *testing.T) {
		s := &System{}
		done := make(chan struct{})
		s.workers = workers.New(func(j job) { j.run(s) }, func(any) {}, time.Hour, done)
		d := dispatcher{s}
		var ran atomic.Int32

		// No idle worker: its own goroutine, and the pool starts none.
		release0 := make(chan struct{})
		d.Schedule(func() { <-release0; ran.Add(1) })
		synctest.Wait()
		assert.True(t, closedOn(waitFor(s)), "a worker was started for a mailbox's run")
		close(release0)

		// An idle worker: it takes the run.
		require.True(t, s.workers.Go(job{f: func() {}}))
		synctest.Wait() // the worker waits for work
		release1 := make(chan struct{})
		d.Schedule(func() { <-release1; ran.Add(1) })
		synctest.Wait()
		assert.False(t, s.workers.Lend(job{f: func() {}}), "the pool's one worker is not busy with the run")
		close(done) // an idle worker would exit now
		waited := waitFor(s)
		assert.False(t, closedOn(waited), "the pool's Wait returned while its worker runs the mailbox")
		close(release1)
		synctest.Wait()
		assert.True(t, closedOn(waited), "the worker exits once its run is over")
		assert.Equal(t, int32(2), ran.Load(), "each run once")
		assert.Equal(t, 300, d.Throughput(), "protoactor's default")
	})
	synctest.Test(t, func(t *testing.T) {
		s := &System{}
		done := make(chan struct{})
		s.workers = workers.New(func(j job) { j.run(s) }, func(any) {}, time.Hour, done)
		d := dispatcher{s}
		require.True(t, s.workers.Go(job{f: func() {}}))
		synctest.Wait() // a worker waits for work

		// Stopped: its own goroutine, though a worker is idle.
		s.workers.Stop()
		var ran atomic.Int32
		release := make(chan struct{})
		d.Schedule(func() { <-release; ran.Add(1) })
		close(done)
		assert.True(t, closedOn(waitFor(s)), "the run after Stop went to the pool's worker")
		close(release)
		synctest.Wait()
		assert.Equal(t, int32(1), ran.Load(), "the run after Stop ran")
	})
}
