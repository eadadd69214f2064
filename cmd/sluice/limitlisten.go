package main

import (
	"net"
	"sync"
)

// limitListener accepts at most cap(slots) connections at once: Accept
// waits, leaving new clients in the kernel's backlog, until one closes.
// Each open connection costs the proxy about 40 KiB and a goroutine or
// two however little it sends (docs/proxy-performance.md); the body
// budget bounds only what its body holds. (golang.org/x/net/netutil's
// LimitListener does the same; this avoids the dependency.)
type limitListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{} // closed by Close: Accept stops waiting
	once  sync.Once
}

func newLimitListener(l net.Listener, n int) net.Listener {
	if n <= 0 {
		return l
	}
	return &limitListener{Listener: l, slots: make(chan struct{}, n), done: make(chan struct{})}
}

// Accept waits for a free slot, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

// Close closes the listener and ends a waiting Accept.
func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back on its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
