// Package conformance holds the tables that every implementation of a rule
// must pass: the outcome table of an attempt (ratelimit.Judge), run by the
// live limiter's rule itself, by the shared store's Redis scripts and by
// its local fallback share. A table is data, not code: each implementation
// has its own runner, in its own package's tests, and a row added here is
// checked everywhere.
package conformance

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// OutcomeCase is one row of the outcome table: what an attempt met, as it
// arrives on the wire (status, headers, body), and the outcome every
// implementation must draw from it.
type OutcomeCase struct {
	// Name says what the row is, in a few words.
	Name string
	// Sent, Status, PeerClosed, BotToken, Safe, Retries and
	// ErrorRetries are the attempt's (ratelimit.Attempt); MaxRetries and
	// MaxErrorRetries are Limits' for every row.
	Sent, PeerClosed, BotToken, Safe bool
	Status                           int
	Retries, ErrorRetries            int
	// Header and Body are the answer's, parsed by ratelimit.ParseHeaders
	// and classified by ratelimit.Classify.
	Header http.Header
	Body   string
	// Want is the outcome.
	Want ratelimit.Outcome
}

// Limits are the retry budgets of every row: a 429 may be met 3 times and
// still be sent again, a server or transport error 2 times.
const (
	MaxRetries      = 3
	MaxErrorRetries = 2
)

// Attempt returns the row's attempt: its answer parsed and classified as
// the limiter does, received at now.
func (c OutcomeCase) Attempt(now time.Time) ratelimit.Attempt {
	h, _ := ratelimit.ParseHeaders(c.Header, now)
	return ratelimit.Attempt{
		Sent: c.Sent, Status: c.Status, PeerClosed: c.PeerClosed,
		Headers: h, Verdict: ratelimit.Classify(c.Status, h, []byte(c.Body)),
		BotToken: c.BotToken, Safe: c.Safe,
		Retries: c.Retries, MaxRetries: MaxRetries,
		ErrorRetries: c.ErrorRetries, MaxErrorRetries: MaxErrorRetries,
	}
}

// Window is the bucket every row's answer speaks of: 5 requests per Period.
// Rows whose answer carries bucket headers show it spent (X-RateLimit-
// Remaining 0, or 2 for a sublimit), reopening after ResetAfter.
const (
	BucketLimit = 5
	Period      = 10 * time.Second
	ResetAfter  = "8.5"
	RetryAfter  = 3 * time.Second
	BucketHash  = "abcd1234"
)

// bucket returns the headers of an answer on the row's bucket with
// remaining requests left, plus extra name-value pairs.
func bucket(remaining string, extra ...string) http.Header {
	h := http.Header{
		"X-Ratelimit-Limit":       {"5"},
		"X-Ratelimit-Remaining":   {remaining},
		"X-Ratelimit-Reset-After": {ResetAfter},
		"X-Ratelimit-Bucket":      {BucketHash},
	}
	for i := 0; i+1 < len(extra); i += 2 {
		h.Set(extra[i], extra[i+1])
	}
	return h
}

const (
	retryBody  = `{"message": "You are being rate limited.", "retry_after": 3, "global": false}`
	globalBody = `{"message": "You are being rate limited.", "retry_after": 3, "global": true}`
	banBody    = `<!DOCTYPE html><html><head><title>Access denied | discord.com used Cloudflare to restrict access</title></head></html>`
)

// Outcomes is the outcome table. Its order is the order of ratelimit.Judge's
// rules.
var Outcomes = []OutcomeCase{
	{Name: "never sent", Want: o(ratelimit.ChargeNone, ratelimit.PauseNone, 0, false, ratelimit.Requeue)},
	{Name: "never sent, a 429 met before", Retries: MaxRetries,
		Want: o(ratelimit.ChargeNone, ratelimit.PauseNone, 0, false, ratelimit.Requeue)},
	{Name: "no answer (timeout), safe to resend", Sent: true, Safe: true,
		Want: o(ratelimit.ChargeUnknown, ratelimit.PauseNone, 0, false, ratelimit.Resend)},
	{Name: "no answer (timeout), not safe", Sent: true,
		Want: o(ratelimit.ChargeUnknown, ratelimit.PauseNone, 0, false, ratelimit.Fail)},
	{Name: "no answer, safe, resends spent", Sent: true, Safe: true, ErrorRetries: MaxErrorRetries,
		Want: o(ratelimit.ChargeUnknown, ratelimit.PauseNone, 0, false, ratelimit.Fail)},
	{Name: "server closed the connection, safe", Sent: true, PeerClosed: true, Safe: true,
		Want: o(ratelimit.ChargeArrived, ratelimit.PauseNone, 0, false, ratelimit.Resend)},
	{Name: "server closed the connection, not safe", Sent: true, PeerClosed: true,
		Want: o(ratelimit.ChargeArrived, ratelimit.PauseNone, 0, false, ratelimit.Fail)},
	{Name: "429 Cloudflare ban (HTML, no rate-limit header)", Sent: true, Status: 429, Body: banBody,
		Header: http.Header{"Content-Type": {"text/html"}},
		Want:   o(ratelimit.ChargeNone, ratelimit.PauseBan, ratelimit.DefaultBanWait, true, ratelimit.Fail)},
	{Name: "429 Cloudflare ban with Retry-After", Sent: true, Status: 429, Body: banBody,
		Header: http.Header{"Retry-After": {"3"}},
		Want:   o(ratelimit.ChargeNone, ratelimit.PauseBan, RetryAfter, true, ratelimit.Fail)},
	{Name: "429 global, no bucket headers", Sent: true, Status: 429, Body: globalBody,
		Header: http.Header{"X-Ratelimit-Global": {"true"}, "X-Ratelimit-Scope": {"global"}, "Retry-After": {"3"}},
		Want:   o(ratelimit.ChargeNone, ratelimit.PauseGlobal, RetryAfter, true, ratelimit.Requeue)},
	{Name: "429 global, retries spent", Sent: true, Status: 429, Body: globalBody, Retries: MaxRetries,
		Header: http.Header{"X-Ratelimit-Global": {"true"}, "Retry-After": {"3"}},
		Want:   o(ratelimit.ChargeNone, ratelimit.PauseGlobal, RetryAfter, true, ratelimit.Fail)},
	{Name: "429 global with the bucket's headers", Sent: true, Status: 429, Body: globalBody,
		Header: bucket("3", "X-Ratelimit-Global", "true", "X-Ratelimit-Scope", "global", "Retry-After", "3"),
		Want:   o(ratelimit.ChargeArrived, ratelimit.PauseGlobal, RetryAfter, true, ratelimit.Requeue)},
	{Name: "429 global told by its JSON body only", Sent: true, Status: 429, Body: globalBody,
		Header: http.Header{"Retry-After": {"3"}},
		Want:   o(ratelimit.ChargeNone, ratelimit.PauseGlobal, RetryAfter, true, ratelimit.Requeue)},
	{Name: "429 shared", Sent: true, Status: 429, Body: retryBody,
		Header: bucket("0", "X-Ratelimit-Scope", "shared", "Retry-After", "3"),
		Want:   o(ratelimit.ChargeArrived, ratelimit.PauseSerial, RetryAfter, false, ratelimit.Requeue)},
	{Name: "429 sublimit (requests remain)", Sent: true, Status: 429, Body: retryBody,
		Header: bucket("2", "X-Ratelimit-Scope", "user", "Retry-After", "3"),
		Want:   o(ratelimit.ChargeArrived, ratelimit.PauseSerial, 8500*time.Millisecond, true, ratelimit.Requeue)},
	{Name: "429 user", Sent: true, Status: 429, Body: retryBody,
		Header: bucket("0", "X-Ratelimit-Scope", "user", "Retry-After", "3"),
		Want:   o(ratelimit.ChargeArrived, ratelimit.PauseBucket, RetryAfter, true, ratelimit.Requeue)},
	{Name: "429 user, retries spent", Sent: true, Status: 429, Body: retryBody, Retries: MaxRetries,
		Header: bucket("0", "X-Ratelimit-Scope", "user", "Retry-After", "3"),
		Want:   o(ratelimit.ChargeArrived, ratelimit.PauseBucket, RetryAfter, true, ratelimit.Fail)},
	{Name: "429 without headers, JSON retry_after (Discord's own)", Sent: true, Status: 429, Body: retryBody,
		Want: o(ratelimit.ChargeArrived, ratelimit.PauseBucket, RetryAfter, true, ratelimit.Requeue)},
	{Name: "401 to the bot's token", Sent: true, Status: 401, BotToken: true, Header: bucket("4"),
		Want: o(ratelimit.ChargeArrived, ratelimit.PauseAuth, 0, true, ratelimit.Deliver)},
	{Name: "401 to another token", Sent: true, Status: 401, Header: bucket("4"),
		Want: o(ratelimit.ChargeArrived, ratelimit.PauseNone, 0, true, ratelimit.Deliver)},
	{Name: "403", Sent: true, Status: 403, BotToken: true, Header: bucket("4"),
		Want: o(ratelimit.ChargeArrived, ratelimit.PauseNone, 0, true, ratelimit.Deliver)},
	{Name: "502 without rate-limit headers, safe", Sent: true, Status: 502, Safe: true,
		Want: o(ratelimit.ChargeArrived, ratelimit.PauseNone, 0, false, ratelimit.Resend)},
	{Name: "502 without rate-limit headers, not safe", Sent: true, Status: 502,
		Want: o(ratelimit.ChargeArrived, ratelimit.PauseNone, 0, false, ratelimit.Deliver)},
	{Name: "502, safe, resends spent", Sent: true, Status: 502, Safe: true, ErrorRetries: MaxErrorRetries,
		Want: o(ratelimit.ChargeArrived, ratelimit.PauseNone, 0, false, ratelimit.Deliver)},
	{Name: "500 with rate-limit headers, safe", Sent: true, Status: 500, Safe: true, Header: bucket("3"),
		Want: o(ratelimit.ChargeArrived, ratelimit.PauseNone, 0, false, ratelimit.Deliver)},
	{Name: "200", Sent: true, Status: 200, BotToken: true, Header: bucket("3"),
		Want: o(ratelimit.ChargeArrived, ratelimit.PauseNone, 0, false, ratelimit.Deliver)},
	{Name: "404", Sent: true, Status: 404, BotToken: true, Header: bucket("3"),
		Want: o(ratelimit.ChargeArrived, ratelimit.PauseNone, 0, false, ratelimit.Deliver)},
}

func o(c ratelimit.Charge, p ratelimit.Pause, wait time.Duration, invalid bool, next ratelimit.Next) ratelimit.Outcome {
	return ratelimit.Outcome{Charge: c, Pause: p, Wait: wait, Invalid: invalid, Next: next}
}

// OutcomeTable renders the outcome table in Markdown, one row per case, as
// docs/architecture.md shows it.
func OutcomeTable() string {
	var b strings.Builder
	b.WriteString("| Attempt | Charge | Pause | Wait | Invalid | Next |\n|---|---|---|---:|---|---|\n")
	for _, c := range Outcomes {
		w := c.Want
		wait := ""
		if w.Wait > 0 {
			wait = w.Wait.String()
		}
		inv := ""
		if w.Invalid {
			inv = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", c.Name, w.Charge, w.Pause, wait, inv, w.Next)
	}
	return b.String()
}
