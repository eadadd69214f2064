package globalwin

// Discord has two global limits. A request that carries an Authorization
// header counts on the token's window; one without counts on the window
// of the IP it comes from: webhook executions and interaction follow-ups
// carry their token in the path and need no bot token, so a bot that
// sends them without one gets a second global limit (Xenon's split; the
// actors' Window names the two).

// Sending is what decides a request's window: plain facts about the
// request, its route and the configuration.
type Sending struct {
	// OwnAuth reports that the request carries an Authorization header
	// of its own.
	OwnAuth bool
	// Token reports that a token is configured (the actors'
	// Config.Authorization).
	Token bool
	// PerToken reports that its route carries its token in the path
	// (webhooks, interactions: routes.Route.PerToken).
	PerToken bool
	// WebhookAuth reports that such routes are sent with the configured
	// token too (the actors' Config.WebhookAuth).
	WebhookAuth bool
}

// Classify decides which global window a request sent as s counts on
// (ip: the IP's, else the token's), and so whether it is sent with the
// configured token: its own Authorization header keeps it on the token's
// window, without the configured token; a route that carries its token in
// the path (webhooks, interactions) goes without the bot's token unless
// WebhookAuth; and with no token configured, nothing is authenticated.
// Every other request is sent with the configured token, on its window.
func Classify(s Sending) (ip, withToken bool) {
	switch {
	case s.OwnAuth:
		return false, false
	case !s.Token:
		return true, false
	case s.PerToken && !s.WebhookAuth:
		return true, false
	}
	return false, true
}

// ipMajorPrefix marks the major parameters of a request sent without an
// Authorization header: Discord counts its buckets per IP, apart from the
// same route's buckets under the token, so it gets its own bucket actor,
// bucket keys and shared-store keys. The one place the prefix is written
// is IPMajor.
const ipMajorPrefix = "ip"

// IPMajor returns the major parameters of a request on the IP window
// whose route's are major: "ip", or "ip;" and major.
func IPMajor(major string) string {
	if major == "" {
		return ipMajorPrefix
	}
	return ipMajorPrefix + ";" + major
}
