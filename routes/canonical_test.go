package routes

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDotSegmentsRefusedInEverySpelling: a dot segment, however spelled, is
// refused by CanonicalPath and Parse, so no route is classified one way
// and resolved another by the server: escaped, with parameters, trimmed of
// trailing spaces, in a compatibility form a server normalising with NFKC
// reads as dots or separators, overlong, or decoded twice.
func TestDotSegmentsRefusedInEverySpelling(t *testing.T) {
	for _, p := range []string{
		"/api/v10/./webhooks/1/tok", "/api/v10/x/../webhooks/1/tok", "/./webhooks/1/tok",
		"/api/v10/%2e/webhooks/1/tok", "/api/v10/%2E%2E/webhooks/1/tok", "/api/v10/.%2e/x",
		"/api/v10/%2e./x", "/api/v10/webhooks/1/tok/..", "/api/v10/channels/1/..;x/webhooks/1/t",
		"/api/v10/channels/1/.;/messages", "/..", "/api/../../secret", "/api/v10/..%2F..%2Fsecret",
		"/api/v10/channels/1/a%2Fb", "/api/v10/channels/1/a%2fb", "/api/v10/channels%5C1", `/api/v10/channels\..\x`,
		"/api/v10/channels/%00", "/api/v10/channels/%1f", "/api/v10/channels/%7F",
		"/Api/Api", "/api/api/v10/channels/1", "/api/v10/API/channels/1",
		// dots and spaces only: servers trim trailing dots and spaces
		"/channels/1/...", "/api/v10/channels/1/..%20/..%20/webhooks/1/tok", "/api/v10/channels/1/..%C2%A0/webhooks/1/tok", "/channels/1/.%20.",
		// compatibility forms (NFKC) of a dot, a slash, a backslash, a percent sign
		"/api/v10/channels/1/\uff0e\uff0e/\uff0e\uff0e/webhooks/1/tok", "/api/v10/channels/1/\u2025/\u2025/webhooks/1/tok",
		"/api/v10/channels/1/%EF%BC%8E%EF%BC%8E/webhooks/1/tok", "/api/v10/channels/1\uff0f..\uff0f..\uff0fwebhooks/1/tok",
		"/api/v10/x\uff3c..\uff3cwebhooks/1/tok", "/api/v10/channels/1/\uff052e\uff052e/webhooks/1/tok", "/api/v10/channels/1/a\u037ex",
		// not UTF-8 once decoded: an overlong dot and slash
		"/api/v10/channels/1/%C0%AE%C0%AE/webhooks/1/tok", "/api/v10/channels/1%C0%AF..%C0%AFwebhooks/1/tok", "/channels/1/%FF",
		// %u escapes decoded after a second decoding
		"/api/v10/channels/1/%25u002e%25u002e/webhooks/1/tok", "/api/v10/channels/1/%25U002E%25u002E/webhooks/1/tok",
	} {
		_, err := CanonicalPath(p)
		assert.ErrorIs(t, err, ErrInvalidPath, p)
		_, err = Parse("POST", p)
		assert.ErrorIs(t, err, ErrInvalidPath, p)
		var pe *ParseError
		require.True(t, errors.As(err, &pe), p)
		assert.NotContains(t, pe.Error(), "tok", "the error does not repeat the input")
	}
	// Dots that are not a whole segment are ordinary characters.
	for _, p := range []string{"/guilds/1/widget.png", "/channels/1/.x", "/channels/1/x.", "/channels/1/1..2", "/channels/1/%25u00zz",
		"/channels/1/messages/2/reactions/\u2764\ufe0f/@me", "/channels/1/messages/2/reactions/%F0%9F%91%8D/@me"} {
		_, err := CanonicalPath(p)
		assert.NoError(t, err, p)
	}
}

// TestCanonicalPathNormalises: spellings of one resource have one
// canonical path, and Parse classifies them alike.
func TestCanonicalPathNormalises(t *testing.T) {
	for in, want := range map[string]Path{
		"/api/v10/channels/1/messages":                        {"v10", "/channels/1/messages"},
		"/API/V10/channels/1/messages/":                       {"v10", "/channels/1/messages"},
		"//api//v9//channels//1?x=1":                          {"v9", "/channels/1"},
		"/api/channels/1":                                     {"", "/channels/1"},
		"/channels/1":                                         {"", "/channels/1"},
		"/api/v10/%77ebhooks/1/t%6Fk":                         {"v10", "/webhooks/1/tok"},
		"/api/v10/WebHooks/1/tok":                             {"v10", "/webhooks/1/tok"},
		"/api/v10/INTERACTIONS/5/tok/callback":                {"v10", "/interactions/5/tok/callback"},
		"/channels/1/messages/2/reactions/%f0%9f%91%8d/@me":   {"", "/channels/1/messages/2/reactions/%F0%9F%91%8D/@me"},
		"/channels/1/messages/2/reactions/name%3a123/%40me":   {"", "/channels/1/messages/2/reactions/name%3A123/%40me"},
		"/channels/1/messages/2/reactions/%F0%9F%91%8D/@me":   {"", "/channels/1/messages/2/reactions/%F0%9F%91%8D/@me"},
		"/api/v10/channels/1/messages/2/reactions/\u2764/@me": {"v10", "/channels/1/messages/2/reactions/\u2764/@me"},
		"/channels/1/messages/2/reactions/100%25/@me":         {"", "/channels/1/messages/2/reactions/100%25/@me"},
		"/channels/1/messages/2/reactions/%25zz%25":           {"", "/channels/1/messages/2/reactions/%25zz%25"},
		"/stage-instances/1":                                  {"", "/stage-instances/1"},
	} {
		got, err := CanonicalPath(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
		again, err := CanonicalPath(got.String())
		require.NoError(t, err, in)
		assert.Equal(t, got, again, "canonical form is a fixed point: %s", in)
		r1, err1 := Parse("POST", in)
		r2, err2 := Parse("POST", got.String())
		require.NoError(t, err1)
		require.NoError(t, err2)
		assert.Equal(t, r1, r2, "Parse reads a path and its canonical form alike: %s", in)
	}
	w, err := Parse("POST", "/api/v10/WEBHOOKS/1/"+webhookToken)
	require.NoError(t, err)
	assert.True(t, w.PerToken, "a token route in any case is a token route")
	assert.Equal(t, "/webhooks/{webhook_id}/{webhook_token}", w.Template)
}

// TestLabelsAreBounded: a route's label is its template only when every
// literal segment is one of Discord's words; anything else, a token where
// the router does not expect one included, is "other".
func TestLabelsAreBounded(t *testing.T) {
	for in, want := range map[string]string{
		"/api/v10/channels/1/messages/2":                    "/channels/{channel_id}/messages/{message_id}",
		"/api/v10/webhooks/1/" + webhookToken:               "/webhooks/{webhook_id}/{webhook_token}",
		"/channels/1/messages/2/reactions/%F0%9F%91%8D/@me": "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me",
		"/guilds/1/widget.png":                              "/guilds/{guild_id}/widget.png",
		"/gateway/bot":                                      "/gateway/bot",
		"/api/v10/webhook/1/" + webhookToken:                OtherLabel,
		"/api/v10/x/webhooks/1/" + webhookToken:             OtherLabel,
		"/api/v10/channels/1/" + webhookToken:               OtherLabel,
		"/channels/1/messages/1/2/3/4/5/6/7":                OtherLabel,
	} {
		r, err := Parse("GET", in)
		require.NoError(t, err, in)
		assert.Equal(t, want, r.Label(), in)
		assert.NotContains(t, r.Redacted(), webhookToken, in)
		assert.NotContains(t, r.String(), webhookToken, in)
	}
	r, err := Parse("GET", "/api/v10/webhook/1/"+webhookToken+"/messages")
	require.NoError(t, err)
	assert.Equal(t, "/{redacted}/1/{redacted}/messages", r.Redacted(), "unknown segments are redacted, known ones and ids kept")
}

func TestMethodLabel(t *testing.T) {
	for in, want := range map[string]string{"get": "GET", "PATCH": "PATCH", "options": "OPTIONS", "FOO": OtherLabel, "": OtherLabel,
		strings.Repeat("A", 40): OtherLabel, "PROPFIND": OtherLabel} {
		assert.Equal(t, want, MethodLabel(in), in)
	}
}

// Every character whose compatibility form (NFKC, Unicode 14) holds a dot,
// a slash, a backslash, a percent sign or a semicolon is refused in any
// segment, raw or percent-encoded; its neighbours are ordinary. The list
// was made by normalising every code point above 0x7F (Python's
// unicodedata.normalize("NFKC")).
func TestCompatibilityFormsOfSeparatorsRefused(t *testing.T) {
	for _, r := range []rune{0x37e, 0x2024, 0x2025, 0x2026, 0x2100, 0x2101, 0x2105, 0x2106,
		0x2488, 0x2489, 0x248a, 0x248b, 0x248c, 0x248d, 0x248e, 0x248f, 0x2490, 0x2491, 0x2492, 0x2493,
		0x2494, 0x2495, 0x2496, 0x2497, 0x2498, 0x2499, 0x249a, 0x249b, 0x33c2, 0x33c7, 0x33d8,
		0xfe14, 0xfe19, 0xfe30, 0xfe52, 0xfe54, 0xfe68, 0xfe6a, 0xff05, 0xff0e, 0xff0f, 0xff1b, 0xff3c, 0x1f100} {
		for _, p := range []string{"/channels/1/a" + string(r) + "b", "/channels/1/" + url.PathEscape(string(r))} {
			_, err := CanonicalPath(p)
			assert.ErrorIs(t, err, ErrInvalidPath, "U+%04X in %q", r, p)
		}
	}
	for _, r := range []rune{0x2023, 0x2027, 0x20ff, 0x2102, 0x2487, 0x249c, 0xfe13, 0xfe53, 0xff04, 0xff10, 0x1f101, 0x2764} {
		_, err := CanonicalPath("/channels/1/a" + string(r) + "b")
		assert.NoError(t, err, "U+%04X", r)
	}
}
