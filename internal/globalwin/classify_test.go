package globalwin_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/internal/globalwin"
)

// The combinations of the four facts that can decide (its own
// Authorization decides alone, so three of its rows are left out): each
// row changes one fact from a neighbour, so each condition of the rule
// decides a row.
func TestClassify(t *testing.T) {
	for _, c := range []struct {
		s             globalwin.Sending
		ip, withToken bool
	}{
		// Its own Authorization: the token's window, as it is, whatever else.
		{globalwin.Sending{OwnAuth: true}, false, false},
		{globalwin.Sending{OwnAuth: true, Token: true}, false, false},
		{globalwin.Sending{OwnAuth: true, PerToken: true}, false, false},
		{globalwin.Sending{OwnAuth: true, Token: true, PerToken: true}, false, false},
		{globalwin.Sending{OwnAuth: true, Token: true, PerToken: true, WebhookAuth: true}, false, false},
		// No token configured: nothing is authenticated.
		{globalwin.Sending{}, true, false},
		{globalwin.Sending{PerToken: true}, true, false},
		{globalwin.Sending{WebhookAuth: true}, true, false},
		{globalwin.Sending{PerToken: true, WebhookAuth: true}, true, false},
		// A token: with it, on its window...
		{globalwin.Sending{Token: true}, false, true},
		{globalwin.Sending{Token: true, WebhookAuth: true}, false, true},
		// ...but a route with its token in the path goes without it,
		// unless WebhookAuth.
		{globalwin.Sending{Token: true, PerToken: true}, true, false},
		{globalwin.Sending{Token: true, PerToken: true, WebhookAuth: true}, false, true},
	} {
		t.Run(fmt.Sprintf("%+v", c.s), func(t *testing.T) {
			ip, withToken := globalwin.Classify(c.s)
			assert.Equal(t, c.ip, ip, "ip")
			assert.Equal(t, c.withToken, withToken, "withToken")
		})
	}
}

// The IP window's major parameters are prefixed "ip", apart from the
// token's.
func TestIPMajor(t *testing.T) {
	for major, want := range map[string]string{
		"":              "ip",
		"channel_id=81": "ip;channel_id=81",
		"ip":            "ip;ip",
	} {
		assert.Equal(t, want, globalwin.IPMajor(major), "%q", major)
	}
}
