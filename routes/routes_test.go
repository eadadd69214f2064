package routes

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	webhookToken     = "hK3bQ9x_vLm2-PqRsTuVwXyZaBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789abcdefghij"
	interactionToken = "aW50ZXJhY3Rpb246MTIzNDU2Nzg5MDEyMzQ1Njc4OjFhMmIzYzRkNWU2ZjdnOGg5aTBqMWsybDNtNG41bzZwN3E4cjlzMHQ"
)

var webhookTokenHash = hashToken(webhookToken)

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		path     string
		template string
		major    string
		redacted string // "" means: same as the template's input path without prefix
		exempt   bool
		perToken bool
	}{
		// Documented majors.
		{name: "channel major", method: "GET", path: "/channels/81/messages",
			template: "/channels/{channel_id}/messages", major: "channel_id=81"},
		{name: "guild major", method: "GET", path: "/guilds/9/members",
			template: "/guilds/{guild_id}/members", major: "guild_id=9"},
		{name: "webhook id only", method: "GET", path: "/webhooks/1",
			template: "/webhooks/{webhook_id}", major: "webhook_id=1"},
		{name: "webhook with token", method: "POST", path: "/webhooks/1/" + webhookToken,
			template: "/webhooks/{webhook_id}/{webhook_token}", major: "webhook_id=1;webhook_token=" + webhookTokenHash,
			redacted: "/webhooks/1/{token}", perToken: true},
		{name: "webhook message", method: "PATCH", path: "/webhooks/1/" + webhookToken + "/messages/55",
			template: "/webhooks/{webhook_id}/{webhook_token}/messages/{message_id}", major: "webhook_id=1;webhook_token=" + webhookTokenHash,
			redacted: "/webhooks/1/{token}/messages/55", perToken: true},
		{name: "webhook slack", method: "POST", path: "/webhooks/1/" + webhookToken + "/slack?wait=true",
			template: "/webhooks/{webhook_id}/{webhook_token}/slack", major: "webhook_id=1;webhook_token=" + webhookTokenHash,
			redacted: "/webhooks/1/{token}/slack", perToken: true},
		{name: "followup per token", method: "PATCH", path: "/webhooks/77/" + interactionToken + "/messages/@original",
			template: "/webhooks/{webhook_id}/{webhook_token}/messages/@original", major: "webhook_id=77;webhook_token=" + hashToken(interactionToken),
			redacted: "/webhooks/77/{token}/messages/@original", perToken: true},
		{name: "interaction callback exempt", method: "POST", path: "/interactions/5/" + interactionToken + "/callback",
			template: "/interactions/{interaction_id}/{interaction_token}/callback", major: "interaction_id=5",
			redacted: "/interactions/5/{token}/callback", exempt: true, perToken: true},
		{name: "interaction callback GET not exempt", method: "GET", path: "/interactions/5/" + interactionToken + "/callback",
			template: "/interactions/{interaction_id}/{interaction_token}/callback", major: "interaction_id=5",
			redacted: "/interactions/5/{token}/callback", perToken: true},
		{name: "no major", method: "GET", path: "/gateway/bot",
			template: "/gateway/bot", major: ""},
		{name: "nested guild is not major", method: "PUT", path: "/applications/3/guilds/9/commands/4/permissions",
			template: "/applications/{application_id}/guilds/{guild_id}/commands/{command_id}/permissions", major: ""},

		// Non-major ids.
		{name: "message id", method: "GET", path: "/channels/81/messages/99",
			template: "/channels/{channel_id}/messages/{message_id}", major: "channel_id=81"},
		{name: "member role", method: "PUT", path: "/guilds/9/members/12/roles/34",
			template: "/guilds/{guild_id}/members/{user_id}/roles/{role_id}", major: "guild_id=9"},
		{name: "user me guilds", method: "DELETE", path: "/users/@me/guilds/9",
			template: "/users/@me/guilds/{guild_id}", major: ""},
		{name: "user id", method: "GET", path: "/users/42",
			template: "/users/{user_id}", major: ""},
		{name: "delete message keeps method", method: "delete", path: "/channels/81/messages/99",
			template: "/channels/{channel_id}/messages/{message_id}", major: "channel_id=81"},

		// Reactions.
		{name: "reaction unicode encoded @me", method: "PUT", path: "/channels/81/messages/99/reactions/%F0%9F%91%8D/@me",
			template: "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me", major: "channel_id=81"},
		{name: "reaction raw unicode", method: "PUT", path: "/channels/81/messages/99/reactions/👍/@me",
			template: "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me", major: "channel_id=81"},
		{name: "reaction custom emoji", method: "PUT", path: "/channels/81/messages/99/reactions/blob:123456/@me",
			template: "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me", major: "channel_id=81"},
		{name: "reaction custom emoji encoded colon", method: "PUT", path: "/channels/81/messages/99/reactions/blob%3A123456/@me",
			template: "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me", major: "channel_id=81"},
		{name: "reaction other user", method: "DELETE", path: "/channels/81/messages/99/reactions/blob:1/42",
			template: "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/{user_id}", major: "channel_id=81"},
		{name: "reactions for one emoji", method: "GET", path: "/channels/81/messages/99/reactions/%E2%9D%A4",
			template: "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}", major: "channel_id=81"},
		{name: "all reactions", method: "DELETE", path: "/channels/81/messages/99/reactions",
			template: "/channels/{channel_id}/messages/{message_id}/reactions", major: "channel_id=81"},

		// Codes.
		{name: "invite code", method: "GET", path: "/invites/discord-developers?with_counts=true",
			template: "/invites/{invite_code}", major: ""},
		{name: "guild template code", method: "GET", path: "/guilds/templates/hgM48av5Q69A",
			template: "/guilds/templates/{template_code}", major: ""},

		// Prefixes, query strings, slashes.
		{name: "v10 prefix", method: "GET", path: "/api/v10/channels/81",
			template: "/channels/{channel_id}", major: "channel_id=81"},
		{name: "v9 prefix", method: "GET", path: "/api/v9/channels/81",
			template: "/channels/{channel_id}", major: "channel_id=81"},
		{name: "api prefix without version", method: "GET", path: "/api/channels/81",
			template: "/channels/{channel_id}", major: "channel_id=81"},
		{name: "trailing slash", method: "GET", path: "/api/v10/channels/81/",
			template: "/channels/{channel_id}", major: "channel_id=81"},
		{name: "repeated slashes", method: "GET", path: "//channels//81///messages",
			template: "/channels/{channel_id}/messages", major: "channel_id=81"},
		{name: "query and fragment", method: "GET", path: "/channels/81/messages?limit=50&before=99#x",
			template: "/channels/{channel_id}/messages", major: "channel_id=81"},
		{name: "empty method is GET", method: "", path: "/channels/81",
			template: "/channels/{channel_id}", major: "channel_id=81"},
		{name: "leading zeros canonical major", method: "GET", path: "/channels/0081",
			template: "/channels/{channel_id}", major: "channel_id=81", redacted: "/channels/0081"},

		// Generic fallback.
		{name: "unknown collection", method: "GET", path: "/guilds/9/frobs/123/knobs",
			template: "/guilds/{guild_id}/frobs/{id}/knobs", major: "guild_id=9"},
		{name: "unknown top level", method: "GET", path: "/widgets/123/456",
			template: "/widgets/{id}/{id}", major: ""},
		{name: "non-numeric channel kept literal", method: "GET", path: "/channels/abc/messages",
			template: "/channels/abc/messages", major: ""},
		{name: "number too large is literal", method: "GET", path: "/channels/99999999999999999999999",
			template: "/channels/99999999999999999999999", major: ""},
		{name: "token repeated later is hidden", method: "POST", path: "/webhooks/1/" + webhookToken + "/" + webhookToken,
			template: "/webhooks/{webhook_id}/{webhook_token}/{webhook_token}", major: "webhook_id=1;webhook_token=" + webhookTokenHash,
			redacted: "/webhooks/1/{token}/{token}", perToken: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(tt.method, tt.path)
			require.NoError(t, err)
			assert.Equal(t, tt.template, r.Template, "Template")
			assert.Equal(t, tt.major, r.Major, "Major")
			assert.Equal(t, tt.exempt, r.GlobalExempt, "GlobalExempt")
			assert.Equal(t, tt.perToken, r.PerToken, "PerToken")
			wantMethod := strings.ToUpper(tt.method)
			if wantMethod == "" {
				wantMethod = "GET"
			}
			assert.Equal(t, wantMethod, r.Method)
			assert.Equal(t, wantMethod+" "+tt.template+" "+tt.major, r.Key())
			if tt.redacted != "" {
				assert.Equal(t, tt.redacted, r.Redacted())
			}
			for _, tok := range []string{webhookToken, interactionToken} {
				assert.NotContains(t, r.Key(), tok)
				assert.NotContains(t, r.Redacted(), tok)
				assert.NotContains(t, r.String(), tok)
			}
		})
	}
}

func TestParseRedactedKeepsPathWithoutPrefix(t *testing.T) {
	r, err := Parse("GET", "/api/v10/channels/81/messages/99/?around=5")
	require.NoError(t, err)
	assert.Equal(t, "/channels/81/messages/99", r.Redacted())
	assert.Equal(t, "GET /channels/81/messages/99", r.String())
}

func TestSameBucketAcrossInputs(t *testing.T) {
	// Each group must produce one key; different groups different keys.
	groups := [][][2]string{
		{
			{"PUT", "/channels/81/messages/1/reactions/%F0%9F%91%8D/@me"},
			{"put", "/api/v10/channels/81/messages/2/reactions/blob:123/@me"},
			{"PUT", "/api/v9/channels/81/messages/3/reactions/👍/@me/"},
		},
		{
			{"GET", "/channels/81/messages/1"},
			{"GET", "/channels/81/messages/2?x=y"},
		},
		{{"DELETE", "/channels/81/messages/1"}},
		{{"GET", "/channels/82/messages/1"}},
		{{"POST", "/webhooks/1/tokenA-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}},
		{{"POST", "/webhooks/1/tokenB-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"}},
	}
	seen := map[string]int{}
	for gi, g := range groups {
		var key string
		for i, in := range g {
			r, err := Parse(in[0], in[1])
			require.NoError(t, err, in)
			if i == 0 {
				key = r.Key()
			}
			assert.Equal(t, key, r.Key(), in)
		}
		prev, dup := seen[key]
		assert.False(t, dup, "group %d shares key %q with group %d", gi, key, prev)
		seen[key] = gi
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name   string
		method string
		path   string
		want   error
	}{
		{"empty", "GET", "", ErrInvalidPath},
		{"relative", "GET", "channels/1", ErrInvalidPath},
		{"absolute URL", "GET", "https://discord.com/api/v10/channels/1", ErrInvalidPath},
		{"too long", "GET", "/channels/1/" + strings.Repeat("a", MaxPathLength), ErrInvalidPath},
		{"bad escape", "GET", "/channels/1/reactions/%zz", ErrInvalidPath},
		{"truncated escape", "GET", "/channels/1/reactions/%F", ErrInvalidPath},
		{"space", "GET", "/channels/1 /messages", ErrInvalidPath},
		{"control", "GET", "/channels/1\n/messages", ErrInvalidPath},
		{"only prefix", "GET", "/api/v10/", ErrInvalidPath},
		{"version of 4 digits", "POST", "/api/v0010/interactions/1/" + interactionToken + "/callback", ErrInvalidPath},
		{"version of 9 zeros", "POST", "/Api/v000000000/interACtions/0/0", ErrInvalidPath},
		{"version without /api (a token route on a base without a version)", "POST", "/v10/webhooks/1/tok", ErrInvalidPath},
		{"second version", "POST", "/api/v10/v9/webhooks/1/tok", ErrInvalidPath},
		{"semicolon parameter", "POST", "/api/v10/webhooks;x/1/" + webhookToken, ErrInvalidPath},
		{"semicolon after the version", "POST", "/api/v10;x/interactions/1/" + interactionToken + "/callback", ErrInvalidPath},
		{"encoded semicolon", "POST", "/api/v10/webhooks%3bx/1/" + webhookToken, ErrInvalidPath},
		{"webhooks by Unicode folding (long s)", "POST", "/api/v10/webhookſ/1/" + webhookToken, ErrInvalidPath},
		{"interactions by Unicode folding, encoded", "POST", "/api/v10/interaction%C5%BF/5/" + interactionToken + "/callback", ErrInvalidPath},
		{"webhooks by Unicode folding (Kelvin sign)", "POST", "/api/v10/webhoo\u212as/1/" + webhookToken, ErrInvalidPath},
		{"webhooks in fullwidth letters", "POST", "/api/v10/\uff57\uff45\uff42\uff48\uff4f\uff4f\uff4b\uff53/1/" + webhookToken, ErrInvalidPath},
		{"webhooks in fullwidth letters, encoded", "POST", "/api/v10/%EF%BD%97ebhooks/1/" + webhookToken, ErrInvalidPath},
		{"webhooks and an encoded space", "POST", "/api/v10/webhooks%20/1/" + webhookToken, ErrInvalidPath},
		{"webhooks and an encoded no-break space", "POST", "/api/v10/webhooks%C2%A0/1/" + webhookToken, ErrInvalidPath},
		{"webhooks with a dot", "POST", "/api/v10/webhooks./1/" + webhookToken, ErrInvalidPath},
		{"webhooks encoded twice", "POST", "/api/v10/%2577ebhooks/1/" + webhookToken, ErrInvalidPath},
		{"dot segments encoded twice", "POST", "/api/v10/channels/1/%252e%252e/%252E%252E/webhooks/1/" + webhookToken, ErrInvalidPath},
		{"dot segment encoded twice, its digits encoded once", "POST", "/api/v10/channels/1/%25%32%65%25%32%65/webhooks/1/" + webhookToken, ErrInvalidPath},
		{"slash encoded twice", "POST", "/api/v10/x%252F..%252Fwebhooks/1/" + webhookToken, ErrInvalidPath},
		{"only slash", "GET", "/", ErrInvalidPath},
		{"query only", "GET", "/?a=b", ErrInvalidPath},
		{"webhook id not snowflake", "POST", "/webhooks/abc/" + webhookToken, ErrInvalidPath},
		{"interaction id not snowflake", "POST", "/interactions/x/" + interactionToken + "/callback", ErrInvalidPath},
		{"bad method", "GE T", "/channels/1", ErrInvalidMethod},
		{"long method", strings.Repeat("A", 33), "/channels/1", ErrInvalidMethod},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.method, tt.path)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
			assert.NotEmpty(t, pe.Reason)
			assert.NotContains(t, err.Error(), webhookToken)
			assert.NotContains(t, err.Error(), interactionToken)
		})
	}
}

func TestParseLongestAcceptedPath(t *testing.T) {
	p := "/channels/1/" + strings.Repeat("a", MaxPathLength-len("/channels/1/"))
	require.Len(t, p, MaxPathLength)
	_, err := Parse("GET", p)
	require.NoError(t, err)
}

func TestBucketKey(t *testing.T) {
	a, err := Parse("GET", "/channels/81/messages/1")
	require.NoError(t, err)
	b, err := Parse("POST", "/channels/81/messages")
	require.NoError(t, err)
	c, err := Parse("POST", "/channels/82/messages")
	require.NoError(t, err)

	const hash = "abcd1234"
	assert.Equal(t, "bucket abcd1234 channel_id=81", BucketKey(hash, a.Major))
	assert.Equal(t, BucketKey(hash, a.Major), BucketKey(hash, b.Major), "same hash, same major: one bucket")
	assert.NotEqual(t, BucketKey(hash, a.Major), BucketKey(hash, c.Major), "same hash, other major: other bucket")
	assert.NotEqual(t, a.Key(), BucketKey(hash, a.Major))
}

func TestParseErrorMessage(t *testing.T) {
	_, err := Parse("GET", "")
	require.EqualError(t, err, "routes: invalid path: empty path")
	assert.True(t, errors.Is(err, ErrInvalidPath))
}

func TestHiddenSublimitRoutes(t *testing.T) {
	for path, want := range map[string]bool{
		"/api/v10/channels/1":            true,
		"/channels/1":                    true,
		"/api/v10/channels/1/messages/2": false,
		"/api/v10/guilds/1":              false,
	} {
		r, err := Parse("PATCH", path)
		if err != nil {
			t.Fatal(err)
		}
		if r.HiddenSublimit != want {
			t.Errorf("PATCH %s: HiddenSublimit = %v, want %v", path, r.HiddenSublimit, want)
		}
	}
	r, _ := Parse("GET", "/channels/1")
	if r.HiddenSublimit {
		t.Error("GET /channels/1 has no hidden sublimit")
	}
}
