package sluicediscordgo_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestFaultsDeliverEveryMessageOnce sends 60 messages over 6 channels with
// discordgo while the simulator answers 5% of requests with a 502 and drops
// the connection of 2% after creating their message. Every call succeeds,
// every message is created once, and discordgo hands each call to the
// transport exactly once: the resends are Sluice's, with the nonce it adds,
// none is discordgo's.
func TestFaultsDeliverEveryMessageOnce(t *testing.T) {
	const channels, perChannel = 6, 10
	srv := startServer(t, sluicetest.Options{
		Rules:  scaled(),
		Faults: sluicetest.Faults{ServerErrorRate: 0.05, DropRate: 0.02, Latency: 10 * time.Millisecond},
		// The dice are rolled per request in arrival order: with this seed
		// the first 60 requests meet six 502s and three drops, so every
		// run has faults of both kinds.
		Seed: 21,
	})
	// As the root module's fault test: enough error retries that a message
	// meeting several faults in a row is still delivered.
	lim := startLimiter(t, srv, func(o *sluice.Options) { o.MaxErrorRetries = 10 })
	s, rt := newSession(t, lim)

	var (
		wg  sync.WaitGroup
		ok  atomic.Int64
		ids sync.Map
	)
	for i := range channels * perChannel {
		ch := channelID(i % channels)
		wg.Go(func() {
			m, err := s.ChannelMessageSend(ch, fmt.Sprintf("message %d", i))
			if assert.NoError(t, err) {
				ok.Add(1)
				ids.Store(m.ID, true)
			}
		})
	}
	wg.Wait()

	st := srv.Stats()
	n := channels * perChannel
	assert.Equal(t, int64(n), ok.Load(), "every call succeeded")
	assert.Equal(t, n, st.MessagesCreated, "each message created once")
	assert.Zero(t, st.DuplicateMessages)
	sluicetest.AssertNoDuplicateMessages(t, st)
	sluicetest.AssertNoViolations(t, st)
	assert.Equal(t, n, rt.count(), "one round trip per call: discordgo resent nothing")
	var distinct int
	ids.Range(func(any, any) bool { distinct++; return true })
	assert.Equal(t, n, distinct)
	assert.Positive(t, st.ServerErrors, "502s injected")
	assert.Positive(t, st.Dropped, "connections dropped")
	t.Logf("%d messages: 502s %d, drops %d, deduplicated resends %d; %s", n, st.ServerErrors, st.Dropped, st.MessagesDeduplicated, st.Summary())
}

// TestDiscordgoDefaultsResend is the reason for MaxRestRetries = 0: with
// discordgo's default (3), a webhook execution answered 502 (which Sluice
// does not resend: it has no nonce and may have been processed) is sent
// again by discordgo, up to three more times. With Apply's setting, each
// call is one round trip and the 502 is returned.
func TestDiscordgoDefaultsResend(t *testing.T) {
	const calls = 12
	run := func(t *testing.T, maxRestRetries int) (roundTrips, failed int) {
		srv := startServer(t, sluicetest.Options{
			Rules:  scaled(),
			Faults: sluicetest.Faults{ServerErrorRate: 0.5},
			Seed:   42,
		})
		lim := startLimiter(t, srv, nil)
		s, rt := newSession(t, lim)
		s.MaxRestRetries = maxRestRetries
		for i := range calls {
			_, err := s.WebhookExecute(hookID, hookToken, true, &discordgo.WebhookParams{Content: fmt.Sprint("hook ", i)})
			if err != nil {
				failed++
			}
		}
		st := srv.Stats()
		sluicetest.AssertNoViolations(t, st)
		t.Logf("MaxRestRetries %d: %d calls, %d round trips, %d failed; 502s %d", maxRestRetries, calls, rt.count(), failed, st.ServerErrors)
		return rt.count(), failed
	}
	t.Run("discordgo default", func(t *testing.T) {
		n, _ := run(t, 3)
		assert.Greater(t, n, calls, "discordgo resent requests answered 502")
	})
	t.Run("Apply", func(t *testing.T) {
		n, failed := run(t, 0)
		assert.Equal(t, calls, n, "one round trip per call")
		require.Positive(t, failed, "the 502s are returned (half the calls meet one)")
	})
}
