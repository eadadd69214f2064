package leakybucket

import (
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestIPKey(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, c := range []struct {
		name    string
		key     IPKey
		remote  string
		xff     []string
		want    string
		comment string
	}{
		{"v4", IPKey{}, "203.0.113.7:5678", nil, "203.0.113.7", ""},
		{"v6 by /64", IPKey{}, "[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1:2::/64", ""},
		{"v6 by /128", IPKey{IPv6Prefix: 128}, "[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1:2:3:4:5:6/128", ""},
		{"v6 by /48", IPKey{IPv6Prefix: 48}, "[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1::/48", ""},
		{"v6 prefix out of range", IPKey{IPv6Prefix: 200}, "[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1:2::/64", ""},
		{"v4-mapped", IPKey{}, "[::ffff:203.0.113.7]:1", nil, "203.0.113.7", ""},
		{"zone dropped", IPKey{}, "[fe80::1%eth0]:80", nil, "fe80::/64", ""},
		{"no port", IPKey{}, "203.0.113.7", nil, "203.0.113.7", ""},
		{"not an address", IPKey{}, "@", nil, "@", "a unix socket's peer"},
		{"untrusted peer", IPKey{TrustedProxies: proxies}, "203.0.113.7:1", []string{"198.51.100.9"}, "203.0.113.7", "a client cannot choose its key"},
		{"no proxies trusted", IPKey{}, "10.0.0.5:1", []string{"198.51.100.9"}, "10.0.0.5", ""},
		{"trusted peer", IPKey{TrustedProxies: proxies}, "10.0.0.5:1", []string{"198.51.100.9"}, "198.51.100.9", ""},
		{"spoofed left", IPKey{TrustedProxies: proxies}, "10.0.0.5:1", []string{"6.6.6.6, 198.51.100.9, 10.0.0.7"}, "198.51.100.9", "6.6.6.6 was sent by the client"},
		{"several fields", IPKey{TrustedProxies: proxies}, "10.0.0.5:1", []string{"6.6.6.6", "198.51.100.9, 10.0.0.7"}, "198.51.100.9", ""},
		{"all trusted", IPKey{TrustedProxies: proxies}, "10.0.0.5:1", []string{"10.1.1.1, 10.2.2.2"}, "10.1.1.1", "the leftmost"},
		{"garbage", IPKey{TrustedProxies: proxies}, "10.0.0.5:1", []string{"6.6.6.6, garbage, 10.0.0.7"}, "10.0.0.7", "the last trusted hop"},
		{"empty field", IPKey{TrustedProxies: proxies}, "10.0.0.5:1", []string{""}, "10.0.0.5", ""},
		{"empty entries", IPKey{TrustedProxies: proxies}, "10.0.0.5:1", []string{"198.51.100.9, ,  ,"}, "198.51.100.9", ""},
		{"ports in the header", IPKey{TrustedProxies: proxies}, "10.0.0.5:1", []string{"198.51.100.9:1234"}, "198.51.100.9", ""},
		{"v6 in the header", IPKey{TrustedProxies: proxies}, "[fd00::1]:1", []string{"[2001:db8::9]:80, fd00::2"}, "2001:db8::/64", ""},
		{"bracketed v6", IPKey{TrustedProxies: proxies}, "[fd00::1]:1", []string{"[2001:db8::9]"}, "2001:db8::/64", ""},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := c.key.Key(r); got != c.want {
			t.Errorf("%s: %q, want %q %s", c.name, got, c.want, c.comment)
		}
	}
}
