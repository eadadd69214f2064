package main

// Tests of discordgo against the Sluice proxy (package proxy): the bot keeps
// discordgo's default http.Client, with no Sluice transport, and reaches
// the API through the proxy because discordgo's endpoint variables point at
// it. The proxy is the limiter.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/sluicetest"
)

// IDs and tokens of the proxy tests. Ids are snowflakes, as Discord's are
// (the proxy refuses a webhook id that is not one).
const (
	botToken      = "proxy-test-bot-token"
	rejectedToken = "not-a-valid-token"
	guildID       = "1200000000000000001"
	roleID        = "1400000000000000001"
	hookID        = "1500000000000000001"
	hookToken     = "webhook-token-0123456789"
	revokedHook   = "revoked-webhook-token-42"
	forbiddenChan = "1100000000000000666"
	knownMessage  = "1600000000000000001" // a message edited and reacted to by id
)

func channelID(i int) string { return fmt.Sprintf("11000000000000000%02d", i+1) }
func userID(i int) string    { return fmt.Sprintf("13000000000000000%02d", i+1) }

// apiEndpoint is one of discordgo's package-level endpoint strings that it
// computes from EndpointAPI when the package is initialised.
type apiEndpoint struct {
	name   string
	p      *string
	suffix string // the variable is EndpointAPI + suffix
}

// apiEndpoints lists every string endpoint of discordgo v0.29.0 derived
// from EndpointAPI (endpoints.go). The endpoint functions
// (EndpointChannelMessages, ...) read these variables when called, so
// setting them is enough. useDiscordAt checks every entry against the
// values discordgo computed, so a discordgo upgrade that changes them
// fails loudly instead of sending some calls to discord.com.
func apiEndpoints() []apiEndpoint {
	return []apiEndpoint{
		{"EndpointGuilds", &discordgo.EndpointGuilds, "guilds/"},
		{"EndpointChannels", &discordgo.EndpointChannels, "channels/"},
		{"EndpointUsers", &discordgo.EndpointUsers, "users/"},
		{"EndpointGateway", &discordgo.EndpointGateway, "gateway"},
		{"EndpointGatewayBot", &discordgo.EndpointGatewayBot, "gateway/bot"},
		{"EndpointWebhooks", &discordgo.EndpointWebhooks, "webhooks/"},
		{"EndpointStickers", &discordgo.EndpointStickers, "stickers/"},
		{"EndpointStageInstances", &discordgo.EndpointStageInstances, "stage-instances"},
		{"EndpointSKUs", &discordgo.EndpointSKUs, "skus"},
		{"EndpointVoice", &discordgo.EndpointVoice, "/voice/"},
		{"EndpointVoiceRegions", &discordgo.EndpointVoiceRegions, "/voice/regions"},
		{"EndpointNitroStickersPacks", &discordgo.EndpointNitroStickersPacks, "/sticker-packs"},
		{"EndpointGuildCreate", &discordgo.EndpointGuildCreate, "guilds"},
		{"EndpointApplications", &discordgo.EndpointApplications, "applications"},
		{"EndpointOAuth2", &discordgo.EndpointOAuth2, "oauth2/"},
		{"EndpointOAuth2Applications", &discordgo.EndpointOAuth2Applications, "oauth2/applications"},
		{"EndpointOauth2", &discordgo.EndpointOauth2, "oauth2/"},
		{"EndpointOauth2Applications", &discordgo.EndpointOauth2Applications, "oauth2/applications"},
	}
}

// useDiscordAt points discordgo at origin ("http://127.0.0.1:8080") instead
// of https://discord.com, as a bot using the proxy would: EndpointDiscord,
// EndpointAPI and every string built from EndpointAPI. restore puts the
// previous values back (also done at cleanup). Not safe while discordgo
// calls are running; the tests of this package do not run in parallel.
func useDiscordAt(t *testing.T, origin string) (restore func()) {
	t.Helper()
	vars := apiEndpoints()
	oldDiscord, oldAPI := discordgo.EndpointDiscord, discordgo.EndpointAPI
	if oldAPI != oldDiscord+"api/v"+discordgo.APIVersion+"/" {
		t.Fatalf("discordgo.EndpointAPI = %q is not EndpointDiscord + \"api/v\" + APIVersion + \"/\": update useDiscordAt for this discordgo version", oldAPI)
	}
	saved := make([]string, len(vars))
	for i, v := range vars {
		saved[i] = *v.p
		if *v.p != oldAPI+v.suffix {
			t.Fatalf("discordgo.%s = %q, not EndpointAPI + %q: update apiEndpoints for this discordgo version", v.name, *v.p, v.suffix)
		}
	}
	var once sync.Once
	restore = func() {
		once.Do(func() {
			discordgo.EndpointDiscord, discordgo.EndpointAPI = oldDiscord, oldAPI
			for i, v := range vars {
				*v.p = saved[i]
			}
		})
	}
	t.Cleanup(restore)
	discordgo.EndpointDiscord = strings.TrimSuffix(origin, "/") + "/"
	discordgo.EndpointAPI = discordgo.EndpointDiscord + "api/v" + discordgo.APIVersion + "/"
	for _, v := range vars {
		*v.p = discordgo.EndpointAPI + v.suffix
	}
	return restore
}

// testRules are the simulator's default rules plus GET
// /guilds/{guild_id}/members/{user_id} (discordgo's GuildMember), which
// the default set does not serve.
func testRules() sluicetest.RuleSet {
	rs := sluicetest.DefaultRules()
	rs.Rules = append(rs.Rules, sluicetest.Rule{
		Name: "get_member", Method: http.MethodGet, Route: "/guilds/{guild_id}/members/{user_id}",
		Bucket: "c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6", Limit: 5, Window: sluicetest.Duration(time.Second),
	})
	return rs
}

// answer is one answer as the bot's side saw it.
type answer struct {
	method, path string
	status       int
	header       http.Header
}

// reason is the answer's proxy.ProxyHeader: set on the proxy's own answers.
func (a answer) reason() string { return a.header.Get(proxy.ProxyHeader) }

// cached is its proxy.CacheHeader: "hit" on an answer from the cache.
func (a answer) cached() bool { return a.header.Get(proxy.CacheHeader) == "hit" }

// recorder keeps every answer of the handler or transport it wraps.
type recorder struct {
	base http.RoundTripper // as a transport

	mu  sync.Mutex
	all []answer
}

func (rec *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		rec.add(answer{r.Method, r.URL.EscapedPath(), sw.status, w.Header().Clone()})
	})
}

func (rec *recorder) add(a answer) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.all = append(rec.all, a)
}

// RoundTrip makes rec an http.RoundTripper around rec.base.
func (rec *recorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := rec.base.RoundTrip(r)
	if err == nil {
		rec.add(answer{r.Method, r.URL.EscapedPath(), resp.StatusCode, resp.Header.Clone()})
	}
	return resp, err
}

func (rec *recorder) answers() []answer {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]answer(nil), rec.all...)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// startProxy starts a simulator with opts, a proxy in front of it, as the
// README shows it, served over loopback by a real net/http server, and
// points discordgo at the proxy. Everything is closed at cleanup, the
// endpoints restored first.
func startProxy(t *testing.T, opts sluicetest.Options) (*sluicetest.Server, *recorder) {
	t.Helper()
	srv, err := sluicetest.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	p, err := proxy.New(proxy.Config{
		Upstream: srv.APIBase(),
		Limiter:  sluice.Options{TLSConfig: srv.ClientTLSConfig()},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	front := httptest.NewServer(rec.wrap(p))
	t.Cleanup(func() {
		front.Close() // also closes http.DefaultTransport's idle connections
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("proxy.Close: %v", err)
		}
	})
	useDiscordAt(t, front.URL)
	return srv, rec
}

// newSession is a bot session as a user makes one: discordgo's default
// client, rate limiter and retry on 429.
func newSession(t *testing.T, token string) *discordgo.Session {
	t.Helper()
	s, err := discordgo.New(token)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDiscordgoWorkloadThroughProxy runs a bot's concurrent REST workload
// through the proxy against Discord's limits (5 messages per 5 s per
// channel, 50 requests per second): every call succeeds, the simulator
// sees no 429 and no other violation, and every answer is the upstream's
// (no refusal of the proxy's own, no 429 for discordgo to retry).
func TestDiscordgoWorkloadThroughProxy(t *testing.T) {
	const (
		channels   = 4
		perChannel = 15 // three full create_message and edit_message windows per channel
		senders    = 3  // goroutines sending to each channel
		members    = 12 // modify_member and add_role admit 10 per 10 s per guild
		emoji      = "👍"
	)
	srv, rec := startProxy(t, sluicetest.Options{Rules: testRules()})
	bot := newSession(t, "Bot "+botToken)

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string
		calls    int
	)
	// done records one call; problem is "" when it went as expected.
	done := func(what string, err error, problem string) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch {
		case err != nil:
			failures = append(failures, fmt.Sprintf("%s: %v", what, err))
		case problem != "":
			failures = append(failures, what+": "+problem)
		}
	}
	began := time.Now()
	for c := range channels {
		ch := channelID(c)
		toEdit, toReact := make(chan string, perChannel), make(chan string, perChannel)
		var sending sync.WaitGroup
		for g := range senders {
			sending.Go(func() {
				for i := g; i < perChannel; i += senders {
					content := fmt.Sprintf("message %d to %s", i, ch)
					m, err := bot.ChannelMessageSend(ch, content)
					var problem string
					if err == nil {
						if m.Content != content || m.ChannelID != ch || m.ID == "" {
							problem = fmt.Sprintf("got content %q, channel %q, id %q", m.Content, m.ChannelID, m.ID)
						} else {
							toEdit <- m.ID
							toReact <- m.ID
						}
					}
					done("ChannelMessageSend "+ch, err, problem)
				}
			})
		}
		wg.Go(func() {
			sending.Wait()
			close(toEdit)
			close(toReact)
		})
		wg.Go(func() {
			for id := range toEdit {
				content := "edited " + id
				m, err := bot.ChannelMessageEdit(ch, id, content)
				var problem string
				if err == nil && (m.ID != id || m.Content != content || m.ChannelID != ch) {
					problem = fmt.Sprintf("got id %q, content %q, channel %q", m.ID, m.Content, m.ChannelID)
				}
				done("ChannelMessageEdit "+ch, err, problem)
			}
		})
		wg.Go(func() {
			for id := range toReact {
				done("MessageReactionAdd "+ch, bot.MessageReactionAdd(ch, id, emoji), "")
			}
		})
	}
	for u := range members {
		user := userID(u)
		wg.Go(func() {
			m, err := bot.GuildMember(guildID, user)
			var problem string
			if err == nil && m.GuildID != guildID {
				problem = fmt.Sprintf("guild %q", m.GuildID)
			}
			done("GuildMember "+user, err, problem)

			nick := "nick " + user
			m, err = bot.GuildMemberEdit(guildID, user, &discordgo.GuildMemberParams{Nick: nick})
			problem = ""
			if err == nil && (m.Nick != nick || m.GuildID != guildID) {
				problem = fmt.Sprintf("got nick %q, guild %q", m.Nick, m.GuildID)
			}
			done("GuildMemberEdit "+user, err, problem)

			done("GuildMemberRoleAdd "+user, bot.GuildMemberRoleAdd(guildID, user, roleID), "")
		})
	}
	wg.Wait()
	took := time.Since(began)

	for _, f := range failures {
		t.Error(f)
	}
	want := channels*perChannel*3 + members*3
	if calls != want {
		t.Errorf("%d calls made, want %d", calls, want)
	}
	st := srv.Stats()
	sluicetest.AssertNoViolations(t, st)
	if st.Requests != want {
		t.Errorf("the simulator answered %d requests, want %d (one per call, no retry)", st.Requests, want)
	}
	for _, a := range rec.answers() {
		if a.status >= 300 || a.reason() != "" {
			t.Errorf("proxy answered %s %s with %d (%s=%q)", a.method, a.path, a.status, proxy.ProxyHeader, a.reason())
		}
	}
	// The limits were reached, not avoided: each channel's create_message
	// bucket filled its window and needed at least three.
	full := map[string]bool{}
	for _, b := range st.Buckets {
		if len(b.Rules) == 1 && b.Rules[0] == "create_message" {
			full[b.Major] = b.MaxAdmitted == b.Limit && b.Windows >= perChannel/b.Limit && b.Admitted == perChannel
			if !full[b.Major] {
				t.Errorf("bucket %s: %d admitted, at most %d in one window (limit %d), %d windows", b.Key, b.Admitted, b.MaxAdmitted, b.Limit, b.Windows)
			}
		}
	}
	if len(full) != channels {
		t.Errorf("%d create_message buckets, want %d", len(full), channels)
	}
	if took > 20*time.Second {
		t.Errorf("took %s", took)
	}
	t.Logf("%d calls in %s; %s", calls, took.Round(time.Millisecond), st.Summary())
}

// step is one discordgo call of the script both sessions run. want is the
// HTTP status of the RESTError it must fail with, 0 for success. It
// returns the deterministic part of the result.
type step struct {
	name string
	want int
	call func(bot, rejected *discordgo.Session) (any, error)
}

// outcome is what a step gave, in comparable form.
type outcome struct {
	Value  string // JSON of the deterministic part of the result
	Status int    // of a *discordgo.RESTError
	Code   int    // its Discord error code
	Msg    string // its Discord error message
	Body   any    // its body, decoded
	Err    string // any other error
}

// created is a message without what the simulator makes fresh for each
// message (its id, for a new message, and timestamp).
func created(m *discordgo.Message, newID bool) any {
	if m == nil {
		return nil
	}
	c := *m
	if newID {
		c.ID = ""
	}
	c.Timestamp = time.Time{}
	return c
}

// script is the sequence of calls made directly and through the proxy:
// successes on most kinds of route the simulator serves, and the failures a
// bot meets (unknown route twice, wrong method, forbidden channel, rejected
// bot token, revoked webhook token).
func script() []step {
	ch := channelID(0)
	return []step{
		{"ChannelMessageSend", 0, func(s, _ *discordgo.Session) (any, error) {
			m, err := s.ChannelMessageSend(ch, "hello from discordgo")
			return created(m, true), err
		}},
		{"ChannelMessageSendComplex with an embed", 0, func(s, _ *discordgo.Session) (any, error) {
			m, err := s.ChannelMessageSendComplex(ch, &discordgo.MessageSend{
				Content: "with an embed", Embeds: []*discordgo.MessageEmbed{{Title: "Sluice", Description: "through the proxy"}},
			})
			return created(m, true), err
		}},
		{"ChannelMessageEdit", 0, func(s, _ *discordgo.Session) (any, error) {
			m, err := s.ChannelMessageEdit(ch, knownMessage, "edited")
			return created(m, false), err
		}},
		{"MessageReactionAdd", 0, func(s, _ *discordgo.Session) (any, error) {
			return nil, s.MessageReactionAdd(ch, knownMessage, "👍")
		}},
		{"GuildMember", 0, func(s, _ *discordgo.Session) (any, error) { return s.GuildMember(guildID, userID(0)) }},
		{"GuildMemberEdit", 0, func(s, _ *discordgo.Session) (any, error) {
			return s.GuildMemberEdit(guildID, userID(0), &discordgo.GuildMemberParams{Nick: "sluiced"})
		}},
		{"GuildMemberRoleAdd", 0, func(s, _ *discordgo.Session) (any, error) {
			return nil, s.GuildMemberRoleAdd(guildID, userID(0), roleID)
		}},
		{"User @me", 0, func(s, _ *discordgo.Session) (any, error) {
			u, err := s.User("@me")
			if u != nil {
				u.ID = "" // a fresh snowflake each time
			}
			return u, err
		}},
		{"Gateway", 0, func(s, _ *discordgo.Session) (any, error) { return s.Gateway() }},
		{"GatewayBot", 0, func(s, _ *discordgo.Session) (any, error) { return s.GatewayBot() }},
		{"WebhookExecute", 0, func(s, _ *discordgo.Session) (any, error) {
			m, err := s.WebhookExecute(hookID, hookToken, true, &discordgo.WebhookParams{Content: "from a webhook", Username: "hook"})
			return created(m, true), err
		}},
		{"GuildRoles (route not served: 404)", 404, func(s, _ *discordgo.Session) (any, error) { return s.GuildRoles(guildID) }},
		{"GuildRoles again (404; the proxy's cache)", 404, func(s, _ *discordgo.Session) (any, error) { return s.GuildRoles(guildID) }},
		{"GuildDelete (method not served: 405)", 405, func(s, _ *discordgo.Session) (any, error) { return nil, s.GuildDelete(guildID) }},
		{"ChannelMessageSend to a forbidden channel (403)", 403, func(s, _ *discordgo.Session) (any, error) {
			m, err := s.ChannelMessageSend(forbiddenChan, "not allowed")
			return created(m, true), err
		}},
		{"ChannelMessageSend with a rejected token (401)", 401, func(_, r *discordgo.Session) (any, error) {
			m, err := r.ChannelMessageSend(ch, "rejected")
			return created(m, true), err
		}},
		{"User @me with a rejected token (401)", 401, func(_, r *discordgo.Session) (any, error) { return r.User("@me") }},
		{"WebhookExecute with a revoked webhook token (401)", 401, func(s, _ *discordgo.Session) (any, error) {
			m, err := s.WebhookExecute(hookID, revokedHook, true, &discordgo.WebhookParams{Content: "revoked"})
			return created(m, true), err
		}},
	}
}

// runScript runs the script with a bot session and one whose token the
// simulator rejects; client, if not nil, replaces their http.Client.
func runScript(t *testing.T, client *http.Client) []outcome {
	t.Helper()
	bot, rejected := newSession(t, "Bot "+botToken), newSession(t, "Bot "+rejectedToken)
	if client != nil {
		bot.Client, rejected.Client = client, client
	}
	var out []outcome
	for _, s := range script() {
		v, err := s.call(bot, rejected)
		var o outcome
		var re *discordgo.RESTError
		switch {
		case errors.As(err, &re):
			o.Status = re.Response.StatusCode
			if re.Message != nil {
				o.Code, o.Msg = re.Message.Code, re.Message.Message
			}
			if json.Unmarshal(re.ResponseBody, &o.Body) != nil {
				o.Body = string(re.ResponseBody)
			}
		case err != nil:
			o.Err = err.Error()
		default:
			b, jerr := json.Marshal(v)
			if jerr != nil {
				t.Fatalf("%s: %v", s.name, jerr)
			}
			o.Value = string(b)
		}
		if o.Status != s.want || o.Err != "" {
			t.Errorf("%s: status %d, error %q; want status %d", s.name, o.Status, o.Err, s.want)
		}
		out = append(out, o)
	}
	return out
}

// scriptOptions are the options of both simulators of the comparison.
func scriptOptions() sluicetest.Options {
	return sluicetest.Options{
		Rules:         testRules(),
		Tokens:        []string{botToken},
		Forbidden:     []string{forbiddenChan},
		RevokedTokens: []string{revokedHook},
	}
}

// comparedHeaders are the answer headers that must not differ between a
// direct and a proxied call: those discordgo's rate limiter reads, and the
// content type. (X-RateLimit-Reset and -Reset-After depend on the moment.)
var comparedHeaders = []string{
	"Content-Type", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Bucket",
	"X-RateLimit-Scope", "X-RateLimit-Global",
}

// TestDiscordgoProxyAnswersLikeDirect runs the same discordgo calls
// directly against one fresh simulator and through the proxy against
// another: every call must give the same result, success or error, from
// answers with the same status and rate-limit headers.
func TestDiscordgoProxyAnswersLikeDirect(t *testing.T) {
	var (
		direct, proxied       []outcome
		directRec, proxiedRec *recorder
	)
	t.Run("direct", func(t *testing.T) {
		srv, err := sluicetest.NewServer(scriptOptions())
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		defer useDiscordAt(t, srv.URL)()
		directRec = &recorder{base: srv.Client().Transport}
		direct = runScript(t, &http.Client{Transport: directRec, Timeout: 20 * time.Second})
		sluicetest.AssertNoViolations(t, srv.Stats())
	})
	t.Run("proxied", func(t *testing.T) {
		var srv *sluicetest.Server
		srv, proxiedRec = startProxy(t, scriptOptions())
		proxied = runScript(t, nil) // discordgo's default client
		sluicetest.AssertNoViolations(t, srv.Stats())
	})
	if t.Failed() {
		return
	}
	steps := script()
	if len(direct) != len(steps) || len(proxied) != len(steps) {
		t.Fatalf("%d direct and %d proxied outcomes, want %d", len(direct), len(proxied), len(steps))
	}
	for i, s := range steps {
		if !reflect.DeepEqual(direct[i], proxied[i]) {
			t.Errorf("%s:\n  direct:  %+v\n  proxied: %+v", s.name, direct[i], proxied[i])
		}
	}

	// One request per step both ways (no retry), with the same answers.
	da, pa := directRec.answers(), proxiedRec.answers()
	if len(da) != len(steps) || len(pa) != len(steps) {
		t.Fatalf("%d direct and %d proxied requests, want one per step (%d)", len(da), len(pa), len(steps))
	}
	var hits, own int
	for i, s := range steps {
		d, p := da[i], pa[i]
		if d.method != p.method || d.path != p.path || d.status != p.status {
			t.Errorf("%s: direct %s %s answered %d, proxied %s %s answered %d", s.name, d.method, d.path, d.status, p.method, p.path, p.status)
		}
		for _, h := range comparedHeaders {
			if dv, pv := d.header.Values(h), p.header.Values(h); !slices.Equal(dv, pv) {
				t.Errorf("%s: %s: direct %q, proxied %q", s.name, h, dv, pv)
			}
		}
		if (d.header.Get("X-RateLimit-Reset-After") == "") != (p.header.Get("X-RateLimit-Reset-After") == "") {
			t.Errorf("%s: X-RateLimit-Reset-After: direct %q, proxied %q", s.name, d.header.Get("X-RateLimit-Reset-After"), p.header.Get("X-RateLimit-Reset-After"))
		}
		// The proxy answers some failures itself (the repeated 404 from its
		// cache, the rejected token's second 401 from the limiter's
		// sluice.ErrUnauthorized); they must look like the API's.
		if p.cached() {
			hits++
		}
		if p.reason() != "" {
			own++
			t.Logf("%s: the proxy's own answer %d (%s)", s.name, p.status, p.reason())
		}
	}
	if hits != 1 {
		t.Errorf("%d answers from the proxy's cache, want 1 (the repeated 404)", hits)
	}
	t.Logf("%d steps alike; %d cache hits, %d answers of the proxy's own", len(steps), hits, own)
}

// TestDiscordgoWebhookWithoutTokenThroughProxy executes a webhook through
// the proxy with a session that has no bot token, as a webhook-only
// program does: it counts on the per-IP limits, and a burst beyond the
// webhook's bucket (5 per 2 s) waits instead of drawing a 429.
func TestDiscordgoWebhookWithoutTokenThroughProxy(t *testing.T) {
	const n = 7
	srv, rec := startProxy(t, sluicetest.Options{})
	hook := newSession(t, "")

	m, err := hook.WebhookExecute(hookID, hookToken, true, &discordgo.WebhookParams{Content: "webhook 0", Username: "sluice"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Content != "webhook 0" || m.ChannelID != hookID || m.ID == "" {
		t.Errorf("got content %q, channel %q, id %q", m.Content, m.ChannelID, m.ID)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 1; i < n; i++ {
		wg.Go(func() {
			_, errs[i] = hook.WebhookExecute(hookID, hookToken, i%2 == 0, &discordgo.WebhookParams{Content: fmt.Sprint("webhook ", i)})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("execution %d: %v", i, err)
		}
	}

	st := srv.Stats()
	sluicetest.AssertNoViolations(t, st)
	if st.Requests != n || st.MessagesCreated != n {
		t.Errorf("the simulator answered %d requests and created %d messages, want %d and %d", st.Requests, st.MessagesCreated, n, n)
	}
	for _, b := range st.Buckets {
		if !strings.HasPrefix(b.Identity, "ip:") {
			t.Errorf("bucket %s counted on %s, want the per-IP limit", b.Key, b.Identity)
		}
	}
	for _, a := range rec.answers() {
		if a.status != http.StatusOK || a.reason() != "" {
			t.Errorf("proxy answered %s %s with %d (%s=%q)", a.method, a.path, a.status, proxy.ProxyHeader, a.reason())
		}
	}
	t.Log(st.Summary())
}
