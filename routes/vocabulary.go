package routes

import "strings"

// OtherLabel is [Route.Label] for a route outside Discord's vocabulary,
// and [MethodLabel] for a method outside [Methods].
const OtherLabel = "other"

// maxLabelSegments is the deepest template that is its own label; Discord's
// deepest routes have 7 segments
// (/applications/{application_id}/guilds/{guild_id}/commands/{command_id}/permissions).
const maxLabelSegments = 8

// Methods are the HTTP methods Discord's API serves, in the form
// [Route.Method] has them. A proxy may refuse every other method.
var Methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// MethodLabel returns method upper-cased if it is one of [Methods], else
// [OtherLabel]: a bounded value for a metric label or a log.
func MethodLabel(method string) string {
	if len(method) <= 7 {
		m := strings.ToUpper(method)
		for _, k := range Methods {
			if m == k {
				return k
			}
		}
	}
	return OtherLabel
}

// Label returns the route's template when each of its literal segments is
// a word of Discord's routes and it has at most 8 segments, else
// [OtherLabel]. Unlike [Route.Template], which keeps an unknown path's
// segments as written (one may be a token the router did not expect, as in
// /webhook/1/TOKEN), a label is safe for a metric or a log: the values it
// takes are bounded by the vocabulary, whatever the input.
func (r Route) Label() string { return r.label }

// knownWords are the literal segments of Discord's documented routes
// (https://discord.com/developers/docs/reference, resources and topics),
// with the words of routes Discord serves beside them. A template made of
// these and placeholders is a plausible route; any other word may be a
// token, a typo or a scanner's probe.
var knownWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`
		@me @original
		activity-instances answers application-role-connection applications archived attachments
		audit-logs auto-moderation authorize bans bot bulk-ban bulk-delete callback channels
		commands connections consume crosspost emojis entitlements execute expire followers
		gateway github guilds incident-actions integrations interactions invites joined lobbies
		member-counts members messages metadata mfa nick oauth2 onboarding permissions pins polls
		preview private prune public reactions recipients regions revoke role-connections roles rules
		scheduled-events search send-soundboard-sound skus slack soundboard-default-sounds
		soundboard-sounds stage-instances sticker-packs stickers subscriptions templates
		thread-members threads token typing users vanity-url voice voice-states webhooks
		welcome-screen widget widget.json widget.png channel-linking`) {
		m[w] = true
	}
	return m
}()

// KnownWord reports whether w is one of the literal segments of Discord's
// routes that a [Route.Label] may carry (such as "channels", "@me",
// "bulk-delete"); placeholders such as "{channel_id}" are not words.
func KnownWord(w string) bool { return knownWords[w] }
