package sluicedisgo_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestFaultsDeliverEveryMessageOnce sends 60 messages over 6 channels with
// disgo's CreateMessage while the simulator answers 5% of requests with a
// 502 and drops the connection of 2% after creating their message. Sluice
// resends them with the nonce it added; disgo sends each call exactly once
// (its http.Client's transport is called once per call), every call
// succeeds, and every message is created once.
//
// Sluice's MaxErrorRetries is raised from 2 to 10: with faults this dense a
// message meeting three in a row (about 0.07³ per message, and a drop takes
// the other requests of its connection with it) would fail the run, not
// show anything about disgo.
func TestFaultsDeliverEveryMessageOnce(t *testing.T) {
	srv := newServer(t, sluicetest.Options{
		Rules:  sluicetest.DefaultRules().Scaled(0.1),
		Faults: sluicetest.Faults{Latency: 10 * time.Millisecond, ServerErrorRate: 0.05, DropRate: 0.02},
	})
	lim := newLimiter(t, srv, func(o *sluice.Options) { o.MaxErrorRetries = 10 })
	r, calls := newRest(t, lim)

	l := load{Channels: 6, Messages: 60}
	out := runDisgo(t.Context(), r, l)
	require.Empty(t, out.Errors, "every call succeeds")

	st := srv.Stats()
	sluicetest.AssertNoViolations(t, st)
	sluicetest.AssertNoDuplicateMessages(t, st)
	assert.Equal(t, l.Messages, st.MessagesCreated, "messages created")
	assert.Zero(t, st.DuplicateMessages)
	assert.EqualValues(t, l.Messages, calls.n.Load(), "disgo resent a call")
	t.Logf("%d messages in %s; %s", l.Messages, out.Elapsed.Round(time.Millisecond), st.Summary())
}
