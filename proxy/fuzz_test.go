package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/routes"
)

// seen is one request as the upstream received it.
type seen struct {
	path string // escaped
	auth string
}

// FuzzProxy sends arbitrary methods and paths through a real proxy to a
// real HTTP/2 TLS upstream that records what reaches it, and checks:
//
//   - a path Discord would treat as a token route (after RFC 3986
//     normalisation: percent-decoding, dot segments resolved, empty
//     segments dropped, /api/vN in any case) never reaches the upstream
//     with Authorization, although the proxy has a default bot token;
//   - the proxy's view and the router's agree: what the upstream receives
//     carries Authorization exactly when routes.Parse of the received path
//     says it is not a token route, and that received path is canonical
//     (Discord's view of it is the router's);
//   - every label value on the proxy's metrics is from the bounded set:
//     a method of routes.Methods or "other"; a route "other", "invalid"
//     or a template of known words and placeholders;
//   - no segment of the input that may be a token (not a known word, not
//     a number, longer than routes.MaxLiteralLength) appears in a log
//     line.
func FuzzProxy(f *testing.F) {
	for _, s := range [][2]string{
		{"GET", "/api/v10/channels/1/messages"},
		{"POST", "/api/v10/webhooks/1/tokentokentokentokentokentoken"},
		{"POST", "/api/v10/./webhooks/1/tokentokentokentokentokentoken"},
		{"POST", "/api/v10/x/../webhooks/1/tokentokentokentokentokentoken"},
		{"POST", "/api/v10/%2e%2e/webhooks/1/tokentokentokentokentokentoken"},
		{"POST", "/API/V10/WEBHOOKS/1/tokentokentokentokentokentoken/slack"},
		{"PATCH", "/api/v10/%77ebhooks/1/tokentokentokentokentokentoken/messages/@original"},
		{"POST", "/api/v10/interactions/5/tokentokentokentokentokentoken/callback"},
		{"GET", "/api/v10/webhook/1/tokentokentokentokentokentoken"},
		{"GET", "/v10/webhooks/1/tokentokentokentokentokentoken"},
		{"DELETE", "/api/v10/channels/1/messages/2/reactions/%F0%9F%91%8D/@me"},
		{"FOO", "/api/v10/channels/1"},
		{"GET", "/api/v10/channels/1/a%2F..%2F..%2Fwebhooks"},
	} {
		f.Add(s[0], s[1])
	}
	var (
		mu     sync.Mutex
		got    []seen
		logBuf bytes.Buffer
	)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.URL.EscapedPath(), r.Header.Get("Authorization")})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	up.EnableHTTP2 = true
	up.StartTLS()
	reg := prometheus.NewRegistry()
	p, err := proxy.New(proxy.Config{
		Upstream:     up.URL + "/api/v10",
		DefaultToken: "Bot default-bot-token",
		Limiter: sluice.Options{
			TLSConfig:   up.Client().Transport.(*http.Transport).TLSClientConfig,
			GlobalLimit: 1_000_000,
		},
		CacheTTL: map[int]time.Duration{},
		Registry: reg,
		Logger:   slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logBuf}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
		up.Close()
	})
	f.Fuzz(func(t *testing.T, method, target string) {
		// The request as net/http's server would read it; what it refuses
		// never reaches a handler.
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + target + " HTTP/1.1\r\nHost: proxy\r\n\r\n")))
		if err != nil || req.URL.Host != "" || !strings.HasPrefix(req.URL.EscapedPath(), "/") {
			return
		}
		switch req.URL.Path {
		case proxy.HealthPath, proxy.ReadyPath, proxy.MetricsPath:
			return
		}
		mu.Lock()
		got, logBuf = got[:0], bytes.Buffer{}
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w := httptest.NewRecorder()
		p.ServeHTTP(w, req.WithContext(ctx))
		mu.Lock()
		received, logs := append([]seen(nil), got...), logBuf.String()
		mu.Unlock()

		if len(received) > 1 {
			t.Fatalf("%s %q reached the upstream %d times", method, target, len(received))
		}
		if discordTokenRoute(req.URL.EscapedPath()) {
			for _, s := range received {
				if s.auth != "" {
					t.Fatalf("%s %q is a token route for Discord and went upstream with Authorization (as %q)", method, target, s.path)
				}
			}
		}
		for _, s := range received {
			r, err := routes.Parse(req.Method, s.path)
			if err != nil {
				t.Fatalf("the upstream received %q, which the router refuses: %v", s.path, err)
			}
			if r.PerToken == (s.auth != "") {
				t.Fatalf("the upstream received %q (token route %v) with Authorization %v", s.path, r.PerToken, s.auth != "")
			}
			if discordTokenRoute(s.path) != r.PerToken {
				t.Fatalf("Discord and the router disagree on %q", s.path)
			}
			c, err := routes.CanonicalPath(s.path)
			if err != nil || "/api/"+c.Version+c.Escaped != s.path {
				t.Fatalf("the upstream received %q, not a canonical path (%v)", s.path, err)
			}
		}
		checkLabels(t, reg)
		for _, seg := range strings.FieldsFunc(req.URL.EscapedPath()+"/"+req.URL.Path, func(c rune) bool { return c == '/' }) {
			if len(seg) <= routes.MaxLiteralLength || routes.KnownWord(seg) || strings.Trim(seg, "0123456789") == "" {
				continue
			}
			if strings.Contains(logs, seg) {
				t.Fatalf("the segment %q of %s %q is in the log:\n%s", seg, method, target, logs)
			}
		}
	})
}

// discordTokenRoute is an oracle independent of package routes: whether
// a server that normalises paths as RFC 3986 says would take escaped for
// a webhook or interaction token route.
func discordTokenRoute(escaped string) bool {
	if i := strings.IndexAny(escaped, "?#"); i >= 0 {
		escaped = escaped[:i]
	}
	dec, err := url.PathUnescape(escaped)
	if err != nil {
		return false
	}
	var segs []string // RFC 3986 §5.2.4, with "\" as a separator too
	for _, s := range strings.FieldsFunc(dec, func(c rune) bool { return c == '/' || c == '\\' }) {
		if i := strings.IndexByte(s, ';'); i >= 0 {
			s = s[:i]
		}
		switch s {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, s)
		}
	}
	if len(segs) > 0 && strings.EqualFold(segs[0], "api") {
		segs = segs[1:]
		if len(segs) > 0 && len(segs[0]) > 1 && (segs[0][0] == 'v' || segs[0][0] == 'V') && strings.Trim(segs[0][1:], "0123456789") == "" {
			segs = segs[1:]
		}
	}
	return len(segs) >= 3 && (strings.EqualFold(segs[0], "webhooks") || strings.EqualFold(segs[0], "interactions"))
}

// checkLabels fails t for a label value outside the bounded set.
func checkLabels(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				v := l.GetValue()
				switch l.GetName() {
				case "method":
					if routes.MethodLabel(v) != v {
						t.Fatalf("%s: method label %q", mf.GetName(), v)
					}
				case "route":
					if v == "other" || v == "invalid" {
						continue
					}
					for _, seg := range strings.Split(strings.TrimPrefix(v, "/"), "/") {
						placeholder := len(seg) > 2 && seg[0] == '{' && seg[len(seg)-1] == '}' && strings.Trim(seg[1:len(seg)-1], "abcdefghijklmnopqrstuvwxyz_") == ""
						if !placeholder && !routes.KnownWord(seg) {
							t.Fatalf("%s: route label %q has the segment %q", mf.GetName(), v, seg)
						}
					}
				}
			}
		}
	}
}

// lockedWriter serialises writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
