package sluicediscordgo_test

import (
	"context"
	"slices"
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

// A priority reaches the limiter through discordgo in the request's
// context (discordgo.WithContext): a message sent as interactive while a
// channel's bulk messages wait is answered ahead of most of them.
func TestPriorityThroughDiscordgo(t *testing.T) {
	srv := startServer(t, sluicetest.Options{Rules: scaled()})
	lim := startLimiter(t, srv, nil)
	s, _ := newSession(t, lim)
	ch := channelID(0)
	_, err := s.ChannelMessageSend(ch, "warm") // the channel's bucket known
	require.NoError(t, err)

	const bulk = 15
	var (
		mu       sync.Mutex
		order    []string
		answered atomic.Int32
		wg       sync.WaitGroup
	)
	send := func(content string, p sluice.Priority) {
		defer wg.Done()
		_, err := s.ChannelMessageSend(ch, content, discordgo.WithContext(sluice.WithPriority(context.Background(), p)))
		assert.NoError(t, err, content)
		mu.Lock()
		order = append(order, content)
		mu.Unlock()
		answered.Add(1)
	}
	for i := range bulk {
		wg.Add(1)
		go send("bulk "+string(rune('a'+i)), sluice.PriorityBulk)
	}
	// Every bulk message reached the limiter before the interaction.
	require.Eventually(t, func() bool {
		snap, err := lim.Snapshot(context.Background())
		return err == nil && len(snap.Requests)+int(answered.Load()) >= bulk
	}, 10*time.Second, time.Millisecond)
	wg.Add(1)
	send("interactive", sluice.PriorityInteractive)
	wg.Wait()
	t.Logf("answer order: %v", order)
	// The channel sends 5 per 500 ms: the interaction goes in the window
	// after the one under way, not behind all fifteen.
	assert.Less(t, slices.Index(order, "interactive"), 10, "%v", order)
}
