package conformance

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// WindowCase is one row of the window table: one bucket, met by one
// process through a sequence of sends and answers, and how many requests
// each send lets go. It is what every implementation of a bucket's window
// bookkeeping must do with what answers tell: ratelimit.Bucket (Take,
// Observe or ObserveLost as ratelimit.Judge charges the answer) and the
// shared store's Redis scripts (reserve, report), each run by its own
// package's tests on a clock the test drives.
//
// One clock serves the process and the server: Reset times are on it.
// Every send lies 40 ms or more away from the window end the answers
// before it imply (the shared store adds a few ms of clock slack; the
// limiter's ReopenMargin is 10 ms). After a bucket reopens, a row sends
// one request and answers it before sending more: the caller's Bucket
// may probe a reopening with one request (the shared store runs beside
// it and need not).
type WindowCase struct {
	// Name says what the row shows, in a few words.
	Name string
	// Steps run in order; their times never go back.
	Steps []WindowStep
}

// WindowStep is a send or an answer, At after the row began.
type WindowStep struct {
	At time.Duration
	// Send requests are asked for at At, one after another; the first
	// Granted of them must be let go and the rest refused. Granted
	// requests are numbered from 0 in the order of the row.
	Send, Granted int
	// Answer, when set, is the answer to a granted request, whose headers
	// arrive at At.
	Answer *WindowAnswer
}

// WindowAnswer is an answer to request To (a number of a granted request).
type WindowAnswer struct {
	To int
	// Unsent reports a request that never left: its slot is given back
	// (ratelimit.ChargeNone), and nothing else is set.
	Unsent bool
	// Status is the HTTP status: 200, a 5xx without rate-limit headers, or
	// 0 for none (a timeout).
	Status int
	// Limit, Remaining and ResetAfter are the bucket's headers; a Limit of
	// 0 sends none of them.
	Limit, Remaining int
	ResetAfter       time.Duration
	// Reset is X-RateLimit-Reset, the server's end of the window that
	// counted the request, as a time since the row began (0: not sent).
	Reset time.Duration
}

// Headers returns the answer's rate-limit headers for a row begun at
// start, as ratelimit.ParseHeaders would give them.
func (a WindowAnswer) Headers(start time.Time) ratelimit.Headers {
	if a.Limit == 0 {
		return ratelimit.Headers{}
	}
	h := ratelimit.Headers{Limit: a.Limit, Remaining: a.Remaining, ResetAfter: a.ResetAfter, Bucket: BucketHash,
		Has: ratelimit.Present{Limit: true, Remaining: true, ResetAfter: true, Bucket: true}}
	if a.Reset > 0 {
		h.Reset, h.Has.Reset = start.Add(a.Reset), true
	}
	return h
}

// Attempt returns the attempt the answer ends, for ratelimit.Judge: sent
// (unless Unsent), with its status and headers.
func (a WindowAnswer) Attempt(start time.Time) ratelimit.Attempt {
	return ratelimit.Attempt{Sent: !a.Unsent, Status: a.Status, Headers: a.Headers(start), MaxRetries: MaxRetries,
		MaxErrorRetries: MaxErrorRetries}
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// send tries n requests at ms, of which granted go.
func send(at, n, granted int) WindowStep {
	return WindowStep{At: ms(at), Send: n, Granted: granted}
}

// ok answers request to at ms with a 200: limit, remaining, Reset-After
// ra ms and X-RateLimit-Reset reset ms (0: none).
func ok(at, to, limit, remaining, ra, reset int) WindowStep {
	return WindowStep{At: ms(at), Answer: &WindowAnswer{To: to, Status: 200, Limit: limit, Remaining: remaining,
		ResetAfter: ms(ra), Reset: ms(reset)}}
}

// bare answers request to at ms with status and no rate-limit header.
func bare(at, to, status int) WindowStep {
	return WindowStep{At: ms(at), Answer: &WindowAnswer{To: to, Status: status}}
}

// unsent reports at ms that request to never left.
func unsent(at, to int) WindowStep {
	return WindowStep{At: ms(at), Answer: &WindowAnswer{To: to, Unsent: true}}
}

// Windows is the window table. Unless a row says otherwise the bucket
// allows 5 requests a second, and an answer arrives 50 ms after the server
// counted its request.
var Windows = []WindowCase{
	{Name: "an unknown bucket sends one pioneer at a time; its answer opens the window", Steps: []WindowStep{
		send(0, 2, 1),
		send(60, 1, 0),
		ok(100, 0, 5, 4, 1000, 1050),
		send(150, 5, 4),
	}},
	{Name: "a pioneer without an answer lets the next one go", Steps: []WindowStep{
		send(0, 2, 1),
		bare(100, 0, 0),
		send(150, 2, 1),
		bare(200, 1, 502),
		send(250, 2, 1),
		ok(350, 2, 5, 4, 1000, 1300),
		send(400, 5, 4),
	}},
	{Name: "a request that never left gives its slot back", Steps: []WindowStep{
		send(0, 1, 1),
		ok(100, 0, 2, 1, 1000, 1050),
		send(150, 2, 1),
		unsent(160, 1),
		send(170, 2, 1),
	}},
	{Name: "remaining follows the lowest answer, in any order", Steps: []WindowStep{
		send(0, 1, 1),
		ok(100, 0, 5, 4, 1000, 1050),
		send(150, 2, 2),
		// Another client spent the rest: the later request's answer
		// comes first.
		ok(200, 2, 5, 0, 850, 1050),
		ok(230, 1, 5, 1, 820, 1050),
		send(300, 2, 0),
	}},
	{Name: "the window reopens at the end its answers tell, the earliest of one window's", Steps: []WindowStep{
		send(0, 1, 1),
		// A slow answer: its end (1300) is late by its round trip.
		ok(300, 0, 5, 4, 1000, 1000),
		send(350, 4, 4),
		// A fast one of the same window (same X-RateLimit-Reset) tells
		// the earlier end.
		ok(400, 1, 5, 3, 600, 1000),
		send(960, 1, 0),
		send(1050, 1, 1),
	}},
	{Name: "only the same window's X-RateLimit-Reset moves its end earlier, never below a later end no such answer told", Steps: []WindowStep{
		send(0, 1, 1),
		ok(100, 0, 5, 4, 1000, 1050),
		send(150, 4, 4),
		// An answer without X-RateLimit-Reset may be of the next window:
		// the end moves later, to 1250.
		ok(450, 1, 5, 3, 800, 0),
		// One of the same window tells an earlier end, which the later
		// one keeps from taking effect.
		ok(500, 2, 5, 2, 550, 1050),
		send(1160, 1, 0),
		send(1300, 1, 1),
	}},
	{Name: "requests in flight at a reopening count in the new window", Steps: []WindowStep{
		send(0, 1, 1),
		ok(100, 0, 5, 4, 1000, 1050),
		send(990, 4, 4),
		send(1000, 1, 0),
		// Their answers have not come: they may count in the next
		// window, which has one slot left.
		send(1150, 2, 1),
		ok(1200, 5, 5, 0, 1000, 2150),
		send(1250, 1, 0),
	}},
	{Name: "a later X-RateLimit-Reset shows a newer window", Steps: []WindowStep{
		send(0, 1, 1),
		// A slow answer: the window seems to end at 1300.
		ok(300, 0, 5, 4, 1000, 1000),
		send(350, 3, 3),
		send(1040, 2, 1),
		// The server counted request 4 in its window after 1000, and
		// tells it: the window's requests are left, but for those in
		// flight, which may count in it.
		ok(1090, 4, 5, 4, 1000, 2040),
		send(1140, 5, 1),
	}},
	{Name: "a late answer of an older window changes nothing of the newer one", Steps: []WindowStep{
		send(0, 1, 1),
		ok(100, 0, 5, 4, 1000, 1050),
		send(900, 2, 2),
		send(1150, 1, 1),
		ok(1200, 3, 5, 4, 1000, 2150),
		send(1250, 1, 1),
		// Requests 1 and 2 were sent in the old window and counted there,
		// which others had filled; their answers come late.
		ok(1300, 1, 5, 0, 100, 1050),
		ok(1400, 2, 5, 0, 50, 1050),
		send(1450, 2, 1),
		send(2150, 1, 0),
		send(2250, 1, 1),
	}},
	{Name: "a request with no answer counts for a period from its end", Steps: []WindowStep{
		send(0, 1, 1),
		ok(100, 0, 2, 1, 1000, 1050),
		send(150, 2, 1),
		// A timeout: the server may have counted it, and not yet.
		bare(400, 1, 0),
		send(1150, 1, 0),
		send(1410, 1, 0),
		send(1500, 1, 1),
		ok(1550, 2, 2, 1, 1000, 2500),
		send(1600, 2, 1),
	}},
	{Name: "a 5xx in the middle of a window counts in that window only", Steps: []WindowStep{
		send(0, 1, 1),
		ok(100, 0, 2, 1, 1000, 1050),
		send(150, 2, 1),
		// The server answered without headers: it counted the request
		// by now, in this window.
		bare(200, 1, 502),
		send(1150, 1, 1),
	}},
	{Name: "a 5xx near a window's end counts in the next window too", Steps: []WindowStep{
		send(0, 1, 1),
		ok(100, 0, 2, 1, 1000, 1050),
		send(1000, 2, 1),
		bare(1080, 1, 502),
		send(1150, 1, 0),
		send(2180, 1, 1),
	}},
	{Name: "a reopened window's first answer tells its limit, higher or lower", Steps: []WindowStep{
		send(0, 1, 1),
		ok(100, 0, 3, 2, 1000, 1050),
		send(150, 2, 2),
		ok(200, 1, 3, 1, 900, 1050),
		ok(210, 2, 3, 0, 890, 1050),
		send(1150, 1, 1),
		// The new window allows 6: its first answer raises the limit.
		ok(1200, 3, 6, 5, 1000, 2150),
		send(1250, 2, 2),
		ok(1300, 4, 6, 3, 900, 2150),
		// A later answer of the same window tells a lower limit: what is
		// left drops with it.
		ok(1320, 5, 4, 1, 880, 2150),
		send(1350, 3, 1),
	}},
	{Name: "a higher limit later in a window raises nothing", Steps: []WindowStep{
		send(0, 1, 1),
		ok(100, 0, 3, 2, 1000, 1050),
		send(150, 1, 1),
		ok(200, 1, 6, 4, 900, 1050),
		send(250, 3, 1),
	}},
}

// WindowTable renders Windows as the Markdown table of docs/architecture.md.
func WindowTable() string {
	var b strings.Builder
	b.WriteString("| Row | Steps (ms: requests asked → let go; answers: #request status limit/remaining, Reset-After, X-RateLimit-Reset) |\n|---|---|\n")
	for _, c := range Windows {
		steps := make([]string, len(c.Steps))
		for i, s := range c.Steps {
			at := s.At.Milliseconds()
			switch a := s.Answer; {
			case a == nil:
				steps[i] = fmt.Sprintf("%d: %d → %d", at, s.Send, s.Granted)
			case a.Unsent:
				steps[i] = fmt.Sprintf("%d: #%d never left", at, a.To)
			case a.Limit == 0:
				status := "no answer"
				if a.Status != 0 {
					status = fmt.Sprintf("%d, no headers", a.Status)
				}
				steps[i] = fmt.Sprintf("%d: #%d %s", at, a.To, status)
			default:
				reset := "no Reset"
				if a.Reset > 0 {
					reset = fmt.Sprintf("Reset %d", a.Reset.Milliseconds())
				}
				steps[i] = fmt.Sprintf("%d: #%d %d %d/%d, %d, %s", at, a.To, a.Status, a.Limit, a.Remaining, a.ResetAfter.Milliseconds(), reset)
			}
		}
		fmt.Fprintf(&b, "| %s | %s |\n", c.Name, strings.Join(steps, " · "))
	}
	return b.String()
}
