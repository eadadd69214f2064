package main

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLimitListenerHoldsTheCap: with 2 slots, a third connection is
// accepted only once one of the first two closes; Close ends a waiting
// Accept.
func TestLimitListenerHoldsTheCap(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := newLimitListener(inner, 2)
	accepted := make(chan net.Conn, 3)
	acceptDone := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				acceptDone <- err
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String()) // the backlog takes the third
		require.NoError(t, err)
		defer c.Close()
		clients = append(clients, c)
	}
	first, second := <-accepted, <-accepted
	ll := l.(*limitListener)
	assert.Len(t, ll.slots, 2, "both slots held: the third waits in the backlog")
	assert.Empty(t, accepted, "no third connection accepted at the cap")
	require.NoError(t, first.Close())
	_ = first.Close() // a second Close gives nothing back twice
	third := <-accepted
	assert.NotNil(t, third)
	assert.Len(t, ll.slots, 2)
	require.NoError(t, l.Close())
	assert.ErrorIs(t, <-acceptDone, net.ErrClosed)
	second.Close()
	third.Close()
}
