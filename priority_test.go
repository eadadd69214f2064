package sluice_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/sluicetest"
)

func TestParsePriority(t *testing.T) {
	for in, want := range map[string]sluice.Priority{
		"": sluice.PriorityNormal, "normal": sluice.PriorityNormal, " Interactive ": sluice.PriorityInteractive,
		"BULK": sluice.PriorityBulk, "interactive": sluice.PriorityInteractive,
	} {
		p, err := sluice.ParsePriority(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, p, in)
	}
	for _, in := range []string{"urgent", "1", "-1", "bulk,interactive", "normal\x00"} {
		_, err := sluice.ParsePriority(in)
		assert.ErrorIs(t, err, sluice.ErrBadRequest, in)
		assert.NotContains(t, err.Error(), in, "a client's value is not quoted")
	}
	for _, p := range []sluice.Priority{sluice.PriorityBulk, sluice.PriorityNormal, sluice.PriorityInteractive} {
		back, err := sluice.ParsePriority(p.String())
		require.NoError(t, err)
		assert.Equal(t, p, back)
		assert.True(t, p.Valid())
	}
	assert.Equal(t, "priority(5)", sluice.Priority(5).String())
	assert.False(t, sluice.Priority(5).Valid())
	assert.Equal(t, sluice.PriorityNormal, sluice.PriorityFrom(context.Background()))
	assert.Equal(t, sluice.PriorityBulk, sluice.PriorityFrom(sluice.WithPriority(context.Background(), sluice.PriorityBulk)))
}

// A priority that is none of the three fails the request at once, before
// it is sent, with a typed error; the limiter goes on.
func TestInvalidPriorityFailsTheRequestOnly(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, sluice.Options{})
	ctx := sluice.WithPriority(context.Background(), sluice.Priority(9))
	_, err := h.lim.Do(ctx, req("POST", "/channels/1/messages", `{"content":"x"}`))
	require.ErrorIs(t, err, sluice.ErrBadRequest)
	assert.Contains(t, err.Error(), "priority(9)")
	resp, err := h.lim.Do(context.Background(), req("POST", "/channels/1/messages", `{"content":"y"}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 1, h.srv.Stats().Requests, "the refused request was not sent")
}

// sendOrdered sends each request with its priority, in order, and returns
// the indexes of the requests in the order their answers came. On a bucket
// of one request per window the next one leaves only after the previous
// one's answer and the window's end: answer order is sending order; across
// buckets it is the order within a few milliseconds.
func sendOrdered(t *testing.T, lim *sluice.Limiter, reqs []*http.Request, prio []sluice.Priority) []int {
	t.Helper()
	var log answerLog
	for i, r := range reqs {
		log.await(t, lim.Send(sluice.WithPriority(context.Background(), prio[i]), r), i)
	}
	return log.order()
}

// answerLog records the order in which requests are answered, and when
// the simulator decided each message it created (its "timestamp").
type answerLog struct {
	mu      sync.Mutex
	wg      sync.WaitGroup
	answers []int
	decided map[int]time.Time
}

// await records i once f has its outcome, which must be a response.
func (a *answerLog) await(t *testing.T, f *sluice.Future, i int) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		resp, err := f.Await(context.Background())
		var created struct{ Timestamp time.Time }
		if assert.NoError(t, err, i) {
			_ = json.NewDecoder(resp.Body).Decode(&created) // a message's; zero for other answers
			resp.Body.Close()
		}
		a.mu.Lock()
		a.answers = append(a.answers, i)
		if a.decided == nil {
			a.decided = map[int]time.Time{}
		}
		a.decided[i] = created.Timestamp
		a.mu.Unlock()
	}()
}

// order waits for every request awaited and returns them in the order
// of their answers.
func (a *answerLog) order() []int {
	a.wg.Wait()
	return a.answers
}

// serialChannel is a harness whose message bucket sends one request per
// window, its channel's bucket known (one request answered), and the
// requests of a load on that channel: bulk ones, then interactive ones.
func serialChannel(t *testing.T, window time.Duration, bulk, interactive int) (*harness, []*http.Request, []sluice.Priority) {
	rs := rules(1, window, [2]string{"POST", messagesRoute})
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{})
	warm, err := h.lim.Do(context.Background(), req("POST", "/channels/5/messages", `{"content":"warm"}`))
	require.NoError(t, err)
	warm.Body.Close()
	var reqs []*http.Request
	var prio []sluice.Priority
	for i := range bulk + interactive {
		p, name := sluice.PriorityBulk, fmt.Sprintf("bulk %d", i)
		if i >= bulk {
			p, name = sluice.PriorityInteractive, fmt.Sprintf("interactive %d", i-bulk)
		}
		reqs = append(reqs, req("POST", "/channels/5/messages", fmt.Sprintf(`{"content":%q}`, name)))
		prio = append(prio, p)
	}
	return h, reqs, prio
}

// In a bucket's queue an interactive request goes ahead of the bulk
// requests queued before it.
func TestPriorityInteractiveGoesAheadOfBulkInItsBucket(t *testing.T) {
	h, reqs, prio := serialChannel(t, 40*time.Millisecond, 12, 4)
	order := sendOrdered(t, h.lim, reqs, prio)
	h.srv.AssertNoViolations(t)
	t.Logf("answer order: %v", order)
	// The bucket sends one request per 40 ms window: the first bulk
	// request may have left (with the next due) before the interactive
	// ones were queued, never more.
	for i := 12; i < 16; i++ {
		assert.LessOrEqual(t, slices.Index(order, i), 2+(i-12), "interactive request %d answered at %d: %v", i-12, slices.Index(order, i), order)
	}
	// Within a class, submission order.
	var bulk, inter []int
	for _, i := range order {
		if i < 12 {
			bulk = append(bulk, i)
		} else {
			inter = append(inter, i)
		}
	}
	assert.True(t, slices.IsSorted(bulk), "bulk in submission order: %v", bulk)
	assert.True(t, slices.IsSorted(inter), "interactive in submission order: %v", inter)
}

// A lower priority is not starved: while bulk requests wait, at most
// seven interactive ones go in a row.
func TestPriorityBulkKeepsItsShare(t *testing.T) {
	h, reqs, prio := serialChannel(t, 25*time.Millisecond, 3, 30)
	order := sendOrdered(t, h.lim, reqs, prio)
	h.srv.AssertNoViolations(t)
	t.Logf("answer order: %v", order)
	run, bulkLeft, longest := 0, 3, 0
	for _, i := range order {
		if i < 3 {
			bulkLeft--
			run = 0
			continue
		}
		if bulkLeft > 0 {
			run++
			longest = max(longest, run)
		}
	}
	assert.LessOrEqual(t, longest, 7, "interactive requests in a row while bulk ones waited: %v", order)
	last := slices.Index(order, 2)
	assert.Less(t, last, 3*8, "the last bulk request answered at %d of %d: %v", last, len(order), order)
	assert.Greater(t, slices.Index(order, 1), slices.Index(order, 13), "bulk requests do yield: %v", order)
}

// In the global window's line an interactive request goes ahead of the
// bulk work of every other channel: 400 bulk messages over 40 channels
// fill a global window of 100 per second for four seconds; interactive
// messages on 10 other channels, sent after them, are answered among the
// first two windows' requests (measured: 44th to 74th of 410). Without
// priorities the bulk channels' longer backlogs go first
// (admission.PathWeight), and the interactive ones wait for all of the
// bulk work (measured: the last was 410th).
func TestPriorityInteractiveGoesAheadInTheGlobalLine(t *testing.T) {
	rs := rules(5, time.Second, [2]string{"POST", messagesRoute})
	rs.GlobalLimit = 100
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{GlobalLimit: 100})
	// Every channel's bucket is known: none needs a pioneer, which goes
	// ahead of the known buckets of its class (admission.PioneerFirst).
	var warm []*http.Request
	for c := range 10 {
		warm = append(warm, req("POST", fmt.Sprintf("/channels/%d/messages", 70_000+c), `{"content":"warm"}`))
	}
	for c := range 40 {
		warm = append(warm, req("POST", fmt.Sprintf("/channels/%d/messages", 71_000+c), `{"content":"warm"}`))
	}
	doAllWithin(t, h.lim, warm, 30*time.Second)

	var reqs []*http.Request
	var prio []sluice.Priority
	for i := range 400 {
		reqs = append(reqs, req("POST", fmt.Sprintf("/channels/%d/messages", 71_000+i%40), `{"content":"bulk"}`))
		prio = append(prio, sluice.PriorityBulk)
	}
	for c := range 10 {
		reqs = append(reqs, req("POST", fmt.Sprintf("/channels/%d/messages", 70_000+c), `{"content":"interactive"}`))
		prio = append(prio, sluice.PriorityInteractive)
	}
	order := sendOrdered(t, h.lim, reqs, prio) // request indexes, in the order of their answers
	h.srv.AssertNoViolations(t)
	worst := 0
	for c := range 10 {
		worst = max(worst, slices.Index(order, 400+c))
	}
	t.Logf("the last interactive request answered %d of 410", worst+1)
	assert.Less(t, worst, 200, "an interactive request waited past two global windows of bulk work")
}

// The lower classes' share holds in the global window's line when one
// grant hands out many slots at once, as when a global pause ends: under
// a global 20 per second, a bulk message meets an external global 429,
// and 40 interactive messages on a channel whose bucket allows 50 a
// window queue behind the pause. When it ends the window's slots go out
// together, and the bulk message takes the eighth (its share), so the
// simulator decides it within that burst. Without the share inside one
// grant the whole burst went to the interactive messages and the bulk
// one waited for the window's next slot, a period later. (The order of
// the answers within a burst is the connections', not the limiter's: the
// test judges by when the simulator decided each message.)
func TestPriorityBulkKeepsItsShareWhenAPauseEnds(t *testing.T) {
	rs := rules(50, 5*time.Second, [2]string{"POST", messagesRoute})
	rs.GlobalLimit = 20
	rs.Rules[0].CreatesMessage = true // its answer tells when it was decided
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{GlobalLimit: 20})
	doAllWithin(t, h.lim, []*http.Request{
		req("POST", "/channels/72000/messages", `{"content":"warm"}`),
		req("POST", "/channels/72001/messages", `{"content":"warm"}`),
	}, 30*time.Second) // both buckets known: no pioneer goes first
	h.srv.InjectGlobalLimit(time.Second)
	var log answerLog // 0: the bulk message
	log.await(t, h.lim.Send(sluice.WithPriority(context.Background(), sluice.PriorityBulk),
		req("POST", "/channels/72001/messages", `{"content":"bulk"}`)), 0)
	require.Eventually(t, func() bool { return h.srv.Stats().InjectedGlobal >= 1 }, 10*time.Second, time.Millisecond,
		"the bulk message met the global 429")
	for i := range 40 {
		log.await(t, h.lim.Send(sluice.WithPriority(context.Background(), sluice.PriorityInteractive),
			req("POST", "/channels/72000/messages", fmt.Sprintf(`{"content":"interactive %d"}`, i))), 1+i)
	}
	log.mu.Lock()
	answered := len(log.answers)
	log.mu.Unlock()
	require.Zero(t, answered, "every message queued behind the pause (else the burst this test is about did not happen)")
	log.order()
	h.srv.AssertNoViolations(t)
	first := log.decided[1]
	for i := 2; i <= 40; i++ {
		if log.decided[i].Before(first) {
			first = log.decided[i]
		}
	}
	require.False(t, first.IsZero() || log.decided[0].IsZero(), "every message was created")
	ahead := 0 // interactive messages the simulator decided before the bulk one
	for i := 1; i <= 40; i++ {
		if log.decided[i].Before(log.decided[0]) {
			ahead++
		}
	}
	t.Logf("the bulk message was decided %v after the burst's first, behind %d interactive ones", log.decided[0].Sub(first), ahead)
	assert.Less(t, ahead, rs.GlobalLimit, "the bulk message waited for the window's next slot, not the burst the pause's end let go")
}

// WithPriority reaches a request sent through Do, DoBatch and the
// RoundTripper alike: they share Send's path.
func TestPriorityThroughEveryEntryPoint(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, sluice.Options{})
	ctx := sluice.WithPriority(context.Background(), sluice.Priority(-7))
	_, err := h.lim.Do(ctx, req("GET", "/channels/1", ""))
	assert.ErrorIs(t, err, sluice.ErrBadRequest)
	res := h.lim.DoBatch(ctx, []*http.Request{req("GET", "/channels/1", "")})
	assert.ErrorIs(t, res[0].Err, sluice.ErrBadRequest)
	r, _ := http.NewRequestWithContext(ctx, "GET", h.srv.APIBase()+"/channels/1", nil)
	_, err = (&http.Client{Transport: h.lim}).Do(r)
	assert.True(t, errors.Is(err, sluice.ErrBadRequest), "%v", err)
}

// An interactive request's ETA is its place ahead of the bulk requests
// queued before it: position 0 in its bucket's queue, a window before
// theirs. The ETA of a bulk request moves back by it.
func TestPriorityETAReflectsTheOrder(t *testing.T) {
	rs := rules(1, time.Second, [2]string{"POST", messagesRoute})
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{})
	warm, err := h.lim.Do(context.Background(), req("POST", "/channels/8/messages", `{"content":"warm"}`))
	require.NoError(t, err)
	warm.Body.Close()

	ctx := context.Background()
	bulk := sluice.WithPriority(ctx, sluice.PriorityBulk)
	var futures []*sluice.Future
	for i := range 3 {
		futures = append(futures, h.lim.Send(bulk, req("POST", "/channels/8/messages", fmt.Sprintf(`{"content":"bulk %d"}`, i))))
	}
	before, err := futures[0].ETA(ctx)
	require.NoError(t, err)
	require.Equal(t, sluice.StageQueued, before.Stage)
	require.Equal(t, 0, before.Position)
	inter := h.lim.Send(sluice.WithPriority(ctx, sluice.PriorityInteractive), req("POST", "/channels/8/messages", `{"content":"interactive"}`))
	e, err := inter.ETA(ctx)
	require.NoError(t, err)
	assert.Equal(t, sluice.StageQueued, e.Stage)
	assert.Equal(t, 0, e.Position, "ahead of the bulk requests")
	after, err := futures[0].ETA(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, after.Position, "the first bulk request is behind it now")
	assert.True(t, e.Start.Before(after.Start), "its window %v before the bulk request's %v", e.Start, after.Start)
	for _, f := range append(futures, inter) {
		resp, err := f.Await(ctx)
		require.NoError(t, err)
		resp.Body.Close()
	}
	h.srv.AssertNoViolations(t)
}

// roleGroup is a harness whose role updates in a guild are under a
// declared limit of n per window, and the requests of a load on guild 1:
// bulk ones, then interactive ones.
func roleGroup(t *testing.T, n int, window time.Duration, bulk, interactive int) (*harness, []*http.Request, []sluice.Priority) {
	h := newHarness(t, sluicetest.Options{Rules: roleRules()}, sluice.Options{Limits: []sluice.Limit{
		{Name: "member_roles", Routes: []string{"PUT " + roleRoute}, Per: "guild_id", Count: n, Window: window},
	}})
	var reqs []*http.Request
	var prio []sluice.Priority
	for i := range bulk + interactive {
		p := sluice.PriorityBulk
		if i >= bulk {
			p = sluice.PriorityInteractive
		}
		reqs = append(reqs, req("PUT", fmt.Sprintf("/guilds/1/members/%d/roles/9", i), ""))
		prio = append(prio, p)
	}
	return h, reqs, prio
}

// Under a declared limit an interactive request takes a place in the
// first window a bulk request still waits in: a mass role update's
// reservations do not hold a user's role update back.
func TestPriorityInteractiveGoesAheadInADeclaredGroup(t *testing.T) {
	h, reqs, prio := roleGroup(t, 5, 500*time.Millisecond, 12, 2) // the simulator's own limit
	order := sendOrdered(t, h.lim, reqs, prio)
	h.srv.AssertNoViolations(t)
	assert.Zero(t, h.srv.Stats().RateLimited["shared"], "the declared limit held")
	t.Logf("answer order: %v", order)
	// The first window's bulk requests may have left before the
	// interactive ones were reserved: the interactive ones go in the next.
	for i := 12; i < 14; i++ {
		assert.LessOrEqual(t, slices.Index(order, i), 6, "interactive request %d answered at %d: %v", i-12, slices.Index(order, i), order)
	}
}

// A declared limit looser than the server's meets its 429s: the group is
// blocked and schedules its requests again, classes and all, and every
// request is answered.
func TestPriorityDeclaredGroupBlockedByTheServer(t *testing.T) {
	h, reqs, prio := roleGroup(t, 2, 150*time.Millisecond, 12, 2) // the server allows 5 per 500 ms
	order := sendOrdered(t, h.lim, reqs, prio)
	assert.Len(t, order, len(reqs))
	assert.NotZero(t, h.srv.Stats().RateLimited["shared"], "the server's limit is stricter")
}

// A bulk request under a declared limit gives up at most
// ratelimit.MaxGroupMoves windows to interactive ones, however many come.
func TestPriorityBulkMovesBackAtMostSevenWindowsInADeclaredGroup(t *testing.T) {
	h, reqs, prio := roleGroup(t, 1, 100*time.Millisecond, 2, 12) // the simulator allows 5 per 500 ms
	order := sendOrdered(t, h.lim, reqs, prio)
	h.srv.AssertNoViolations(t)
	assert.Zero(t, h.srv.Stats().RateLimited["shared"], "the declared limit held")
	t.Logf("answer order: %v", order)
	// Bulk 0 may leave at once; bulk 1, due in the second window, lets
	// seven interactive requests go ahead of it, then keeps its window.
	assert.LessOrEqual(t, slices.Index(order, 0), ratelimit.MaxGroupMoves, "%v", order)
	assert.Equal(t, 1+ratelimit.MaxGroupMoves, slices.Index(order, 1), "%v", order)
}

// In a declared group, ETAs follow the classes: an interactive request's
// window is before the bulk requests' it passed, and the bulk request it
// moved back has the later window in its ETA.
func TestPriorityETAInADeclaredGroup(t *testing.T) {
	h, reqs, prio := roleGroup(t, 2, time.Minute, 4, 1) // windows a minute apart: nothing leaves meanwhile but the first two
	ctx := context.Background()
	var futures []*sluice.Future
	for i, r := range reqs[:4] {
		futures = append(futures, h.lim.Send(sluice.WithPriority(ctx, prio[i]), r))
	}
	last, err := futures[3].ETA(ctx)
	require.NoError(t, err)
	require.Equal(t, sluice.LimitDeclared, last.Limit)
	inter := h.lim.Send(sluice.WithPriority(ctx, prio[4]), reqs[4])
	e, err := inter.ETA(ctx)
	require.NoError(t, err)
	moved, err := futures[3].ETA(ctx)
	require.NoError(t, err)
	assert.Equal(t, sluice.LimitDeclared, e.Limit)
	assert.True(t, e.Start.Before(moved.Start), "the interaction's window %v before the bulk request's %v", e.Start, moved.Start)
	assert.True(t, moved.Start.After(last.Start.Add(30*time.Second)), "the last bulk request moved back a window: %v, was %v", moved.Start, last.Start)
	require.NoError(t, h.lim.Close(ctx)) // the rest would wait minutes: Close answers them
	for _, f := range append(futures, inter) {
		<-f.Done()
	}
}
