package actors

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/transport"
)

// A connection that died carries no request, so it looks the least
// loaded: picked, every request sent on it came back at once unsent, to
// be sent on it again, about 130,000 times a second until the supervisor
// heard of the death (TestChaosEveryRequestEndsAndNoUnsafeResend hung in
// about half of its runs after the first in one process). The gate picks
// a live one, and with none live the bucket actors do not send.
func TestGatePicksNoDeadConnection(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	dial := func() *transport.Conn {
		c, err := transport.Dial(context.Background(), u, transport.Config{H2C: true})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	dead, live := dial(), dial()
	live.Claim() // busier than the dead one
	defer live.Unclaim()
	dead.Close()
	<-dead.Done()

	var turn atomic.Uint32
	g := &gate{conns: []*transport.Conn{dead, live}, turn: &turn}
	assert.True(t, g.live())
	for range 4 {
		c := g.pick()
		require.Same(t, live, c, "the live one, though the dead one carries less")
		c.Unclaim()
	}

	only := &gate{conns: []*transport.Conn{dead}, turn: &turn}
	assert.False(t, only.live(), "no connection to send on: the actors wait for the supervisor's next gate")
}
