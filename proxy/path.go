package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/routes"
)

// target is the URL a request is handed to its limiter with, and its
// route: both come from the one canonical path (routes.CanonicalPath), so
// the limiter, which parses the URL's path again, classifies exactly what
// the proxy classified, and the upstream receives that path and no other
// spelling of it. A path with a version (the request's, else the
// upstream's) goes on Discord's host, https://discord.com/api/vN/...,
// which the limiter puts below the upstream's mount point (…/api/vN
// replaced by this version); without one it is relative, below the
// upstream's base path. No spelling can leave that base: CanonicalPath
// refuses dot segments and encoded slashes.
func (p *Proxy) target(r *http.Request) (*url.URL, routes.Route, error) {
	cp, err := routes.CanonicalPath(r.URL.EscapedPath())
	if err != nil {
		return nil, routes.Route{}, err
	}
	if cp.Version == "" {
		cp.Version = p.cfg.version
	}
	raw := cp.String()
	route, err := routes.Parse(r.Method, raw)
	if err != nil {
		return nil, routes.Route{}, err
	}
	path, err := url.PathUnescape(raw)
	if err != nil { // CanonicalPath checked every escape
		return nil, routes.Route{}, fmt.Errorf("%w: %v", sluice.ErrBadRequest, err)
	}
	u := &url.URL{Path: path, RawPath: raw, RawQuery: r.URL.RawQuery}
	if cp.Version != "" {
		u.Scheme, u.Host = "https", "discord.com"
	}
	return u, route, nil
}

// hopHeaders are dropped in both directions (RFC 9110 §7.6.1), as
// httputil.ReverseProxy does.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// copyHeader copies src into dst without hop-by-hop headers, those that
// Connection names, and the names in drop (canonical). It builds no map:
// it runs twice per request.
func copyHeader(dst, src http.Header, drop ...string) {
	var named []string
	for _, v := range src["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				named = append(named, http.CanonicalHeaderKey(f))
			}
		}
	}
	for k, vs := range src {
		if slices.Contains(hopHeaders, k) || slices.Contains(named, k) || slices.Contains(drop, k) {
			continue
		}
		dst[k] = append(dst[k][:0:0], vs...)
	}
}
