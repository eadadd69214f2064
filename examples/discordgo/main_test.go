package main

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/sluicetest"
)

// TestMain fails the run if the simulator, the limiter or discordgo left a
// goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDiscordgoThroughSluice runs the example's flow with the simulator's
// windows scaled down twenty times (5 messages per 250 ms per channel) and
// checks every message arrived without a single 429.
func TestDiscordgoThroughSluice(t *testing.T) {
	rep, err := run(context.Background(), config{
		Messages: 30, Channels: 3,
		Rules: sluicetest.DefaultRules().Scaled(0.05),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rep.Errors {
		t.Error("discordgo:", e)
	}
	if rep.Sent != 30 || rep.Failed != 0 {
		t.Errorf("sent %d, failed %d; want 30 and 0", rep.Sent, rep.Failed)
	}
	st := rep.Stats
	sluicetest.AssertNoViolations(t, st)
	if st.Requests != 30 {
		t.Errorf("simulator answered %d requests, want 30 (no retries needed)", st.Requests)
	}
	if got := st.ClientUser429s() + st.ClientGlobal429s() + st.RateLimited["shared"]; got != 0 {
		t.Errorf("%d 429s, want none", got)
	}
	if len(st.Buckets) != 3 {
		t.Errorf("%d buckets, want one per channel (3)", len(st.Buckets))
	}
	for _, b := range st.Buckets {
		if b.Admitted != 10 || len(b.Rules) != 1 || b.Rules[0] != "create_message" {
			t.Errorf("bucket %s: admitted %d by rules %v; want 10 by create_message", b.Key, b.Admitted, b.Rules)
		}
	}
	// 10 messages per channel at 5 per window need two windows: one wait
	// of about 250 ms, not a 5 s one and not a 429 retry.
	if rep.Elapsed > 3*time.Second {
		t.Errorf("took %s", rep.Elapsed)
	}
	t.Logf("%d messages in %s; %s", rep.Sent, rep.Elapsed.Round(time.Millisecond), st.Summary())
}
