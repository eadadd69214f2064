package routes

import "testing"

func TestRelatedTemplates(t *testing.T) {
	const (
		messages = "/channels/{channel_id}/messages"
		message  = "/channels/{channel_id}/messages/{message_id}"
		pins     = "/channels/{channel_id}/pins"
		channel  = "/channels/{channel_id}"
		ownReact = "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me"
		userReac = "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/{user_id}"
		reacts   = "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}"
		allReact = "/channels/{channel_id}/messages/{message_id}/reactions"
		member   = "/guilds/{guild_id}/members/{user_id}"
		role     = "/guilds/{guild_id}/members/{user_id}/roles/{role_id}"
	)
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{messages, messages, true},
		{messages, message, true},
		{messages, pins, true},
		{messages, channel, true},
		{ownReact, userReac, true},
		{ownReact, reacts, true},
		{reacts, allReact, true},
		{messages, ownReact, false},
		{message, ownReact, false},
		{member, role, false},
		{"/gateway", "/users/@me", false},
		{"/gateway", "/guilds", false},
		{"/gateway", "/gateway/bot", true},
	} {
		if got := Related(c.a, c.b); got != c.want {
			t.Errorf("Related(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := Related(c.b, c.a); got != c.want {
			t.Errorf("Related(%q, %q) = %v, want %v (symmetric)", c.b, c.a, got, c.want)
		}
	}
}
