package sluicediscordgo_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// maxRatio is the most discordgo through Apply may take over Sluice alone
// on the same load: the bound.
const maxRatio = 1.05

// TestPipeliningOnASaturatedChannel sends 20 messages to one channel at
// once (four windows of 5 per 500 ms) at 100 ms and 150 ms of latency, with
// Sluice alone (lim.Do), with discordgo through Apply and with discordgo on
// a plain &http.Client{Transport: lim}:
//
//   - through Apply, Sluice has several of the channel's messages in flight
//     (MaxInFlight > 1 at the simulator) and takes at most maxRatio the time
//     of Sluice alone;
//   - on the plain transport, discordgo's bucket lock lets one message at a
//     time out (MaxInFlight == 1); the time it costs is logged (README.md
//     has the measured table).
//
// No run draws a 429.
func TestPipeliningOnASaturatedChannel(t *testing.T) {
	for _, latency := range []time.Duration{100 * time.Millisecond, 150 * time.Millisecond} {
		t.Run(fmt.Sprint(latency), func(t *testing.T) {
			ld := load{Channels: 1, Messages: 20, Latency: latency, Rules: scaled()}
			alone := runLoad(t, sluiceAlone, ld)
			pipelined := runLoad(t, applied, ld)
			plain := runLoad(t, plainTransport, ld)
			for _, o := range []outcome{alone, pipelined, plain} {
				assert.Zero(t, o.Failed)
				no429s(t, o.Stats)
				assert.Equal(t, ld.Messages, o.Stats.MessagesCreated)
			}
			ratio := float64(pipelined.Elapsed) / float64(alone.Elapsed)
			plainRatio := float64(plain.Elapsed) / float64(alone.Elapsed)
			t.Logf("%s latency, 20 messages to one channel: Sluice alone %s (in flight %d); Apply %s (%.3fx, in flight %d); plain transport %s (%.3fx, in flight %d)",
				latency, alone.Elapsed.Round(time.Millisecond), alone.MaxInFlight,
				pipelined.Elapsed.Round(time.Millisecond), ratio, pipelined.MaxInFlight,
				plain.Elapsed.Round(time.Millisecond), plainRatio, plain.MaxInFlight)

			assert.Greater(t, pipelined.MaxInFlight, 1, "Apply: the channel's messages are pipelined")
			assert.LessOrEqual(t, ratio, maxRatio, "Apply vs Sluice alone")
			assert.Equal(t, 1, plain.MaxInFlight, "plain transport: discordgo's bucket lock sends one at a time")
		})
	}
}
