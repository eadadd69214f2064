package actors

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/globalwin"
)

// Window names one of Discord's two global limits. A request that carries
// an Authorization header counts on the token's window (BotWindow); one
// without counts on the window of the IP it comes from (IPWindow): webhook
// executions and interaction follow-ups carry their token in the path and
// need no bot token, so a bot that sends them without one gets a second
// global limit (Xenon's split). Interaction callbacks count on neither
// (routes.Route.GlobalExempt).
type Window uint8

const (
	// BotWindow is the global limit of the token a request carries.
	BotWindow Window = iota
	// IPWindow is the global limit of the egress IP, for requests sent
	// without an Authorization header.
	IPWindow

	numWindows = iota
)

var windowNames = [numWindows]string{BotWindow: "bot", IPWindow: "ip"}

// String returns "bot" or "ip".
func (w Window) String() string {
	if int(w) < len(windowNames) {
		return windowNames[w]
	}
	return "Window(" + strconv.Itoa(int(w)) + ")"
}

// classify sets c's window and whether it is sent with the configured
// token (globalwin.Classify) and, for the IP window, marks its major
// parameters so its buckets are kept apart from the token's
// (globalwin.IPMajor).
func (s *System) classify(c *Call) {
	ip, withToken := globalwin.Classify(globalwin.Sending{
		OwnAuth:     c.Req != nil && c.Req.Header.Get("Authorization") != "",
		Token:       s.cfg.Authorization != "",
		PerToken:    c.Route.PerToken,
		WebhookAuth: s.cfg.WebhookAuth,
	})
	c.window, c.withToken = BotWindow, withToken && c.Req != nil // (a call without a request is refused before it is sent)
	if ip {
		c.window = IPWindow
		c.Route.Major = globalwin.IPMajor(c.Route.Major)
	}
}

// windowAdmission is the supervisor's side of one global window: its
// pause (a global 429 there), its state machine and its line (the buckets
// waiting for its slots, admission.Queue). The two windows never wait for
// each other.
type windowAdmission struct {
	w       Window
	g       *globalwin.Window        // its limiter and counters, shared with the bucket actors
	until   time.Time                // paused before it (a global 429, or a ban's hold)
	machine *fsm.Window              // open <-> global_limit
	q       *admission.Queue[*child] // Invariant: q.Len() == g.Waiting
	timer   timerKind                // its globalClearMsg timer
	retry   timerKind                // its globalRetryMsg timer
}

// store publishes the line's length and its keeps' count for the bucket
// actors (globalwin.Window.Waiting and Kept).
func (a *windowAdmission) store() {
	a.g.Waiting.Store(int32(a.q.Len()))
	a.g.Kept.Store(int32(a.q.Keeps()))
}

// WindowSnapshot is one global window's part of a Snapshot.
type WindowSnapshot struct {
	Name, State string
	Limit, Used int
	PausedFor   time.Duration
}
