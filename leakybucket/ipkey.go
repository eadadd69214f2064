package leakybucket

import (
	"net/http"
	"net/netip"
	"strings"
)

// DefaultIPv6Prefix is the prefix length IPKey keys IPv6 clients by when
// IPv6Prefix is 0: a /64, the block one subscriber usually gets, so that a
// client cannot escape its limit by hopping addresses within it.
const DefaultIPv6Prefix = 64

// IPKey keys requests by client IP address. The client is the peer of the
// connection (Request.RemoteAddr) unless that peer is a trusted proxy: then
// X-Forwarded-For is read from right to left, skipping trusted proxies, and
// the first address not trusted is the client. Only the addresses appended
// by trusted proxies are believed, so a client cannot choose its key by
// sending its own X-Forwarded-For. If every hop is trusted, the leftmost is
// the client; if the first untrusted hop is not an address, the last
// trusted one is.
//
// IPv4 clients (and IPv4-mapped IPv6) are keyed by their address, IPv6
// clients by their IPv6Prefix. A RemoteAddr that is not an IP address
// (a unix socket, a test) is the key as it is.
//
// The zero value trusts no proxy and keys IPv6 by /64. An IPKey is safe for
// concurrent use if its fields are not changed.
type IPKey struct {
	// TrustedProxies are the networks of the proxies whose X-Forwarded-For
	// is believed (for example 10.0.0.0/8 for a load balancer's subnet).
	// Empty means none: X-Forwarded-For is ignored.
	TrustedProxies []netip.Prefix
	// IPv6Prefix is the prefix length IPv6 clients are keyed by, 1 to 128.
	// 0 means DefaultIPv6Prefix (64).
	IPv6Prefix int
}

// Key returns the key of r's client: an address ("203.0.113.7") or an IPv6
// prefix ("2001:db8:1:2::/64").
func (k IPKey) Key(r *http.Request) string {
	peer, ok := parseHost(r.RemoteAddr)
	if !ok {
		return r.RemoteAddr
	}
	client := peer
	if k.trusted(peer) {
		client = k.forwarded(r.Header.Values("X-Forwarded-For"), peer)
	}
	return k.format(client)
}

// forwarded walks the X-Forwarded-For values from the right, from the peer
// last, and returns the first hop that is not trusted.
func (k IPKey) forwarded(values []string, last netip.Addr) netip.Addr {
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for {
			j := strings.LastIndexByte(v, ',')
			hop := strings.TrimSpace(v[j+1:])
			if hop != "" {
				a, ok := parseHost(hop)
				if !ok {
					return last // garbage where a trusted proxy should have written an address
				}
				if !k.trusted(a) {
					return a
				}
				last = a
			}
			if j < 0 {
				break
			}
			v = v[:j]
		}
	}
	return last
}

func (k IPKey) trusted(a netip.Addr) bool {
	for _, p := range k.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (k IPKey) format(a netip.Addr) string {
	if a.Is4() {
		return a.String()
	}
	bits := k.IPv6Prefix
	if bits <= 0 || bits > 128 {
		bits = DefaultIPv6Prefix
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return a.String()
	}
	return p.String()
}

// parseHost parses an address as RemoteAddr or X-Forwarded-For carry it:
// "1.2.3.4", "1.2.3.4:80", "2001:db8::1", "[2001:db8::1]:80". The zone is
// dropped and an IPv4-mapped address becomes IPv4.
func parseHost(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.WithZone("").Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone("").Unmap(), true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.WithZone("").Unmap(), true
		}
	}
	return netip.Addr{}, false
}
