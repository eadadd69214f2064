package sluicearikawa_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/diamondburned/arikawa/v3/api/webhook"
	"github.com/diamondburned/arikawa/v3/discord"
	"github.com/diamondburned/arikawa/v3/state"

	"github.com/sluicehq/sluice"
	sluicearikawa "github.com/sluicehq/sluice/integrations/arikawa"
	"github.com/sluicehq/sluice/sluicetest"
)

// Example sends a message, a reaction and a webhook execution with
// arikawa through Sluice, against the simulator. Against Discord, leave
// BaseURL and TLSConfig unset.
func Example() {
	srv, err := sluicetest.NewServer(sluicetest.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	lim, err := sluice.New(sluice.Options{
		Token:     "my-token",
		BaseURL:   srv.APIBase(),
		TLSConfig: srv.ClientTLSConfig(),
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close(context.Background())

	client := sluicearikawa.NewClient("Bot my-token", lim)
	msg, err := client.SendMessage(1000, "hello")
	if err != nil {
		panic(err)
	}
	fmt.Println("sent:", msg.Content)
	if err := client.React(1000, msg.ID, discord.APIEmoji("👍")); err != nil {
		panic(err)
	}

	hook := sluicearikawa.NewWebhookClient(42, "webhook-token", lim)
	hm, err := hook.ExecuteAndWait(webhook.ExecuteData{Content: "from a webhook"})
	if err != nil {
		panic(err)
	}
	fmt.Println("executed:", hm.Content)

	// A call that could not be sent within a second fails at once, and
	// Sluice's error is found through arikawa's.
	for range 4 {
		if _, err := client.SendMessage(1000, "filling the window"); err != nil {
			panic(err)
		}
	}
	ctx := sluice.WithMaxWait(context.Background(), time.Second)
	_, err = client.WithContext(ctx).SendMessage(1000, "one too many")
	var we *sluice.WaitError
	fmt.Println("wait error:", errors.As(err, &we))

	st := srv.Stats()
	fmt.Println("requests:", st.Requests, "429s:", len(st.RateLimited), "violations:", len(st.Violations()))
	// Output:
	// sent: hello
	// executed: from a webhook
	// wait error: true
	// requests: 7 429s: 0 violations: 0
}

// ExampleApply switches the client of a State made by arikawa's own
// constructor to Sluice, before its first request.
func ExampleApply() {
	srv, err := sluicetest.NewServer(sluicetest.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	lim, err := sluice.New(sluice.Options{Token: "my-token", BaseURL: srv.APIBase(), TLSConfig: srv.ClientTLSConfig()})
	if err != nil {
		panic(err)
	}
	defer lim.Close(context.Background())

	s := state.New("Bot my-token")
	sluicearikawa.Apply(s.Client, lim)

	msg, err := s.SendMessage(1000, "through the state")
	if err != nil {
		panic(err)
	}
	fmt.Println(msg.Content)
	// Output:
	// through the state
}
