package sluice_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// Load reads a limiter's load without a message to its actors: cheap
// enough for every metrics scrape or health check.
func ExampleLimiter_Load() {
	srv, lim := exampleSimulator(sluicetest.RuleSet{})
	defer srv.Close()
	defer lim.Close(context.Background())

	req, _ := http.NewRequest("POST", "/channels/123/messages", strings.NewReader(`{"content":"hello"}`))
	req.Header.Set("Content-Type", "application/json")
	if _, err := lim.Do(context.Background(), req); err != nil {
		panic(err)
	}
	ld := lim.Load()
	fmt.Println(ld.State, "pending", ld.Pending, "buckets", ld.Buckets)
	for _, w := range ld.Windows {
		fmt.Println(w.Name, "used", w.Used, "of", w.Limit)
	}
	// Output:
	// connected pending 0 buckets 1
	// bot used 1 of 50
	// ip used 0 of 50
}

// TestLoadFollowsTheRequests: while requests wait for their bucket, Load
// counts them pending, as Snapshot counts them queued; afterwards none
// pending or running, the connection up, the global window open.
func TestLoadFollowsTheRequests(t *testing.T) {
	srv, lim := exampleSimulator(sluicetest.RuleSet{})
	defer srv.Close()
	defer lim.Close(context.Background())
	ld := lim.Load()
	assert.Equal(t, 0, ld.Pending)
	assert.Equal(t, 9000, ld.InvalidLeft, "the default budget, untouched")
	assert.Nil(t, ld.Shared, "no Redis")

	// Seven messages to one channel (5 per 5 s): two wait for the next
	// window, and are pending meanwhile.
	var wg sync.WaitGroup
	futures := make([]*sluice.Future, 7)
	for i := range futures {
		req, _ := http.NewRequest("POST", "/channels/9/messages", strings.NewReader(`{"content":"x"}`))
		req.Header.Set("Content-Type", "application/json")
		futures[i] = lim.Send(context.Background(), req)
	}
	for _, f := range futures[:5] {
		<-f.Done()
	}
	ld = lim.Load()
	assert.Equal(t, 2, ld.Pending, "the two requests of the next window")
	snap, err := lim.Snapshot(context.Background())
	require.NoError(t, err)
	assert.Equal(t, snap.Buckets[0].Queued, 2)
	for _, f := range futures {
		wg.Add(1)
		go func() { defer wg.Done(); _, err := f.Await(context.Background()); assert.NoError(t, err) }()
	}
	wg.Wait()
	ld = lim.Load()
	assert.Equal(t, 0, ld.Pending)
	assert.Equal(t, 0, ld.Running)
	assert.Equal(t, "connected", ld.State)
	require.Len(t, ld.Windows, 2)
	assert.Equal(t, "bot", ld.Windows[0].Name)
	assert.Equal(t, 50, ld.Windows[0].Limit)
	// How many of the seven are still within the 1 s window depends on the
	// time since they went: at most all of them.
	assert.LessOrEqual(t, ld.Windows[0].Used, 7)
	assert.Equal(t, "open", ld.Windows[0].State)
}
