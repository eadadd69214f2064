package transport

import (
	"context"
	"crypto/tls"
	"net"
	"time"
)

// Defaults applied to zero Config fields.
const (
	DefaultDialTimeout  = 10 * time.Second
	DefaultPingInterval = 15 * time.Second
	DefaultPingTimeout  = 5 * time.Second
)

// Config configures Dial. The zero value is valid: HTTP/2 over TLS with the
// system roots, 10 s dial timeout, a PING after 15 s of silence, 5 s to
// answer it.
type Config struct {
	// TLSConfig is used for https:// URLs. It is cloned; NextProtos is
	// overwritten ("h2", plus "http/1.1" when AllowHTTP1) and ServerName
	// defaults to the URL's host. If nil, a default tls.Config is used,
	// which verifies the server against the system roots.
	TLSConfig *tls.Config

	// H2C selects cleartext HTTP/2 with prior knowledge for http:// URLs.
	// It has no HTTP/1 fallback (there is no negotiation in h2c). Ignored
	// for https:// URLs.
	H2C bool

	// AllowHTTP1 permits an HTTP/1.1 connection when HTTP/2 is not
	// available: the TLS server did not select "h2", or the URL is
	// http:// and H2C is false. An HTTP/1.1 Conn carries one request at a
	// time. If false (the default), Dial fails with ErrHTTP2Required
	// instead: the point of this package is one multiplexed connection.
	AllowHTTP1 bool

	// DialTimeout bounds TCP connect plus TLS handshake. Zero means
	// DefaultDialTimeout; negative means no limit beyond the context.
	DialTimeout time.Duration

	// PingInterval is how long the connection may stay silent (no frame
	// received) before a liveness PING is sent (HTTP2Config.SendPingTimeout).
	// Zero means DefaultPingInterval; negative disables pings. HTTP/2 only.
	PingInterval time.Duration

	// PingTimeout is how long to wait for the PING acknowledgement before
	// declaring the connection dead with ErrPingTimeout. Zero means
	// DefaultPingTimeout.
	PingTimeout time.Duration

	// MaxResponseHeaderBytes limits the size of response headers
	// (http.Transport.MaxResponseHeaderBytes; for HTTP/2 it becomes
	// SETTINGS_MAX_HEADER_LIST_SIZE). Zero means the net/http default.
	MaxResponseHeaderBytes int64

	// DisableCompression stops net/http from adding "Accept-Encoding:
	// gzip" and transparently decompressing responses, so bodies pass
	// through unchanged (what a forwarding proxy usually wants).
	DisableCompression bool

	// DialContext, if non-nil, opens the TCP connection (TLS and HTTP/2
	// are layered on top by this package). Useful in tests. If nil, a
	// net.Dialer is used.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (c Config) dialTimeout() time.Duration {
	if c.DialTimeout == 0 {
		return DefaultDialTimeout
	}
	return c.DialTimeout
}

func (c Config) pingInterval() time.Duration {
	switch {
	case c.PingInterval == 0:
		return DefaultPingInterval
	case c.PingInterval < 0:
		return 0
	}
	return c.PingInterval
}

func (c Config) pingTimeout() time.Duration {
	if c.PingTimeout <= 0 {
		return DefaultPingTimeout
	}
	return c.PingTimeout
}

func (c Config) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if c.DialContext != nil {
		return c.DialContext(ctx, network, addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}
