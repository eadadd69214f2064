package sluice_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// recorder collects trace events.
type recorder struct {
	mu     sync.Mutex
	events []sluice.TraceEvent
	more   chan struct{} // closed and replaced when an event arrives
}

func (r *recorder) add(e sluice.TraceEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	if r.more != nil {
		close(r.more)
		r.more = nil
	}
}

// arrival is a channel closed when the next event arrives.
func (r *recorder) arrival() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.more == nil {
		r.more = make(chan struct{})
	}
	return r.more
}

// waitSteps waits until steps(actorName, kind, request) has at least n
// entries, or 10 s, and returns them. An actor that stops after a message
// (a bucket gone idle) is not asked by a snapshot, so settle does not wait
// for its events: this waits for them to arrive.
func (r *recorder) waitSteps(actorName, kind string, request uint64, n int) []string {
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		more := r.arrival()
		if got := r.steps(actorName, kind, request); len(got) >= n {
			return got
		}
		select {
		case <-more:
		case <-deadline.C:
			return r.steps(actorName, kind, request)
		}
	}
}

func (r *recorder) all() []sluice.TraceEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sluice.TraceEvent(nil), r.events...)
}

// steps projects the events of one actor kind and event kind, optionally
// for one request, as "message" or "message:status" strings.
func (r *recorder) steps(actorName, kind string, request uint64) []string {
	var out []string
	for _, e := range r.all() {
		if e.Actor != actorName || e.Kind != kind || (request != 0 && e.RequestID != request) {
			continue
		}
		s := e.Message
		if kind == "transition" {
			s = e.Event + ":" + e.StateBefore + "->" + e.StateAfter
		} else if e.Status != 0 {
			s += fmt.Sprintf(":%d", e.Status)
		}
		out = append(out, s)
	}
	return out
}

// settle waits until every live actor has emitted the events of the
// messages it handled so far: a snapshot is a message to each of them,
// handled after those. A bucket that went idle and stopped is not asked
// (recorder.waitSteps waits for its events).
func settle(t *testing.T, h *harness) {
	t.Helper()
	_, err := h.lim.Snapshot(context.Background())
	require.NoError(t, err)
}

func tracedHarness(t *testing.T, sopts sluicetest.Options, lopts sluice.Options) (*harness, *recorder) {
	rec := &recorder{}
	lopts.Trace = rec.add
	return newHarness(t, sopts, lopts), rec
}

// requestID finds the id of the first request whose route contains s.
func requestID(t *testing.T, rec *recorder, s string) uint64 {
	t.Helper()
	for _, e := range rec.all() {
		if e.RequestID != 0 && strings.Contains(e.Route, s) {
			return e.RequestID
		}
	}
	t.Fatalf("no event for a route containing %q", s)
	return 0
}

func TestTracePioneerRequest(t *testing.T) {
	h, rec := tracedHarness(t, sluicetest.Options{}, sluice.Options{})
	_, err := h.lim.Do(context.Background(), req("GET", "/channels/42", ""))
	require.NoError(t, err)
	settle(t, h)
	id := requestID(t, rec, "/channels/42")
	// Three messages carry a request: submit, enqueue, result.
	assert.Equal(t, []string{"submit"}, rec.steps("supervisor", "receive", id))
	assert.Equal(t, []string{"enqueue", "result:200"}, rec.steps("bucket", "receive", id))
	assert.Empty(t, rec.steps("bucket", "send", id), "the bucket actor sends its requests itself")
	assert.Equal(t, []string{"discovered:initial->open"}, rec.steps("bucket", "transition", 0))
	assert.Equal(t, []string{"dial:disconnected->connecting", "up:connecting->connected"}, rec.steps("supervisor", "transition", 0))
	for _, e := range rec.all() {
		if e.Kind == "receive" && e.Message == "enqueue" {
			assert.Equal(t, "initial", e.StateBefore)
			assert.Equal(t, "initial", e.StateAfter, "the pioneer is out; the bucket is still unknown")
			assert.Contains(t, e.Bucket, "/channels/{channel_id}")
		}
		if e.Kind == "receive" && e.Message == "result" {
			assert.Equal(t, "initial", e.StateBefore)
			assert.Equal(t, "open", e.StateAfter)
		}
	}
}

// TestTraceThreeMessagesPerRequest counts the actor messages each request
// of a pipelined burst crosses on the hot path.
func TestTraceThreeMessagesPerRequest(t *testing.T) {
	rs := rules(5, time.Second, [2]string{"POST", "/channels/{channel_id}/messages"})
	h, rec := tracedHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{})
	var reqs []*http.Request
	for i := range 5 {
		reqs = append(reqs, req("POST", "/channels/9/messages", fmt.Sprintf(`{"content":"%d"}`, i)))
	}
	for _, r := range h.lim.DoBatch(context.Background(), reqs) {
		require.NoError(t, r.Err)
	}
	settle(t, h)
	perRequest := map[uint64][]string{}
	for _, e := range rec.all() {
		if e.Kind == "receive" && e.RequestID != 0 {
			perRequest[e.RequestID] = append(perRequest[e.RequestID], e.Message)
		}
	}
	require.Len(t, perRequest, 5)
	for id, msgs := range perRequest {
		assert.Equal(t, []string{"submit", "enqueue", "result"}, msgs, "request %d", id)
	}
}

func TestTracePipelinedBurst(t *testing.T) {
	rs := rules(5, time.Second, [2]string{"POST", "/channels/{channel_id}/messages"})
	h, rec := tracedHarness(t, sluicetest.Options{Rules: rs, Faults: sluicetest.Faults{Latency: 50 * time.Millisecond}}, sluice.Options{})
	var reqs []*http.Request
	for i := range 5 {
		reqs = append(reqs, req("POST", "/channels/9/messages", fmt.Sprintf(`{"content":"%d"}`, i)))
	}
	for _, r := range h.lim.DoBatch(context.Background(), reqs) {
		require.NoError(t, r.Err)
	}
	settle(t, h)
	// In the bucket's own order: the five enqueues (the pioneer goes at
	// the first), the pioneer's result reveals the bucket, and the other
	// four go at once: their results come after, all in the exhausted bucket.
	var order []string
	for _, e := range rec.all() {
		if e.Actor != "bucket" {
			continue
		}
		switch {
		case e.Kind == "transition" && e.Event == "discovered":
			order = append(order, "discovered")
		case e.Kind == "receive" && e.Message == "result":
			order = append(order, "result:"+e.StateBefore)
		}
	}
	assert.Equal(t, []string{"result:initial", "discovered", "result:exhausted", "result:exhausted", "result:exhausted", "result:exhausted"}, order,
		"the four left the bucket exhausted (5 of 5 spent) before any of them was answered")
	// The four went together: the simulator saw them within one latency.
	ev := h.srv.Stats().Buckets[0].Timeline
	require.Len(t, ev, 5)
	assert.Less(t, ev[4].At-ev[1].At, 50*time.Millisecond, "pipelined, not one per round trip")
}

func TestTraceGlobal429(t *testing.T) {
	h, rec := tracedHarness(t, sluicetest.Options{}, sluice.Options{})
	h.srv.InjectGlobalLimit(200 * time.Millisecond)
	resp, err := h.lim.Do(context.Background(), req("GET", "/channels/5", ""))
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	settle(t, h)
	id := requestID(t, rec, "/channels/5")
	assert.Equal(t, []string{"enqueue", "result:429", "result:200"}, rec.steps("bucket", "receive", id),
		"the pause starts before the bucket hears of the 429: one 429, then the retry after the pause")
	assert.Equal(t, []string{"submit"}, rec.steps("supervisor", "receive", id))
	// The bot's window pauses (its machine: open -> global_limit), and
	// with it the supervisor; both clear when the pause ends.
	assert.Equal(t, []string{"dial:disconnected->connecting", "up:connecting->connected",
		"global_hit:open->global_limit", "global_hit:connected->global_limit",
		"global_clear:global_limit->open", "global_clear:global_limit->connected"}, rec.steps("supervisor", "transition", 0))
	var windows []string
	for _, e := range rec.all() {
		if e.Kind == "transition" && e.Actor == "supervisor" && e.Bucket != "" {
			windows = append(windows, e.Bucket+" "+e.Event)
		}
	}
	assert.Equal(t, []string{"window bot global_hit", "window bot global_clear"}, windows, "the IP's window is untouched")
	assert.Contains(t, rec.steps("supervisor", "receive", 0), "global_hit")
}

func TestTraceConnectionDeath(t *testing.T) {
	arrived := make(chan struct{}, 4)
	clock := func() time.Time {
		select {
		case arrived <- struct{}{}:
		default:
		}
		return time.Now()
	}
	h, rec := tracedHarness(t, sluicetest.Options{Clock: clock, Faults: sluicetest.Faults{Latency: time.Hour}},
		sluice.Options{Connections: 1}) // one connection: its death is the supervisor's "down"
	<-arrived // the simulator read its clock at start
	// The caller's own nonce without enforce_nonce: not safe to resend.
	f := h.lim.Send(context.Background(), req("POST", "/channels/3/messages", `{"content":"x","nonce":"1"}`))
	<-arrived // the request reached the simulator
	h.srv.DropConnections()
	_, err := f.Await(context.Background())
	require.ErrorIs(t, err, sluice.ErrConnectionDied)
	settle(t, h)
	id := requestID(t, rec, "/channels/3")
	// The bucket, knowing nothing of its limit, goes idle after the answer
	// and may stop before it has emitted the answer's event.
	assert.Equal(t, []string{"enqueue", "result"}, rec.waitSteps("bucket", "receive", id, 2), "no headers: the connection died first")
	// The supervisor learns of the death. Nothing waits, so it does not
	// redial: a request to come will (TestReconnectStormsBackOff and the
	// fault tests cover reconnections).
	trans := rec.waitSteps("supervisor", "transition", 0, 3)
	assert.Equal(t, []string{"dial:disconnected->connecting", "up:connecting->connected", "down:connected->disconnected"}, trans)
	assert.Contains(t, rec.steps("supervisor", "receive", 0), "conn_down")
}

func TestTraceAndLogsNeverShowTokens(t *testing.T) {
	const secret = "SECRET-bot-token-0123456789"
	const hookToken = "SECRET-webhook-token-abcdef"
	var logs bytes.Buffer
	rec := &recorder{}
	srv, err := sluicetest.NewServer(sluicetest.Options{Tokens: []string{secret}})
	require.NoError(t, err)
	defer srv.Close()
	lim, err := sluice.New(sluice.Options{BaseURL: srv.APIBase(), Token: secret, TLSConfig: srv.ClientTLSConfig(),
		Trace: rec.add, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	for _, r := range []*http.Request{
		req("GET", "/users/@me", ""),
		req("POST", "/webhooks/123456789012345678/"+hookToken, `{"content":"x"}`),
		req("POST", "/interactions/123456789012345678/"+hookToken+"/callback", `{"type":1}`),
	} {
		_, err := lim.Do(context.Background(), r)
		require.NoError(t, err)
	}
	bad := req("GET", "/users/@me", "")
	bad.Header.Set("Authorization", "Bot "+secret+"-wrong")
	_, _ = lim.Do(context.Background(), bad) // a 401, logged as a warning
	require.NoError(t, lim.Close(context.Background()))
	var all strings.Builder
	for _, e := range rec.all() {
		fmt.Fprintf(&all, "%+v\n", e)
	}
	require.NotEmpty(t, rec.all())
	require.NotZero(t, logs.Len())
	for _, out := range []string{all.String(), logs.String()} {
		assert.NotContains(t, out, secret)
		assert.NotContains(t, out, hookToken)
	}
	assert.Contains(t, all.String(), "{webhook_token}", "routes appear redacted")
}

// Options.Trace sees every message each actor handles, with the actor's
// state before and after; here, what the bucket actor did for one request.
func Example_trace() {
	rec := &recorder{}
	srv, _ := sluicetest.NewServer(sluicetest.Options{})
	defer srv.Close()
	lim, _ := sluice.New(sluice.Options{BaseURL: srv.APIBase(), Token: "my-bot-token", TLSConfig: srv.ClientTLSConfig(),
		Trace: rec.add})
	resp, _ := lim.Do(context.Background(), req("GET", "/channels/42", ""))
	resp.Body.Close()
	lim.Close(context.Background()) // every event is in once Close returns
	for _, e := range rec.all() {
		if e.Actor == "bucket" && (e.RequestID != 0 || e.Kind == "transition") {
			fmt.Println(strings.TrimSpace(fmt.Sprintf("%-10s %-9s %-8s %s -> %s", e.Kind, e.Message+e.Event, e.Route, e.StateBefore, e.StateAfter)))
		}
	}
	// Output:
	// receive    enqueue   GET /channels/42 initial -> initial
	// receive    result    GET /channels/42 initial -> open
	// transition discovered          initial -> open
}
