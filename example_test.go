package sluice_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// exampleSimulator starts a simulated Discord API with the given rules (none
// means Discord's) and a limiter pointed at it, as an application would
// point one at https://discord.com/api/v10. The caller closes both.
func exampleSimulator(rules sluicetest.RuleSet) (*sluicetest.Server, *sluice.Limiter) {
	srv, err := sluicetest.NewServer(sluicetest.Options{Rules: rules})
	if err != nil {
		panic(err)
	}
	lim, err := sluice.New(sluice.Options{
		BaseURL:   srv.APIBase(),         // default: https://discord.com/api/v10
		Token:     "my-bot-token",        // sent as "Authorization: Bot my-bot-token"
		TLSConfig: srv.ClientTLSConfig(), // trust the simulator's self-signed certificate
	})
	if err != nil {
		panic(err)
	}
	return srv, lim
}

// echoedContent decodes the "content" field of a message the simulator echoed.
func echoedContent(resp *http.Response) string {
	defer resp.Body.Close()
	var m struct {
		Content string `json:"content"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return "undecodable: " + err.Error()
	}
	return m.Content
}

// New creates a limiter for one bot token; Do sends a request through it
// and waits for the answer. Relative URLs go below Options.BaseURL.
func ExampleNew() {
	srv, err := sluicetest.NewServer(sluicetest.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	lim, err := sluice.New(sluice.Options{
		BaseURL:   srv.APIBase(), // leave empty for https://discord.com/api/v10
		Token:     "my-bot-token",
		TLSConfig: srv.ClientTLSConfig(),
	})
	if err != nil {
		panic(err)
	}
	defer lim.Close(context.Background())

	req, _ := http.NewRequest("POST", "/channels/123/messages", strings.NewReader(`{"content":"hello"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := lim.Do(context.Background(), req)
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.StatusCode, echoedContent(resp))
	fmt.Println("limit", resp.Header.Get("X-RateLimit-Limit"), "remaining", resp.Header.Get("X-RateLimit-Remaining"))
	// Output:
	// 200 hello
	// limit 5 remaining 4
}

// Send returns a future at once; the request is queued on its bucket and
// sent when the limits allow. Await waits for the outcome.
func ExampleLimiter_Send() {
	srv, lim := exampleSimulator(sluicetest.RuleSet{})
	defer srv.Close()
	defer lim.Close(context.Background())

	var futures []*sluice.Future
	for _, ch := range []string{"10", "20", "30"} {
		req, _ := http.NewRequest("POST", "/channels/"+ch+"/messages", strings.NewReader(`{"content":"to `+ch+`"}`))
		futures = append(futures, lim.Send(context.Background(), req))
	}
	// All three are on their way; do other work here, then collect them.
	for _, f := range futures {
		resp, err := f.Await(context.Background())
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println(resp.StatusCode, echoedContent(resp))
	}
	// Output:
	// 200 to 10
	// 200 to 20
	// 200 to 30
}

// DoBatch sends many requests at once and returns their outcomes in
// order. Here one channel's message bucket allows 5 messages per 100 ms,
// so 12 messages need three windows; the limiter waits for each window
// instead of collecting 429s.
func ExampleLimiter_DoBatch() {
	rules := sluicetest.RuleSet{Rules: []sluicetest.Rule{{
		Name: "create_message", Method: "POST", Route: "/channels/{channel_id}/messages",
		Bucket: "3cd1f278bd0ecaf11e0d2391374c011d", Limit: 5, Window: sluicetest.Duration(100 * time.Millisecond),
	}}}
	srv, lim := exampleSimulator(rules)
	defer srv.Close()
	defer lim.Close(context.Background())

	var reqs []*http.Request
	for i := 1; i <= 12; i++ {
		req, _ := http.NewRequest("POST", "/channels/42/messages", strings.NewReader(fmt.Sprintf(`{"content":"message %d"}`, i)))
		reqs = append(reqs, req)
	}
	var got []string
	for _, r := range lim.DoBatch(context.Background(), reqs) {
		if r.Err != nil {
			fmt.Println("error:", r.Err)
			continue
		}
		got = append(got, fmt.Sprintf("%d %s", r.Response.StatusCode, echoedContent(r.Response)))
	}
	fmt.Println(strings.Join(got, "\n"))

	st := srv.Stats()
	fmt.Println("windows:", st.Buckets[0].Windows, "most in one window:", st.MaxBucketWindow)
	fmt.Println("429s:", st.ByStatus[429], "violations:", len(st.Violations()))
	// Output:
	// 200 message 1
	// 200 message 2
	// 200 message 3
	// 200 message 4
	// 200 message 5
	// 200 message 6
	// 200 message 7
	// 200 message 8
	// 200 message 9
	// 200 message 10
	// 200 message 11
	// 200 message 12
	// windows: 3 most in one window: 5
	// 429s: 0 violations: 0
}

// A Limiter is an http.RoundTripper, so any code that takes an
// *http.Client can send through it. Absolute URLs keep their path and go to
// Options.BaseURL's host: here https://discord.com/api/v10/users/@me
// reaches the simulator.
func ExampleLimiter_RoundTrip() {
	srv, lim := exampleSimulator(sluicetest.RuleSet{})
	defer srv.Close()
	defer lim.Close(context.Background())

	client := &http.Client{Transport: lim}
	resp, err := client.Get("https://discord.com/api/v10/users/@me")
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var me struct {
		Username string `json:"username"`
		Bot      bool   `json:"bot"`
	}
	_ = json.Unmarshal(body, &me)
	fmt.Println(resp.StatusCode, me.Username, me.Bot)
	fmt.Println("bucket", resp.Header.Get("X-RateLimit-Bucket"))
	// Output:
	// 200 sluice-simulator true
	// bucket 3ae9f1a3b5c7d9e1f3a5b7c9d1e3f5a7
}

// Webhook executions carry their token in the path and need no bot token:
// sent without it (the default, Options.WebhookAuth false), Discord counts
// them on the IP's global limit, beside the bot's. A burst of 60 messages
// and 60 webhook executions therefore runs on two windows of 50 per
// second, not one.
func ExampleOptions_webhooks() {
	srv, lim := exampleSimulator(sluicetest.RuleSet{})
	defer srv.Close()
	defer lim.Close(context.Background())

	var reqs []*http.Request
	for i := range 60 {
		msg, _ := http.NewRequest("POST", fmt.Sprintf("/channels/%d/messages", 100+i), strings.NewReader(`{"content":"hi"}`))
		msg.Header.Set("Content-Type", "application/json")
		hook, _ := http.NewRequest("POST", fmt.Sprintf("/webhooks/%d/a-webhook-token", 500+i), strings.NewReader(`{"content":"hi"}`))
		hook.Header.Set("Content-Type", "application/json")
		reqs = append(reqs, msg, hook)
	}
	for _, r := range lim.DoBatch(context.Background(), reqs) {
		if r.Err != nil {
			fmt.Println(r.Err)
			continue
		}
		r.Response.Body.Close()
	}
	st := srv.Stats()
	for _, g := range st.Globals {
		kind, _, _ := strings.Cut(g.Identity, ":")
		fmt.Printf("%s: %d requests, at most %d in one second (limit %d)\n", kind, g.Admitted, g.MaxInWindow, g.Limit)
	}
	snap, _ := lim.Snapshot(context.Background())
	for _, w := range snap.Windows {
		fmt.Printf("window %s: %s, limit %d\n", w.Name, w.State, w.Limit)
	}
	// Output:
	// ip: 60 requests, at most 50 in one second (limit 50)
	// token: 60 requests, at most 50 in one second (limit 50)
	// window bot: open, limit 50
	// window ip: open, limit 50
}

// ETA tells where a request stands: its place in its bucket's queue and the
// window it is expected to be sent in. Here a channel's messages allow 2
// per 500 ms and one was just sent: of 5 more, the first takes the
// window's last slot, the next two go in the next window and the last two
// in the one after.
func ExampleFuture_ETA() {
	srv, lim := exampleSimulator(sluicetest.RuleSet{Rules: []sluicetest.Rule{{
		Name: "create_message", Method: "POST", Route: "/channels/{channel_id}/messages",
		Bucket: "messages", Limit: 2, Window: sluicetest.Duration(500 * time.Millisecond),
	}}})
	defer srv.Close()
	defer lim.Close(context.Background())

	send := func() *sluice.Future {
		req, _ := http.NewRequest("POST", "/channels/10/messages", strings.NewReader(`{"content":"hi"}`))
		return lim.Send(context.Background(), req)
	}
	if _, err := send().Await(context.Background()); err != nil { // the bucket tells its limit
		panic(err)
	}
	var futures []*sluice.Future
	for range 5 {
		futures = append(futures, send())
	}
	last := futures[len(futures)-1]
	eta, err := last.ETA(context.Background())
	if err != nil {
		panic(err)
	}
	wait := eta.Wait(time.Now())
	fmt.Println(eta.Stage, "place", eta.Position, "decided by its", eta.Limit)
	fmt.Println("goes in the window after next:", wait > 500*time.Millisecond && wait <= time.Second+100*time.Millisecond)
	for _, f := range futures {
		if _, err := f.Await(context.Background()); err != nil {
			panic(err)
		}
	}
	eta, _ = last.ETA(context.Background())
	fmt.Println(eta.Stage)
	// Output:
	// queued place 3 decided by its bucket
	// goes in the window after next: true
	// done
}

// WithPriority moves a request ahead of lower priorities wherever requests
// wait. Here a channel's bucket sends one message per 100 ms: three bulk
// messages queue, then a user's interaction; the interaction goes first,
// the bulk ones after it, in their order.
func ExampleWithPriority() {
	srv, lim := exampleSimulator(sluicetest.RuleSet{Rules: []sluicetest.Rule{{
		Name: "create_message", Method: "POST", Route: "/channels/{channel_id}/messages",
		Bucket: "messages", Limit: 1, Window: sluicetest.Duration(100 * time.Millisecond),
	}}})
	defer srv.Close()
	defer lim.Close(context.Background())

	send := func(ctx context.Context, content string) *sluice.Future {
		req, _ := http.NewRequest("POST", "/channels/10/messages", strings.NewReader(`{"content":"`+content+`"}`))
		return lim.Send(ctx, req)
	}
	if _, err := send(context.Background(), "warm").Await(context.Background()); err != nil { // the bucket tells its limit
		panic(err)
	}
	bulk := sluice.WithPriority(context.Background(), sluice.PriorityBulk)
	futures := []*sluice.Future{send(bulk, "bulk 1"), send(bulk, "bulk 2"), send(bulk, "bulk 3"),
		send(sluice.WithPriority(context.Background(), sluice.PriorityInteractive), "interactive")}

	// One message per window: the answers come in the order they were sent.
	answered := make(chan string, len(futures))
	for _, f := range futures {
		go func() {
			resp, err := f.Await(context.Background())
			if err != nil {
				answered <- "error: " + err.Error()
				return
			}
			answered <- echoedContent(resp)
		}()
	}
	for range futures {
		fmt.Println(<-answered)
	}
	// Output:
	// interactive
	// bulk 1
	// bulk 2
	// bulk 3
}
