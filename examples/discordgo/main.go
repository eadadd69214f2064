// Command discordgo sends messages with github.com/bwmarrin/discordgo
// through a Sluice limiter, against the Sluice simulator running in the
// same process, and prints what the simulator saw.
//
// The wiring is two lines: point the limiter at the API and apply it to the
// session with the discordgo integration (integrations/discordgo), which
// makes it the transport of discordgo's HTTP client, keeps discordgo's
// per-URL lock from serialising a channel, and switches discordgo's own
// resends off.
//
//	lim, _ := sluice.New(sluice.Options{Token: token})
//	sluicediscordgo.Apply(session, lim)
//
// discordgo builds absolute https://discord.com/api/v9/... URLs; the limiter
// keeps their path and sends them to its BaseURL's host, so here they reach
// the simulator, which serves /api/v9 as well as /api/v10.
//
// Run it with
//
//	go run . [-messages 30] [-channels 3] [-scale 1]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/sluicehq/sluice"
	sluicediscordgo "github.com/sluicehq/sluice/integrations/discordgo"
	"github.com/sluicehq/sluice/sluicetest"
)

// token is the bot token; the simulator accepts any token.
const token = "test-token"

// config is what one run sends, and to what.
type config struct {
	// Messages is the number of messages, spread round-robin over Channels
	// channels.
	Messages, Channels int
	// Rules are the simulator's limits; empty means Discord's (5 messages
	// per 5 s per channel, 50 requests per second in all).
	Rules sluicetest.RuleSet
}

// report is the outcome of a run.
type report struct {
	Sent, Failed int
	Elapsed      time.Duration
	Stats        sluicetest.Stats
	// Errors holds the first few errors discordgo returned.
	Errors []error
}

// run starts the simulator and a limiter pointed at it, sends cfg.Messages
// messages with discordgo's ChannelMessageSend, all at once, and closes
// everything before it returns.
func run(ctx context.Context, cfg config) (rep report, err error) {
	// The simulator stands in for https://discord.com.
	srv, err := sluicetest.NewServer(sluicetest.Options{Rules: cfg.Rules})
	if err != nil {
		return rep, err
	}
	defer srv.Close()

	// One limiter per bot token. Against the real API, leave BaseURL and
	// TLSConfig unset.
	lim, err := sluice.New(sluice.Options{
		BaseURL:   srv.APIBase(),
		Token:     token,
		TLSConfig: srv.ClientTLSConfig(),
	})
	if err != nil {
		return rep, err
	}
	defer func() {
		if cerr := lim.Close(context.Background()); err == nil {
			err = cerr
		}
	}()

	session, err := discordgo.New("Bot " + token)
	if err != nil {
		return rep, err
	}
	// Every REST call of the session now goes through Sluice, several per
	// channel at once; discordgo sends each call once (Sluice resends what
	// is safe to resend and waits out 429s). Each call's deadline comes
	// from its context (discordgo.WithContext) or Options.Timeout.
	sluicediscordgo.Apply(session, lim)

	var (
		wg        sync.WaitGroup
		sent      atomic.Int64
		mu        sync.Mutex
		errs      []error
		failed    int
		began     = time.Now()
		reqOption = discordgo.WithContext(ctx)
	)
	for i := range cfg.Messages {
		channel := fmt.Sprint(1000 + i%cfg.Channels)
		wg.Go(func() {
			_, err := session.ChannelMessageSend(channel, fmt.Sprintf("message %d", i), reqOption)
			if err == nil {
				sent.Add(1)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			failed++
			if len(errs) < 5 {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()

	rep.Elapsed = time.Since(began)
	rep.Sent, rep.Failed, rep.Errors = int(sent.Load()), failed, errs
	rep.Stats = srv.Stats()
	// A REST-only session opens no gateway; call session.Close() if you
	// called session.Open().
	return rep, nil
}

// main parses the flags, runs once and prints the simulator's verdict. It
// exits 1 if a message failed or the simulator saw a violation.
func main() {
	messages := flag.Int("messages", 30, "messages to send")
	channels := flag.Int("channels", 3, "channels to spread them over")
	scale := flag.Float64("scale", 1, "multiply the simulator's bucket windows by this (0.1 runs ten times faster)")
	flag.Parse()
	if *messages < 0 || *channels < 1 || *scale <= 0 {
		fmt.Fprintln(os.Stderr, "need -messages >= 0, -channels >= 1 and -scale > 0")
		os.Exit(2)
	}

	rep, err := run(context.Background(), config{
		Messages: *messages, Channels: *channels,
		Rules: sluicetest.DefaultRules().Scaled(*scale),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	fmt.Printf("sent %d of %d messages to %d channels in %s\n", rep.Sent, *messages, *channels, rep.Elapsed.Round(time.Millisecond))
	for _, e := range rep.Errors {
		fmt.Println("error:", e)
	}
	fmt.Println("simulator:", rep.Stats.Summary())
	v := rep.Stats.Violations()
	fmt.Printf("violations: %d\n", len(v))
	for _, s := range v {
		fmt.Println("  ", s)
	}
	if rep.Failed > 0 || len(v) > 0 {
		os.Exit(1)
	}
}
