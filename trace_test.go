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
}

func (r *recorder) add(e sluice.TraceEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
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

// settle waits until every actor has emitted the events of the messages it
// handled so far: a snapshot is a message to each of them, handled after
// those.
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
	assert.Equal(t, []string{"submit", "dispatch", "work_done:200"}, rec.steps("supervisor", "receive", id))
	assert.Equal(t, []string{"enqueue", "headers:200", "result:200"}, rec.steps("bucket", "receive", id))
	assert.Equal(t, []string{"dispatch"}, rec.steps("bucket", "send", id))
	assert.Equal(t, []string{"discovered:initial->open"}, rec.steps("bucket", "transition", 0))
	assert.Equal(t, []string{"dial:disconnected->connecting", "up:connecting->connected"}, rec.steps("supervisor", "transition", 0))
	for _, e := range rec.all() {
		if e.Kind == "receive" && e.Message == "enqueue" {
			assert.Equal(t, "initial", e.StateBefore)
			assert.Equal(t, "initial", e.StateAfter, "the pioneer is out; the bucket is still unknown")
			assert.Contains(t, e.Bucket, "/channels/{channel_id}")
		}
		if e.Kind == "receive" && e.Message == "headers" {
			assert.Equal(t, "initial", e.StateBefore)
			assert.Equal(t, "open", e.StateAfter)
		}
	}
}

func TestTracePipelinedBurst(t *testing.T) {
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
	// In the bucket's own order (each received message, then what it
	// caused): the pioneer is dispatched alone; its headers reveal the
	// bucket (transition) and its hash, which the supervisor confirms
	// (owner); then the other four go at once.
	var order []string
	for _, e := range rec.all() {
		if e.Actor != "bucket" {
			continue
		}
		switch {
		case e.Kind == "send" && e.Message == "dispatch":
			order = append(order, "dispatch")
		case e.Kind == "transition" && e.Event == "discovered":
			order = append(order, "discovered")
		case e.Kind == "receive" && (e.Message == "headers" || e.Message == "owner") && len(order) < 8:
			order = append(order, e.Message)
		}
	}
	require.GreaterOrEqual(t, len(order), 8)
	assert.Equal(t, []string{"dispatch", "headers", "discovered", "owner", "dispatch", "dispatch", "dispatch", "dispatch"}, order[:8])
}

func TestTraceGlobal429(t *testing.T) {
	h, rec := tracedHarness(t, sluicetest.Options{}, sluice.Options{})
	h.srv.InjectGlobalLimit(200 * time.Millisecond)
	resp, err := h.lim.Do(context.Background(), req("GET", "/channels/5", ""))
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	settle(t, h)
	id := requestID(t, rec, "/channels/5")
	assert.Equal(t, []string{"enqueue", "headers:429", "result:429", "headers:200", "result:200"}, rec.steps("bucket", "receive", id))
	assert.Equal(t, []string{"submit", "dispatch", "work_done:429", "dispatch", "work_done:200"}, rec.steps("supervisor", "receive", id))
	assert.Equal(t, []string{"dial:disconnected->connecting", "up:connecting->connected",
		"global_hit:connected->global_limit", "global_clear:global_limit->connected"}, rec.steps("supervisor", "transition", 0))
	assert.Contains(t, rec.steps("bucket", "send", 0), "global_hit")
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
	h, rec := tracedHarness(t, sluicetest.Options{Clock: clock, Faults: sluicetest.Faults{Latency: time.Hour}}, sluice.Options{})
	<-arrived // the simulator read its clock at start
	f := h.lim.Send(context.Background(), req("POST", "/channels/3/messages", `{"content":"x"}`))
	<-arrived // the request reached the simulator
	h.srv.DropConnections()
	_, err := f.Await(context.Background())
	require.ErrorIs(t, err, sluice.ErrConnectionDied)
	settle(t, h)
	id := requestID(t, rec, "/channels/3")
	assert.Equal(t, []string{"enqueue", "result"}, rec.steps("bucket", "receive", id), "no headers: the connection died first")
	// The supervisor learns of the death, redials and is connected again.
	trans := rec.steps("supervisor", "transition", 0)
	for len(trans) < 5 { // the redial is asynchronous: each snapshot waits for the supervisor's next message
		settle(t, h)
		trans = rec.steps("supervisor", "transition", 0)
	}
	assert.Equal(t, []string{"dial:disconnected->connecting", "up:connecting->connected",
		"down:connected->disconnected", "dial:disconnected->connecting", "up:connecting->connected"}, trans[:5])
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
	// send       dispatch  GET /channels/42 initial ->
	// receive    headers   GET /channels/42 initial -> open
	// transition discovered          initial -> open
	// receive    result    GET /channels/42 open -> open
}
