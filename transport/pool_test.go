package transport

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Pick spreads requests over the least loaded connections, taking turns
// among equals, and never picks a dead connection while a live one is
// left: a dead one carries no request, so it looks the least loaded, and
// every request sent on it came back at once unsent, to be sent on it
// again (TestChaosEveryRequestEndsAndNoUnsafeResend hung in about half of
// its runs after the first in one process).
func TestPickSpreadsAndSkipsTheDead(t *testing.T) {
	srv := startTLSServer(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), true)
	cfg := Config{TLSConfig: srv.clientTLS()}
	a, b, c := dialT(t, srv.URL, cfg), dialT(t, srv.URL, cfg), dialT(t, srv.URL, cfg)
	var turn atomic.Uint32
	assert.Nil(t, Pick(nil, &turn))
	assert.False(t, AnyAlive(nil))

	// Unsent picks are counted (Claim): three picks take the three.
	seen := map[*Conn]int{}
	for range 3 {
		seen[Pick([]*Conn{a, b, c}, &turn)]++
	}
	assert.Equal(t, map[*Conn]int{a: 1, b: 1, c: 1}, seen, "picked together, the requests spread over the pool")
	// Equally loaded: successive picks take turns.
	seen = map[*Conn]int{}
	for range 6 {
		p := Pick([]*Conn{a, b, c}, &turn)
		seen[p]++
		p.Unclaim()
	}
	assert.Equal(t, map[*Conn]int{a: 2, b: 2, c: 2}, seen, "unclaimed at once, the picks still take turns")
	for _, x := range []*Conn{a, b, c} {
		x.Unclaim()
	}

	b.Claim() // busier than the dead one
	defer b.Unclaim()
	a.Close()
	c.Close()
	<-a.Done()
	<-c.Done()
	assert.True(t, AnyAlive([]*Conn{a, b, c}))
	for range 4 {
		p := Pick([]*Conn{a, b, c}, &turn)
		require.Same(t, b, p, "the live one, though the dead ones carry less")
		p.Unclaim()
	}
	assert.False(t, AnyAlive([]*Conn{a, c}), "no connection to send on")
	p := Pick([]*Conn{a, c}, &turn)
	require.NotNil(t, p, "with every one dead, one is still given (its send fails unsent)")
	p.Unclaim()
}
