package sluicetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// t0 is a fixed wall-clock instant so header values are exact.
var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

const token = "Bot secret-token-value"

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

type sim struct {
	t *testing.T
	e *Engine
}

func newSim(t *testing.T, rs RuleSet, cfg ...Config) *sim {
	t.Helper()
	c := Config{Rules: rs}
	if len(cfg) > 0 {
		c = cfg[0]
		c.Rules = rs
	}
	e, err := NewEngine(t0, c)
	require.NoError(t, err)
	return &sim{t, e}
}

func (s *sim) do(at time.Duration, method, path string, mods ...func(*Request)) Decision {
	r := Request{Method: method, Path: path, Authorization: token, IP: "10.0.0.1"}
	for _, m := range mods {
		m(&r)
	}
	return s.e.Handle(t0.Add(at), r)
}

func noAuth(r *Request)                { r.Authorization = "" }
func withBody(b string) func(*Request) { return func(r *Request) { r.Body = []byte(b) } }
func withAuth(a string) func(*Request) { return func(r *Request) { r.Authorization = a } }
func fromIP(ip string) func(*Request)  { return func(r *Request) { r.IP = ip } }
func hasRateLimitHeaders(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-ratelimit-") {
			return true
		}
	}
	return false
}

func rl(limit int, window time.Duration, rules ...Rule) RuleSet {
	for i := range rules {
		if rules[i].Limit == 0 {
			rules[i].Limit = limit
		}
		if rules[i].Window == 0 {
			rules[i].Window = Duration(window)
		}
	}
	return RuleSet{Rules: rules}
}

func TestDefaultRulesValid(t *testing.T) {
	rs := DefaultRules()
	require.NoError(t, rs.Validate())
	assert.Equal(t, 50, rs.GlobalLimit)
	assert.Equal(t, 10000, rs.InvalidLimit)
	assert.Equal(t, Duration(10*time.Minute), rs.InvalidWindow)
	names := map[string]bool{}
	for _, r := range rs.Rules {
		names[r.Name] = true
	}
	for _, want := range []string{"create_message", "get_message", "edit_message", "delete_message", "add_reaction",
		"modify_channel", "modify_member", "add_role", "get_current_user", "execute_webhook", "interaction_callback", "get_gateway_bot"} {
		assert.True(t, names[want], "default rules lack %s", want)
	}
}

func TestExactHeadersOfAdmittedRequests(t *testing.T) {
	s := newSim(t, rl(5, 5*time.Second, Rule{Name: "create_message", Method: "POST", Route: "/channels/{channel_id}/messages", Bucket: "abcd"}))
	d := s.do(0, "POST", "/api/v10/channels/1/messages", withBody(`{"content":"hi"}`))
	require.Equal(t, 200, d.Status)
	assert.Equal(t, "5", d.Header.Get("X-RateLimit-Limit"))
	assert.Equal(t, "4", d.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "5.000", d.Header.Get("X-RateLimit-Reset-After"))
	assert.Equal(t, fmt.Sprintf("%.3f", float64(t0.Add(5*time.Second).UnixMilli())/1000), d.Header.Get("X-RateLimit-Reset"))
	assert.Equal(t, "abcd", d.Header.Get("X-RateLimit-Bucket"))
	assert.Empty(t, d.Header.Get("X-RateLimit-Scope"), "scope is only sent on 429s")
	assert.Empty(t, d.Header.Get("X-RateLimit-Global"))
	var body map[string]any
	require.NoError(t, json.Unmarshal(d.Body, &body))
	assert.Equal(t, "hi", body["content"])
	assert.Equal(t, "1", body["channel_id"])

	// 1234.5678 ms later: reset-after is rounded up to the millisecond.
	d = s.do(1234*time.Millisecond+567800*time.Nanosecond, "POST", "/api/v10/channels/1/messages")
	assert.Equal(t, "3", d.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "3.766", d.Header.Get("X-RateLimit-Reset-After"))
	assert.Equal(t, fmt.Sprintf("%.3f", float64(t0.Add(5*time.Second).UnixMilli())/1000), d.Header.Get("X-RateLimit-Reset"))
}

func TestUserScope429AndWindowReset(t *testing.T) {
	s := newSim(t, rl(2, time.Second, Rule{Name: "r", Method: "GET", Route: "/channels/{channel_id}", Bucket: "h"}))
	s.do(ms(100), "GET", "/api/v10/channels/7")
	s.do(ms(200), "GET", "/api/v10/channels/7")
	d := s.do(ms(350), "GET", "/api/v10/channels/7")
	require.Equal(t, 429, d.Status)
	assert.Equal(t, "user", d.Header.Get("X-RateLimit-Scope"))
	assert.Equal(t, "0", d.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "2", d.Header.Get("X-RateLimit-Limit"))
	assert.Equal(t, "0.750", d.Header.Get("X-RateLimit-Reset-After"), "the window started at the first request, 100 ms")
	assert.Equal(t, "h", d.Header.Get("X-RateLimit-Bucket"))
	assert.Equal(t, "1", d.Header.Get("Retry-After"), "Retry-After is whole seconds, rounded up")
	assert.Empty(t, d.Header.Get("X-RateLimit-Global"))
	assert.JSONEq(t, `{"message":"You are being rate limited.","retry_after":0.75,"global":false}`, string(d.Body))

	// One nanosecond before the window ends: still limited.
	assert.Equal(t, 429, s.do(ms(1100)-1, "GET", "/api/v10/channels/7").Status)
	// Exactly at its end a new window opens with the first request.
	d = s.do(ms(1100), "GET", "/api/v10/channels/7")
	require.Equal(t, 200, d.Status)
	assert.Equal(t, "1", d.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "1.000", d.Header.Get("X-RateLimit-Reset-After"))

	st := s.e.Stats()
	assert.Equal(t, 2, st.RateLimited["user"])
	assert.Equal(t, 2, st.Invalid)
	require.Len(t, st.Buckets, 1)
	assert.Equal(t, 2, st.Buckets[0].Windows)
	assert.Equal(t, 2, st.Buckets[0].MaxAdmitted)
	assert.Len(t, st.Buckets[0].Timeline, 5)
	assert.Contains(t, st.Violations()[0], "2 user-scope 429s")
}

func TestSharedHashAndMajorParameters(t *testing.T) {
	s := newSim(t, DefaultRules())
	// get_messages and get_message share a hash (limit 5 per 5 s): their
	// requests on one channel share one count.
	for i := 0; i < 3; i++ {
		require.Equal(t, 200, s.do(0, "GET", "/api/v10/channels/1/messages").Status)
	}
	d := s.do(0, "GET", "/api/v10/channels/1/messages/100")
	assert.Equal(t, "1", d.Header.Get("X-RateLimit-Remaining"))
	d = s.do(0, "GET", "/api/v10/channels/1/messages/200") // message ids are not major
	assert.Equal(t, "0", d.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, 429, s.do(0, "GET", "/api/v10/channels/1/messages").Status)
	// Another channel is another bucket with the same hash.
	d = s.do(0, "GET", "/api/v10/channels/2/messages/100")
	assert.Equal(t, "4", d.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, d.Header.Get("X-RateLimit-Bucket"), s.do(0, "GET", "/api/v10/channels/1/messages/5").Header.Get("X-RateLimit-Bucket"))
	// Another hash on the same channel has its own count.
	assert.Equal(t, "4", s.do(0, "POST", "/api/v10/channels/1/messages").Header.Get("X-RateLimit-Remaining"))

	st := s.e.Stats()
	var shared *BucketStats
	for i, b := range st.Buckets {
		if b.Major == "channel_id=1" && len(b.Rules) == 2 {
			shared = &st.Buckets[i]
		}
	}
	require.NotNil(t, shared, "one bucket holds both rules")
	assert.Equal(t, []string{"get_messages", "get_message"}, shared.Rules)
	assert.Equal(t, 5, shared.MaxAdmitted)

	// Guilds: members of one guild share, another guild does not.
	assert.Equal(t, "9", s.do(0, "PATCH", "/api/v10/guilds/5/members/1").Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "8", s.do(0, "PATCH", "/api/v10/guilds/5/members/2").Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "9", s.do(0, "PATCH", "/api/v10/guilds/6/members/1").Header.Get("X-RateLimit-Remaining"))
	// Roles: add and remove share a hash.
	s.do(0, "PUT", "/api/v10/guilds/5/members/1/roles/3")
	assert.Equal(t, "8", s.do(0, "DELETE", "/api/v10/guilds/5/members/1/roles/3").Header.Get("X-RateLimit-Remaining"))
}

func TestRoutingPrefixesAndMethods(t *testing.T) {
	s := newSim(t, DefaultRules())
	for _, p := range []string{"/api/v10/users/@me", "/api/v9/users/@me", "/api/users/@me", "/api/v10/users/@me/"} {
		d := s.do(0, "GET", p)
		assert.Equal(t, 200, d.Status, p)
		assert.Equal(t, "get_current_user", d.Rule, p)
	}
	assert.Equal(t, "get_user", s.do(0, "GET", "/api/v10/users/80351110224678912").Rule, "a literal beats a parameter")
	assert.Equal(t, 404, s.do(0, "GET", "/api/v6/users/@me").Status, "old versions are not served")
	assert.Equal(t, 404, s.do(0, "GET", "/users/@me").Status, "not an API path")
	assert.Equal(t, 404, s.do(0, "GET", "/api/v10/nothing/here").Status)
	assert.Equal(t, 405, s.do(0, "POST", "/api/v10/users/@me").Status)
	d := s.do(0, "PUT", "/api/v10/channels/1/messages/2/reactions/%F0%9F%91%8D/@me")
	assert.Equal(t, 204, d.Status)
	assert.Equal(t, "add_reaction", d.Rule)
	assert.Empty(t, d.Body)
	d = s.do(0, "PUT", "/api/v10/channels/1/messages/2/reactions/custom:123/@me")
	assert.Equal(t, 429, d.Status, "every emoji shares the reaction bucket: 1 per 250 ms")
	assert.Equal(t, 404, s.do(0, "GET", "/api/v10/channels//messages").Status, "an empty parameter matches nothing")
}

func TestGlobalLimitSlidingWindowAndShape(t *testing.T) {
	rs := DefaultRules()
	rs.GlobalLimit = 3
	s := newSim(t, rs)
	s.do(ms(0), "GET", "/api/v10/channels/1")
	s.do(ms(400), "GET", "/api/v10/channels/2")
	s.do(ms(800), "GET", "/api/v10/channels/3")
	d := s.do(ms(900), "GET", "/api/v10/channels/4")
	require.Equal(t, 429, d.Status)
	assert.False(t, d.Injected)
	assert.Equal(t, "global", d.Header.Get("X-RateLimit-Scope"))
	assert.Equal(t, "true", d.Header.Get("X-RateLimit-Global"))
	assert.Equal(t, "1", d.Header.Get("Retry-After"))
	for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-Reset-After", "X-RateLimit-Bucket"} {
		assert.Empty(t, d.Header.Get(h), "the documented global 429 has no %s", h)
	}
	assert.JSONEq(t, `{"message":"You are being rate limited.","retry_after":0.1,"global":true}`, string(d.Body))
	// Sliding: at 1000 ms the first request leaves the window, not before.
	assert.Equal(t, 429, s.do(ms(1000)-1, "GET", "/api/v10/channels/4").Status)
	assert.Equal(t, 200, s.do(ms(1000), "GET", "/api/v10/channels/4").Status)
	assert.Equal(t, 429, s.do(ms(1001), "GET", "/api/v10/channels/5").Status)

	// The refused request did not reach the bucket of channel 4.
	st := s.e.Stats()
	for _, b := range st.Buckets {
		if b.Major == "channel_id=4" {
			assert.Equal(t, 1, b.Requests)
		}
	}
	assert.Equal(t, 3, st.RateLimited["global"])
	assert.Equal(t, 3, st.MaxGlobalWindow)
	require.Len(t, st.Globals, 1)
	assert.True(t, strings.HasPrefix(st.Globals[0].Identity, "token:"))
	assert.Equal(t, []Duration{Duration(ms(900)), Duration(ms(1000) - 1), Duration(ms(1001))}, st.Globals[0].Refused,
		"when each refusal was answered")
	assert.Contains(t, strings.Join(st.Violations(), "\n"), "3 global 429s caused by the client")
}

func TestGlobalPerIPForWebhooksAndExemptInteractions(t *testing.T) {
	rs := DefaultRules()
	rs.GlobalLimit = 1
	rs.IPGlobalLimit = 2
	s := newSim(t, rs)
	require.Equal(t, 200, s.do(0, "GET", "/api/v10/channels/1").Status)
	require.Equal(t, 429, s.do(0, "GET", "/api/v10/channels/2").Status, "token's global limit of 1")
	// Webhooks without a token count per IP, separately.
	assert.Equal(t, 200, s.do(0, "POST", "/api/v10/webhooks/1/tok1", noAuth).Status)
	assert.Equal(t, 200, s.do(0, "POST", "/api/v10/webhooks/2/tok2", noAuth).Status)
	d := s.do(0, "POST", "/api/v10/webhooks/3/tok3", noAuth)
	assert.Equal(t, 429, d.Status)
	assert.Equal(t, "global", d.Header.Get("X-RateLimit-Scope"))
	assert.Equal(t, 200, s.do(0, "POST", "/api/v10/webhooks/3/tok3", noAuth, fromIP("10.0.0.2")).Status, "another IP")
	// The same webhook with the bot token counts against the token.
	assert.Equal(t, 429, s.do(0, "POST", "/api/v10/webhooks/3/tok3").Status)
	// Interaction callbacks are exempt, with or without a token.
	for i := 0; i < 5; i++ {
		assert.Equal(t, 204, s.do(0, "POST", fmt.Sprintf("/api/v10/interactions/%d/itok/callback", i)).Status)
	}
	// Routes that need a token refuse a missing one.
	assert.Equal(t, 401, s.do(0, "GET", "/api/v10/channels/1", noAuth).Status)
}

func TestWebhookTokensAreMajorAndNeverReported(t *testing.T) {
	s := newSim(t, DefaultRules())
	secret := "aVeryS3cretWebhookToken"
	d1 := s.do(0, "POST", "/api/v10/webhooks/1/"+secret, noAuth)
	d2 := s.do(0, "POST", "/api/v10/webhooks/1/other", noAuth)
	assert.Equal(t, "4", d1.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "4", d2.Header.Get("X-RateLimit-Remaining"), "webhook_id + webhook_token is the major")
	assert.NotContains(t, string(d1.Body), secret)
	st := s.e.Stats()
	b, err := json.Marshal(st)
	require.NoError(t, err)
	assert.NotContains(t, string(b), secret)
	assert.NotContains(t, string(b), "secret-token-value")
	s.do(0, "GET", "/api/v10/users/@me")
	b, _ = json.Marshal(s.e.Stats())
	assert.NotContains(t, string(b), "secret-token-value")
}

func TestHiddenSublimitSharedScope(t *testing.T) {
	rs := DefaultRules().Scaled(0.001) // 10 min → 600 ms; 5 s → 5 ms
	s := newSim(t, rs)
	rename := withBody(`{"name":"general"}`)
	assert.Equal(t, 200, s.do(ms(0), "PATCH", "/api/v10/channels/9", rename).Status)
	assert.Equal(t, 200, s.do(ms(10), "PATCH", "/api/v10/channels/9", rename).Status)
	d := s.do(ms(20), "PATCH", "/api/v10/channels/9", withBody(`{"topic":"x"}`))
	require.Equal(t, 429, d.Status)
	assert.Equal(t, "shared", d.Header.Get("X-RateLimit-Scope"))
	assert.Equal(t, "4", d.Header.Get("X-RateLimit-Remaining"), "the headers still show calls remaining")
	assert.Empty(t, d.Header.Get("X-RateLimit-Global"))
	assert.Equal(t, "1", d.Header.Get("Retry-After"))
	var body rateLimitBody
	require.NoError(t, json.Unmarshal(d.Body, &body))
	assert.InDelta(t, 0.58, body.RetryAfter, 1e-9)
	assert.False(t, body.Global)
	// Edits that touch neither field are not counted by the sublimit.
	assert.Equal(t, 200, s.do(ms(30), "PATCH", "/api/v10/channels/9", withBody(`{"nsfw":true}`)).Status)
	// A second 429 in the same window is the client's fault.
	assert.Equal(t, 429, s.do(ms(40), "PATCH", "/api/v10/channels/9", rename).Status)
	// Another channel has its own sublimit.
	assert.Equal(t, 200, s.do(ms(40), "PATCH", "/api/v10/channels/10", rename).Status)
	// After the sublimit window: admitted again.
	assert.Equal(t, 200, s.do(ms(600), "PATCH", "/api/v10/channels/9", rename).Status)

	st := s.e.Stats()
	assert.Equal(t, 2, st.RateLimited["shared"])
	assert.Equal(t, 0, st.Invalid, "shared 429s are not invalid requests")
	require.Len(t, st.Sublimits, 2)
	max := map[string]int{}
	for _, sl := range st.Sublimits {
		max[sl.Key[strings.Index(sl.Key, "channel_id="):]] = sl.Max429sInWindow
	}
	assert.Equal(t, map[string]int{"channel_id=9/channel_name_topic": 2, "channel_id=10/channel_name_topic": 0}, max)
	assert.Contains(t, strings.Join(st.Violations(), "\n"), "2 shared 429s in one window")
}

func TestInvalidRequestLimitBansTheIP(t *testing.T) {
	rs := DefaultRules()
	rs.InvalidLimit = 3
	rs.InvalidWindow = Duration(10 * time.Second)
	rs.BanDuration = Duration(time.Minute)
	s := newSim(t, rs, Config{Tokens: []string{"good"}, Forbidden: []string{"666"}})
	good := withAuth("Bot good")
	assert.Equal(t, 401, s.do(ms(0), "GET", "/api/v10/users/@me", withAuth("Bot wrong")).Status)
	d := s.do(ms(1), "GET", "/api/v10/channels/666", good)
	assert.Equal(t, 403, d.Status)
	assert.Equal(t, "4", d.Header.Get("X-RateLimit-Remaining"), "a 403 is counted by its bucket")
	assert.JSONEq(t, `{"message":"Missing Access","code":50001}`, string(d.Body))
	// Shared 429s do not count.
	sub := withBody(`{"name":"n"}`)
	s.do(ms(2), "PATCH", "/api/v10/channels/1", good, sub)
	s.do(ms(3), "PATCH", "/api/v10/channels/1", good, sub)
	assert.Equal(t, "shared", s.do(ms(4), "PATCH", "/api/v10/channels/1", good, sub).Scope)
	assert.Equal(t, 401, s.do(ms(5), "GET", "/api/v10/users/@me", noAuth).Status)
	assert.Equal(t, 0, s.e.Stats().Bans)
	// The fourth invalid request in 10 s bans the IP.
	assert.Equal(t, 401, s.do(ms(6), "GET", "/api/v10/users/@me", withAuth("garbage")).Status)
	d = s.do(ms(7), "GET", "/api/v10/users/@me", good)
	require.Equal(t, 429, d.Status)
	assert.Equal(t, "ban", d.Scope)
	assert.False(t, hasRateLimitHeaders(d.Header), "a Cloudflare ban has no rate-limit headers")
	assert.Empty(t, d.Header.Get("Retry-After"))
	assert.Contains(t, d.Header.Get("Content-Type"), "text/html")
	assert.Contains(t, string(d.Body), "Error 1015")
	assert.Equal(t, 200, s.do(ms(8), "GET", "/api/v10/users/@me", good, fromIP("10.9.9.9")).Status, "bans are per IP")
	// The ban lasts BanDuration from the triggering request.
	assert.Equal(t, 429, s.do(ms(6)+time.Minute-1, "GET", "/api/v10/users/@me", good).Status)
	assert.Equal(t, 200, s.do(ms(6)+time.Minute, "GET", "/api/v10/users/@me", good).Status)
	st := s.e.Stats()
	assert.Equal(t, 1, st.Bans)
	assert.Equal(t, 2, st.Banned)
	assert.Equal(t, 4, st.Invalid)
	assert.Contains(t, strings.Join(st.Violations(), "\n"), "banned 1 times")
}

func TestInvalidRequestsSlideOutOfTheWindow(t *testing.T) {
	rs := DefaultRules()
	rs.InvalidLimit = 2
	rs.InvalidWindow = Duration(time.Second)
	s := newSim(t, rs)
	s.do(ms(0), "GET", "/api/v10/users/@me", noAuth)
	s.do(ms(500), "GET", "/api/v10/users/@me", noAuth)
	s.do(ms(1000), "GET", "/api/v10/users/@me", noAuth) // the first has left the window
	assert.Equal(t, 0, s.e.Stats().Bans)
	s.do(ms(1100), "GET", "/api/v10/users/@me", noAuth)
	assert.Equal(t, 1, s.e.Stats().Bans)
}

func TestInjectedGlobalOutage(t *testing.T) {
	s := newSim(t, DefaultRules())
	s.e.ExhaustGlobal(t0.Add(time.Second), t0.Add(3500*time.Millisecond))
	assert.Equal(t, 200, s.do(ms(999), "GET", "/api/v10/channels/1").Status)
	d := s.do(ms(1000), "GET", "/api/v10/channels/1")
	require.Equal(t, 429, d.Status)
	assert.True(t, d.Injected)
	assert.Equal(t, "3", d.Header.Get("Retry-After"))
	assert.JSONEq(t, `{"message":"You are being rate limited.","retry_after":2.5,"global":true}`, string(d.Body))
	assert.Equal(t, 204, s.do(ms(2000), "POST", "/api/v10/interactions/1/t/callback").Status, "exempt routes pass")
	assert.Equal(t, 200, s.do(ms(2000), "POST", "/api/v10/webhooks/1/t", noAuth).Status, "the IP limit is not the token's")
	assert.Equal(t, 200, s.do(ms(3500), "GET", "/api/v10/channels/1").Status)
	st := s.e.Stats()
	assert.Equal(t, 1, st.InjectedGlobal)
	assert.Equal(t, 1, st.RateLimited["global"])
	assert.Empty(t, st.Violations(), "injected 429s are not the client's fault")
}

func TestEngineReset(t *testing.T) {
	s := newSim(t, DefaultRules())
	s.do(0, "GET", "/api/v10/users/@me")
	s.e.Reset(t0.Add(time.Second))
	st := s.e.Stats()
	assert.Zero(t, st.Requests)
	assert.Empty(t, st.Buckets)
}

type fakeTB struct{ msgs []string }

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func TestAssertNoViolations(t *testing.T) {
	s := newSim(t, rl(1, time.Second, Rule{Name: "r", Method: "GET", Route: "/x", Bucket: "h"}))
	s.do(0, "GET", "/api/x")
	var tb fakeTB
	assert.True(t, AssertNoViolations(&tb, s.e.Stats()))
	assert.Empty(t, tb.msgs)
	s.do(0, "GET", "/api/x")
	assert.False(t, AssertNoViolations(&tb, s.e.Stats()))
	require.Len(t, tb.msgs, 1)
	assert.Contains(t, tb.msgs[0], "1 user-scope 429s")
}

func TestRulesParsingAndValidation(t *testing.T) {
	js := `{"global_limit": 10, "rules": [{"name":"a","method":"get","route":"/things/{channel_id}","bucket":"h","limit":2,"window":"1.5s"}]}`
	rs, err := ParseRules([]byte(js))
	require.NoError(t, err)
	assert.Equal(t, 10, rs.GlobalLimit)
	assert.Equal(t, 50, rs.IPGlobalLimit)
	assert.Equal(t, "GET", rs.Rules[0].Method)
	assert.Equal(t, Duration(1500*time.Millisecond), rs.Rules[0].Window)
	assert.Equal(t, AuthRequired, rs.Rules[0].Auth)

	yml := "rules:\n  - {name: a, method: DELETE, route: '/x/{guild_id}', bucket: h, limit: 1, window: 0.25}\n"
	rs, err = ParseRules([]byte(yml))
	require.NoError(t, err)
	assert.Equal(t, Duration(250*time.Millisecond), rs.Rules[0].Window)
	assert.Equal(t, 204, rs.Rules[0].Status)

	bad := map[string]string{
		"unknown field":  `{"rules": [], "globl": 1}`,
		"no rules":       `{"rules": []}`,
		"zero limit":     `{"rules": [{"method":"GET","route":"/a","bucket":"h","limit":0,"window":"1s"}]}`,
		"no window":      `{"rules": [{"method":"GET","route":"/a","bucket":"h","limit":1}]}`,
		"bad method":     `{"rules": [{"method":"FETCH","route":"/a","bucket":"h","limit":1,"window":"1s"}]}`,
		"bad route":      `{"rules": [{"method":"GET","route":"a/{x","bucket":"h","limit":1,"window":"1s"}]}`,
		"no bucket":      `{"rules": [{"method":"GET","route":"/a","limit":1,"window":"1s"}]}`,
		"negative":       `{"rules": [{"method":"GET","route":"/a","bucket":"h","limit":1,"window":"-1s"}]}`,
		"duplicate":      `{"rules": [{"method":"GET","route":"/a/{x}","bucket":"h","limit":1,"window":"1s"},{"method":"GET","route":"/a/{y}","bucket":"g","limit":1,"window":"1s"}]}`,
		"hash disagrees": `{"rules": [{"method":"GET","route":"/a","bucket":"h","limit":1,"window":"1s"},{"method":"POST","route":"/a","bucket":"h","limit":2,"window":"1s"}]}`,
		"bad auth":       `{"rules": [{"method":"GET","route":"/a","bucket":"h","limit":1,"window":"1s","auth":"maybe"}]}`,
		"bad sublimit":   `{"rules": [{"method":"GET","route":"/a","bucket":"h","limit":1,"window":"1s","sublimits":[{"name":"s","limit":0,"window":"1s"}]}]}`,
	}
	for name, in := range bad {
		_, err := ParseRules([]byte(in))
		assert.ErrorIs(t, err, ErrInvalidRules, name)
	}
	_, err = LoadRules("rules.toml")
	assert.Error(t, err)
	_, err = NewEngine(t0, Config{Rules: RuleSet{Rules: []Rule{{Method: "GET", Route: "/a", Bucket: "h"}}}})
	assert.ErrorIs(t, err, ErrInvalidRules)
}

func TestLoadRulesFromFiles(t *testing.T) {
	dir := t.TempDir()
	y := dir + "/r.yaml"
	require.NoError(t, writeFile(y, DefaultRulesYAML()))
	rs, err := LoadRules(y)
	require.NoError(t, err)
	assert.Equal(t, DefaultRules(), rs)
	j := dir + "/r.json"
	b, err := json.Marshal(DefaultRules())
	require.NoError(t, err)
	require.NoError(t, writeFile(j, b))
	rs2, err := LoadRules(j)
	require.NoError(t, err)
	assert.Equal(t, rs, rs2, "JSON round trip")
}

func TestScaled(t *testing.T) {
	rs := DefaultRules()
	sc := rs.Scaled(0.5)
	for i := range rs.Rules {
		assert.Equal(t, rs.Rules[i].Window/2, sc.Rules[i].Window)
	}
	assert.Equal(t, rs.GlobalWindow, sc.GlobalWindow)
	assert.Equal(t, Duration(10*time.Minute), rs.Rules[indexOf(rs, "modify_channel")].Sublimits[0].Window, "the original is untouched")
	assert.Equal(t, Duration(5*time.Minute), sc.Rules[indexOf(sc, "modify_channel")].Sublimits[0].Window)
}

func indexOf(rs RuleSet, name string) int {
	for i, r := range rs.Rules {
		if r.Name == name {
			return i
		}
	}
	return -1
}

func TestTrackDuplicates(t *testing.T) {
	s := newSim(t, DefaultRules(), Config{TrackDuplicates: true})
	s.do(0, "POST", "/api/v10/channels/1/messages", withBody(`{"content":"a"}`))
	s.do(0, "POST", "/api/v10/channels/1/messages", withBody(`{"content":"b"}`))
	s.do(0, "POST", "/api/v10/channels/1/messages", withBody(`{"content":"a"}`))
	s.do(0, "GET", "/api/v10/channels/1")
	s.do(0, "GET", "/api/v10/channels/1")
	assert.Equal(t, map[string]int{"POST": 1, "GET": 1}, s.e.Stats().Duplicates)
	plain := newSim(t, DefaultRules())
	plain.do(0, "GET", "/api/v10/channels/1")
	plain.do(0, "GET", "/api/v10/channels/1")
	assert.Empty(t, plain.e.Stats().Duplicates)
}

func lateSim(t *testing.T, limit int, late time.Duration) *sim {
	t.Helper()
	return newSim(t, rl(limit, time.Second, Rule{Name: "r", Method: "GET", Route: "/channels/{channel_id}", Bucket: "h"}),
		Config{LateReset: late})
}

// resetAt is the X-RateLimit-Reset value for the instant t0+at.
func resetAt(at time.Duration) string {
	return fmt.Sprintf("%.3f", float64(t0.Add(at).UnixMilli())/1000)
}

func TestLateResetZeroReopensOnTime(t *testing.T) {
	for _, late := range []time.Duration{0, -time.Second} {
		s := lateSim(t, 2, late)
		require.Equal(t, 200, s.do(ms(100), "GET", "/api/v10/channels/7").Status)
		require.Equal(t, 200, s.do(ms(200), "GET", "/api/v10/channels/7").Status)
		assert.Equal(t, 429, s.do(ms(1100)-1, "GET", "/api/v10/channels/7").Status)
		d := s.do(ms(1100), "GET", "/api/v10/channels/7")
		require.Equal(t, 200, d.Status, "late=%s: the window reopens at the announced reset", late)
		assert.False(t, d.Late)
		assert.Equal(t, "1.000", d.Header.Get("X-RateLimit-Reset-After"))
		st := s.e.Stats()
		assert.Zero(t, st.LateReset429s)
		assert.Zero(t, st.LateResetExcused)
		assert.Equal(t, 1, st.RateLimited["user"])
		assert.Equal(t, 2, st.Buckets[0].Windows)
	}
}

func TestLateResetAnswers429UntilTheRealReopening(t *testing.T) {
	s := lateSim(t, 2, ms(300))
	const p = "/api/v10/channels/7"
	require.Equal(t, 200, s.do(ms(100), "GET", p).Status)
	d := s.do(ms(200), "GET", p)
	require.Equal(t, 200, d.Status)
	assert.Equal(t, "0.900", d.Header.Get("X-RateLimit-Reset-After"), "the headers announce the on-time reset")
	assert.Equal(t, resetAt(ms(1100)), d.Header.Get("X-RateLimit-Reset"))
	assert.False(t, d.Late)

	// Before the announced reset: an ordinary 429, announcing the on-time reset.
	d = s.do(ms(350), "GET", p)
	require.Equal(t, 429, d.Status)
	assert.False(t, d.Late)
	assert.Equal(t, "0.750", d.Header.Get("X-RateLimit-Reset-After"))
	assert.JSONEq(t, `{"message":"You are being rate limited.","retry_after":0.75,"global":false}`, string(d.Body))

	// At the announced reset the window is still exhausted for 300 ms.
	d = s.do(ms(1100), "GET", p)
	require.Equal(t, 429, d.Status)
	assert.True(t, d.Late)
	assert.Equal(t, "user", d.Scope)
	assert.Equal(t, "user", d.Header.Get("X-RateLimit-Scope"))
	assert.Equal(t, "0", d.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "2", d.Header.Get("X-RateLimit-Limit"))
	assert.Equal(t, "0.300", d.Header.Get("X-RateLimit-Reset-After"), "the time left until the real reopening")
	assert.Equal(t, resetAt(ms(1400)), d.Header.Get("X-RateLimit-Reset"))
	assert.Equal(t, "1", d.Header.Get("Retry-After"))
	assert.Empty(t, d.Header.Get("X-RateLimit-Global"))
	assert.JSONEq(t, `{"message":"You are being rate limited.","retry_after":0.3,"global":false}`, string(d.Body))

	d = s.do(ms(1250), "GET", p)
	require.Equal(t, 429, d.Status)
	assert.JSONEq(t, `{"message":"You are being rate limited.","retry_after":0.15,"global":false}`, string(d.Body))
	// A third request in the late interval: more than the window an on-time
	// Discord would have opened at 1100 ms admits, so not excused.
	d = s.do(ms(1400)-1, "GET", p)
	require.Equal(t, 429, d.Status)
	assert.Equal(t, "0.001", d.Header.Get("X-RateLimit-Reset-After"), "rounded up")

	// The window really reopens at announced + late; the new window starts
	// with that request.
	d = s.do(ms(1400), "GET", p)
	require.Equal(t, 200, d.Status)
	assert.False(t, d.Late)
	assert.Equal(t, "1", d.Header.Get("X-RateLimit-Remaining"))
	assert.Equal(t, "1.000", d.Header.Get("X-RateLimit-Reset-After"))
	assert.Equal(t, resetAt(ms(2400)), d.Header.Get("X-RateLimit-Reset"))
	require.Equal(t, 200, s.do(ms(1500), "GET", p).Status)
	d = s.do(ms(2400), "GET", p)
	require.Equal(t, 429, d.Status, "every window reopens late")
	assert.True(t, d.Late)
	assert.Equal(t, "0.300", d.Header.Get("X-RateLimit-Reset-After"))

	// After the real end (2700 ms) the bucket stays empty until the next
	// request, which opens the next window: 3000 ms to 4000 ms (+300).
	d = s.do(ms(3000), "GET", p)
	require.Equal(t, 200, d.Status)
	assert.Equal(t, "1.000", d.Header.Get("X-RateLimit-Reset-After"))
	assert.Equal(t, resetAt(ms(4000)), d.Header.Get("X-RateLimit-Reset"))
	d = s.do(ms(3999), "GET", p)
	require.Equal(t, 200, d.Status, "still in the window that opened at 3000 ms")
	assert.Equal(t, "0.001", d.Header.Get("X-RateLimit-Reset-After"))
	d = s.do(ms(4000), "GET", p)
	require.Equal(t, 429, d.Status)
	assert.True(t, d.Late)
	assert.Equal(t, resetAt(ms(4300)), d.Header.Get("X-RateLimit-Reset"))

	st := s.e.Stats()
	assert.Equal(t, 12, st.Requests)
	assert.Equal(t, 6, st.RateLimited["user"], "late 429s are user 429s")
	assert.Equal(t, 5, st.LateReset429s)
	assert.Equal(t, 4, st.LateResetExcused)
	assert.Equal(t, 6, st.Invalid, "late 429s count toward the invalid-request limit")
	require.Len(t, st.Buckets, 1)
	b := st.Buckets[0]
	assert.Equal(t, 12, b.Requests)
	assert.Equal(t, 6, b.Admitted)
	assert.Equal(t, 6, b.RateLimited)
	assert.Equal(t, 5, b.LateReset429s)
	assert.Equal(t, 4, b.LateResetExcused)
	assert.Equal(t, 3, b.Windows, "windows opened at 100, 1400 and 3000 ms")
	assert.Equal(t, 2, b.MaxAdmitted)
	var late []time.Duration
	for _, ev := range b.Timeline {
		if ev.Late {
			late = append(late, ev.At)
		}
	}
	assert.Equal(t, []time.Duration{ms(1100), ms(1250), ms(1400) - 1, ms(2400), ms(4000)}, late)
	v := st.Violations()
	require.Len(t, v, 1)
	assert.Equal(t, "2 user-scope 429s (bucket limits exceeded), 1 of them in late-reset intervals beyond what an on-time window would have admitted", v[0],
		"the 429 at 350 ms and the third late request at 1400 ms - 1 ns")
	assert.Contains(t, st.Summary(), "late_reset_429s=5 excused=4")
}

func TestLateResetRequestsAfterTheAnnouncedResetAreNotViolations(t *testing.T) {
	// A client that trusts the headers: it spends the window, sends a full
	// window's worth at the announced reset, gets late 429s, and retries
	// after their retry_after.
	s := lateSim(t, 2, ms(300))
	const p = "/api/v10/channels/7"
	for i := 0; i < 2; i++ {
		require.Equal(t, 200, s.do(0, "GET", p).Status)
	}
	var retry time.Duration
	for i := 0; i < 2; i++ {
		d := s.do(time.Second, "GET", p)
		require.Equal(t, 429, d.Status)
		var body rateLimitBody
		require.NoError(t, json.Unmarshal(d.Body, &body))
		retry = time.Duration(body.RetryAfter * float64(time.Second))
	}
	require.Equal(t, ms(300), retry)
	for i := 0; i < 2; i++ {
		require.Equal(t, 200, s.do(time.Second+retry, "GET", p).Status)
	}
	st := s.e.Stats()
	assert.Equal(t, 2, st.RateLimited["user"])
	assert.Equal(t, 2, st.LateReset429s)
	assert.Equal(t, 2, st.LateResetExcused)
	assert.Empty(t, st.Violations(), "the headers said the window was over")
	var tb fakeTB
	assert.True(t, AssertNoViolations(&tb, st))

	// Ignoring the late 429's retry_after once an on-time window would be
	// spent too is the client's fault.
	require.Equal(t, 200, s.do(time.Second+retry, "GET", "/api/v10/channels/8").Status)
	require.Equal(t, 200, s.do(time.Second+retry, "GET", "/api/v10/channels/8").Status)
	for i := 0; i < 3; i++ {
		require.Equal(t, 429, s.do(2*time.Second+retry, "GET", "/api/v10/channels/8").Status)
	}
	st = s.e.Stats()
	assert.Equal(t, 5, st.LateReset429s)
	assert.Equal(t, 4, st.LateResetExcused)
	assert.Equal(t, []string{"1 user-scope 429s (bucket limits exceeded), 1 of them in late-reset intervals beyond what an on-time window would have admitted"}, st.Violations())
}

func TestLateResetAdmitsIntoTheOldWindowWhileItHasRoom(t *testing.T) {
	s := lateSim(t, 3, ms(300))
	const p = "/api/v10/channels/7"
	require.Equal(t, 200, s.do(0, "GET", p).Status)
	d := s.do(time.Second, "GET", p)
	require.Equal(t, 200, d.Status, "the old window still has room")
	assert.True(t, d.Late)
	assert.Equal(t, "1", d.Header.Get("X-RateLimit-Remaining"), "counted in the old window")
	assert.Equal(t, "0.300", d.Header.Get("X-RateLimit-Reset-After"))
	assert.Equal(t, resetAt(ms(1300)), d.Header.Get("X-RateLimit-Reset"))
	require.Equal(t, 200, s.do(ms(1100), "GET", p).Status)
	d = s.do(ms(1200), "GET", p)
	require.Equal(t, 429, d.Status)
	assert.Equal(t, "0.100", d.Header.Get("X-RateLimit-Reset-After"))
	// The fourth request of the late interval is one more than an on-time
	// window opened at 1000 ms would have admitted.
	require.Equal(t, 429, s.do(ms(1250), "GET", p).Status)
	d = s.do(ms(1300), "GET", p)
	require.Equal(t, 200, d.Status)
	assert.Equal(t, "2", d.Header.Get("X-RateLimit-Remaining"))
	st := s.e.Stats()
	assert.Equal(t, 2, st.LateReset429s)
	assert.Equal(t, 1, st.LateResetExcused)
	assert.Equal(t, 2, st.Buckets[0].Windows)
	assert.Equal(t, 3, st.Buckets[0].MaxAdmitted)
	assert.Len(t, st.Violations(), 1)
}

func TestLateResetLongerThanTheWindow(t *testing.T) {
	// An on-time Discord would have opened two windows in a 1.5 s late
	// interval; requests that fit them are excused.
	s := lateSim(t, 1, ms(1500))
	const p = "/api/v10/channels/7"
	require.Equal(t, 200, s.do(0, "GET", p).Status)
	d := s.do(time.Second, "GET", p)
	require.Equal(t, 429, d.Status)
	assert.Equal(t, "1.500", d.Header.Get("X-RateLimit-Reset-After"))
	require.Equal(t, 429, s.do(2*time.Second, "GET", p).Status)
	require.Equal(t, 429, s.do(2*time.Second, "GET", p).Status)
	require.Equal(t, 200, s.do(ms(2500), "GET", p).Status)
	st := s.e.Stats()
	assert.Equal(t, 3, st.LateReset429s)
	assert.Equal(t, 2, st.LateResetExcused)
}

func TestSetLateResetAppliesAtOnce(t *testing.T) {
	s := lateSim(t, 1, 0)
	const p = "/api/v10/channels/7"
	require.Equal(t, 200, s.do(0, "GET", p).Status)
	s.e.SetLateReset(ms(300)) // the open window reopens late too
	d := s.do(time.Second, "GET", p)
	require.Equal(t, 429, d.Status)
	assert.True(t, d.Late)
	assert.Equal(t, "0.300", d.Header.Get("X-RateLimit-Reset-After"))
	s.e.SetLateReset(0) // back on time: the window has reopened
	d = s.do(ms(1100), "GET", p)
	require.Equal(t, 200, d.Status)
	assert.Equal(t, "1.000", d.Header.Get("X-RateLimit-Reset-After"))
	s.e.SetLateReset(-time.Second) // negative means on time
	require.Equal(t, 200, s.do(ms(2100), "GET", p).Status)
	s.e.SetLateReset(ms(300))
	s.e.Reset(t0.Add(ms(3000))) // Reset keeps the fault
	require.Equal(t, 200, s.do(ms(3000), "GET", p).Status)
	assert.Equal(t, 429, s.do(ms(4000), "GET", p).Status)
	assert.Equal(t, 200, s.do(ms(4300), "GET", p).Status)
	assert.Equal(t, 1, s.e.Stats().LateReset429s)
}

func TestLateResetLeavesSublimitsAlone(t *testing.T) {
	rs := DefaultRules().Scaled(0.001) // rename sublimit: 2 per 600 ms
	s := newSim(t, rs, Config{LateReset: ms(300)})
	rename := withBody(`{"name":"general"}`)
	require.Equal(t, 200, s.do(ms(0), "PATCH", "/api/v10/channels/9", rename).Status)
	require.Equal(t, 200, s.do(ms(10), "PATCH", "/api/v10/channels/9", rename).Status)
	// The bucket (5 per 5 ms) is in its late interval from 5 to 305 ms; the
	// hidden sublimit is not announced by any header and keeps its own,
	// on-time window (0 to 600 ms).
	d := s.do(ms(20), "PATCH", "/api/v10/channels/9", rename)
	require.Equal(t, "shared", d.Scope)
	assert.True(t, d.Late)
	var body rateLimitBody
	require.NoError(t, json.Unmarshal(d.Body, &body))
	assert.InDelta(t, 0.58, body.RetryAfter, 1e-9, "the sublimit's reset is not delayed")
	assert.Equal(t, 200, s.do(ms(600), "PATCH", "/api/v10/channels/9", rename).Status)
	st := s.e.Stats()
	assert.Zero(t, st.LateReset429s, "only user-scope 429s are late-reset 429s")
	assert.Equal(t, 1, st.RateLimited["shared"])
}

func TestRevokedWebhookTokensAre401(t *testing.T) {
	s := newSim(t, DefaultRules(), Config{RevokedTokens: []string{"expired"}})
	d := s.do(ms(0), "PATCH", "/api/v10/webhooks/1/expired/messages/@original", withBody(`{"content":"x"}`))
	assert.Equal(t, 401, d.Status)
	assert.JSONEq(t, `{"message":"Invalid Webhook Token","code":50027}`, string(d.Body))
	assert.Equal(t, 200, s.do(ms(1), "PATCH", "/api/v10/webhooks/1/fresh/messages/@original", withBody(`{"content":"x"}`)).Status)
	assert.Equal(t, 200, s.do(ms(2), "POST", "/api/v10/webhooks/1/fresh", withBody(`{"content":"x"}`)).Status)
}

// A sublimit with Per is a group limit across rules and buckets: one
// counter per value of the parameter, shared by every rule that names it.
func TestSublimitPerGroupSpansRules(t *testing.T) {
	hidden := []Sublimit{{Name: "member_roles", Per: "guild_id", Limit: 2, Window: Duration(time.Second)}}
	withRoles := []Sublimit{{Name: "member_roles", Per: "guild_id", Fields: []string{"roles"}, Limit: 2, Window: Duration(time.Second)}}
	rs := rl(10, time.Second,
		Rule{Name: "add_role", Method: "PUT", Route: "/guilds/{guild_id}/members/{user_id}/roles/{role_id}", Bucket: "roles", Sublimits: hidden},
		Rule{Name: "modify_member", Method: "PATCH", Route: "/guilds/{guild_id}/members/{user_id}", Bucket: "member", Sublimits: withRoles})
	s := newSim(t, rs)
	assert.Equal(t, 204, s.do(ms(0), "PUT", "/api/v10/guilds/1/members/5/roles/9").Status)
	assert.Equal(t, 200, s.do(ms(1), "PATCH", "/api/v10/guilds/1/members/6", withBody(`{"roles":["9"]}`)).Status)
	assert.Equal(t, 200, s.do(ms(2), "PATCH", "/api/v10/guilds/1/members/6", withBody(`{"nick":"x"}`)).Status, "sets no role")
	d := s.do(ms(3), "PUT", "/api/v10/guilds/1/members/7/roles/9")
	require.Equal(t, 429, d.Status, "the third role update of guild 1, over two buckets")
	assert.Equal(t, "shared", d.Header.Get("X-RateLimit-Scope"))
	assert.Equal(t, "8", d.Header.Get("X-RateLimit-Remaining"), "the request's own bucket headers")
	assert.Equal(t, 204, s.do(ms(4), "PUT", "/api/v10/guilds/2/members/7/roles/9").Status, "another guild, another group")
	assert.Equal(t, 204, s.do(ms(1000), "PUT", "/api/v10/guilds/1/members/7/roles/9").Status, "the window is over")
	st := s.e.Stats()
	keys := map[string]int{}
	for _, sl := range st.Sublimits {
		keys[sl.Key] = sl.Admitted
	}
	assert.Equal(t, map[string]int{"group member_roles guild_id=1": 3, "group member_roles guild_id=2": 1}, keys)

	bad := rs
	bad.Rules = append([]Rule(nil), rs.Rules...)
	bad.Rules[1].Sublimits = []Sublimit{{Name: "member_roles", Per: "guild_id", Limit: 3, Window: Duration(time.Second)}}
	_, err := NewEngine(t0, Config{Rules: bad})
	assert.ErrorContains(t, err, "another limit or window")
	bad.Rules[1].Sublimits = []Sublimit{{Name: "x", Per: "channel_id", Limit: 3, Window: Duration(time.Second)}}
	_, err = NewEngine(t0, Config{Rules: bad})
	assert.ErrorContains(t, err, `per "channel_id" is not a parameter`)
}

// TestRequestsHandledOutOfArrivalOrder: the engine judges each request at
// its arrival stamp; one handled after a later-stamped request opened a new
// window (a starved goroutine) is counted there, and the 429s that this
// alone causes are excused, by arrival. An overshoot by arrival is not.
func TestRequestsHandledOutOfArrivalOrder(t *testing.T) {
	s := newSim(t, rl(5, 100*time.Millisecond, Rule{Name: "get", Method: "GET", Route: "/channels/{channel_id}", Bucket: "c"}))
	get := func(at int) Decision { return s.do(ms(at), "GET", "/api/v10/channels/1") }
	for i := range 3 {
		require.Equal(t, 200, get(i).Status) // window A: 0..100, 3 by arrival
	}
	require.Equal(t, 200, get(100).Status) // window B opens at 100
	// Stamped in A, handled now: counted in B, and in A by arrival (4, 5).
	require.Equal(t, 200, get(50).Status)
	require.Equal(t, 200, get(51).Status)
	require.Equal(t, 200, get(110).Status)
	require.Equal(t, 200, get(111).Status) // B full: 5, 3 of them stamped in it
	assert.Equal(t, 429, get(112).Status, "the answer is the handling order's")
	st := s.e.Stats()
	assert.Equal(t, 1, st.RateLimited["user"])
	assert.Equal(t, 1, st.ReorderedExcused, "by arrival B holds 3 of 5")
	assert.Zero(t, st.ClientUser429s())
	assert.Empty(t, st.Violations())
	// A sixth stamped in A: over A's limit by arrival, a violation.
	assert.Equal(t, 429, get(52).Status)
	st = s.e.Stats()
	assert.Equal(t, 2, st.RateLimited["user"])
	assert.Equal(t, 1, st.ReorderedExcused)
	assert.Equal(t, 1, st.ClientUser429s())
	assert.Len(t, st.Violations(), 1)
	require.Len(t, st.Buckets, 1)
	assert.Equal(t, 1, st.Buckets[0].ReorderedExcused)
	// Once B ends, in-order requests are judged as always: a sixth in a
	// window is the client's.
	for i := range 5 {
		require.Equal(t, 200, get(300+i).Status)
	}
	assert.Equal(t, 429, get(310).Status)
	assert.Equal(t, 2, s.e.Stats().ClientUser429s())
}

// TestGlobalRefusalOutOfArrivalOrder: the global window's count sees the
// requests handled so far; one stamped before requests handled ahead of
// it is refused when they fill the window, and excused when, by the
// stamps, every interval of the window containing it had room. A refusal
// by the stamps too is the client's.
func TestGlobalRefusalOutOfArrivalOrder(t *testing.T) {
	rs := rl(100, time.Second, Rule{Name: "r", Method: "GET", Route: "/channels/{channel_id}", Bucket: "h"})
	rs.GlobalLimit, rs.GlobalWindow = 3, Duration(100*time.Millisecond)
	s := newSim(t, rs)
	get := func(at, ch int) Decision { return s.do(ms(at), "GET", fmt.Sprintf("/api/v10/channels/%d", ch)) }
	require.Equal(t, 200, get(10, 1).Status)
	require.Equal(t, 200, get(20, 2).Status)
	require.Equal(t, 200, get(150, 3).Status) // stamped later, handled first
	require.Equal(t, 200, get(160, 4).Status)
	require.Equal(t, 200, get(170, 5).Status)
	// Stamped 50: the count sees 150, 160, 170, a full window; by the
	// stamps the intervals of 100 ms around 50 hold 10, 20 and 50 at
	// most.
	assert.Equal(t, 429, get(50, 6).Status)
	st := s.e.Stats()
	assert.Equal(t, 1, st.RateLimited["global"])
	assert.Equal(t, 1, st.GlobalReorderedExcused)
	assert.Zero(t, st.ClientGlobal429s())
	assert.Empty(t, st.Violations())
	// In order, a fourth in 100 ms is refused by the stamps too: the
	// client's.
	s2 := newSim(t, rs)
	for _, at := range []int{10, 20, 30} {
		require.Equal(t, 200, s2.do(ms(at), "GET", "/api/v10/channels/1").Status)
	}
	assert.Equal(t, 429, s2.do(ms(40), "GET", "/api/v10/channels/2").Status)
	st = s2.e.Stats()
	assert.Zero(t, st.GlobalReorderedExcused)
	assert.Equal(t, 1, st.ClientGlobal429s())
	assert.Len(t, st.Violations(), 1)
}
