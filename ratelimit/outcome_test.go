package ratelimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/conformance"
	"github.com/sluicehq/sluice/ratelimit"
)

// TestJudgeConformance runs the outcome table on the rule itself.
func TestJudgeConformance(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, c := range conformance.Outcomes {
		t.Run(c.Name, func(t *testing.T) {
			got := ratelimit.Judge(c.Attempt(now))
			require.Equal(t, c.Want, got, "want %v, got %v", c.Want, got)
		})
	}
}

// FuzzJudge checks the invariants of the outcome table on any attempt.
func FuzzJudge(f *testing.F) {
	f.Add(true, 429, false, true, true, "0", "user", "3", 1, 0, `{"retry_after": 1}`)
	f.Add(false, 0, false, false, false, "", "", "", 0, 0, "")
	f.Add(true, 502, true, true, false, "", "", "", 0, 2, "")
	f.Fuzz(func(t *testing.T, sent bool, status int, peerClosed, bot, safe bool, remaining, scope, retryAfter string, retries, errRetries int, body string) {
		hdr := http.Header{}
		if remaining != "" {
			hdr.Set("X-Ratelimit-Remaining", remaining)
		}
		if scope != "" {
			hdr.Set("X-Ratelimit-Scope", scope)
		}
		if retryAfter != "" {
			hdr.Set("Retry-After", retryAfter)
		}
		now := time.Unix(1_700_000_000, 0)
		h, _ := ratelimit.ParseHeaders(hdr, now)
		a := ratelimit.Attempt{Sent: sent, Status: status, PeerClosed: peerClosed, Headers: h,
			Verdict: ratelimit.Classify(status, h, []byte(body)), BotToken: bot, Safe: safe,
			Retries: retries, MaxRetries: 3, ErrorRetries: errRetries, MaxErrorRetries: 2}
		o := ratelimit.Judge(a)
		if !sent {
			require.Equal(t, ratelimit.Outcome{Charge: ratelimit.ChargeNone, Next: ratelimit.Requeue}, o, "never sent")
			return
		}
		// Only a request that is safe, within its budget, and met no
		// answer or a header-less 5xx is resent.
		if o.Next == ratelimit.Resend {
			require.True(t, safe && errRetries < 2)
			require.True(t, status == 0 || status >= 500 && !h.Has.RateLimit)
		}
		// A 429 always pauses something, for the verdict's wait.
		if status == 429 {
			require.NotEqual(t, ratelimit.PauseNone, o.Pause)
			require.Equal(t, a.Verdict.Wait, o.Wait)
			require.LessOrEqual(t, o.Wait, ratelimit.MaxWait)
		} else {
			require.Contains(t, []ratelimit.Pause{ratelimit.PauseNone, ratelimit.PauseAuth}, o.Pause)
		}
		// A ban is never retried at once.
		if o.Pause == ratelimit.PauseBan {
			require.Equal(t, ratelimit.Fail, o.Next)
		}
		// Nothing but a global 429 or a ban gives a sent request's slots
		// back.
		if o.Charge == ratelimit.ChargeNone {
			require.Contains(t, []ratelimit.Pause{ratelimit.PauseGlobal, ratelimit.PauseBan}, o.Pause)
			require.False(t, h.Has.Remaining)
		}
		require.Equal(t, status != 0 && ratelimit.CountsAsInvalid(status, a.Verdict), o.Invalid)
	})
}
