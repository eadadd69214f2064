package routes

import "testing"

func TestResendTable(t *testing.T) {
	for _, c := range []struct {
		method, path string
		want         Resend
	}{
		{"GET", "/channels/1/messages", ResendSafe},
		{"PUT", "/channels/1/messages/2/reactions/%F0%9F%91%8D/@me", ResendSafe},
		{"PATCH", "/channels/1/messages/2", ResendSafe},
		{"DELETE", "/channels/1/messages/2", ResendSafe},
		{"POST", "/channels/1/messages", ResendWithNonce},
		{"POST", "/api/v10/channels/1/messages", ResendWithNonce},
		{"POST", "/users/@me/channels", ResendSafe},
		{"POST", "/channels/1/typing", ResendSafe},
		{"POST", "/channels/1/invites", ResendNever},
		{"POST", "/webhooks/1/tok", ResendNever},
		{"POST", "/interactions/1/tok/callback", ResendNever},
		{"POST", "/channels/1/messages/2/crosspost", ResendNever},
	} {
		r, err := Parse(c.method, c.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Resend(); got != c.want {
			t.Errorf("%s %s: %s, want %s", c.method, c.path, got, c.want)
		}
	}
}
