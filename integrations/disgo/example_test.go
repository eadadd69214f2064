package sluicedisgo_test

import (
	"context"
	"fmt"
	"time"

	"github.com/disgoorg/disgo/discord"
	"github.com/disgoorg/disgo/rest"

	"github.com/sluicehq/sluice"
	sluicedisgo "github.com/sluicehq/sluice/integrations/disgo"
	"github.com/sluicehq/sluice/sluicetest"
)

// Example sends disgo's REST calls through Sluice, against the simulator.
// Against Discord, leave BaseURL and TLSConfig unset.
func Example() {
	srv, err := sluicetest.NewServer(sluicetest.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	const token = "MTIzNDU2Nzg5MDEyMzQ1Njc4.simulated.token"
	lim, err := sluice.New(sluice.Options{
		BaseURL:   srv.APIBase(),
		TLSConfig: srv.ClientTLSConfig(),
		Token:     token,
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close(context.Background())

	// The wiring: disgo's limiter and retries off, Sluice as the transport.
	client := rest.New(rest.NewClient(token, sluicedisgo.ConfigOpts(lim)...))
	defer client.Close(context.Background())

	// WithContext, not rest.WithCtx: the deadline then reaches Sluice.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		msg, err := client.CreateMessage(100000000000000001, discord.MessageCreate{
			Content: fmt.Sprintf("hello %d", i+1),
		}, sluicedisgo.WithContext(ctx))
		if err != nil {
			panic(err)
		}
		fmt.Println(msg.Content)
	}
	st := srv.Stats()
	fmt.Printf("429s: %d, violations: %d\n", len(st.RateLimited), len(st.Violations()))
	// Output:
	// hello 1
	// hello 2
	// hello 3
	// 429s: 0, violations: 0
}
