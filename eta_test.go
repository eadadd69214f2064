package sluice_test

// ETAs (Future.ETA, Snapshot.Requests): each request's predicted send
// window, checked against when the simulator actually received it.

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

// etaSlack is how far outside its predicted window a request may arrive
// and still count as on time: the loopback trip, the actor's turn and the
// race detector's overhead.
const etaSlack = 30 * time.Millisecond

// sentTimes returns when the simulator received each request of each
// bucket, in order, as wall-clock times.
func sentTimes(srv *sluicetest.Server) map[string][]time.Time {
	start := time.Now().Add(-srv.Elapsed())
	out := map[string][]time.Time{}
	for _, b := range srv.Stats().Buckets {
		for _, e := range b.Timeline {
			out[b.Key] = append(out[b.Key], start.Add(e.At))
		}
	}
	return out
}

// onTime reports whether at falls in e's window, give or take etaSlack.
func onTime(e sluice.ETA, at time.Time) bool {
	return !at.Before(e.Start.Add(-etaSlack)) && !at.After(e.End.Add(etaSlack))
}

// etas asks every future for its ETA at once, in order.
func etas(t *testing.T, fs []*sluice.Future) []sluice.ETA {
	t.Helper()
	out := make([]sluice.ETA, len(fs))
	for i, f := range fs {
		e, err := f.ETA(context.Background())
		require.NoError(t, err)
		out[i] = e
	}
	return out
}

func awaitAll(t *testing.T, fs []*sluice.Future) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, f := range fs {
		resp, err := f.Await(ctx)
		require.NoError(t, err, "request %d", i)
		require.Less(t, resp.StatusCode, 300, "request %d", i)
	}
}

// One bucket of 5 per 400 ms, known, and 23 requests at once: each one's
// place in the queue and the window its bucket lets it go in.
func TestETAInOneBucket(t *testing.T) {
	h := newHarness(t, sluicetest.Options{Rules: rules(5, 400*time.Millisecond, [2]string{"POST", messagesRoute})}, sluice.Options{})
	_, err := h.lim.Do(context.Background(), req("POST", "/channels/1/messages", `{"content":"first"}`))
	require.NoError(t, err) // the bucket is known: 4 left in this window
	var reqs []*http.Request
	for i := range 23 {
		reqs = append(reqs, req("POST", "/channels/1/messages", fmt.Sprintf(`{"content":"m%d"}`, i)))
	}
	fs := h.lim.SendBatch(context.Background(), reqs)
	// The queue's windows at one instant: each place not before the one
	// ahead. (ETAs asked one after another may not compare so: an answer
	// between two asks can move the window's end earlier, by up to the
	// bucket's reset slack, for the second only.)
	snap, err := h.lim.Snapshot(context.Background())
	require.NoError(t, err)
	queue := slices.Clone(snap.Requests)
	slices.SortFunc(queue, func(a, b sluice.RequestSnapshot) int { return a.ETA.Position - b.ETA.Position })
	require.GreaterOrEqual(t, len(queue), 10, "most of the 23 wait: 5 go per window")
	for i := 1; i < len(queue); i++ {
		assert.False(t, queue[i].ETA.Start.Before(queue[i-1].ETA.Start), "place %d: not before the one ahead", queue[i].ETA.Position)
	}
	es := etas(t, fs)
	awaitAll(t, fs)

	sent := sentTimes(h.srv)
	require.Len(t, sent, 1)
	var times []time.Time
	for _, ts := range sent {
		times = ts[1:] // after the first request
	}
	require.Len(t, times, len(fs))
	queued := 0
	for i, e := range es {
		if e.Stage == sluice.StageSent {
			// Its ETA is when it was sent; the simulator received it a
			// transit later, which a busy machine stretches (30 ms
			// seen beside two CPU-bound processes): logged past the
			// slack, bounded at a second.
			transit := times[i].Sub(e.Start)
			assert.True(t, transit >= -etaSlack && transit < time.Second, "request %d: sent at its ETA %v, received %v later", i, e.Start, transit)
			if transit > etaSlack {
				t.Logf("request %d: received %v after the send its ETA gives", i, transit)
			}
			continue
		}
		if e.Stage == sluice.StageDone {
			continue // sent and answered before its ETA was asked (the race detector's pace)
		}
		require.Equal(t, sluice.StageQueued, e.Stage, "request %d", i)
		queued++
		assert.True(t, e.Known, "request %d", i)
		assert.Equal(t, sluice.LimitBucket, e.Limit, "request %d", i)
		if i > 0 && es[i-1].Stage == sluice.StageQueued {
			assert.Equal(t, es[i-1].Position+1, e.Position, "request %d: one place behind the previous one", i)
		}
		assert.True(t, onTime(e, times[i]), "request %d (place %d): sent %v after the start of its window [%v, %v)",
			i, e.Position, times[i].Sub(es[0].Start), e.Start.Sub(es[0].Start), e.End.Sub(es[0].Start))
	}
	assert.GreaterOrEqual(t, queued, 15, "most requests waited: the ETAs were asked while they did")
	e, err := fs[len(fs)-1].ETA(context.Background())
	require.NoError(t, err)
	assert.Equal(t, sluice.ETA{Stage: sluice.StageDone}, e, "answered: done")
}

// Fan-out: 60 channels, one request each, under a global limit of 10 per
// 200 ms. Every bucket has room; the global window decides, and the ETA
// says which of its windows each request goes in.
func TestETAUnderTheGlobalLimit(t *testing.T) {
	const n, global, gwin = 60, 10, 200 * time.Millisecond
	rs := rules(5, 5*time.Second, [2]string{"POST", messagesRoute})
	rs.GlobalLimit, rs.GlobalWindow = global, sluicetest.Duration(gwin)
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{GlobalLimit: global, GlobalWindow: gwin})
	_, err := h.lim.Do(context.Background(), req("POST", "/channels/999/messages", `{"content":"learn the hash"}`))
	require.NoError(t, err)
	var reqs []*http.Request
	for i := range n {
		reqs = append(reqs, req("POST", fmt.Sprintf("/channels/%d/messages", 1000+i), `{"content":"x"}`))
	}
	fs := h.lim.SendBatch(context.Background(), reqs)
	es := etas(t, fs)
	awaitAll(t, fs)

	sent := sentTimes(h.srv)
	early, globalBound, hits, waited, wide := time.Now(), 0, 0, 0, 0
	for _, e := range es {
		if e.Stage == sluice.StageQueued && e.Start.Before(early) {
			early = e.Start
		}
	}
	for i, e := range es {
		key := ""
		for k := range sent {
			if strings.HasSuffix(k, fmt.Sprintf("/channel_id=%d", 1000+i)) {
				key = k
			}
		}
		require.NotEmpty(t, key, "request %d reached the server: %v", i, keys(sent))
		at := sent[key][0]
		if e.Stage != sluice.StageQueued {
			continue // sent (or answered) before its ETA was asked
		}
		waited++
		if e.Limit == sluice.LimitGlobal {
			globalBound++
			// One period, and the doubt of the round trips before its
			// turn (half of each); for a request at a burst's cut, the
			// burst on the other side of it too (one per side of each
			// cut with 10 slots).
			w := e.End.Sub(e.Start)
			assert.GreaterOrEqual(t, w, gwin, "request %d: a global window is one period at least", i)
			if w >= gwin+gwin/2 {
				wide++
				assert.Less(t, w, 3*gwin+gwin/2, "request %d: at a cut, three bursts at most", i)
			}
		}
		if onTime(e, at) {
			hits++
		} else {
			t.Logf("request %d: sent %v, predicted [%v, %v) by %s", i, at.Sub(early), e.Start.Sub(early), e.End.Sub(early), e.Limit)
		}
	}
	assert.GreaterOrEqual(t, waited, n-2*global, "most requests waited for the global window when asked")
	assert.GreaterOrEqual(t, globalBound, waited-global, "the global window sets most ETAs")
	assert.LessOrEqual(t, wide, 2*(n/global), "wider than a burst only at a cut: one request on each side of it")
	assert.GreaterOrEqual(t, hits, waited*95/100, "at least 95%% sent in their predicted window (%d waited)", waited)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A declared limit's window sets the ETA of the requests under it.
func TestETAOfADeclaredLimit(t *testing.T) {
	h := newHarness(t, sluicetest.Options{Rules: roleRules()}, sluice.Options{Limits: memberRoles()})
	var reqs []*http.Request
	for i := range 15 {
		reqs = append(reqs, req("PUT", fmt.Sprintf("/guilds/1/members/%d/roles/9", i), ""))
	}
	fs := h.lim.SendBatch(context.Background(), reqs)
	es := etas(t, fs)
	awaitAll(t, fs)
	h.srv.AssertNoViolations(t)
	var times []time.Time
	for _, ts := range sentTimes(h.srv) {
		times = append(times, ts...)
	}
	require.Len(t, times, len(fs))
	declared := 0
	for i, e := range es {
		if e.Limit != sluice.LimitDeclared {
			continue
		}
		declared++
		assert.Equal(t, "member_roles", e.Declared)
		assert.True(t, onTime(e, times[i]), "request %d: sent %v, predicted [%v, %v)", i,
			times[i].Sub(es[0].Start), e.Start.Sub(es[0].Start), e.End.Sub(es[0].Start))
	}
	assert.GreaterOrEqual(t, declared, 9, "15 requests, 5 per window: the last two windows' wait for the declared limit")
}

// Snapshot.Requests lists the queue with the same places and windows
// Future.ETA tells.
func TestSnapshotShowsETAs(t *testing.T) {
	h := newHarness(t, sluicetest.Options{Rules: rules(2, time.Second, [2]string{"POST", messagesRoute})}, sluice.Options{})
	_, err := h.lim.Do(context.Background(), req("POST", "/channels/1/messages", `{"content":"first"}`))
	require.NoError(t, err)
	var reqs []*http.Request
	for i := range 5 {
		reqs = append(reqs, req("POST", "/channels/1/messages", fmt.Sprintf(`{"content":"m%d"}`, i)))
	}
	fs := h.lim.SendBatch(context.Background(), reqs)
	snap, err := h.lim.Snapshot(context.Background())
	require.NoError(t, err)
	es := etas(t, fs)
	require.NotEmpty(t, snap.Requests)
	byPlace := map[int]sluice.RequestSnapshot{}
	for _, r := range snap.Requests {
		assert.Equal(t, sluice.StageQueued, r.ETA.Stage)
		assert.Equal(t, "POST /channels/1/messages", r.Route)
		assert.Contains(t, r.Bucket, "channel_id=1")
		byPlace[r.ETA.Position] = r
	}
	for _, e := range es {
		if e.Stage != sluice.StageQueued {
			continue
		}
		r, ok := byPlace[e.Position]
		require.True(t, ok, "place %d is in the snapshot", e.Position)
		assert.WithinDuration(t, e.Start, r.ETA.Start, 50*time.Millisecond, "place %d", e.Position)
	}
	awaitAll(t, fs)
	snap, err = h.lim.Snapshot(context.Background())
	require.NoError(t, err)
	assert.Empty(t, snap.Requests, "nothing waits")
}

// MaxWait refuses at once a request that would wait out a global 429's
// pause, and says so.
func TestMaxWaitRefusesByTheGlobalPause(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, sluice.Options{})
	h.srv.InjectGlobalLimit(3 * time.Second)
	f := h.lim.Send(context.Background(), req("GET", "/channels/1", ""))
	// The first request meets the global 429 and waits out the pause.
	require.Eventually(t, func() bool {
		s, err := h.lim.Snapshot(context.Background())
		return err == nil && s.State == "global_limit"
	}, 5*time.Second, 5*time.Millisecond)
	start := time.Now()
	_, err := h.lim.Do(sluice.WithMaxWait(context.Background(), time.Second), req("GET", "/channels/2", ""))
	var we *sluice.WaitError
	require.True(t, errors.As(err, &we), "%v", err)
	assert.Less(t, time.Since(start), time.Second, "refused at once")
	assert.Equal(t, sluice.LimitGlobal, we.By)
	assert.Greater(t, we.Wait, time.Second)
	assert.WithinDuration(t, time.Now().Add(we.Wait), we.At, time.Second, "At is the refusal's time plus Wait (the second: what \"at once\" allows above)")
	assert.Contains(t, err.Error(), "global limit")
	_, err = f.Await(context.Background())
	require.NoError(t, err)
}

// A future refused before submission, and one answered, tell StageDone.
func TestETAOfFinishedRequests(t *testing.T) {
	h := newHarness(t, sluicetest.Options{}, sluice.Options{})
	bad := h.lim.Send(context.Background(), req("GET", "/not-an-api-route", ""))
	<-bad.Done()
	e, err := bad.ETA(context.Background())
	require.NoError(t, err)
	assert.Equal(t, sluice.StageDone, e.Stage)
	assert.Equal(t, "done", e.Stage.String())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := h.lim.Send(context.Background(), req("GET", "/channels/1", ""))
	if e, err := f.ETA(ctx); err == nil {
		assert.Contains(t, []sluice.Stage{sluice.StageQueued, sluice.StageSent, sluice.StageDone}, e.Stage)
	} else {
		assert.ErrorIs(t, err, context.Canceled)
	}
	_, err = f.Await(context.Background())
	require.NoError(t, err)
	e, err = f.ETA(context.Background())
	require.NoError(t, err)
	assert.Equal(t, sluice.StageDone, e.Stage)
}

// A request waiting out the backoff after a 5xx tells StageRetrying, and
// when its backoff ends.
func TestETAOfARetry(t *testing.T) {
	h := newHarness(t, sluicetest.Options{Faults: sluicetest.Faults{ServerErrorRate: 1}}, sluice.Options{})
	f := h.lim.Send(context.Background(), req("GET", "/channels/1", ""))
	var e sluice.ETA
	require.Eventually(t, func() bool {
		var err error
		e, err = f.ETA(context.Background())
		return err == nil && e.Stage == sluice.StageRetrying
	}, 10*time.Second, time.Millisecond, "the request waits for its backoff after a 502")
	assert.Equal(t, sluice.LimitRetry, e.Limit)
	assert.WithinDuration(t, time.Now(), e.Start, 5*time.Second, "a backoff is seconds at most")
	assert.Equal(t, "retrying", e.Stage.String())
	resp, err := f.Await(context.Background())
	if err == nil {
		assert.Equal(t, 502, resp.StatusCode, "the last attempt's answer")
	}
}
