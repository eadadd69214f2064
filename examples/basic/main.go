// Command basic sends a burst of Discord messages through a Sluice limiter
// to the Sluice simulator, in the same process, and shows that the
// simulator answered none of them with a 429.
//
//	go run ./examples/basic [-messages 100] [-channels 20]
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// main starts the simulator with Discord's rules, points a limiter at it
// and sends every message at once with DoBatch. Each channel's bucket
// allows 5 messages per 5 s and the bot 50 requests per second, so the
// default 100 messages over 20 channels go out as 50 at once and 50 one
// second later: a little over 1 s, the fastest the rules allow.
func main() {
	messages := flag.Int("messages", 100, "messages to send")
	channels := flag.Int("channels", 20, "channels to spread them over")
	flag.Parse()

	srv, err := sluicetest.NewServer(sluicetest.Options{}) // Discord's rules on a random port
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	lim, err := sluice.New(sluice.Options{
		BaseURL:   srv.APIBase(),         // leave empty for https://discord.com/api/v10
		Token:     "my-bot-token",        // your bot token
		TLSConfig: srv.ClientTLSConfig(), // trust the simulator's certificate
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close(context.Background())

	var reqs []*http.Request
	for i := range *messages {
		path := fmt.Sprintf("/channels/%d/messages", 1000+i%max(*channels, 1))
		req, _ := http.NewRequest("POST", path, strings.NewReader(fmt.Sprintf(`{"content":"message %d"}`, i)))
		req.Header.Set("Content-Type", "application/json")
		reqs = append(reqs, req)
	}

	began := time.Now()
	ok := 0
	for _, r := range lim.DoBatch(context.Background(), reqs) {
		if r.Err == nil && r.Response.StatusCode == http.StatusOK {
			ok++
		}
	}
	elapsed := time.Since(began)

	st := srv.Stats()
	fmt.Printf("%d of %d messages sent in %s\n", ok, len(reqs), elapsed.Round(time.Millisecond))
	fmt.Printf("429s from the simulator: %d, violations: %d\n", st.ByStatus[http.StatusTooManyRequests], len(st.Violations()))
	fmt.Println("simulator:", st.Summary())
}
