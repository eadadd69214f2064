package sluice_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
)

// A long queue behind a pioneer on the wire keeps its slots of the global
// window from the buckets behind it in line while the pioneer's answer
// comes: a bucket that learns its limit first, alone in line, no longer
// takes the window's last slots from a longer backlog whose answer comes a
// moment later (scenario 18 of docs/comparison.md: a hot channel lost its
// first window to the cold channels answered before it, and ended a
// window late).
//
// A global window of 6 per second; a warm-up learns the route; then a
// cold channel (3 messages) and a hot one (12) each send a pioneer. The
// cold one is answered first, and asks for its 2 other messages while the
// hot pioneer's answer is held back until that ask is handled. The window's
// 3 slots left go to the hot channel's next 3 messages; the cold channel's
// wait for the next second.
func TestPioneerOnTheWireKeepsItsSlots(t *testing.T) {
	const cold, hot = "100", "200"
	var (
		mu       sync.Mutex
		arrivals []string // channel of each request, as the server saw them
		sent     = map[string]int{}
	)
	hotArrived, releaseHot, hotKept := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var armed, released, kept, noKeep atomic.Bool
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(r.URL.Path, "/") // /api/v10/channels/{id}/messages
		ch := parts[len(parts)-2]
		mu.Lock()
		arrivals = append(arrivals, ch)
		sent[ch]++
		n := sent[ch]
		mu.Unlock()
		switch {
		case ch == hot && n == 1:
			armed.Store(true)
			close(hotArrived)
			select {
			case <-releaseHot:
			case <-r.Context().Done():
				return
			}
		case ch == cold && n == 1:
			// the cold pioneer is answered once the hot one is on the
			// wire and the supervisor has the hot queue's keep (or not:
			// then the test fails)
			select {
			case <-hotArrived:
			case <-r.Context().Done():
				return
			}
			select {
			case <-hotKept:
			case <-time.After(5 * time.Second):
				noKeep.Store(true)
			case <-r.Context().Done():
				return
			}
		}
		h := w.Header()
		h.Set("X-RateLimit-Limit", "5")
		h.Set("X-RateLimit-Remaining", strconv.Itoa(max(0, 5-n)))
		h.Set("X-RateLimit-Reset-After", "1.000")
		h.Set("X-RateLimit-Bucket", "msgs")
		w.Write([]byte(`{}`))
	}))
	lim := limiterFor(t, srv, sluice.Options{GlobalLimit: 6, GlobalWindow: time.Second, NoDefaultLimits: true,
		Trace: func(e sluice.TraceEvent) {
			// (the only keep here: the cold queue is short)
			if e.Kind == "receive" && e.Actor == "supervisor" && e.Message == "soon" && kept.CompareAndSwap(false, true) {
				close(hotKept)
			}
			// the supervisor handled the cold channel's ask: the hot
			// pioneer's answer may come
			if armed.Load() && e.Kind == "receive" && e.Actor == "supervisor" && e.Message == "want" && released.CompareAndSwap(false, true) {
				close(releaseHot)
			}
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := lim.Do(ctx, req("POST", "/channels/1/messages", `{}`))
	require.NoError(t, err)
	resp.Body.Close()

	var fs []*sluice.Future
	for range 3 {
		fs = append(fs, lim.Send(ctx, req("POST", "/channels/"+cold+"/messages", `{}`)))
	}
	for range 12 {
		fs = append(fs, lim.Send(ctx, req("POST", "/channels/"+hot+"/messages", `{}`)))
	}
	for _, f := range fs {
		resp, err := f.Await(ctx)
		require.NoError(t, err)
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	require.False(t, noKeep.Load(), "the hot queue behind its pioneer told no keep")
	require.GreaterOrEqual(t, len(arrivals), 6)
	// The first window: the warm-up, both pioneers, and the 3 slots left.
	assert.Equal(t, []string{hot, hot, hot}, arrivals[3:6], "the window's last slots went to the long backlog: %v", arrivals)
}

// A keep no queue needs any more is withdrawn at once, not left to hold
// the window's slots until it lapses (admission.SoonGrace after the
// reopening it named): here the hot queue's pioneer is answered with its
// bucket shut for longer than the global period, and the cold channel
// waiting in line gets the slots the keep held in the same handler of the
// supervisor's (before, they waited for the keep's lapse, a timer away).
//
// A global window of 6 per second; a warm-up learns the route; the hot
// channel (11 messages) sends its pioneer and, while the server holds it,
// tells its keep. The cold channel (3) then asks for its pioneer (the
// fast path is closed while a keep stands; a pioneer goes ahead of it)
// and, at its answer, for its 2 others, held by the keep. The hot
// pioneer's answer shuts its bucket for 1.5 s.
func TestAKeepNoQueueNeedsIsWithdrawn(t *testing.T) {
	const cold, hot = "100", "200"
	var (
		mu     sync.Mutex
		sent   = map[string]int{}
		events []sluice.TraceEvent // the supervisor's, in order
	)
	hotKept, coldAsked, releaseHot := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var kept atomic.Bool
	var asked atomic.Int32
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(r.URL.Path, "/") // /api/v10/channels/{id}/messages
		ch := parts[len(parts)-2]
		mu.Lock()
		sent[ch]++
		n := sent[ch]
		mu.Unlock()
		h := w.Header()
		h.Set("X-RateLimit-Limit", "5")
		h.Set("X-RateLimit-Remaining", strconv.Itoa(max(0, 5-n)))
		h.Set("X-RateLimit-Reset-After", "1.000")
		if ch == hot && n == 1 {
			select {
			case <-releaseHot:
			case <-r.Context().Done():
				return
			}
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset-After", "1.500") // shut for longer than the global period
		}
		h.Set("X-RateLimit-Bucket", "msgs")
		w.Write([]byte(`{}`))
	}))
	lim := limiterFor(t, srv, sluice.Options{GlobalLimit: 6, GlobalWindow: time.Second, NoDefaultLimits: true,
		Trace: func(e sluice.TraceEvent) {
			if e.Actor != "supervisor" {
				return
			}
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
			if e.Kind == "receive" && e.Message == "soon" && kept.CompareAndSwap(false, true) {
				close(hotKept)
			}
			if e.Kind == "receive" && e.Message == "want" && kept.Load() && asked.Add(1) == 2 {
				close(coldAsked) // its pioneer's ask, then its queue's
			}
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := lim.Do(ctx, req("POST", "/channels/1/messages", `{}`))
	require.NoError(t, err)
	resp.Body.Close()

	hotCtx, cancelHot := context.WithCancel(ctx)
	defer cancelHot()
	var hots []*sluice.Future
	for range 11 {
		hots = append(hots, lim.Send(hotCtx, req("POST", "/channels/"+hot+"/messages", `{}`)))
	}
	select {
	case <-hotKept:
	case <-ctx.Done():
		t.Fatal("the hot queue behind its pioneer told no keep")
	}
	var colds []*sluice.Future
	for range 3 {
		colds = append(colds, lim.Send(ctx, req("POST", "/channels/"+cold+"/messages", `{}`)))
	}
	select {
	case <-coldAsked:
	case <-ctx.Done():
		t.Fatal("the cold channel never asked the supervisor")
	}
	close(releaseHot)
	for _, f := range colds {
		resp, err := f.Await(ctx)
		require.NoError(t, err)
		resp.Body.Close()
	}
	cancelHot() // its bucket's next windows are not this test's
	for _, f := range hots {
		if resp, err := f.Await(ctx); err == nil {
			resp.Body.Close()
		}
	}

	mu.Lock()
	defer mu.Unlock()
	// The supervisor's events: the keep (told again while the hot queue
	// filled, perhaps), then its withdrawal, whose handler grants the
	// cold channel's ask (a keep's handler grants nothing).
	var soons []int
	for i, e := range events {
		if e.Kind == "receive" && e.Message == "soon" {
			soons = append(soons, i)
		}
	}
	require.GreaterOrEqual(t, len(soons), 2, "the keep was never withdrawn")
	granted := false
	for _, s := range soons[1:] {
		for _, e := range events[s+1:] {
			if e.Kind == "receive" {
				break // the next message: this soon's handler is over
			}
			granted = granted || e.Kind == "send" && e.Message == "grant"
		}
	}
	assert.True(t, granted, "the withdrawal's handler granted nothing: the slots stayed kept")
}

// A queue whose bucket reopens more than a global period away tells its
// keep a period before the reopening, though no message comes to its
// actor meanwhile: otherwise it asked only when its window had reopened,
// found the slots handed out to the line and waited for them (scenario 8
// of docs/comparison.md, a hot channel among cold ones under a global
// window of 100 ms: 60 ms on its second window).
//
// A global window of 6 per 200 ms; a warm-up learns the route; a hot
// channel (15 messages, 5 per second: three windows) and ten cold ones (5
// each) keep the line busy for more than a second. Once its first window
// has gone (the server saw 5 of its messages), before its second, a
// second later, the hot bucket tells a keep (its queue then still needs a
// window after that one). Before, its only keeps were those of its queue
// behind its pioneer, while the server had seen at most that one.
func TestAKeepIsToldAPeriodBeforeAFarReopening(t *testing.T) {
	const hot = "200"
	var (
		mu     sync.Mutex
		sent   = map[string]int{}
		keptAt []int // how many hot messages the server had seen at each keep the hot bucket told
	)
	srv := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(r.URL.Path, "/") // /api/v10/channels/{id}/messages
		ch := parts[len(parts)-2]
		mu.Lock()
		sent[ch]++
		n := sent[ch]
		mu.Unlock()
		h := w.Header()
		h.Set("X-RateLimit-Limit", "5")
		h.Set("X-RateLimit-Remaining", strconv.Itoa((5-n%5)%5))
		h.Set("X-RateLimit-Reset-After", "1.000")
		h.Set("X-RateLimit-Bucket", "msgs")
		w.Write([]byte(`{}`))
	}))
	lim := limiterFor(t, srv, sluice.Options{GlobalLimit: 6, GlobalWindow: 200 * time.Millisecond, NoDefaultLimits: true,
		Trace: func(e sluice.TraceEvent) {
			if e.Kind == "send" && e.Actor == "bucket" && strings.Contains(e.Bucket, hot) && e.Message == "soon" {
				mu.Lock()
				keptAt = append(keptAt, sent[hot])
				mu.Unlock()
			}
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := lim.Do(ctx, req("POST", "/channels/1/messages", `{}`))
	require.NoError(t, err)
	resp.Body.Close()

	var fs []*sluice.Future
	for range 15 {
		fs = append(fs, lim.Send(ctx, req("POST", "/channels/"+hot+"/messages", `{}`)))
	}
	for c := range 10 {
		for range 5 {
			fs = append(fs, lim.Send(ctx, req("POST", "/channels/"+strconv.Itoa(300+c)+"/messages", `{}`)))
		}
	}
	for _, f := range fs {
		resp, err := f.Await(ctx)
		require.NoError(t, err)
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Contains(t, keptAt, 5, "no keep told between the hot bucket's first window and its second (messages the server had seen at each keep: %v)", keptAt)
}
