package sluice_test

// Declared limits (Options.Limits): limits the API enforces without
// announcing them, against a simulator that enforces them the way Discord
// does, with a shared-scope 429 and no header.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

const (
	roleRoute   = "/guilds/{guild_id}/members/{user_id}/roles/{role_id}"
	memberRoute = "/guilds/{guild_id}/members/{user_id}"
)

// roleRules: adding and removing a role share a generous bucket (20 per
// second per guild), editing a member has its own; a hidden limit of 5
// role updates per 500 ms per guild spans the three routes (a member edit
// counts when it sets "roles"), answered only by a shared 429.
func roleRules() sluicetest.RuleSet {
	hidden := []sluicetest.Sublimit{{Name: "member_roles", Per: "guild_id", Limit: 5, Window: sluicetest.Duration(500 * time.Millisecond)}}
	withRoles := []sluicetest.Sublimit{{Name: "member_roles", Per: "guild_id", Fields: []string{"roles"}, Limit: 5, Window: sluicetest.Duration(500 * time.Millisecond)}}
	w := sluicetest.Duration(time.Second)
	return sluicetest.RuleSet{Rules: []sluicetest.Rule{
		{Name: "add_role", Method: "PUT", Route: roleRoute, Bucket: "roles", Limit: 20, Window: w, Sublimits: hidden},
		{Name: "remove_role", Method: "DELETE", Route: roleRoute, Bucket: "roles", Limit: 20, Window: w, Sublimits: hidden},
		{Name: "modify_member", Method: "PATCH", Route: memberRoute, Bucket: "member", Limit: 20, Window: w, Sublimits: withRoles},
	}}
}

// memberRoles declares the simulator's hidden limit, replacing the default
// of that name (10 per 10 s).
func memberRoles() []sluice.Limit {
	return []sluice.Limit{
		{Name: "member_roles", Routes: []string{"PUT " + roleRoute, "DELETE " + roleRoute}, Per: "guild_id", Count: 5, Window: 500 * time.Millisecond},
		{Name: "member_roles", Routes: []string{"PATCH " + memberRoute}, Fields: []string{"roles"}, Per: "guild_id", Count: 5, Window: 500 * time.Millisecond},
	}
}

// roleLoad: 32 role updates on guild 1 over the three routes, 8 on
// guild 2, and 4 member edits that set no role (not under the limit).
func roleLoad() []*http.Request {
	var reqs []*http.Request
	for i := range 12 {
		reqs = append(reqs, req("PUT", fmt.Sprintf("/guilds/1/members/%d/roles/9", i), ""),
			req("DELETE", fmt.Sprintf("/guilds/1/members/%d/roles/8", i), ""))
		if i < 8 {
			reqs = append(reqs, req("PUT", fmt.Sprintf("/guilds/2/members/%d/roles/9", i), ""),
				req("PATCH", fmt.Sprintf("/guilds/1/members/%d", 100+i), `{"roles":["9"]}`))
		}
		if i < 4 {
			reqs = append(reqs, req("PATCH", fmt.Sprintf("/guilds/1/members/%d", 200+i), `{"nick":"n"}`))
		}
	}
	return reqs
}

func TestDeclaredGroupLimitDrawsNo429(t *testing.T) {
	h := newHarness(t, sluicetest.Options{Rules: roleRules(), Faults: sluicetest.Faults{Latency: 20 * time.Millisecond, Jitter: 10 * time.Millisecond}},
		sluice.Options{Limits: memberRoles()})
	reqs := roleLoad()
	doAllWithin(t, h.lim, reqs, 30*time.Second)
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	assert.Zero(t, st.RateLimited["shared"], "a declared limit never needs a 429")
	admitted := map[string]int{}
	for _, sl := range st.Sublimits {
		assert.Zero(t, sl.RateLimited, sl.Key)
		admitted[sl.Key] = sl.Admitted
	}
	assert.Equal(t, map[string]int{"group member_roles guild_id=1": 32, "group member_roles guild_id=2": 8}, admitted)
}

// Without the declaration Sluice meets the hidden limit and learns it from
// its first 429: the requests already in flight then meet it too, and
// after that at most one meets it per window of the limit (the bucket goes
// one request at a time, paused until the retry_after).
func TestUndeclaredGroupLimitLearnsFromTheFirst429(t *testing.T) {
	const window = 500 * time.Millisecond
	rs := roleRules()
	rs.Rules = rs.Rules[:2] // one bucket: the 429 teaches the bucket
	h := newHarness(t, sluicetest.Options{Rules: rs, Faults: sluicetest.Faults{Latency: 20 * time.Millisecond}},
		sluice.Options{NoDefaultLimits: true})
	var reqs []*http.Request
	for i := range 12 {
		reqs = append(reqs, req("PUT", fmt.Sprintf("/guilds/1/members/%d/roles/9", i), ""),
			req("DELETE", fmt.Sprintf("/guilds/1/members/%d/roles/8", i), ""))
	}
	doAllWithin(t, h.lim, reqs, 30*time.Second)
	st := h.srv.Stats()
	assert.Zero(t, st.ClientUser429s()+st.ClientGlobal429s())
	require.Len(t, st.Sublimits, 1)
	require.Len(t, st.Buckets, 1)
	var limited []time.Duration
	for _, e := range st.Buckets[0].Timeline {
		if e.Scope == "shared" {
			limited = append(limited, e.At)
		}
	}
	require.NotEmpty(t, limited)
	later := 0
	for _, at := range limited {
		if at >= limited[0]+window {
			later++
		}
	}
	assert.LessOrEqual(t, later, st.Sublimits[0].Windows-1, "after the first window, at most one 429 per window: %v", limited)
	t.Logf("undeclared: %d shared 429s over %d windows, %d after the first", len(limited), st.Sublimits[0].Windows, later)
}

// A group may span bucket actors: a bot's own rule over every channel (a
// Group function), checked at the server's arrival times.
func TestDeclaredGroupSpansChannels(t *testing.T) {
	const window = 300 * time.Millisecond
	dms := sluice.Limit{Name: "dms", Routes: []string{"POST " + messagesRoute}, Count: 2, Window: window,
		Group: func(r *http.Request) string {
			if r.Header.Get("X-Kind") == "dm" {
				return "dm"
			}
			return ""
		}}
	h := newHarness(t, sluicetest.Options{Rules: rules(5, time.Second, [2]string{"POST", messagesRoute}),
		Faults: sluicetest.Faults{Latency: 10 * time.Millisecond, Jitter: 10 * time.Millisecond}}, sluice.Options{Limits: []sluice.Limit{dms}})
	var reqs []*http.Request
	for i := range 8 {
		r := req("POST", fmt.Sprintf("/channels/%d/messages", 100+i), `{"content":"hi"}`)
		r.Header.Set("X-Kind", "dm")
		reqs = append(reqs, r, req("POST", fmt.Sprintf("/channels/%d/messages", 100+i), `{"content":"not a dm"}`))
	}
	doAllWithin(t, h.lim, reqs, 30*time.Second)
	h.srv.AssertNoViolations(t)
	var at []time.Duration // arrivals of the DMs: the first of each channel
	for _, b := range h.srv.Stats().Buckets {
		require.Len(t, b.Timeline, 2, b.Key)
		at = append(at, b.Timeline[0].At)
	}
	slices.Sort(at)
	for i := 2; i < len(at); i++ {
		assert.GreaterOrEqual(t, at[i]-at[i-2], window, "three DMs within one window: %v", at)
	}
}

// MaxWait refuses at once by the ETA a declared limit gives.
func TestDeclaredLimitMaxWaitRefusesAtOnce(t *testing.T) {
	h := newHarness(t, sluicetest.Options{Rules: roleRules()}, sluice.Options{Limits: []sluice.Limit{
		{Name: "member_roles", Routes: []string{"PUT " + roleRoute}, Per: "guild_id", Count: 2, Window: time.Minute},
	}})
	ctx := sluice.WithMaxWait(context.Background(), 5*time.Second)
	for i := range 2 {
		resp, err := h.lim.Do(ctx, req("PUT", fmt.Sprintf("/guilds/1/members/%d/roles/9", i), ""))
		require.NoError(t, err)
		resp.Body.Close()
	}
	start := time.Now()
	_, err := h.lim.Do(ctx, req("PUT", "/guilds/1/members/3/roles/9", ""))
	var we *sluice.WaitError
	require.ErrorAs(t, err, &we)
	assert.Less(t, time.Since(start), 5*time.Second, "refused at once, not after waiting")
	assert.Equal(t, "member_roles", we.Declared)
	assert.Greater(t, we.Wait, 50*time.Second)
	assert.Contains(t, err.Error(), "declared limit member_roles")
	// Another guild is another group.
	resp, err := h.lim.Do(ctx, req("PUT", "/guilds/2/members/3/roles/9", ""))
	require.NoError(t, err)
	resp.Body.Close()
}

// Snapshot shows the groups with requests waiting and slots held.
func TestDeclaredLimitInSnapshot(t *testing.T) {
	h := newHarness(t, sluicetest.Options{Rules: roleRules()}, sluice.Options{Limits: []sluice.Limit{
		{Name: "member_roles", Routes: []string{"PUT " + roleRoute}, Per: "guild_id", Count: 1, Window: time.Minute},
	}})
	resp, err := h.lim.Do(context.Background(), req("PUT", "/guilds/1/members/1/roles/9", ""))
	require.NoError(t, err)
	resp.Body.Close()
	f := h.lim.Send(context.Background(), req("PUT", "/guilds/1/members/2/roles/9", ""))
	require.Eventually(t, func() bool {
		s, err := h.lim.Snapshot(context.Background())
		require.NoError(t, err)
		return len(s.Limits) == 1 && s.Limits[0].Waiting == 1
	}, 5*time.Second, 5*time.Millisecond)
	s, err := h.lim.Snapshot(context.Background())
	require.NoError(t, err)
	assert.Equal(t, sluice.LimitSnapshot{Limit: "member_roles", Group: "guild_id=1", Count: 1, Window: time.Minute, Waiting: 1, Held: 1}, s.Limits[0])
	closeWithin(t, h.lim, 5*time.Second)
	_, err = f.Await(context.Background())
	assert.ErrorIs(t, err, sluice.ErrClosed, "a request waiting for its window ends with Close")
}

// Bad declarations are refused by New with an *OptionError naming the
// problem; a panicking Group fails its request only.
func TestDeclaredLimitErrors(t *testing.T) {
	for name, l := range map[string]sluice.Limit{
		"no name":        {Routes: []string{"PUT " + roleRoute}, Count: 1, Window: time.Second},
		"no routes":      {Name: "x", Count: 1, Window: time.Second},
		"zero count":     {Name: "x", Routes: []string{"PUT " + roleRoute}, Window: time.Second},
		"zero window":    {Name: "x", Routes: []string{"PUT " + roleRoute}, Count: 1},
		"not a template": {Name: "x", Routes: []string{"PUT /guilds/{id}/members/{user_id}/roles/{role_id}"}, Count: 1, Window: time.Second},
		"no method":      {Name: "x", Routes: []string{roleRoute}, Count: 1, Window: time.Second},
		"per not major":  {Name: "x", Routes: []string{"PUT " + roleRoute}, Per: "user_id", Count: 1, Window: time.Second},
		"bar in name":    {Name: "a|b", Routes: []string{"PUT " + roleRoute}, Count: 1, Window: time.Second},
	} {
		_, err := sluice.New(sluice.Options{Limits: []sluice.Limit{l}})
		var oe *sluice.OptionError
		if assert.ErrorAs(t, err, &oe, name) {
			assert.Equal(t, "Limits", oe.Option, name)
			t.Logf("%s: %v", name, err)
		}
	}
	_, err := sluice.New(sluice.Options{Limits: []sluice.Limit{
		{Name: "x", Routes: []string{"PUT " + roleRoute}, Count: 1, Window: time.Second},
		{Name: "x", Routes: []string{"DELETE " + roleRoute}, Count: 2, Window: time.Second},
	}})
	assert.ErrorContains(t, err, "must agree")
	_, err = sluice.New(sluice.Options{Limits: []sluice.Limit{{Name: "x", Routes: []string{"PUT /guilds/{guild_id}/members/{member_id}/roles/{role_id}"}, Count: 1, Window: time.Second}}})
	assert.ErrorContains(t, err, `Sluice names this route "/guilds/{guild_id}/members/{user_id}/roles/{role_id}"`)

	h := newHarness(t, sluicetest.Options{Rules: roleRules()}, sluice.Options{Limits: []sluice.Limit{
		{Name: "boom", Routes: []string{"* " + roleRoute}, Count: 1, Window: time.Second, Group: func(*http.Request) string { panic("oops") }},
		{Name: "long", Routes: []string{"PATCH /guilds/{guild_id}/members/{user_id}"}, Count: 1, Window: time.Second,
			Group: func(r *http.Request) string { return r.URL.Query().Get("g") }},
	}})
	_, err = h.lim.Do(context.Background(), req("PUT", "/guilds/1/members/1/roles/9", ""))
	assert.ErrorIs(t, err, sluice.ErrBadRequest)
	assert.ErrorContains(t, err, "oops")
	_, err = h.lim.Do(context.Background(), req("PATCH", "/guilds/1/members/1?g="+strings.Repeat("x", sluice.MaxGroupKey+1), `{"nick":"a"}`))
	assert.ErrorIs(t, err, sluice.ErrBadRequest, "a group key over MaxGroupKey")
	resp, err := h.lim.Do(context.Background(), req("PATCH", "/guilds/1/members/1", `{"nick":"a"}`))
	require.NoError(t, err, "other routes go on")
	resp.Body.Close()
}

// The default set is valid, replaceable by name and can be left out.
func TestDefaultLimits(t *testing.T) {
	names := map[string]bool{}
	for _, l := range sluice.DefaultLimits() {
		names[l.Name] = true
		assert.NotEmpty(t, l.Source, l.Name)
	}
	assert.Equal(t, map[string]bool{"channel_name_topic": true, "member_roles": true}, names)

	// Declared by default: a third rename of a channel within 10 minutes
	// waits for its window (refused at once with a short MaxWait).
	rs := sluicetest.DefaultRules()
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{MaxWait: time.Second})
	for i := range 3 {
		resp, err := h.lim.Do(context.Background(), req("PATCH", "/channels/5", fmt.Sprintf(`{"name":"n%d"}`, i)))
		if i < 2 {
			require.NoError(t, err)
			resp.Body.Close()
			continue
		}
		var we *sluice.WaitError
		require.ErrorAs(t, err, &we)
		assert.Equal(t, "channel_name_topic", we.Declared)
	}
	resp, err := h.lim.Do(context.Background(), req("PATCH", "/channels/5", `{"nsfw":true}`))
	require.NoError(t, err, "an edit that renames nothing is not under the limit")
	resp.Body.Close()
	assert.Zero(t, h.srv.Stats().RateLimited["shared"])

	h = newHarness(t, sluicetest.Options{Rules: rs.Scaled(0.0005)}, sluice.Options{NoDefaultLimits: true, MaxWait: time.Second})
	for i := range 3 {
		resp, err := h.lim.Do(context.Background(), req("PATCH", "/channels/5", fmt.Sprintf(`{"name":"n%d"}`, i)))
		if err != nil {
			require.False(t, errors.Is(err, sluice.ErrWaitTooLong), "no declared limit: nothing predicted")
			continue
		}
		resp.Body.Close()
	}
}

// Requests whose context ends while they wait for a declared limit give
// their places back: once all have an outcome, nothing waits in the group.
func TestDeclaredLimitCancelledRequestsLeaveNoPlace(t *testing.T) {
	h := newHarness(t, sluicetest.Options{Rules: roleRules()}, sluice.Options{Limits: []sluice.Limit{
		{Name: "member_roles", Routes: []string{"PUT " + roleRoute}, Per: "guild_id", Count: 1, Window: 100 * time.Millisecond},
	}})
	var futures []*sluice.Future
	for i := range 20 {
		// No deadline (one would be refused at once by its ETA): cancelled
		// while it waits in the group.
		ctx, cancel := context.WithCancel(context.Background())
		defer time.AfterFunc(time.Duration(i%7)*40*time.Millisecond, cancel).Stop()
		defer cancel()
		futures = append(futures, h.lim.Send(ctx, req("PUT", fmt.Sprintf("/guilds/1/members/%d/roles/9", i), "")))
	}
	for _, f := range futures {
		<-f.Done()
	}
	s, err := h.lim.Snapshot(context.Background())
	require.NoError(t, err)
	for _, g := range s.Limits {
		assert.Zero(t, g.Waiting, "a request with an outcome keeps no place: %+v", g)
	}
}

// A request cancelled while it waited in a declared group leaves its place
// to the next request the group reserves: that newcomer goes in the place,
// ahead of the requests reserved after it in its lane, as its ETA says.
// Before, it waited behind all of them (its bucket's FIFO), the place went
// unused, and its ETA said a window too early.
func TestDeclaredGroupNewcomerGoesInACancelledPlace(t *testing.T) {
	h := newHarness(t, sluicetest.Options{Rules: roleRules()}, sluice.Options{Limits: []sluice.Limit{
		{Name: "member_roles", Routes: []string{"PUT " + roleRoute}, Per: "guild_id", Count: 1, Window: 500 * time.Millisecond},
	}})
	put := func(i int) *http.Request { return req("PUT", fmt.Sprintf("/guilds/1/members/%d/roles/9", i), "") }
	a := h.lim.Send(context.Background(), put(1)) // the group's places: now, +0.5 s, +1 s, +1.5 s
	ctx, cancel := context.WithCancel(context.Background())
	b := h.lim.Send(ctx, put(2))
	c := h.lim.Send(context.Background(), put(3))
	d := h.lim.Send(context.Background(), put(4))
	for _, f := range []*sluice.Future{b, c, d} {
		_, err := f.ETA(context.Background()) // queued, its place reserved
		require.NoError(t, err)
	}
	cancel()
	_, err := b.Await(context.Background())
	require.ErrorIs(t, err, context.Canceled)
	e := h.lim.Send(context.Background(), put(5))
	eta, err := e.ETA(context.Background())
	require.NoError(t, err)
	cETA, err := c.ETA(context.Background())
	require.NoError(t, err)
	assert.True(t, eta.Start.Before(cETA.Start), "the newcomer has the cancelled place, before c's: %v, c %v", eta, cETA)
	_, err = a.Await(context.Background())
	require.NoError(t, err)
	_, err = e.Await(context.Background())
	require.NoError(t, err)
	select {
	case <-c.Done():
		t.Fatal("c, reserved a window after the newcomer's place, went first")
	default:
	}
	awaitAll(t, []*sluice.Future{c, d})
	h.srv.AssertNoViolations(t)
}
