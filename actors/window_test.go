package actors

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/routes"
)

// System.classify applies globalwin.Classify to the call's header, route
// and configuration, and marks the IP window's major parameters.
func TestClassify(t *testing.T) {
	hook, err := routes.Parse("POST", "/webhooks/2/tok")
	require.NoError(t, err)
	webhook := hook.Major // webhook_id and a hash of the token
	require.NotEmpty(t, webhook)
	for _, c := range []struct {
		name, token  string
		webhookAuth  bool
		method, path string
		ownAuth      bool
		window       Window
		withToken    bool
		major        string
	}{
		{"message with the token", "Bot t", false, "POST", "/channels/1/messages", false, BotWindow, true, "channel_id=1"},
		{"message, no token configured", "", false, "POST", "/channels/1/messages", false, IPWindow, false, "ip;channel_id=1"},
		{"no major, no token configured", "", false, "GET", "/users/@me", false, IPWindow, false, "ip"},
		{"webhook without a token", "Bot t", false, "POST", "/webhooks/2/tok", false, IPWindow, false, "ip;" + webhook},
		{"webhook with WebhookAuth", "Bot t", true, "POST", "/webhooks/2/tok", false, BotWindow, true, webhook},
		{"webhook with its own Authorization", "Bot t", false, "POST", "/webhooks/2/tok", true, BotWindow, false, webhook},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &System{cfg: Config{Authorization: c.token, WebhookAuth: c.webhookAuth}}
			req, err := http.NewRequest(c.method, c.path, nil)
			require.NoError(t, err)
			if c.ownAuth {
				req.Header.Set("Authorization", "Bot own")
			}
			route, err := routes.Parse(c.method, c.path)
			require.NoError(t, err)
			call := NewCall(1, context.Background(), req, route, false, time.Unix(0, 0))
			s.classify(call)
			assert.Equal(t, c.window, call.window)
			assert.Equal(t, c.withToken, call.withToken)
			assert.Equal(t, c.major, call.Route.Major)
		})
	}
}
