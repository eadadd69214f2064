package sluice_test

// One test per defect class of the core redesign (issue: "Re-found the actor
// core"), each through the public API against the simulator, whose strict
// accounting must stay clean. Run them in a loop before trusting a change:
//
//	go test -race -count=20 -run 'TestCore' .

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/sluicetest"
)

// shared returns a rule set where every (method, route) shares one bucket
// hash with the given limit and window.
func shared(limit int, window time.Duration, routes ...[2]string) sluicetest.RuleSet {
	rs := rules(limit, window, routes...)
	for i := range rs.Rules {
		rs.Rules[i].Bucket = "shared-hash"
	}
	return rs
}

const (
	reactionRoute = "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me"
	messagesRoute = "/channels/{channel_id}/messages"
	pinsRoute     = "/channels/{channel_id}/pins"
)

// doAllWithin sends reqs at once and fails the test if any lacks an outcome
// after limit (a stranded request), or if one failed.
func doAllWithin(t *testing.T, lim *sluice.Limiter, reqs []*http.Request, limit time.Duration) {
	t.Helper()
	futures := lim.SendBatch(context.Background(), reqs)
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for i, f := range futures {
		select {
		case <-f.Done():
		case <-deadline.C:
			t.Fatalf("request %d (%s %s) has no outcome after %s: stranded", i, reqs[i].Method, reqs[i].URL.Path, limit)
		}
		resp, err := f.Await(context.Background())
		require.NoError(t, err, "request %d", i)
		require.Less(t, resp.StatusCode, 300, "request %d", i)
	}
}

// Defect 1: requests stranded when two routes sharing a hash meet on new
// channels, and Close never returning.
func TestCoreSharedHashOnNewChannelsStrandsNothing(t *testing.T) {
	t.Run("reaction PUT and DELETE on 40 fresh channels", func(t *testing.T) {
		rs := shared(1, 100*time.Millisecond, [2]string{"PUT", reactionRoute}, [2]string{"DELETE", reactionRoute})
		h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{})
		var reqs []*http.Request
		for c := range 40 {
			path := fmt.Sprintf("/channels/%d/messages/1/reactions/%%F0%%9F%%91%%8D/@me", 1000+c)
			reqs = append(reqs, req("PUT", path, ""), req("DELETE", path, ""))
		}
		doAllWithin(t, h.lim, reqs, 20*time.Second)
		h.srv.AssertNoViolations(t)
		closeWithin(t, h.lim, 5*time.Second)
	})
	t.Run("4 GET messages and 1 GET pins per channel", func(t *testing.T) {
		rs := shared(5, 200*time.Millisecond, [2]string{"GET", messagesRoute}, [2]string{"GET", pinsRoute})
		h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{})
		var reqs []*http.Request
		for c := range 20 {
			for range 4 {
				reqs = append(reqs, req("GET", fmt.Sprintf("/channels/%d/messages", 2000+c), ""))
			}
			reqs = append(reqs, req("GET", fmt.Sprintf("/channels/%d/pins", 2000+c), ""))
		}
		doAllWithin(t, h.lim, reqs, 20*time.Second)
		h.srv.AssertNoViolations(t)
		closeWithin(t, h.lim, 5*time.Second)
	})
}

// A route never answered that shares the hash of an unrelated route
// (messages/{id} and pins: not the same path, parent, child nor sibling)
// whose window is spent on each of 50 channels: before its first answer
// nobody knows which bucket it is, and each channel's first pioneer went
// beside the spent bucket: 50 user 429s. One first pioneer per template
// goes now, across channels; the others wait for its answer and count in
// their channel's bucket: at most that one guess draws a 429.
//
// The messages are answered before the pins go, so no actor has a pioneer
// of its own out, and the first pins request is held at the server until
// a second channel's actor has handled its pins request (its trace
// event): that actor looked at the turn, found it taken and waits, so the
// answer must be told to it. (Before, the test raced: an actor whose
// messages pioneer was still out did not look at the turn, and when the
// first pins answer came before those answers, nobody waited; it failed 3
// runs in 25 beside two CPU-bound loops.)
func TestCoreNewRouteOnManyChannelsLearnsItsHashOnce(t *testing.T) {
	rs := shared(5, 300*time.Millisecond, [2]string{"GET", messagesRoute + "/{message_id}"}, [2]string{"GET", pinsRoute})
	rs.GlobalLimit = 1000
	srv, err := sluicetest.NewServer(sluicetest.Options{Rules: rs, Faults: sluicetest.Faults{Latency: 10 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	var (
		told        atomic.Int32 // pioneered messages the waiting actors received
		pinsHandled atomic.Int32 // pins requests their actors handled
		held        atomic.Bool  // the first pins request is held
		releaseOnce sync.Once
	)
	release := make(chan struct{})
	maybeRelease := func() {
		if held.Load() && pinsHandled.Load() >= 2 {
			releaseOnce.Do(func() { close(release) })
		}
	}
	front := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/pins") && held.CompareAndSwap(false, true) {
			maybeRelease()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		srv.ServeHTTP(w, r)
	}))
	lim := limiterFor(t, front, sluice.Options{GlobalLimit: 1000, Trace: func(e sluice.TraceEvent) {
		switch {
		case e.Kind == "receive" && e.Message == "pioneered":
			told.Add(1)
		case e.Kind == "receive" && e.Message == "enqueue" && strings.HasSuffix(e.Route, "/pins"):
			pinsHandled.Add(1)
			maybeRelease()
		}
	}})
	h := &harness{t: t, srv: srv, lim: lim}
	var spend, pins []*http.Request
	for c := range 50 {
		for i := range 5 {
			spend = append(spend, req("GET", fmt.Sprintf("/channels/%d/messages/%d", 3500+c, 1+i), ""))
		}
		pins = append(pins, req("GET", fmt.Sprintf("/channels/%d/pins", 3500+c), ""))
	}
	doAllWithin(t, h.lim, spend[:5], 10*time.Second)                     // the messages' hash is known
	for _, f := range h.lim.SendBatch(context.Background(), spend[5:]) { // every channel's window spent
		_, err := f.Await(context.Background())
		require.NoError(t, err)
	}
	doAllWithin(t, h.lim, pins, 20*time.Second)
	st := h.srv.Stats()
	t.Logf("%s", st.Summary())
	if !assert.LessOrEqual(t, st.ClientUser429s(), 1, "one first pioneer guesses; the others learn from it") {
		logAround429s(t, st)
	}
	assert.Equal(t, 300, st.Requests-st.ClientUser429s(), "nothing else sent twice")
	assert.Positive(t, told.Load(), "the channels waiting for the first pioneer are told of its answer, not left to poll")
}

// A route whose answers name no bucket (no rate-limit headers) has no hash
// to learn: once its first answer says so, its first requests on other
// channels go together, not one channel after another behind a turn that
// teaches nothing.
func TestCoreRouteWithoutBucketHeadersIsNotSerialized(t *testing.T) {
	const channels = 20
	var mu sync.Mutex
	arrived, alone := 0, 0
	all := make(chan struct{})
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived++
		n := arrived
		if n == channels {
			close(all)
		}
		mu.Unlock()
		if n > 1 { // the first is answered at once; the others are held until all are in
			select {
			case <-all:
			case <-time.After(2 * time.Second):
				mu.Lock()
				alone++ // the others did not come: they wait for this one
				mu.Unlock()
			}
		}
		w.Write([]byte(`{}`))
	}))
	lim := limiterFor(t, srv, sluice.Options{})
	var reqs []*http.Request
	for c := range channels {
		reqs = append(reqs, req("GET", fmt.Sprintf("/channels/%d/messages/1", 4000+c), ""))
	}
	doAllWithin(t, lim, reqs, 2*time.Minute)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, channels, arrived)
	assert.Zero(t, alone, "after the first answer, the other channels' first requests were in flight together")
}

func closeWithin(t *testing.T, lim *sluice.Limiter, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	require.NoError(t, lim.Close(ctx), "Close must return with every request answered")
}

// Defect 2: over the limit on shared hashes — three routes over 50 channels
// on one hash, and a hash learned on one channel reused on the others.
func TestCoreThreeRoutesSharingAHashNeverOverTheLimit(t *testing.T) {
	rs := shared(5, 300*time.Millisecond,
		[2]string{"GET", messagesRoute}, [2]string{"GET", pinsRoute}, [2]string{"POST", messagesRoute})
	rs.GlobalLimit = 1000
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{GlobalLimit: 1000})
	var reqs []*http.Request
	for c := range 50 {
		ch := 3000 + c
		for i := range 18 {
			switch i % 3 {
			case 0:
				reqs = append(reqs, req("GET", fmt.Sprintf("/channels/%d/messages", ch), ""))
			case 1:
				reqs = append(reqs, req("GET", fmt.Sprintf("/channels/%d/pins", ch), ""))
			default:
				reqs = append(reqs, req("POST", fmt.Sprintf("/channels/%d/messages", ch), `{"content":"x"}`))
			}
		}
	}
	doAllWithin(t, h.lim, reqs, 30*time.Second)
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	assert.Zero(t, st.ClientUser429s())
	assert.LessOrEqual(t, st.MaxBucketWindow, 5)
}

func TestCoreHashLearnedOnOneChannelServesTheOthers(t *testing.T) {
	rs := shared(1, 100*time.Millisecond, [2]string{"PUT", reactionRoute}, [2]string{"DELETE", reactionRoute})
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{})
	// Learn both templates on one channel.
	path := func(c int) string { return fmt.Sprintf("/channels/%d/messages/1/reactions/x/@me", c) }
	sendAll(t, h.lim, []*http.Request{req("PUT", path(1), ""), req("DELETE", path(1), "")})
	// Then 20 new channels at once: every route goes straight to its real
	// bucket, one pioneer per bucket, no 429.
	var reqs []*http.Request
	for c := range 20 {
		reqs = append(reqs, req("PUT", path(100+c), ""), req("DELETE", path(100+c), ""))
	}
	doAllWithin(t, h.lim, reqs, 20*time.Second)
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	assert.Zero(t, st.ClientUser429s(), "user 429s on new channels")
}

// Defect 3: a slot lost for good when a sibling route on the channel turns
// out to have another hash. A 5-per-600 ms bucket beside a 1-per-100 ms one
// on the same channel: the long bucket must use every slot of every window.
func TestCoreSiblingWithAnotherHashGivesItsSlotBack(t *testing.T) {
	rs := sluicetest.RuleSet{GlobalLimit: 1000, Rules: []sluicetest.Rule{
		{Name: "long", Method: "POST", Route: messagesRoute, Bucket: "long", Limit: 5, Window: sluicetest.Duration(600 * time.Millisecond)},
		{Name: "short", Method: "GET", Route: pinsRoute, Bucket: "short", Limit: 1, Window: sluicetest.Duration(100 * time.Millisecond)},
	}}
	h := newHarness(t, sluicetest.Options{Rules: rs, Faults: sluicetest.Faults{Jitter: 20 * time.Millisecond}}, sluice.Options{GlobalLimit: 1000})
	// On each of 8 channels both routes start unknown: whichever pioneer
	// is answered first must not keep a slot for the other once it is
	// known to be another bucket.
	var reqs []*http.Request
	for c := range 8 {
		for i := range 15 {
			reqs = append(reqs, req("POST", fmt.Sprintf("/channels/%d/messages", 70+c), fmt.Sprintf(`{"content":"%d"}`, i)))
			if i < 3 {
				reqs = append(reqs, req("GET", fmt.Sprintf("/channels/%d/pins", 70+c), ""))
			}
		}
	}
	doAllWithin(t, h.lim, reqs, 20*time.Second)
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	for _, b := range st.Buckets {
		if b.Hash == "long" {
			assert.Equal(t, 3, b.Windows, "%s: 15 requests at 5 per window take 3 full windows, not more", b.Major)
		}
	}
}

// Defect 4: head-of-line starvation. Many cold channels and one hot one
// under a binding global limit: the hot channel must still get its full
// bucket every window, so it needs no more windows than its own limit
// implies.
func TestCoreHotChannelIsNotStarvedByTheGlobalQueue(t *testing.T) {
	// A big bot's load, windows scaled to a tenth: 4,450 messages over 500
	// channels plus 50 on one hot channel, global limit 500/s, messages 5
	// per 500 ms.
	rs := rules(5, 500*time.Millisecond, [2]string{"POST", messagesRoute})
	rs.GlobalLimit = 500
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{GlobalLimit: 500})
	var reqs []*http.Request
	for i := range 4450 {
		reqs = append(reqs, req("POST", fmt.Sprintf("/channels/%d/messages", 10_000+i%500), `{"content":"cold"}`))
	}
	for range 50 {
		reqs = append(reqs, req("POST", "/channels/1/messages", `{"content":"hot"}`))
	}
	began := time.Now()
	doAllWithin(t, h.lim, reqs, 90*time.Second)
	took := time.Since(began)
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	var hot *sluicetest.BucketStats
	for i, b := range st.Buckets {
		if b.Major == "channel_id=1" {
			hot = &st.Buckets[i]
		}
	}
	require.NotNil(t, hot)
	require.Equal(t, 50, hot.Admitted)
	// The cold load takes 4,500/500 = 9 s; the hot channel's 50 requests
	// need 10 windows of 5, 4.5 s from its first request. Waiting behind
	// the cold backlog (one FIFO, or round-robin over 500 buckets), its
	// windows open a second apart or more. Served by its backlog (the
	// admission queue's order), every window it has more than a window of
	// work for is full and opens as soon as the previous one ended; the
	// last few requests, with no window at stake, may yield to cold
	// channels that have waited longer. Allow two late windows for its
	// pioneer and the start of pacing (the bursts before its first want
	// take a period to smooth out).
	counts, starts := windowsOf(hot.Timeline, 500*time.Millisecond)
	// The premise is a global limit that binds: the machine must keep up
	// with 500 requests a second (9 s for the load). A machine too busy to
	// (the suite beside CPU-bound processes, under the race detector)
	// starves every actor alike, and windows open late for all; the
	// order is then not what is measured. bench/ measures the pace. Since
	// global admission hands out each window's burst at once (2026-11-28),
	// a starved machine also sends a burst's slots later than they were
	// reserved, and a hot bucket's kept slots wait for its slow actor:
	// beside two CPU-bound loops under the race detector the load took
	// 10.1-11.2 s (9.5 s before), and 2 of 13 such runs split a hot window
	// (both above 10.7 s). Under the race detector alone, 9.5-10.2 s.
	if ideal := 9 * time.Second; took > ideal*23/20 {
		t.Skipf("the machine kept only %.0f%% of the global pace (%v for the load, ideal %v): the global limit did not bind; hot windows %v starting %v",
			100*ideal.Seconds()/took.Seconds(), took.Round(time.Millisecond), ideal, counts, starts)
	}
	// Below that, a machine that kept a share x of the pace stretches
	// every window alike, by (1/x - 1) of it: a hot window is late when it
	// opens later than that past the previous one's end, and 100 ms more.
	slack := 100 * time.Millisecond
	if ideal := 9 * time.Second; took > ideal {
		slack += time.Duration(float64(500*time.Millisecond) * (took.Seconds()/ideal.Seconds() - 1))
	}
	t.Logf("the load took %v (ideal 9s); hot windows %v; late past %v", took.Round(time.Millisecond), counts, slack)
	left, late, checked := 50, 0, 0
	for i := range counts {
		if left <= 5 {
			break
		}
		checked++
		assert.Equal(t, 5, counts[i], "hot window %d with %d requests left (windows %v starting %v)", i, left, counts, starts)
		if i > 0 && starts[i]-(starts[i-1]+500*time.Millisecond) > slack {
			late++
		}
		left -= counts[i]
	}
	assert.GreaterOrEqual(t, checked, 9)
	assert.LessOrEqual(t, late, 2, "hot windows opened late: %d (windows %v starting %v)", late, counts, starts)
}

// A backlog four global windows long takes four windows, not five: each
// window reopens with its whole burst to hand out, and a bucket's queue
// that waits for its window's probe keeps the global slots granted for it.
// 400 messages over 40 channels (5 per second each), global 100/s: the
// buckets could take 200 a second, so the global limit binds. Before, a
// pacer token was spent on every admission tried while the window was full
// (the window reopened with a fraction of its slots and paced the rest),
// and a probing bucket gave its granted slots back and waited a whole
// window for them: the last request went 4.0-4.1 s after the first.
func TestCoreGlobalBoundBacklogUsesEveryWindowWhole(t *testing.T) {
	rs := rules(5, time.Second, [2]string{"POST", messagesRoute})
	rs.GlobalLimit = 100
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{GlobalLimit: 100})
	var reqs []*http.Request
	for i := range 400 {
		reqs = append(reqs, req("POST", fmt.Sprintf("/channels/%d/messages", 30_000+i%40), `{"content":"bulk"}`))
	}
	doAllWithin(t, h.lim, reqs, 60*time.Second)
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	var at []time.Duration
	for _, b := range st.Buckets {
		for _, e := range b.Timeline {
			if e.Status < 300 {
				at = append(at, e.At)
			}
		}
	}
	require.Len(t, at, 400)
	slices.Sort(at)
	// The premise: the machine sends a window's burst at once. One too
	// busy to (the suite beside CPU-bound processes, under the race
	// detector) stretches every window alike; bench/ measures the pace.
	if burst := at[99] - at[0]; burst > 300*time.Millisecond {
		t.Skipf("the first window's 100 requests took %v to arrive: the machine cannot send a burst, so windows are not what is measured", burst)
	}
	perWindow := make([]int, 0, 5)
	for _, a := range at {
		w := int((a - at[0]) / time.Second)
		for len(perWindow) <= w {
			perWindow = append(perWindow, 0)
		}
		perWindow[w]++
	}
	span := at[len(at)-1] - at[0]
	t.Logf("first to last request %v; per second from the first: %v", span.Round(time.Millisecond), perWindow)
	// Three periods after the first request the fourth window opens; a
	// window that kept back a probing bucket's requests for the next one
	// takes a whole period more.
	assert.Less(t, span, 3*time.Second+600*time.Millisecond, "the backlog took a fifth global window (per second: %v)", perWindow)
}

// A channel that appears while known channels' backlogs fill the global
// window sends its pioneer at the next free global slot, ahead of the
// known channels' requests (admission.PioneerFirst): one request, whose answer
// starts its bucket's windows. Before, a bucket not known yet counted
// 100 ms per queued request (1 s for 10) against 5 s for each known one,
// and waited behind all of their first windows: a message creation whose
// pioneer met a 502 started its windows seconds late (the fault scenario,
// issue 10).
func TestCoreNewChannelsPioneerGoesFirst(t *testing.T) {
	rs := rules(5, 5*time.Second, [2]string{"POST", messagesRoute})
	rs.GlobalLimit = 50
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{GlobalLimit: 50})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var known []*sluice.Future
	for ch := range 29 {
		for i := range 10 {
			f := h.lim.Send(ctx, req("POST", fmt.Sprintf("/channels/%d/messages", 20_000+ch), fmt.Sprintf(`{"content":"%d"}`, i)))
			known = append(known, f)
		}
	}
	for ch := range 29 { // each channel's first request, its pioneer
		resp, err := known[ch*10].Await(ctx)
		require.NoError(t, err)
		resp.Body.Close()
	}
	before := 0
	for _, b := range h.srv.Stats().Buckets {
		before += b.Requests
	}
	var late []*sluice.Future
	for i := range 10 {
		late = append(late, h.lim.Send(ctx, req("POST", "/channels/1/messages", fmt.Sprintf(`{"content":"%d"}`, i))))
	}
	resp, err := late[0].Await(ctx)
	require.NoError(t, err)
	resp.Body.Close()
	cancel() // the rest need not go

	st := h.srv.Stats()
	var first time.Duration = -1
	var others []time.Duration
	for _, b := range st.Buckets {
		for _, e := range b.Timeline {
			if b.Major == "channel_id=1" {
				if first < 0 || e.At < first {
					first = e.At
				}
			} else {
				others = append(others, e.At)
			}
		}
	}
	require.GreaterOrEqual(t, first, time.Duration(0))
	ahead := -before // the known channels' requests that went after it came and before its pioneer
	for _, at := range others {
		if at < first {
			ahead++
		}
	}
	// The 29 pioneers took 29 of the first second's 50 global slots; the
	// known channels' next 21 take the rest as soon as they ask, before
	// the new channel comes. A second later the slots free again, and the
	// new pioneer's grant is the first (the others granted with it may
	// reach the server a little earlier: 21 + 29 at most; 0 to 25 in 20
	// runs). Weighed as before, it waited for most of the known channels'
	// first windows (29 × 4 - 21 = 95 requests; 67 to 112 in three runs).
	assert.Less(t, ahead, 50, "requests of known channels that went ahead of the new channel's pioneer")
	t.Logf("%d requests of known channels went between the new channel's arrival and its pioneer", ahead)
	h.srv.AssertNoViolations(t)
}

// windowsOf splits a bucket timeline into windows (a window opens at the
// first request after the previous one ended) and returns each one's 200s
// and start.
func windowsOf(ev []sluicetest.Event, window time.Duration) (counts []int, starts []time.Duration) {
	var end time.Duration = -1
	for _, e := range ev {
		if e.Status >= 300 {
			continue
		}
		if end < 0 || e.At >= end {
			counts = append(counts, 0)
			starts = append(starts, e.At)
			end = e.At + window
		}
		counts[len(counts)-1]++
	}
	return counts, starts
}

// Defect 5: windows reopened a round trip late. With 200 ms of latency (the
// simulator decides at arrival and delays the answer), a saturated bucket
// must send the first request of each window when the window reopens, not a
// round trip after its answer shows the reset.
func TestCoreWindowsReopenOnTime(t *testing.T) {
	const latency = 200 * time.Millisecond
	rs := rules(5, time.Second, [2]string{"POST", messagesRoute})
	h := newHarness(t, sluicetest.Options{Rules: rs, Faults: sluicetest.Faults{Latency: latency}}, sluice.Options{})
	warmClock(t, h.lim)
	var reqs []*http.Request
	for i := range 20 {
		reqs = append(reqs, req("POST", "/channels/5/messages", fmt.Sprintf(`{"content":"%d"}`, i)))
	}
	doAllWithin(t, h.lim, reqs, 30*time.Second)
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	var ev []sluicetest.Event
	for _, b := range st.Buckets {
		if b.Major == "channel_id=5" {
			ev = b.Timeline
		}
	}
	require.Len(t, ev, 20)
	// Windows open at requests 0, 5, 10, 15; each lasts 1 s from its
	// opener's arrival. The next opener should arrive just after.
	for w := 1; w < 4; w++ {
		late := ev[5*w].At - (ev[5*(w-1)].At + time.Second)
		assert.GreaterOrEqual(t, late, time.Duration(0))
		assert.Less(t, late, latency/2, "window %d reopened %s after the server's reset", w, late)
	}
}

// warmClock sends a bot's first requests, on channels of their own: any
// answers teach the server's clock (ratelimit.ClockFirst of them before it
// is trusted, ClockWarm before its spread is taken as it is).
func warmClock(t *testing.T, lim *sluice.Limiter) {
	t.Helper()
	var warm []*http.Request
	for i := range ratelimit.ClockWarm {
		warm = append(warm, req("POST", fmt.Sprintf("/channels/%d/messages", 900+i), `{"content":"hello"}`))
	}
	sendAll(t, lim, warm)
}

// A probe proves one reopening: it is not repeated for every window while
// the forward trips vary. With the server's clock warm and each request
// reaching the server 0-20 ms after it left (sluicetest's ForwardJitter),
// a saturated bucket probes its first reopenings only. A window that opens
// with a probe sends the rest of its requests a round trip after the
// first; otherwise they go together. (A probe's count time, as the clock
// places it, includes the clock's allowance for a faster trip; judged
// against the next reopening's send delay, which does not, every window
// probed and the bucket ran at about half its pace with a 100 ms latency.)
func TestCoreProbesStopUnderForwardJitter(t *testing.T) {
	const latency = 100 * time.Millisecond
	rs := rules(5, 500*time.Millisecond, [2]string{"POST", messagesRoute})
	h := newHarness(t, sluicetest.Options{Rules: rs,
		Faults: sluicetest.Faults{Latency: latency, ForwardJitter: 20 * time.Millisecond}}, sluice.Options{})
	warmClock(t, h.lim)
	var reqs []*http.Request
	for i := range 60 {
		reqs = append(reqs, req("POST", "/channels/5/messages", fmt.Sprintf(`{"content":"%d"}`, i)))
	}
	doAllWithin(t, h.lim, reqs, time.Minute)
	h.srv.AssertNoViolations(t)
	var ev []sluicetest.Event
	for _, b := range h.srv.Stats().Buckets {
		if b.Major == "channel_id=5" {
			ev = b.Timeline
		}
	}
	require.Len(t, ev, 60)
	windows, probed := 0, 0
	for i := 1; i+1 < len(ev); i++ { // (the first window is the new bucket's: its pioneer goes alone)
		if ev[i].Remaining != 4 {
			continue // not a window's first request
		}
		windows++
		if ev[i+1].At-ev[i].At > latency/2 {
			probed++
		}
	}
	t.Logf("%d of %d reopenings held for a probe", probed, windows)
	assert.GreaterOrEqual(t, windows, 10)
	// Before: 11 of 11; now 1 or 2 (12 runs), each a probe whose trip was
	// slower than the clock's allowance and margin explain.
	assert.LessOrEqual(t, probed, 5, "reopenings held for a probe")
}

// Defect 6: a global 429 pauses at once. While an external consumer holds
// the global limit, only the requests already on the wire when the first
// global 429 arrived may meet it; nothing is sent into the outage after.
func TestCoreGlobal429PausesAtOnce(t *testing.T) {
	const latency = 30 * time.Millisecond
	h := newHarness(t, sluicetest.Options{Faults: sluicetest.Faults{Latency: latency}}, sluice.Options{})
	sendAll(t, h.lim, []*http.Request{req("GET", "/channels/1", "")})
	h.srv.InjectGlobalLimit(400 * time.Millisecond)
	// A steady stream from 8 workers: several requests are always on the
	// wire when the outage's first 429 comes back.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 6 {
				resp, err := h.lim.Do(context.Background(), req("GET", fmt.Sprintf("/channels/%d", 100+w*10+i), ""))
				if err == nil {
					resp.Body.Close()
				}
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	// At most the 8 requests on the wire meet the outage; the pause then
	// covers it (its retry_after is the outage's end).
	assert.LessOrEqual(t, st.InjectedGlobal, 8, "global 429s: %d", st.InjectedGlobal)
}

// Windows reopened late (as Discord is reported to do, by 250–400 ms): the
// first request of a new window meets a user 429 once; the bucket's
// reopening margin then adapts and no other window of that bucket meets
// one.
func TestCoreLateReopeningWindowsAdaptTheMargin(t *testing.T) {
	rs := rules(5, time.Second, [2]string{"POST", messagesRoute}, [2]string{"GET", pinsRoute})
	h := newHarness(t, sluicetest.Options{Rules: rs, Faults: sluicetest.Faults{LateReset: 300 * time.Millisecond}}, sluice.Options{})
	var reqs []*http.Request
	for i := range 25 {
		reqs = append(reqs, req("POST", "/channels/8/messages", fmt.Sprintf(`{"content":"%d"}`, i)))
		reqs = append(reqs, req("GET", "/channels/8/pins", ""))
	}
	doAllWithin(t, h.lim, reqs, 30*time.Second)
	st := h.srv.Stats()
	h.srv.AssertNoViolations(t)
	require.Len(t, st.Buckets, 2)
	for _, b := range st.Buckets {
		assert.LessOrEqual(t, b.RateLimited, 1, "%s: user 429s in late windows", b.Hash)
		assert.Equal(t, 25, b.Admitted)
	}
	snap, err := h.lim.Snapshot(context.Background())
	require.NoError(t, err)
	for _, b := range snap.Buckets {
		if b.Known {
			assert.GreaterOrEqual(t, b.Margin, 300*time.Millisecond, "%s learned the lateness", b.Key)
		}
	}
}

// A 429 that ends a request reports its scope by the names the docs use.
func TestCoreRateLimitErrorScopeIsUser(t *testing.T) {
	rs := rules(1, time.Second, [2]string{"POST", messagesRoute})
	h := newHarness(t, sluicetest.Options{Rules: rs, Faults: sluicetest.Faults{LateReset: 500 * time.Millisecond}},
		sluice.Options{MaxRetries: -1})
	f1 := h.lim.Send(context.Background(), req("POST", "/channels/9/messages", `{"content":"a"}`))
	f2 := h.lim.Send(context.Background(), req("POST", "/channels/9/messages", `{"content":"b"}`))
	_, err := f1.Await(context.Background())
	require.NoError(t, err)
	_, err = f2.Await(context.Background())
	var rle *sluice.RateLimitError
	require.ErrorAs(t, err, &rle, "the second window reopens late: a user 429, no retry allowed")
	assert.Equal(t, "user", rle.Scope)
	assert.ErrorIs(t, err, sluice.ErrRateLimited)
	assert.Equal(t, 1, rle.Attempts)
}

// A route never answered on a channel whose message bucket is spent: its
// pioneer may only share a related route's bucket (a reaction is not
// related to the channel's messages), so it goes at once instead of
// waiting for the message window to end, and draws no 429.
func TestCoreNewRouteDoesNotWaitForAnUnrelatedSpentBucket(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, sluice.Options{}) // Discord's rules: messages 5 per 5 s
	var five []*http.Request
	for i := range 5 {
		five = append(five, req("POST", "/channels/1/messages", fmt.Sprintf(`{"content":"%d"}`, i)))
	}
	sendAll(t, h.lim, five) // the message bucket is known and spent for ~5 s
	sixth := h.lim.Send(context.Background(), req("POST", "/channels/1/messages", `{"content":"6"}`))
	resp, err := h.lim.Do(context.Background(), req("PUT", "/channels/1/messages/1/reactions/x/@me", ""))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	select {
	case <-sixth.Done():
		t.Fatal("the reaction waited for the message window (the sixth message went first)")
	default:
	}
	// The sixth message waits for its window; closing the limiter ends it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, h.lim.Close(ctx))
	_, err = sixth.Await(context.Background())
	assert.ErrorIs(t, err, sluice.ErrClosed)
	h.srv.AssertNoViolations(t)
	assert.Zero(t, h.srv.Stats().ClientUser429s())
}
