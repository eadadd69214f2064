package proxy

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// upstreamPath maps a request's escaped path to the upstream's: the
// /api or /api/vN prefix a bot library puts before the resource is
// replaced by the upstream base's path, keeping the request's own version
// when it names one. With the base https://discord.com/api/v10:
//
//	/api/v9/channels/1   → /api/v9/channels/1
//	/api/channels/1      → /api/v10/channels/1
//	/channels/1          → /api/v10/channels/1
//
// A base without a version (…/api) gets the request's path below it.
func upstreamPath(base, escaped string) string {
	rest, version := escaped, ""
	if r, ok := cutSegment(rest, "api"); ok {
		rest = r
		if seg, r2, ok := firstSegment(rest); ok && isVersion(seg) {
			version, rest = seg, r2
		}
	}
	if version != "" {
		if dir, last, ok := lastSegment(base); ok && isVersion(last) {
			base = dir + "/" + version
		} else {
			base += "/" + version
		}
	}
	if rest == "" {
		return base + "/"
	}
	return base + rest
}

// cutSegment removes the first path segment if it is name ("/api/x" →
// "/x", "/api" → "").
func cutSegment(p, name string) (string, bool) {
	seg, rest, ok := firstSegment(p)
	if !ok || !strings.EqualFold(seg, name) {
		return p, false
	}
	return rest, true
}

// firstSegment splits "/a/b" into "a" and "/b".
func firstSegment(p string) (seg, rest string, ok bool) {
	if !strings.HasPrefix(p, "/") {
		return "", p, false
	}
	p = p[1:]
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i], p[i:], true
	}
	return p, "", p != ""
}

// lastSegment splits "/api/v10" into "/api" and "v10".
func lastSegment(p string) (dir, seg string, ok bool) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", "", false
	}
	return p[:i], p[i+1:], true
}

// isVersion reports "v" followed by digits.
func isVersion(s string) bool {
	if len(s) < 2 || (s[0] != 'v' && s[0] != 'V') {
		return false
	}
	for _, c := range s[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// upstreamURL is the absolute URL a request is sent to.
func upstreamURL(base *url.URL, in *url.URL) *url.URL {
	u := *base
	escaped := upstreamPath(base.EscapedPath(), in.EscapedPath())
	p, err := url.PathUnescape(escaped)
	if err != nil {
		p = escaped // routes.Parse refuses it before it is sent
	}
	u.Path, u.RawPath = p, escaped
	u.RawQuery = in.RawQuery
	return &u
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
