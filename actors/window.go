package actors

import (
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
	return "Window(" + itoa(uint64(w)) + ")"
}

// ipMajorPrefix marks the major parameters of a request sent without an
// Authorization header: Discord counts its buckets per IP, apart from the
// same route's buckets under the token, so it gets its own bucket actor,
// bucket keys and shared-store keys. The one place the prefix is written
// is System.classify.
const ipMajorPrefix = "ip"

// windowOf decides which global window c counts on, and so whether it is
// sent with the configured token: its own Authorization header keeps it
// on the token's window; a route that carries its token in the path
// (webhooks, interactions) goes without the bot's token unless
// Config.WebhookAuth; and with no token configured, nothing is
// authenticated.
func (s *System) windowOf(c *Call) Window {
	switch {
	case c.Req != nil && c.Req.Header.Get("Authorization") != "":
		return BotWindow
	case s.cfg.Authorization == "":
		return IPWindow
	case c.Route.PerToken && !s.cfg.WebhookAuth:
		return IPWindow
	}
	return BotWindow
}

// classify sets c's window and, for the IP window, marks its major
// parameters so its buckets are kept apart from the token's.
func (s *System) classify(c *Call) {
	c.window = s.windowOf(c)
	c.withToken = s.cfg.Authorization != "" && c.window == BotWindow && c.Req != nil && c.Req.Header.Get("Authorization") == ""
	if c.window == IPWindow {
		if c.Route.Major == "" {
			c.Route.Major = ipMajorPrefix
		} else {
			c.Route.Major = ipMajorPrefix + ";" + c.Route.Major
		}
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

// store publishes the line's length for the bucket actors.
func (a *windowAdmission) store() { a.g.Waiting.Store(int32(a.q.Len())) }

// WindowSnapshot is one global window's part of a Snapshot.
type WindowSnapshot struct {
	Name, State string
	Limit, Used int
	PausedFor   time.Duration
}
