package sluicetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const messages = "/api/v10/channels/1/messages"

func msgSim(t *testing.T, limit int) *sim {
	t.Helper()
	return newSim(t, rl(limit, 5*time.Second,
		Rule{Name: "create_message", Method: "POST", Route: "/channels/{channel_id}/messages", Bucket: "m", CreatesMessage: true}))
}

type message struct {
	ID        string `json:"id"`
	ChannelID string `json:"channel_id"`
	Content   string `json:"content"`
	Nonce     any    `json:"nonce"`
	Timestamp string `json:"timestamp"`
}

func decodeMessage(t *testing.T, d Decision) message {
	t.Helper()
	require.Equal(t, 200, d.Status, string(d.Body))
	assert.Equal(t, "application/json", d.Header.Get("Content-Type"))
	var m message
	require.NoError(t, json.Unmarshal(d.Body, &m))
	require.NotEmpty(t, m.ID)
	return m
}

func TestDefaultRulesCreateMessages(t *testing.T) {
	rs := DefaultRules()
	for _, r := range rs.Rules {
		want := r.Name == "create_message" || r.Name == "execute_webhook"
		assert.Equal(t, want, r.CreatesMessage, r.Name)
	}
}

func TestEnforcedNonceReturnsTheExistingMessage(t *testing.T) {
	s := msgSim(t, 5)
	body := withBody(`{"content":"hello","nonce":"abc","enforce_nonce":true}`)
	d0 := s.do(0, "POST", messages, body)
	first := decodeMessage(t, d0)
	assert.Equal(t, "1", first.ChannelID)
	assert.Equal(t, "hello", first.Content)
	assert.Equal(t, "abc", first.Nonce)
	assert.NotContains(t, string(d0.Body), "enforce_nonce", "a request flag, not a message field")

	d := s.do(ms(100), "POST", messages, body)
	again := decodeMessage(t, d)
	assert.Equal(t, first, again, "the same message, timestamp and id included")
	assert.Equal(t, "3", d.Header.Get("X-RateLimit-Remaining"), "a deduplicated request still spends the bucket")

	st := s.e.Stats()
	assert.Equal(t, 1, st.MessagesCreated)
	assert.Equal(t, 1, st.MessagesDeduplicated)
	assert.Zero(t, st.DuplicateMessages)
	assert.Equal(t, 2, st.Buckets[0].Admitted)
	assert.Empty(t, st.Violations())
	var tb fakeTB
	assert.True(t, AssertNoDuplicateMessages(&tb, st))
	assert.Empty(t, tb.msgs)

	// Another nonce is another message; the body of the first is irrelevant.
	other := decodeMessage(t, s.do(ms(200), "POST", messages, withBody(`{"content":"hello","nonce":"abd","enforce_nonce":true}`)))
	assert.NotEqual(t, first.ID, other.ID)
	assert.Equal(t, 2, s.e.Stats().MessagesCreated)
}

func TestNonceWithoutEnforceCreatesADuplicate(t *testing.T) {
	s := msgSim(t, 5)
	a := decodeMessage(t, s.do(0, "POST", messages, withBody(`{"content":"hi","nonce":"n1"}`)))
	b := decodeMessage(t, s.do(ms(10), "POST", messages, withBody(`{"content":"hi","nonce":"n1","enforce_nonce":false}`)))
	assert.NotEqual(t, a.ID, b.ID, "without enforce_nonce a message is always created")
	st := s.e.Stats()
	assert.Equal(t, 2, st.MessagesCreated)
	assert.Zero(t, st.MessagesDeduplicated)
	assert.Equal(t, 1, st.DuplicateMessages)
	assert.Empty(t, st.Violations(), "duplicates are not rate-limit violations")

	var tb fakeTB
	assert.False(t, AssertNoDuplicateMessages(&tb, st))
	require.Len(t, tb.msgs, 1)
	assert.Contains(t, tb.msgs[0], "1 messages were created twice")

	// With enforce_nonce now, the latest message with that nonce comes back.
	c := decodeMessage(t, s.do(ms(20), "POST", messages, withBody(`{"content":"hi","nonce":"n1","enforce_nonce":true}`)))
	assert.Equal(t, b.ID, c.ID)
	assert.Equal(t, 1, s.e.Stats().MessagesDeduplicated)
}

func TestIdenticalBodiesWithoutNonceAreDuplicates(t *testing.T) {
	s := msgSim(t, 10)
	s.do(0, "POST", messages, withBody(`{"content":"same"}`))
	s.do(ms(1), "POST", messages, withBody(`{"content":"other"}`))
	s.do(ms(2), "POST", messages, withBody(`{"content":"same"}`))
	s.do(ms(3), "POST", "/api/v10/channels/2/messages", withBody(`{"content":"same"}`))                   // another channel
	s.do(ms(4), "POST", messages, withBody(`{"content":"same"}`), withAuth("Bot another-token"))          // another author
	s.do(ms(5), "POST", messages, withBody(`{"content":"same","nonce":"x"}`))                             // a nonce: not compared by body
	s.do(ms(6), "POST", messages, withBody(`{"content":"same"}`), func(r *Request) { r.IP = "10.9.9.9" }) // same token elsewhere: same author
	s.do(NonceWindow+ms(6), "POST", messages, withBody(`{"content":"same"}`))                             // forgotten
	st := s.e.Stats()
	assert.Equal(t, 8, st.MessagesCreated)
	assert.Equal(t, 2, st.DuplicateMessages)
	assert.Zero(t, st.MessagesDeduplicated)
}

func TestNonceDedupIsPerAuthorAndChannel(t *testing.T) {
	s := msgSim(t, 10)
	body := withBody(`{"content":"x","nonce":"same","enforce_nonce":true}`)
	ids := map[string]bool{}
	ids[decodeMessage(t, s.do(0, "POST", messages, body)).ID] = true
	ids[decodeMessage(t, s.do(ms(1), "POST", "/api/v10/channels/2/messages", body)).ID] = true
	ids[decodeMessage(t, s.do(ms(2), "POST", messages, body, withAuth("Bot another-token"))).ID] = true
	assert.Len(t, ids, 3)
	st := s.e.Stats()
	assert.Equal(t, 3, st.MessagesCreated)
	assert.Zero(t, st.MessagesDeduplicated)
	assert.Zero(t, st.DuplicateMessages)
}

func TestNonceIsForgottenAfterTheWindow(t *testing.T) {
	s := msgSim(t, 10)
	body := withBody(`{"content":"x","nonce":"n","enforce_nonce":true}`)
	first := decodeMessage(t, s.do(0, "POST", messages, body))
	assert.Equal(t, first.ID, decodeMessage(t, s.do(NonceWindow-time.Millisecond, "POST", messages, body)).ID)
	later := decodeMessage(t, s.do(NonceWindow, "POST", messages, body))
	assert.NotEqual(t, first.ID, later.ID, "5 minutes after its creation the nonce is forgotten")
	st := s.e.Stats()
	assert.Equal(t, 2, st.MessagesCreated)
	assert.Equal(t, 1, st.MessagesDeduplicated)
	assert.Zero(t, st.DuplicateMessages)
	// The new message is remembered from its own creation.
	assert.Equal(t, later.ID, decodeMessage(t, s.do(2*NonceWindow-time.Millisecond, "POST", messages, body)).ID)
}

func TestRateLimitedMessageCreatesNothing(t *testing.T) {
	s := msgSim(t, 1)
	decodeMessage(t, s.do(0, "POST", messages, withBody(`{"content":"a","nonce":"1","enforce_nonce":true}`)))
	d := s.do(ms(10), "POST", messages, withBody(`{"content":"b","nonce":"2","enforce_nonce":true}`))
	require.Equal(t, 429, d.Status)
	assert.Contains(t, string(d.Body), "rate limited")
	assert.Equal(t, 1, s.e.Stats().MessagesCreated)
	// The same request after the window is not deduplicated: nothing was
	// created with nonce 2.
	m := decodeMessage(t, s.do(5*time.Second, "POST", messages, withBody(`{"content":"b","nonce":"2","enforce_nonce":true}`)))
	assert.Equal(t, "b", m.Content)
	st := s.e.Stats()
	assert.Equal(t, 2, st.MessagesCreated)
	assert.Zero(t, st.MessagesDeduplicated)
	assert.Zero(t, st.DuplicateMessages)
}

func TestNonceShapes(t *testing.T) {
	s := msgSim(t, 20)
	// An integer nonce is echoed digit for digit and equals its string.
	d := s.do(0, "POST", messages, withBody(`{"content":"x","nonce":1234567890123456789012345,"enforce_nonce":true}`))
	require.Equal(t, 200, d.Status)
	assert.Contains(t, string(d.Body), `"nonce":1234567890123456789012345`)
	first := decodeMessage(t, d)
	assert.Equal(t, first.ID, decodeMessage(t, s.do(ms(1), "POST", messages, withBody(`{"nonce":"1234567890123456789012345","enforce_nonce":true}`))).ID)

	// Too long, or neither a string nor an integer: 400, nothing created,
	// the bucket spent.
	for i, bad := range []string{
		`{"nonce":"12345678901234567890123456"}`,
		`{"nonce":12345678901234567890123456}`,
		`{"nonce":1.5}`,
		`{"nonce":true,"enforce_nonce":true}`,
		`{"nonce":{"a":1}}`,
	} {
		d := s.do(ms(10+i), "POST", messages, withBody(bad))
		require.Equal(t, 400, d.Status, bad)
		assert.Contains(t, string(d.Body), `"code":50035`, bad)
		assert.NotEmpty(t, d.Header.Get("X-RateLimit-Remaining"), bad)
	}
	// A 25-character string nonce counts characters, not bytes.
	assert.Equal(t, 200, s.do(ms(20), "POST", messages, withBody(`{"nonce":"ééééééééééééééééééééééééé"}`)).Status)
	// Absent, null and empty nonces are no nonce: compared by body.
	assert.Equal(t, 200, s.do(ms(21), "POST", messages, withBody(`{"content":"y","nonce":null,"enforce_nonce":true}`)).Status)
	assert.Equal(t, 200, s.do(ms(22), "POST", messages, withBody(`{"content":"y","nonce":null,"enforce_nonce":true}`)).Status)
	st := s.e.Stats()
	assert.Equal(t, 4, st.MessagesCreated)
	assert.Equal(t, 1, st.MessagesDeduplicated)
	assert.Equal(t, 1, st.DuplicateMessages)
	assert.Equal(t, 5, st.ByStatus[400])
	assert.Zero(t, st.Invalid, "400s are not invalid requests")
}

func TestWebhookMessagesDedupPerWebhook(t *testing.T) {
	s := newSim(t, DefaultRules())
	body := withBody(`{"content":"w","nonce":"n","enforce_nonce":true}`)
	d0 := s.do(0, "POST", "/api/v10/webhooks/7/tok", body, noAuth)
	first := decodeMessage(t, d0)
	assert.Equal(t, "7", first.ChannelID, "the webhook id stands for its channel")
	assert.NotContains(t, string(d0.Body), "tok\"", "the webhook token is never echoed")
	// The author is the webhook, whoever calls it.
	assert.Equal(t, first.ID, decodeMessage(t, s.do(ms(1), "POST", "/api/v10/webhooks/7/tok", body)).ID)
	assert.Equal(t, first.ID, decodeMessage(t, s.do(ms(2), "POST", "/api/v10/webhooks/7/tok", body, noAuth, fromIP("10.0.0.9"))).ID)
	assert.NotEqual(t, first.ID, decodeMessage(t, s.do(ms(3), "POST", "/api/v10/webhooks/7/other", body, noAuth)).ID)
	assert.NotEqual(t, first.ID, decodeMessage(t, s.do(ms(4), "POST", "/api/v10/webhooks/8/tok", body, noAuth)).ID)
	st := s.e.Stats()
	assert.Equal(t, 3, st.MessagesCreated)
	assert.Equal(t, 2, st.MessagesDeduplicated)
	b, err := json.Marshal(st)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "tok\"")
}

func TestMessageMemoryIsBoundedAndReset(t *testing.T) {
	rs := rl(1000, 5*time.Second,
		Rule{Name: "create_message", Method: "POST", Route: "/channels/{channel_id}/messages", Bucket: "m", CreatesMessage: true})
	rs.GlobalLimit = 10000
	s := newSim(t, rs)
	for i := 0; i < 300; i++ {
		s.do(ms(i), "POST", messages, withBody(fmt.Sprintf(`{"content":"%d","nonce":"%d"}`, i, i)))
		s.do(ms(i), "POST", messages, withBody(fmt.Sprintf(`{"content":"%d"}`, i)))
	}
	assert.Equal(t, len(s.e.messages.nonces), 300)
	assert.Equal(t, len(s.e.messages.bodies), 300)
	// Any request, even one that creates nothing, lets the old ones go.
	s.do(NonceWindow+ms(150), "GET", "/api/v10/nothing")
	assert.Equal(t, len(s.e.messages.nonces), 149)
	assert.Equal(t, len(s.e.messages.bodies), 149)
	s.do(NonceWindow+ms(300), "GET", "/api/v10/nothing")
	assert.Zero(t, len(s.e.messages.nonces))
	assert.Zero(t, len(s.e.messages.bodies))
	assert.LessOrEqual(t, len(s.e.messages.queue)-s.e.messages.head, 0)

	// A message refreshed by a later creation stays until that one expires.
	s.do(0, "POST", messages, withBody(`{"content":"r"}`))
	s.do(time.Minute, "POST", messages, withBody(`{"content":"r"}`))
	s.do(NonceWindow+time.Second, "GET", "/api/v10/nothing")
	assert.Equal(t, len(s.e.messages.bodies), 1)

	s.e.Reset(t0.Add(time.Hour))
	assert.Zero(t, len(s.e.messages.bodies))
	st := s.e.Stats()
	assert.Zero(t, st.MessagesCreated)
	assert.Zero(t, st.DuplicateMessages)
}

func TestResetForgetsNonces(t *testing.T) {
	s := msgSim(t, 5)
	body := withBody(`{"content":"x","nonce":"n","enforce_nonce":true}`)
	first := decodeMessage(t, s.do(0, "POST", messages, body))
	s.e.Reset(t0.Add(time.Second))
	assert.NotEqual(t, first.ID, decodeMessage(t, s.do(2*time.Second, "POST", messages, body)).ID)
	assert.Zero(t, s.e.Stats().MessagesDeduplicated)
}

func cycleSim(t *testing.T, cycle []int, cfg ...Config) *sim {
	t.Helper()
	return newSim(t, RuleSet{Rules: []Rule{{Name: "r", Method: "GET", Route: "/channels/{channel_id}", Bucket: "h",
		LimitCycle: cycle, Window: Duration(time.Second)}}}, cfg...)
}

func TestLimitCycleChangesTheLimitEachWindow(t *testing.T) {
	s := cycleSim(t, []int{5, 2, 5})
	assert.Equal(t, 5, s.e.Rules().Rules[0].Limit, "limit defaults to the cycle's first")
	get := func(at time.Duration) Decision { return s.do(at, "GET", "/api/v10/channels/1") }
	for i := 0; i < 5; i++ {
		d := get(ms(i))
		require.Equal(t, 200, d.Status)
		assert.Equal(t, "5", d.Header.Get("X-RateLimit-Limit"))
		assert.Equal(t, fmt.Sprint(4-i), d.Header.Get("X-RateLimit-Remaining"))
	}
	// Second window: 2.
	d := get(time.Second)
	require.Equal(t, 200, d.Status)
	assert.Equal(t, "2", d.Header.Get("X-RateLimit-Limit"))
	assert.Equal(t, "1", d.Header.Get("X-RateLimit-Remaining"))
	d = get(time.Second + ms(1))
	require.Equal(t, 200, d.Status)
	assert.Equal(t, "0", d.Header.Get("X-RateLimit-Remaining"))
	d = get(time.Second + ms(2))
	require.Equal(t, 429, d.Status, "a third request in the window of 2")
	assert.Equal(t, "user", d.Header.Get("X-RateLimit-Scope"))
	assert.Equal(t, "2", d.Header.Get("X-RateLimit-Limit"))
	// Third window: 5 again; the fourth wraps to 5, the fifth to 2.
	for i := 0; i < 5; i++ {
		require.Equal(t, 200, get(2*time.Second+ms(i)).Status)
	}
	require.Equal(t, 429, get(2*time.Second+ms(5)).Status)
	for i := 0; i < 5; i++ {
		require.Equal(t, 200, get(3*time.Second+ms(i)).Status)
	}
	assert.Equal(t, "2", get(4*time.Second).Header.Get("X-RateLimit-Limit"))
	// Another bucket key starts its own cycle.
	assert.Equal(t, "5", s.do(4*time.Second, "GET", "/api/v10/channels/2").Header.Get("X-RateLimit-Limit"))

	st := s.e.Stats()
	assert.Equal(t, 2, st.RateLimited["user"])
	assert.Equal(t, 5, st.MaxBucketWindow)
	require.Len(t, st.Buckets, 2)
	b := st.Buckets[0]
	assert.Equal(t, []int{5, 2, 5}, b.LimitCycle)
	assert.Equal(t, 5, b.Limit)
	assert.Equal(t, 5, b.Windows)
	assert.Zero(t, b.MaxOverLimit)
	v := st.Violations()
	require.Len(t, v, 1)
	assert.Contains(t, v[0], "2 user-scope 429s")
}

func TestLimitCycleWindowsAreJudgedByTheirOwnLimit(t *testing.T) {
	s := cycleSim(t, []int{2, 5})
	for i := 0; i < 2; i++ {
		require.Equal(t, 200, s.do(ms(i), "GET", "/api/v10/channels/1").Status)
	}
	for i := 0; i < 5; i++ {
		require.Equal(t, 200, s.do(time.Second+ms(i), "GET", "/api/v10/channels/1").Status)
	}
	st := s.e.Stats()
	assert.Equal(t, 2, st.Buckets[0].Limit)
	assert.Equal(t, 5, st.Buckets[0].MaxAdmitted)
	assert.Empty(t, st.Violations(), "5 in a window of 5 is no simulator bug, though the first limit was 2")
	st.Buckets[0].MaxOverLimit = 1
	assert.Contains(t, strings.Join(st.Violations(), "\n"), "simulator bug")
}

func TestLimitCycleWithLateReset(t *testing.T) {
	// The on-time window a late 429 is judged against is the next window,
	// with the next limit.
	s := cycleSim(t, []int{1, 3}, Config{LateReset: 500 * time.Millisecond})
	require.Equal(t, 200, s.do(0, "GET", "/api/v10/channels/1").Status)
	for i := 0; i < 4; i++ {
		d := s.do(time.Second+ms(100*i), "GET", "/api/v10/channels/1")
		require.Equal(t, 429, d.Status)
		assert.Equal(t, "1", d.Header.Get("X-RateLimit-Limit"), "the old window's limit")
	}
	st := s.e.Stats()
	assert.Equal(t, 4, st.LateReset429s)
	assert.Equal(t, 3, st.LateResetExcused, "an on-time window of 3 would have admitted 3 of them")
	d := s.do(1500*time.Millisecond, "GET", "/api/v10/channels/1")
	require.Equal(t, 200, d.Status)
	assert.Equal(t, "3", d.Header.Get("X-RateLimit-Limit"))
}

func TestLimitCycleValidation(t *testing.T) {
	yml := "rules:\n  - {name: a, method: GET, route: '/a', bucket: h, limit_cycle: [5, 2, 5], window: 1s}\n" +
		"  - {name: b, method: POST, route: '/a', bucket: h, limit: 5, limit_cycle: [5, 2, 5], window: 1s}\n"
	rs, err := ParseRules([]byte(yml))
	require.NoError(t, err)
	assert.Equal(t, []int{5, 2, 5}, rs.Rules[0].LimitCycle)
	assert.Equal(t, 5, rs.Rules[0].Limit)
	require.NoError(t, RuleSet{Rules: []Rule{{Method: "GET", Route: "/a", Bucket: "h", LimitCycle: []int{3}, Window: Duration(time.Second),
		Auth: AuthRequired, Status: 200}}}.Validate(),
		"limit 0 is fine with a cycle, before defaults too")

	bad := map[string]string{
		"zero entry":     `{"rules": [{"method":"GET","route":"/a","bucket":"h","limit_cycle":[5,0],"window":"1s"}]}`,
		"negative entry": `{"rules": [{"method":"GET","route":"/a","bucket":"h","limit_cycle":[-1],"window":"1s"}]}`,
		"limit differs":  `{"rules": [{"method":"GET","route":"/a","bucket":"h","limit":2,"limit_cycle":[5,2],"window":"1s"}]}`,
		"empty no limit": `{"rules": [{"method":"GET","route":"/a","bucket":"h","limit_cycle":[],"window":"1s"}]}`,
		"hash disagrees": `{"rules": [{"method":"GET","route":"/a","bucket":"h","limit_cycle":[5,2],"window":"1s"},{"method":"POST","route":"/a","bucket":"h","limit":5,"window":"1s"}]}`,
		"cycle differs":  `{"rules": [{"method":"GET","route":"/a","bucket":"h","limit_cycle":[5,2],"window":"1s"},{"method":"POST","route":"/a","bucket":"h","limit_cycle":[5,3],"window":"1s"}]}`,
	}
	for name, in := range bad {
		_, err := ParseRules([]byte(in))
		assert.ErrorIs(t, err, ErrInvalidRules, name)
	}

	sc := rs.Scaled(0.5)
	sc.Rules[0].LimitCycle[0] = 99
	assert.Equal(t, 5, rs.Rules[0].LimitCycle[0], "Scaled copies the cycle")
}
