package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/sluicetest"
)

// The tests in this file run "sluice proxy" as an OS process (startProxy)
// in front of a recording upstream that behaves like Discord, and play
// hostile or careless clients against it: paths spelled to make the proxy
// and the API disagree, tokens where the router does not expect them,
// unbounded label values, bodies that are too large or never finish,
// made-up tokens that stall, malformed headers and request smuggling.
// Most clients write HTTP/1.1 by hand on a TCP connection (hostileConn),
// since Go's client normalises or refuses what they send. Every wait is
// bounded: a connection's deadline, waitFor's limit or a timer.

// Values of the X-Sluice-Proxy header that the tests expect, spelled out
// rather than taken from package proxy so that this file also builds
// against a proxy older than some of them.
const (
	hostileBadRequest  = "bad_request"
	hostileMethod      = "method_not_allowed"
	hostileBodyLarge   = "body_too_large"
	hostileBodyTimeout = "body_timeout"
	hostileOverloaded  = "overloaded"
	hostileQueueFull   = "queue_full"
)

// hostileBotToken is the proxy's default token (SLUICE_TOKEN) in these
// tests: shaped like a real bot token, so a leak would be noticed.
const hostileBotToken = "Bot MTA5ODc2NTQzMjEwOTg3NjU0.GhOstl.hostile-default-bot-token-0123456789abcd"

// hostileConnDeadline bounds everything done on one hand-written
// connection, so a proxy that never answers fails the test instead of
// hanging it.
const hostileConnDeadline = 15 * time.Second

// --- the recording upstream ---

// upstreamRequest is one request as the recording upstream received it.
type upstreamRequest struct {
	Method   string
	Path     string // escaped, as sent on the wire
	Query    string
	Auth     string // the Authorization header
	Resolved string // the path as the API reads it (discordResolve)
}

// discordUpstream is a real HTTP/2 server over TLS that records every
// request and answers like Discord would: it resolves dot segments, and a
// resolved path that is a webhook or interaction token route is answered
// 401 "Invalid Webhook Token" when it carries Authorization (the answer
// that makes a limiter take its bot token for revoked), 200 {} without;
// every other path is answered 200 {} with the rate-limit headers of a
// bucket of 5 per second shared by every route ("abc"), or with none when
// plain is set.
type discordUpstream struct {
	srv    *httptest.Server
	mount  string // the path below which the API lives: "" or "/discord"
	plain  bool   // answer other routes without rate-limit headers (set before use)
	caFile string // its certificate, for -ca-file

	mu   sync.Mutex
	reqs []upstreamRequest
}

// newDiscordUpstream starts a recording upstream whose API lives below
// mount ("" for the root); it is closed when t ends.
func newDiscordUpstream(t *testing.T, mount string) *discordUpstream {
	t.Helper()
	u := &discordUpstream{mount: mount}
	u.srv = httptest.NewUnstartedServer(u)
	u.srv.EnableHTTP2 = true
	u.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // connections the killed proxy drops
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	u.caFile = filepath.Join(t.TempDir(), "upstream.pem")
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: u.srv.Certificate().Raw})
	require.NoError(t, os.WriteFile(u.caFile, cert, 0o600))
	return u
}

// APIBase is the -upstream value: the server's URL, the mount and /api/v10.
func (u *discordUpstream) APIBase() string { return u.srv.URL + u.mount + "/api/v10" }

// requests returns a copy of what has been received so far.
func (u *discordUpstream) requests() []upstreamRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.reqs)
}

// ServeHTTP records r and answers it as the type's comment says.
func (u *discordUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	rec := upstreamRequest{
		Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery,
		Auth: r.Header.Get("Authorization"), Resolved: discordResolve(r.URL.EscapedPath()),
	}
	u.mu.Lock()
	u.reqs = append(u.reqs, rec)
	u.mu.Unlock()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if u.tokenRoute(rec.Resolved) {
		if rec.Auth != "" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"message":"Invalid Webhook Token","code":50027}`)
			return
		}
		_, _ = io.WriteString(w, `{}`)
		return
	}
	if u.plain {
		_, _ = io.WriteString(w, `{}`)
		return
	}
	h.Set("X-RateLimit-Limit", "5")
	h.Set("X-RateLimit-Remaining", "4")
	h.Set("X-RateLimit-Reset-After", "1")
	h.Set("X-RateLimit-Bucket", "abc")
	_, _ = io.WriteString(w, `{}`)
}

// tokenRoute reports whether a resolved path is, for the API, a webhook
// or interaction token route: below the mount, /api, a version (both in
// any case), then webhooks/{id}/{token} or interactions/{id}/{token}
// (also in any case: the harsher reading).
func (u *discordUpstream) tokenRoute(resolved string) bool {
	if len(resolved) < len(u.mount) || !strings.EqualFold(resolved[:len(u.mount)], u.mount) {
		return false
	}
	segs := strings.FieldsFunc(resolved[len(u.mount):], func(c rune) bool { return c == '/' })
	if len(segs) > 0 && strings.EqualFold(segs[0], "api") {
		segs = segs[1:]
		if len(segs) > 0 && len(segs[0]) > 1 && (segs[0][0] == 'v' || segs[0][0] == 'V') && strings.Trim(segs[0][1:], "0123456789") == "" {
			segs = segs[1:]
		}
	}
	return len(segs) >= 3 && (strings.EqualFold(segs[0], "webhooks") || strings.EqualFold(segs[0], "interactions"))
}

// discordResolve is the path an escaped path names for a server that
// follows RFC 3986 and is generous about it: percent-decoded, a backslash
// taken for a slash, a dot segment with parameters ("..;x") taken for a
// dot segment, then dot segments resolved and empty segments dropped
// (path.Clean).
func discordResolve(escaped string) string {
	dec, err := url.PathUnescape(escaped)
	if err != nil {
		dec = escaped
	}
	segs := strings.Split(strings.ReplaceAll(dec, `\`, "/"), "/")
	for i, s := range segs {
		if name, _, ok := strings.Cut(s, ";"); ok && (name == "." || name == "..") {
			segs[i] = name
		}
	}
	return path.Clean("/" + strings.Join(segs, "/"))
}

// --- hand-written HTTP/1.1 ---

// hostileConn is one TCP connection to the proxy on which a test writes
// HTTP/1.1 by hand. Everything on it ends by hostileConnDeadline; it is
// closed when the test ends.
type hostileConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

// hostileAnswer is one answer read from a hostileConn.
type hostileAnswer struct {
	status int
	header http.Header
	body   string
	close  bool // the answer says the connection closes after it
	err    error
}

// reason is the answer's X-Sluice-Proxy header.
func (a hostileAnswer) reason() string { return a.header.Get(proxy.ProxyHeader) }

func (a hostileAnswer) String() string {
	if a.err != nil {
		return "error: " + a.err.Error()
	}
	return fmt.Sprintf("%d %s=%q %s", a.status, proxy.ProxyHeader, a.reason(), a.body)
}

// dialHostile opens a connection to p.
func dialHostile(t *testing.T, p *proxyProc) *hostileConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(p.URL, "http://"), 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, c.SetDeadline(time.Now().Add(hostileConnDeadline)))
	t.Cleanup(func() { _ = c.Close() })
	return &hostileConn{t: t, c: c, br: bufio.NewReader(c)}
}

// send writes s and fails the test if it cannot.
func (hc *hostileConn) send(s string) {
	hc.t.Helper()
	_, err := io.WriteString(hc.c, s)
	require.NoError(hc.t, err)
}

// sendAsync writes b from a goroutine, for a body the proxy may stop
// reading before its end (it answers, then closes); the write's error, of
// no interest then, is dropped. The goroutine ends with the connection.
func (hc *hostileConn) sendAsync(b []byte) {
	go func() { _, _ = hc.c.Write(b) }()
}

// read reads one answer; safe from any goroutine.
func (hc *hostileConn) read() hostileAnswer {
	resp, err := http.ReadResponse(hc.br, nil)
	if err != nil {
		return hostileAnswer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return hostileAnswer{status: resp.StatusCode, header: resp.Header, body: string(b), close: resp.Close, err: err}
}

// answer reads one answer and fails the test if there is none.
func (hc *hostileConn) answer() hostileAnswer {
	hc.t.Helper()
	a := hc.read()
	require.NoError(hc.t, a.err)
	return a
}

// closedByProxy reports how the next read ends: nil if the proxy closed
// the connection (EOF, or a reset), else what was read or the error.
func (hc *hostileConn) closedByProxy() error {
	var b [512]byte
	n, err := hc.br.Read(b[:])
	switch {
	case n > 0:
		return fmt.Errorf("the connection is still open: read %q", b[:n])
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return nil
	default:
		return fmt.Errorf("the connection is still open: %w", err)
	}
}

// hostileRequest is a request head as written on the wire: the request
// line with target as given, Host, the header lines, and the blank line.
func hostileRequest(method, target string, header ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: proxy.test\r\n", method, target)
	for _, h := range header {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// exchangeHostile sends req on a new connection and returns the answer.
func exchangeHostile(t *testing.T, p *proxyProc, req string) hostileAnswer {
	t.Helper()
	hc := dialHostile(t, p)
	defer hc.c.Close()
	hc.send(req)
	return hc.answer()
}

// hostileSecret is a random string shaped like a webhook token: 68
// characters of the URL-safe base64 alphabet.
func hostileSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 51)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return base64.RawURLEncoding.EncodeToString(b)
}

// metricsText is the proxy's /metrics page.
func metricsText(t *testing.T, p *proxyProc) string {
	t.Helper()
	status, _, body := p.get(proxy.MetricsPath)
	require.Equal(t, http.StatusOK, status)
	return body
}

// --- the tests ---

// TestProxyHostileDotSegments (security: paths the proxy and the API
// would read differently). With a default bot token, every spelling of a
// webhook route through a dot segment ("." ".." "%2e" "%2E%2E" ".%2e"),
// an encoded slash or backslash, a raw backslash, an encoded control
// character, a semicolon ("webhooks;x", "%3B", "..;x"), a version of more
// than 3 digits ("v0010"), one without /api or a second one ("/v10/"),
// a first segment that is no ASCII word ("webhookſ" by Unicode case
// folding, fullwidth letters, "webhooks%20"), or an escaped escape that a
// server decoding twice reads as another path ("%2577ebhooks",
// "%252e%252e", "%25u002e"), or a segment a normalising server reads as
// dots or a separator ("．．" in fullwidth, "／", the overlong "%C0%AE",
// "..%20") is answered 400 bad_request by the proxy
// and never reaches the upstream, which would resolve it to the webhook
// route and, seeing the bot token on it, answer 401 Invalid Webhook
// Token; afterwards a bot request still gets 200 (the bot token was not taken for revoked);
// and the spellings of a token route that are accepted (words in any
// case, empty segments, an encoded unreserved character, no version)
// reach the upstream without Authorization, on the canonical path.
func TestProxyHostileDotSegments(t *testing.T) {
	t.Parallel()
	up := newDiscordUpstream(t, "")
	p := startProxy(t, []string{"SLUICE_TOKEN=" + hostileBotToken},
		"-listen", "127.0.0.1:0", "-upstream", up.APIBase(), "-ca-file", up.caFile)

	// (a) Refused, each of them a webhook route once resolved.
	refused := []string{
		"/api/v10/webhooks;x/1/tok",
		"/api/v10/webhooks%3Bx/1/tok",
		"/api/v10;x/webhooks/1/tok",
		"/api/v0010/webhooks/1/tok",
		"/v10/webhooks/1/tok",
		"/api/v10/V9/webhooks/1/tok",
		"/Api/v000000000/interACtions/1/tok/callback",
		"/api/v10/webhookſ/1/tok",
		"/api/v10/webhook%C5%BF/1/tok",
		"/api/v10/\uff57\uff45\uff42\uff48\uff4f\uff4f\uff4b\uff53/1/tok",
		"/api/v10/%EF%BD%97ebhooks/1/tok",
		"/api/v10/webhooks%20/1/tok",
		"/api/v10/%2577ebhooks/1/tok",
		"/api/v10/channels/1/%252e%252e/%252e%252e/webhooks/1/tok",
		"/api/v10/channels/1/%25%32%65%25%32%65/webhooks/1/tok",
		"/api/v10/channels/1/\uff0e\uff0e/\uff0e\uff0e/webhooks/1/tok",
		"/api/v10/channels/1/%EF%BC%8E%EF%BC%8E/%EF%BC%8E%EF%BC%8E/webhooks/1/tok",
		"/api/v10/channels/1%EF%BC%8F..%EF%BC%8F..%EF%BC%8Fwebhooks/1/tok",
		"/api/v10/channels/1/%C0%AE%C0%AE/%C0%AE%C0%AE/webhooks/1/tok",
		"/api/v10/channels/1/..%20/..%20/webhooks/1/tok",
		"/api/v10/channels/1/%25u002e%25u002e/%25u002e%25u002e/webhooks/1/tok",
		"/api/v10/./webhooks/1/tok",
		"/api/v10/x/../webhooks/1/tok",
		"/api/v10/%2e/webhooks/1/tok",
		"/api/v10/x/%2E%2E/webhooks/1/tok",
		"/api/v10/x/.%2e/webhooks/1/tok",
		"/api/v10/x/%2e./webhooks/1/tok",
		"/api/v10/x/..;x/webhooks/1/tok",
		"/api/v10/channels/../webhooks/1/tok?wait=true",
		"/api/./v10/webhooks/1/tok",
		"/api/v10/webhooks/1/tok/.",
		"/api/v10/webhooks/1/tok/x/..",
		"/api/v10/channels/1/..%2F..%2Fwebhooks/1/tok",
		"/api/v10/x%2F..%2Fwebhooks/1/tok",
		"/api/v10/x%5C..%5Cwebhooks/1/tok",
		`/api/v10/x\..\webhooks/1/tok`,
		"/api/v10/webhooks%2F1%2Ftok",
		"/api/v10/webhooks/1/tok%00",
		"/api/v10/webhooks/1/tok%0d%0a",
		"/api/v10/webhooks/1/%7Ftok",
	}
	for _, target := range refused {
		a := exchangeHostile(t, p, hostileRequest("POST", target, "Content-Type: application/json", "Content-Length: 2")+"{}")
		assert.Equal(t, http.StatusBadRequest, a.status, "%s: %s", target, a)
		assert.Equal(t, hostileBadRequest, a.reason(), "%s: %s", target, a)
	}
	for _, r := range up.requests() {
		assert.False(t, r.Auth != "" && up.tokenRoute(r.Resolved), "the upstream got the bot token on %s (%s)", r.Path, r.Resolved)
	}
	assert.Empty(t, up.requests(), "a refused request reached the upstream")

	// (b) The bot is not locked out: its token still works.
	status, hdr, body := p.get("/api/v10/channels/1/messages")
	assert.Equal(t, http.StatusOK, status, "a bot request after the hostile ones: %s", body)
	assert.Empty(t, hdr.Get(proxy.ProxyHeader), body)

	// (c) Accepted spellings of a token route: sent without Authorization
	// on the canonical path (the query tells the requests apart).
	accepted := []string{
		"/api/v10/WEBHOOKS/1/tok",
		"/API/V10/webhooks/1/tok",
		"/api/v10//webhooks/1/tok",
		"/api/v10/%77ebhooks/1/tok",
		"/api/v10/webhooks/1/tok/",
		"/api/webhooks/1/tok",
	}
	for i, target := range accepted {
		a := exchangeHostile(t, p, hostileRequest("POST", target+"?case="+strconv.Itoa(i), "Content-Type: application/json", "Content-Length: 2")+"{}")
		assert.Equal(t, http.StatusOK, a.status, "%s: %s", target, a)
		assert.Empty(t, a.reason(), "%s: %s", target, a)
	}
	got := map[string]upstreamRequest{}
	for _, r := range up.requests() {
		if c, ok := strings.CutPrefix(r.Query, "case="); ok {
			got[c] = r
		}
		assert.False(t, r.Auth != "" && up.tokenRoute(r.Resolved), "the upstream got the bot token on %s (%s)", r.Path, r.Resolved)
	}
	for i, target := range accepted {
		r, ok := got[strconv.Itoa(i)]
		if assert.True(t, ok, "%s never reached the upstream", target) {
			assert.Equal(t, "/api/v10/webhooks/1/tok", r.Path, target)
			assert.Empty(t, r.Auth, "%s reached the upstream with Authorization", target)
		}
	}
}

// TestProxyHostileDotSegmentsBelowUpstreamBase (security: leaving the
// upstream's base path). With -upstream …/discord/api/v10, paths that
// climb out of it with ".." or "%2e%2e" (or an encoded slash) are
// answered 400 bad_request and the upstream never receives a path that
// resolves outside /discord/; a webhook request reaches
// /discord/api/v10/webhooks/1/tok without Authorization.
func TestProxyHostileDotSegmentsBelowUpstreamBase(t *testing.T) {
	t.Parallel()
	up := newDiscordUpstream(t, "/discord")
	p := startProxy(t, []string{"SLUICE_TOKEN=" + hostileBotToken},
		"-listen", "127.0.0.1:0", "-upstream", up.APIBase(), "-ca-file", up.caFile)
	for _, target := range []string{
		"/api/v10/../../secret",
		"/api/v10/%2e%2e/%2e%2e/secret",
		"/api/v10/../../../secret",
		"/api/v10/%2e%2e/%2E%2E/.%2e/secret",
		"/api/../../../secret",
		"/../../../../secret",
		"/api/v10/channels/1/../../../../../secret",
		"/api/v10/..%2F..%2F..%2Fsecret",
		"/api/v10/..;x/..;x/..;x/secret",
	} {
		a := exchangeHostile(t, p, hostileRequest("GET", target))
		assert.Equal(t, http.StatusBadRequest, a.status, "%s: %s", target, a)
		assert.Equal(t, hostileBadRequest, a.reason(), "%s: %s", target, a)
	}
	a := exchangeHostile(t, p, hostileRequest("POST", "/api/v10/webhooks/1/tok", "Content-Type: application/json", "Content-Length: 2")+"{}")
	assert.Equal(t, http.StatusOK, a.status, a.String())
	reqs := up.requests()
	for _, r := range reqs {
		assert.True(t, strings.HasPrefix(r.Resolved, "/discord/"), "the upstream received %s, outside /discord/ (%s)", r.Path, r.Resolved)
	}
	if assert.Len(t, reqs, 1, "only the webhook request reaches the upstream: %+v", reqs) {
		assert.Equal(t, "/discord/api/v10/webhooks/1/tok", reqs[0].Path)
		assert.Empty(t, reqs[0].Auth)
	}
}

// TestProxyHostileTokensStayOutOfMetricsAndLogs (secrets: tokens where
// the router does not expect them). With -log-level debug, in the text
// and the JSON log format, requests carry a random 68-character token in
// paths the router does not know as token routes (/x/webhooks/1/T,
// /webhook/1/T, /v10/webhooks/1/T, /channels/1/T/messages), in ones it
// does (/api/V10/webhooks/1/T, an interaction callback), percent-encoded,
// behind a dot segment (refused), as the method itself (a request with no
// real method) and as the caller's Authorization (accepted, and malformed).
// The token appears neither on /metrics nor anywhere in the process's
// output, up to its exit on SIGTERM.
func TestProxyHostileTokensStayOutOfMetricsAndLogs(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			secret := hostileSecret(t)
			up := newDiscordUpstream(t, "")
			p := startProxy(t, []string{"SLUICE_TOKEN=" + hostileBotToken},
				"-listen", "127.0.0.1:0", "-upstream", up.APIBase(), "-ca-file", up.caFile,
				"-log-level", "debug", "-log-format", format)
			escaped := "%" + strings.ToUpper(strconv.FormatUint(uint64(secret[0]), 16)) + secret[1:]
			reqs := []string{
				hostileRequest("GET", "/api/v10/x/webhooks/1/"+secret),
				hostileRequest("GET", "/api/v10/webhook/1/"+secret),
				hostileRequest("GET", "/api/V10/webhooks/1/"+secret),
				hostileRequest("GET", "/v10/webhooks/1/"+secret),
				hostileRequest("GET", "/api/v10/channels/1/"+secret+"/messages"),
				hostileRequest("GET", "/api/v10/webhook/1/"+escaped),
				hostileRequest("GET", "/api/v10/x/../webhook/1/"+secret),
				hostileRequest("PATCH", "/api/v10/webhooks/1/"+secret+"/messages/@original", "Content-Length: 2") + "{}",
				hostileRequest("POST", "/api/v10/interactions/1/"+secret+"/callback", "Content-Length: 2") + "{}",
				hostileRequest(secret, "/api/v10/channels/1/messages"),
				hostileRequest("GET", "/api/v10/users/@me", "Authorization: Bot "+secret),
				hostileRequest("GET", "/api/v10/users/@me", "Authorization: Bot "+secret+"\tx"),
			}
			for _, req := range reqs {
				a := exchangeHostile(t, p, req)
				assert.Less(t, a.status, 500, "%q: %s", req, a)
			}
			metrics := metricsText(t, p)
			assert.NotContains(t, metrics, secret, "the token is on /metrics")
			assert.NotContains(t, metrics, secret[:24], "a part of the token is on /metrics")
			assert.Equal(t, 0, p.stop(syscall.SIGTERM))
			stdout, stderr := p.output()
			assert.NotContains(t, stdout+stderr, secret, "the token is in the output")
			assert.NotContains(t, stdout+stderr, secret[:24], "a part of the token is in the output")
			assert.NotContains(t, stdout+stderr, hostileBotToken[4:], "the default token is in the output")
			assert.GreaterOrEqual(t, strings.Count(stderr, "DEBUG"), len(reqs), "a debug line per request:\n%s", stderr)
		})
	}
}

// TestProxyHostileMetricsLabelsStayBounded (resources: unbounded metric
// series). 1,500 GETs on distinct paths of random words and 150 requests
// with made-up methods, in random order from 8 goroutines on keep-alive
// connections. 150 of the paths are relayed upstream (200); the others
// carry an X-Sluice-Max-Wait the proxy cannot read, so they are refused
// 400 bad_request at once (the route label is taken all the same, and the
// limit of 50 requests a second upstream would make 1,500 last 30 s).
// Made-up methods are answered 405 method_not_allowed with Allow. On
// /metrics, sluice_proxy_requests_total then has at most 257 route values,
// its methods are Discord's or "other", it counts every request, and the
// page is under 256 KiB. Then 600 paths made of Discord's own words,
// enough distinct templates to pass the proxy's bound of 256 route
// values: there are still at most 257 across every metric, the rest
// counted as "other".
func TestProxyHostileMetricsLabelsStayBounded(t *testing.T) {
	t.Parallel()
	up := newDiscordUpstream(t, "")
	up.plain = true // no shared bucket: the relayed paths wait only for the global limit
	p := startProxy(t, []string{"SLUICE_TOKEN=" + hostileBotToken},
		"-listen", "127.0.0.1:0", "-upstream", up.APIBase(), "-ca-file", up.caFile)
	rng := mathrand.New(mathrand.NewPCG(mathrand.Uint64(), mathrand.Uint64()))
	word := func(letters string, min, max int) string {
		b := make([]byte, min+rng.IntN(max-min+1))
		for i := range b {
			b[i] = letters[rng.IntN(len(letters))]
		}
		return string(b)
	}
	const lower, upper = "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	// request is one request to send; relayed ones go upstream, the others
	// have a bad X-Sluice-Max-Wait.
	type request struct {
		method, path string
		relayed      bool
	}
	var junk []request
	seen := map[string]bool{}
	for len(junk) < 1500 {
		segs := make([]string, 1+rng.IntN(4))
		for i := range segs {
			segs[i] = word(lower, 3, 12)
		}
		if target := "/api/v10/" + strings.Join(segs, "/"); !seen[target] {
			seen[target] = true
			junk = append(junk, request{"GET", target, len(junk) < 150})
		}
	}
	allowed := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"}
	for n := 0; n < 150; {
		m := word(upper, 3, 10)
		if slices.Contains(allowed, m) || m == "CONNECT" || m == "PRI" || seen[m] {
			continue
		}
		seen[m] = true
		junk = append(junk, request{m, "/api/v10/channels/1/messages", false})
		n++
	}
	mathrand.Shuffle(len(junk), func(i, j int) { junk[i], junk[j] = junk[j], junk[i] })

	// send sends reqs from 8 goroutines and checks every answer.
	send := func(reqs []request) {
		t.Helper()
		type result struct {
			req    request
			status int
			header http.Header
			err    error
		}
		const workers = 8
		tr := &http.Transport{MaxIdleConnsPerHost: workers}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
		jobs, results := make(chan request), make(chan result, len(reqs))
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range jobs {
					req, err := http.NewRequest(r.method, p.URL+r.path, nil)
					if err != nil {
						results <- result{req: r, err: err}
						continue
					}
					if !r.relayed {
						req.Header.Set("X-Sluice-Max-Wait", "soon")
					}
					resp, err := client.Do(req)
					if err != nil {
						results <- result{req: r, err: err}
						continue
					}
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					results <- result{r, resp.StatusCode, resp.Header, err}
				}
			}()
		}
		for _, r := range reqs {
			jobs <- r
		}
		close(jobs)
		wg.Wait()
		close(results)
		statuses := map[string]int{}
		for r := range results {
			if !assert.NoError(t, r.err, "%s %s", r.req.method, r.req.path) {
				continue
			}
			reason := r.header.Get(proxy.ProxyHeader)
			statuses[strconv.Itoa(r.status)+" "+reason]++
			switch {
			case r.req.method != "GET":
				assert.Equal(t, http.StatusMethodNotAllowed, r.status, r.req.method)
				assert.Equal(t, hostileMethod, reason, r.req.method)
				assert.Contains(t, r.header.Get("Allow"), "GET", r.req.method)
			case r.req.relayed:
				assert.Equal(t, http.StatusOK, r.status, "%s %s: %s", r.req.method, r.req.path, reason)
			default:
				assert.Equal(t, http.StatusBadRequest, r.status, "%s %s: %s", r.req.method, r.req.path, reason)
				assert.Equal(t, hostileBadRequest, reason, "%s %s", r.req.method, r.req.path)
			}
		}
		t.Logf("answers: %v", statuses)
	}
	// labels returns the values of label on the samples of the metrics
	// whose lines start with prefix, and the page's size.
	labels := func(prefix, label string) (map[string]bool, int) {
		t.Helper()
		page := metricsText(t, p)
		re := regexp.MustCompile(`[{,]` + label + `="((?:[^"\\]|\\.)*)"`)
		values := map[string]bool{}
		for _, line := range strings.Split(page, "\n") {
			if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, prefix) {
				continue
			}
			if m := re.FindStringSubmatch(line); m != nil {
				values[m[1]] = true
			}
		}
		return values, len(page)
	}

	send(junk)
	routes, size := labels("sluice_proxy_requests_total{", "route")
	methods, _ := labels("sluice_proxy_requests_total{", "method")
	t.Logf("after %d junk requests: %d route values %v, methods %v, /metrics %d bytes",
		len(junk), len(routes), slices.Sorted(maps.Keys(routes)), slices.Sorted(maps.Keys(methods)), size)
	assert.LessOrEqual(t, len(routes), 257, "route values")
	for m := range methods {
		assert.Contains(t, allowed, m, "method value")
	}
	assert.Less(t, size, 256<<10, "/metrics size")
	assert.Equal(t, float64(len(junk)), p.metric("sluice_proxy_requests_total"), "every request counted")

	// Paths of Discord's words (none starting a token route, which
	// needs an id): many distinct plausible templates.
	words := strings.Fields(`channels messages pins typing members roles bans emojis stickers threads
		invites users guilds commands permissions reactions search archived public private
		preview prune regions templates integrations widget voice-states onboarding`)
	var known []request
	for len(known) < 600 {
		segs := make([]string, 2+rng.IntN(3))
		for i := range segs {
			segs[i] = words[rng.IntN(len(words))]
		}
		if target := "/api/v10/" + strings.Join(segs, "/"); !seen[target] {
			seen[target] = true
			known = append(known, request{"GET", target, false})
		}
	}
	send(known)
	routes, size = labels("", "route")
	t.Logf("after %d more on Discord's words: %d route values, /metrics %d bytes", len(known), len(routes), size)
	assert.LessOrEqual(t, len(routes), 257, "route values")
	assert.True(t, routes["other"], "past the bound, routes are counted as other")
}

// TestProxyHostileBodiesAreBounded (resources: memory held by request
// bodies). With -max-body 1 MiB and -max-buffered 3 MiB: a Content-Length
// of 2 MiB is answered 413 body_too_large (Discord's code 40005) before a
// byte of the body is sent; a chunked upload of 3 MiB is answered 413
// too. Five uploads of 1 MiB that each send 900 KiB and stall hold about
// 950 KiB each (the chunks their bytes filled): once three hold theirs,
// the next one to need memory is
// answered 503 overloaded with Retry-After and Connection: close (which
// one depends on the order the proxy reads them; the first answer is
// awaited). Once the stalled ones hang up, their memory is given back: a
// 1 MiB upload and a small one are served again.
func TestProxyHostileBodiesAreBounded(t *testing.T) {
	t.Parallel()
	up := newDiscordUpstream(t, "")
	p := startProxy(t, []string{"SLUICE_TOKEN=" + hostileBotToken},
		"-listen", "127.0.0.1:0", "-upstream", up.APIBase(), "-ca-file", up.caFile,
		"-max-body", "1048576", "-max-buffered", "3145728")
	const mib = 1 << 20
	post := func(channel int, header ...string) string {
		return hostileRequest("POST", fmt.Sprintf("/api/v10/channels/%d/messages", channel), append([]string{"Content-Type: application/json"}, header...)...)
	}
	tooLarge := func(what string, a hostileAnswer) {
		t.Helper()
		assert.Equal(t, http.StatusRequestEntityTooLarge, a.status, "%s: %s", what, a)
		assert.Equal(t, hostileBodyLarge, a.reason(), "%s: %s", what, a)
		var body struct{ Code int }
		if assert.NoError(t, json.Unmarshal([]byte(a.body), &body), "%s: %s", what, a) {
			assert.Equal(t, 40005, body.Code, "%s: %s", what, a)
		}
	}
	// upload sends a full body of n bytes on a new connection.
	upload := func(channel, n int) hostileAnswer {
		t.Helper()
		hc := dialHostile(t, p)
		defer hc.c.Close()
		hc.send(post(channel, "Content-Length: "+strconv.Itoa(n)))
		hc.sendAsync(bytes.Repeat([]byte("x"), n))
		return hc.answer()
	}

	// Announced too large: the headers alone get the answer.
	hc := dialHostile(t, p)
	hc.send(post(1, "Content-Length: 2097152"))
	tooLarge("Content-Length 2 MiB", hc.answer())

	// Chunked, too large once read.
	hc = dialHostile(t, p)
	hc.send(post(2, "Transfer-Encoding: chunked"))
	var chunked bytes.Buffer
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for range 3 * mib / len(chunk) {
		fmt.Fprintf(&chunked, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	chunked.WriteString("0\r\n\r\n")
	hc.sendAsync(chunked.Bytes())
	tooLarge("chunked 3 MiB", hc.answer())

	// Five stalled uploads: four fit, the fifth to need memory does not.
	const stalledN, sent = 5, 900 << 10
	stalled := make([]*hostileConn, stalledN)
	answers := make(chan hostileAnswer, stalledN)
	for i := range stalled {
		hc := dialHostile(t, p)
		hc.send(post(10+i, "Content-Length: "+strconv.Itoa(mib)))
		hc.sendAsync(bytes.Repeat([]byte("x"), sent))
		stalled[i] = hc
		go func() { answers <- hc.read() }()
	}
	first := <-answers // bounded by the connections' deadline
	require.NoError(t, first.err)
	assert.Equal(t, http.StatusServiceUnavailable, first.status, first.String())
	assert.Equal(t, hostileOverloaded, first.reason(), first.String())
	assert.NotEmpty(t, first.header.Get("Retry-After"), first.String())
	assert.True(t, first.close, "Connection: close on %s", first)

	// They hang up: every byte they held is given back.
	for _, hc := range stalled {
		_ = hc.c.Close()
	}
	channel := 100
	waitFor(t, 10*time.Second, "a 1 MiB upload served once the stalled ones are gone", func() bool {
		channel++
		a := upload(channel, mib)
		require.True(t, a.status == http.StatusOK || a.reason() == hostileOverloaded, a.String())
		return a.status == http.StatusOK
	})
	a := upload(200, 20)
	assert.Equal(t, http.StatusOK, a.status, "a small upload: %s", a)
	assert.Empty(t, a.reason(), a.String())
}

// TestProxyHostileStalledTokensTakeNoPlace (resources: -max-tokens taken
// by made-up tokens). With -max-tokens 2 and -body-timeout 2s, four
// uploads with four made-up tokens send 10 bytes of their 1,000 and
// stall. While they stall, a request on the default token and one on a
// new token are both served by the upstream (200), not refused
// queue_full; the stalled ones are answered 408 body_timeout, and none of
// their tokens reaches the upstream.
func TestProxyHostileStalledTokensTakeNoPlace(t *testing.T) {
	t.Parallel()
	up := newDiscordUpstream(t, "")
	p := startProxy(t, []string{"SLUICE_TOKEN=" + hostileBotToken},
		"-listen", "127.0.0.1:0", "-upstream", up.APIBase(), "-ca-file", up.caFile,
		"-max-tokens", "2", "-body-timeout", "2s")
	const n = 4
	answers := make(chan hostileAnswer, n)
	for i := range n {
		hc := dialHostile(t, p)
		require.NoError(t, hc.c.SetDeadline(time.Now().Add(10*time.Second))) // the body timeout is 2 s
		hc.send(hostileRequest("POST", fmt.Sprintf("/api/v10/channels/%d/messages", i+1),
			fmt.Sprintf("Authorization: Bot madeup%d", i+1), "Content-Type: application/json", "Content-Length: 1000") + `{"content"`)
		go func() { answers <- hc.read() }()
	}
	// Every one in the proxy (or, for a proxy that refuses some,
	// answered) before the others are sent.
	var early []hostileAnswer
	waitFor(t, 10*time.Second, "the stalled uploads in the proxy", func() bool {
		for len(answers) > 0 {
			early = append(early, <-answers)
		}
		return len(early)+int(p.metric("sluice_proxy_requests_in_flight")) >= n
	})
	require.Empty(t, early, "stalled uploads answered at once")

	status, hdr, body := p.get("/api/v10/users/@me")
	assert.Equal(t, http.StatusOK, status, "the default token while they stall: %s", body)
	assert.Empty(t, hdr.Get(proxy.ProxyHeader), body)
	status, hdr, body = p.get("/api/v10/users/@me", "Authorization", "Bot fresh")
	assert.Equal(t, http.StatusOK, status, "a new token while they stall: %s", body)
	assert.Empty(t, hdr.Get(proxy.ProxyHeader), body)
	select {
	case a := <-answers:
		t.Errorf("a stalled upload was answered before the other requests were served (%s): the test proves nothing", a)
		answers <- a
	default:
	}

	for range n {
		a := <-answers // bounded by the connections' deadline
		if !assert.NoError(t, a.err, "a stalled upload got no answer 10 s after it stalled, with a body timeout of 2 s") {
			continue
		}
		assert.Equal(t, http.StatusRequestTimeout, a.status, a.String())
		assert.Equal(t, hostileBodyTimeout, a.reason(), a.String())
	}
	for _, r := range up.requests() {
		assert.NotContains(t, r.Auth, "madeup", "a stalled upload reached the upstream")
	}
}

// TestProxyHostileStalledBodyOfARefusedRequest (resources: connections
// held by stalled uploads that the proxy answers without reading their
// body). With -body-timeout 2s, requests that announce a body of 1,000
// bytes, send 10 and stall, and are answered before their body is read
// (refused for a dot segment, a made-up method, a malformed
// Authorization or a malformed X-Sluice-Max-Wait; or replayed from the
// cache of 404s), still get their answer within 6 s: it is not held back
// until the client sends the rest of a body it may never send, which
// would hold the connection and its goroutine for as long as the client
// likes (and a SIGTERM for the whole grace period).
func TestProxyHostileStalledBodyOfARefusedRequest(t *testing.T) {
	t.Parallel()
	srv, ca := newUpstream(t, sluicetest.Options{}) // the simulator: 404 for a route it does not know
	p := startProxy(t, []string{"SLUICE_TOKEN=" + hostileBotToken},
		"-listen", "127.0.0.1:0", "-upstream", srv.APIBase(), "-ca-file", ca, "-body-timeout", "2s")
	const missing = "/api/v10/channels/5/nothing"
	for i, want := range []string{"", "hit"} {
		status, hdr, body := p.get(missing)
		require.Equal(t, http.StatusNotFound, status, body)
		require.Equal(t, want, hdr.Get(proxy.CacheHeader), "404 #%d", i+1)
	}
	cases := []struct {
		method, target, header string
		status                 int
		reason, cache          string // the X-Sluice-Proxy and X-Sluice-Cache headers
	}{
		{"POST", "/api/v10/x/../channels/1/messages", "Content-Type: application/json", http.StatusBadRequest, hostileBadRequest, ""},
		{"FOO", "/api/v10/channels/1/messages", "Content-Type: application/json", http.StatusMethodNotAllowed, hostileMethod, ""},
		{"POST", "/api/v10/channels/1/messages", "Authorization: Bot a b", http.StatusBadRequest, hostileBadRequest, ""},
		{"POST", "/api/v10/channels/1/messages", "X-Sluice-Max-Wait: soon", http.StatusBadRequest, hostileBadRequest, ""},
		{"GET", missing, "Content-Type: application/json", http.StatusNotFound, "", "hit"},
	}
	answers := make([]chan hostileAnswer, len(cases))
	for i, tc := range cases {
		hc := dialHostile(t, p)
		require.NoError(t, hc.c.SetDeadline(time.Now().Add(6*time.Second)))
		hc.send(hostileRequest(tc.method, tc.target, tc.header, "Content-Length: 1000") + `{"content"`)
		answers[i] = make(chan hostileAnswer, 1)
		go func() { answers[i] <- hc.read() }()
	}
	for i, tc := range cases {
		a := <-answers[i] // bounded by the connection's deadline
		what := tc.method + " " + tc.target + " " + tc.header
		if !assert.NoError(t, a.err, "%s: no answer 6 s after its body stalled", what) {
			continue
		}
		assert.Equal(t, tc.status, a.status, "%s: %s", what, a)
		assert.Equal(t, tc.reason, a.reason(), "%s: %s", what, a)
		assert.Equal(t, tc.cache, a.header.Get(proxy.CacheHeader), "%s: %s", what, a)
	}
}

// TestProxyHostileBadInputIsNot5xx (robustness: bad input is the caller's
// fault, never a 5xx). An Authorization value with a tab, with a byte of
// 0x80 or more, with a space inside the token, or of 600 bytes is answered
// 400 bad_request; an X-Sluice-Max-Wait value outside the strict grammar
// (1_000 1e3 0x10 Inf +5 -1 .5 NaN) is answered 400 bad_request, while
// 2.5 and 2500ms are accepted.
func TestProxyHostileBadInputIsNot5xx(t *testing.T) {
	t.Parallel()
	up := newDiscordUpstream(t, "")
	p := startProxy(t, []string{"SLUICE_TOKEN=" + hostileBotToken},
		"-listen", "127.0.0.1:0", "-upstream", up.APIBase(), "-ca-file", up.caFile)
	for _, auth := range []string{
		"Bot abc\tdef",
		"Bot abc\xffdef",
		"Bot \x80abcdef",
		"abc\xc3\xa9def",
		"Bot abc def",
		"Bot " + strings.Repeat("a", 596),
	} {
		a := exchangeHostile(t, p, hostileRequest("GET", "/api/v10/users/@me", "Authorization: "+auth))
		assert.Equal(t, http.StatusBadRequest, a.status, "Authorization %q: %s", auth, a)
		assert.Equal(t, hostileBadRequest, a.reason(), "Authorization %q: %s", auth, a)
	}
	for _, v := range []string{"1_000", "1e3", "0x10", "Inf", "+5", "-1", ".5", "NaN"} {
		status, hdr, body := p.get("/api/v10/users/@me", "X-Sluice-Max-Wait", v)
		assert.Equal(t, http.StatusBadRequest, status, "X-Sluice-Max-Wait %q: %s", v, body)
		assert.Equal(t, hostileBadRequest, hdr.Get(proxy.ProxyHeader), "X-Sluice-Max-Wait %q: %s", v, body)
	}
	for i, v := range []string{"2.5", "2500ms"} {
		status, hdr, body := p.get(fmt.Sprintf("/api/v10/channels/%d/messages", i+1), "X-Sluice-Max-Wait", v)
		assert.Equal(t, http.StatusOK, status, "X-Sluice-Max-Wait %q: %s", v, body)
		assert.Empty(t, hdr.Get(proxy.ProxyHeader), "X-Sluice-Max-Wait %q: %s", v, body)
	}
}

// TestProxyHostileSmuggling (security: request smuggling over HTTP/1.1).
// A POST with both Content-Length and Transfer-Encoding: chunked, whose
// chunked body ends at once and is followed, in the same write, by a
// second request: the answer to the first says Connection: close, the
// proxy then closes the connection, and the upstream never receives the
// second.
func TestProxyHostileSmuggling(t *testing.T) {
	t.Parallel()
	up := newDiscordUpstream(t, "")
	p := startProxy(t, []string{"SLUICE_TOKEN=" + hostileBotToken},
		"-listen", "127.0.0.1:0", "-upstream", up.APIBase(), "-ca-file", up.caFile)
	smuggled := hostileRequest("GET", "/api/v10/smuggled/1")
	body := "0\r\n\r\n" + smuggled
	hc := dialHostile(t, p)
	hc.send(hostileRequest("POST", "/api/v10/channels/1/messages", "Content-Type: application/json",
		"Content-Length: "+strconv.Itoa(len(body)), "Transfer-Encoding: chunked") + body)
	a := hc.answer()
	t.Logf("first answer: %s", a)
	assert.Less(t, a.status, 500, a.String())
	assert.True(t, a.close, "the answer does not close the connection: Connection %q", a.header.Get("Connection"))
	assert.NoError(t, hc.closedByProxy(), "after the answer")
	for _, r := range up.requests() {
		assert.NotContains(t, r.Path, "smuggled", "the smuggled request reached the upstream")
	}
}
