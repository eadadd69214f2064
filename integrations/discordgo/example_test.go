package sluicediscordgo_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/sluicehq/sluice"
	sluicediscordgo "github.com/sluicehq/sluice/integrations/discordgo"
	"github.com/sluicehq/sluice/sluicetest"
)

// Example wires a discordgo session to a limiter and sends ten messages to
// one channel at once, against the simulator standing in for discord.com
// (against the real API, leave BaseURL and TLSConfig unset).
func Example() {
	srv, err := sluicetest.NewServer(sluicetest.Options{
		Rules:  sluicetest.DefaultRules().Scaled(0.1), // 5 messages per 500 ms per channel
		Faults: sluicetest.Faults{Latency: 50 * time.Millisecond},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	const token = "my-bot-token"
	lim, err := sluice.New(sluice.Options{BaseURL: srv.APIBase(), TLSConfig: srv.ClientTLSConfig(), Token: token})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lim.Close(context.Background())

	session, err := discordgo.New("Bot " + token)
	if err != nil {
		fmt.Println(err)
		return
	}
	sluicediscordgo.Apply(session, lim)

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		sent int
	)
	for i := range 10 {
		wg.Go(func() {
			if _, err := session.ChannelMessageSend("1100000000000000001", fmt.Sprint("hello ", i)); err == nil {
				mu.Lock()
				sent++
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	st := srv.Stats()
	fmt.Printf("sent %d messages, %d created, %d 429s, %d violations\n", sent, st.MessagesCreated, len(st.RateLimited), len(st.Violations()))
	fmt.Println("pipelined:", st.Buckets[0].MaxInFlight > 1)
	// Output:
	// sent 10 messages, 10 created, 0 429s, 0 violations
	// pipelined: true
}
