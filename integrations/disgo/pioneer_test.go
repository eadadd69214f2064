package sluicedisgo_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicedisgo "github.com/sluicehq/sluice/integrations/disgo"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestFirstReactionAfterSaturatedChannel shows a cost of Sluice itself, not
// of disgo (lim.Do shows it the same way): the first request of a route
// Sluice never saw answered (here PUT .../reactions/{emoji}/@me) "goes
// alone, holding a slot in each known bucket of the channel it might
// share", so when the channel's create_message bucket is exhausted, the
// first reaction waits for that bucket's window to end (5 s with Discord's
// rules) although Discord gives reactions a bucket of their own. In the
// measured load (30 messages, then reactions) this costs Sluice a whole
// message window: 11.0 s against 9.6 s for disgo alone at real windows
// (README.md). It is skipped because it fails on the current Sluice; run it
// with SLUICE_PIONEER=1.
func TestFirstReactionAfterSaturatedChannel(t *testing.T) {
	if os.Getenv("SLUICE_PIONEER") != "1" {
		t.Skip("fails on the current Sluice (a new route waits for the channel's exhausted buckets); SLUICE_PIONEER=1 runs it")
	}
	srv := newServer(t, sluicetest.Options{}) // Discord's windows: 5 messages per 5 s
	lim := newLimiter(t, srv, nil)
	r, _ := newRest(t, lim)
	saturate(t, r)

	began := time.Now()
	require.NoError(t, r.AddReaction(channel(0), 300000000000000001, emoji, sluicedisgo.WithContext(t.Context())))
	took := time.Since(began)
	t.Logf("first reaction on the saturated channel took %s", took.Round(time.Millisecond))
	requireClean(t, srv.Stats())
	assert.Less(t, took, time.Second, "the reaction waited for the message bucket's window")
}
