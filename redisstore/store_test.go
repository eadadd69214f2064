package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newStore opens a Store with cfg on srv, closed at the test's end; its
// client is s.rdb (for hooks that count calls).
func newStore(t testing.TB, srv *redistest.Server, cfg Config) *Store {
	t.Helper()
	if cfg.Namespace == "" {
		cfg.Namespace = Namespace("secret-token-" + t.Name())
	}
	s, err := New(srv.Client(t), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func answer(limit, remaining int, resetAfter time.Duration, hash string) ratelimit.SharedAnswer {
	return ratelimit.SharedAnswer{Now: time.Now(), Sent: true, Status: 200, Major: "channel_id=1",
		Template: "GET /channels/{channel_id}/messages",
		Headers: ratelimit.Headers{Limit: limit, Remaining: remaining, ResetAfter: resetAfter, Bucket: hash,
			Has: ratelimit.Present{Limit: true, Remaining: true, ResetAfter: true, Bucket: hash != ""}}}
}

func request() ratelimit.SharedRequest {
	return ratelimit.SharedRequest{Now: time.Now(), Route: "GET /channels/{channel_id}/messages channel_id=1",
		Template: "GET /channels/{channel_id}/messages", Major: "channel_id=1", Global: true}
}

// One pioneer per unknown bucket across every process: the others wait for
// its answer, are woken by it, and then share the bucket it revealed
// (under its hash, learned for every process) without ever going over.
func TestPioneerElectionAndWake(t *testing.T) {
	srv := redistest.Start(t)
	woken := make(chan string, 4)
	ns := Namespace("tok")
	a := newStore(t, srv, Config{Namespace: ns})
	b := newStore(t, srv, Config{Namespace: ns, Wake: func(major string) { woken <- major }})
	ctx := context.Background()

	p := a.Reserve(ctx, request())
	require.True(t, p.OK, "the first request of an unknown bucket is its pioneer")
	w := b.Reserve(ctx, request())
	require.False(t, w.OK, "a second pioneer while the first is in flight")
	assert.True(t, w.Notify)
	assert.Equal(t, "bucket", w.Scope)

	a.Report(ctx, p, answer(5, 4, time.Second, "h1"))
	select {
	case m := <-woken:
		assert.Equal(t, "channel_id=1", m)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting process was not woken by the pioneer's answer")
	}
	granted := 0
	for range 10 {
		g := b.Reserve(ctx, request())
		if g.OK {
			granted++
			assert.Equal(t, "bucket h1 channel_id=1", g.Key, "reserved under the hash the other process learned")
			assert.Equal(t, "h1", g.Hash)
		}
	}
	assert.Equal(t, 4, granted, "the pioneer's window had 4 left")
}

// Many goroutines on two stores reserving one bucket at once: exactly what
// remains is granted, and the global window caps the total.
func TestReservationsNeverExceedTheCount(t *testing.T) {
	srv := redistest.Start(t)
	ns := Namespace("tok2")
	stores := []*Store{newStore(t, srv, Config{Namespace: ns, GlobalLimit: 1000}), newStore(t, srv, Config{Namespace: ns, GlobalLimit: 1000})}
	ctx := context.Background()
	p := stores[0].Reserve(ctx, request())
	require.True(t, p.OK)
	stores[0].Report(ctx, p, answer(10, 9, 5*time.Second, ""))

	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if stores[i%2].Reserve(ctx, request()).OK {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 9, ok.Load())

	// The global window alone.
	g := newStore(t, srv, Config{Namespace: Namespace("tok3"), GlobalLimit: 7})
	n := 0
	for i := range 20 {
		r := request()
		r.Route = "GET /x/{id} id=" + string(rune('a'+i))
		r.Template, r.Hash = "GET /x/{id}", "x" // a known bucket per id
		r.Major = "id=" + string(rune('a'+i))
		if g.Reserve(ctx, r).OK {
			n++
		}
	}
	assert.Equal(t, 7, n)
}

// Every key the store writes is below the token's hash tag, carries an
// expiry, and nothing contains the token.
func TestKeysExpireAndHideTheToken(t *testing.T) {
	srv := redistest.Start(t)
	const token = "MTIzNDU2Nzg5.very-secret"
	s := newStore(t, srv, Config{Namespace: Namespace(token), InvalidLimit: 100})
	ctx := context.Background()
	g := s.Reserve(ctx, request())
	require.True(t, g.OK)
	a := answer(5, 4, time.Second, "h1")
	s.Report(ctx, g, a)
	g = s.Reserve(ctx, request())
	require.True(t, g.OK)
	a.Status, a.Verdict = 429, ratelimit.Verdict{Kind: ratelimit.UserLimit, Wait: time.Second}
	s.Report(ctx, g, a)

	c := srv.Client(t)
	keys, err := c.Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		assert.True(t, strings.HasPrefix(k, Namespace(token)+":"), k)
		assert.NotContains(t, k, "secret")
		ttl, err := c.PTTL(ctx, k).Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, time.Duration(0), "key %q has no expiry", k)
	}
	// The 429 paused the bucket for every process, and counted as invalid.
	r := s.Reserve(ctx, request())
	assert.False(t, r.OK)
	assert.Greater(t, r.Wait, 500*time.Millisecond)
}

// Redis killed: the store answers from its local share at once, never
// fails open, and comes back to shared limits when Redis does.
func TestFallbackAndRecovery(t *testing.T) {
	srv := redistest.Start(t)
	modes := make(chan Mode, 8)
	s := newStore(t, srv, Config{Namespace: Namespace("tok4"), GlobalLimit: 40, Share: 0.25, Heartbeat: 50 * time.Millisecond,
		ModeChanged: func(_, to Mode) { modes <- to }})
	ctx := context.Background()
	require.True(t, s.Reserve(ctx, request()).OK)
	srv.Kill()

	// The first reservation meets the dead Redis and switches; the global
	// window is held for a period (others' slots are unknown), then a
	// quarter of it is this process's.
	assert.False(t, s.Reserve(ctx, request()).OK)
	require.Equal(t, Fallback, <-modes)
	later := time.Now().Add(2 * time.Second)
	n := 0
	for i := range 40 {
		r := request()
		r.Now = later
		r.Route, r.Major = "GET /x/{id} id="+string(rune('a'+i)), "id="+string(rune('a'+i))
		r.Template, r.Hash = "GET /x/{id}", "x"
		g := r
		if s.Reserve(ctx, g).OK {
			n++
		}
	}
	assert.Equal(t, Fallback, s.Mode())
	assert.Equal(t, 10, n, "a quarter of the global limit while Redis is down")
	assert.EqualValues(t, 1, s.Stats().Outages)

	srv.Restart(t)
	select {
	case m := <-modes:
		require.Equal(t, Recovering, m)
	case <-time.After(10 * time.Second):
		t.Fatal("the store never noticed Redis was back")
	}
	// Recovering: a refusal names its scope.
	g := s.Reserve(ctx, request())
	assert.False(t, g.Local && !g.OK && g.Scope == "", "a refusal names its scope")
}

// While Redis is down, a known bucket gets this process's share of its
// limit per window, and no more.
func TestFallbackShareOfABucket(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, Config{Namespace: Namespace("tok5"), Share: 0.25})
	srv.Kill()
	// The switch happens at the first reservation; its window under way is
	// held: the next window is the first counted locally.
	now := time.Now()
	var first ratelimit.Bucket
	first.Observe(now, now, ratelimit.Headers{Limit: 50, Remaining: 49, ResetAfter: time.Second,
		Has: ratelimit.Present{Limit: true, Remaining: true, ResetAfter: true}})
	r := request()
	r.Now, r.Local, r.Window = now, first, time.Second
	g := s.Reserve(context.Background(), r)
	assert.False(t, g.OK, "the window under way at the switch is held")
	assert.Equal(t, Fallback, s.Mode())
	now = now.Add(3 * time.Second) // a later window, past the hold at the switch (Store.silence)
	var local ratelimit.Bucket
	local.Observe(now, now, ratelimit.Headers{Limit: 50, Remaining: 49, ResetAfter: time.Second,
		Has: ratelimit.Present{Limit: true, Remaining: true, ResetAfter: true}})
	// Offered a request every 5 ms for a window's length, it sends a
	// quarter of 50, evenly spaced: any interval as long as the window
	// holds no more, whatever phase Discord's window has.
	var sent []time.Time
	for at := now; at.Before(now.Add(time.Second)); at = at.Add(5 * time.Millisecond) {
		r := request()
		r.Now, r.Local, r.Window, r.Global = at, local, time.Second, false
		if s.Reserve(context.Background(), r).OK {
			sent = append(sent, at)
		}
	}
	assert.Len(t, sent, 12, "a quarter of 50 in a window")
	for i := 1; i < len(sent); i++ {
		assert.GreaterOrEqual(t, sent[i].Sub(sent[i-1]), time.Second/12, "spaced by a twelfth of the window")
	}
}

// countCalls counts the commands a client sends to Redis (a pipeline counts
// once: one round trip).
type countCalls struct {
	n atomic.Int64
	// answered counts the scripts answered; each answer is told on ends
	// when it is set (at most one waiting: read answered after a receive).
	answered atomic.Int64
	ends     chan struct{}
}

func (c *countCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *countCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		// The heartbeat's own script is not a request's: the goroutine's
		// first beat may come late on a loaded machine, inside a count.
		script := (name == "evalsha" || name == "eval") && !isHeartbeat(cmd)
		if script {
			c.n.Add(1)
		}
		err := next(ctx, cmd)
		if script {
			c.answered.Add(1)
			if c.ends != nil {
				select {
				case c.ends <- struct{}{}:
				default:
				}
			}
		}
		return err
	}
}

// isHeartbeat reports whether cmd runs heartbeatLua (EVALSHA with its
// hash, or EVAL with the source that hashes to it).
func isHeartbeat(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	arg, _ := args[1].(string)
	if cmd.Name() == "eval" {
		sum := sha1.Sum([]byte(arg))
		arg = hex.EncodeToString(sum[:])
	}
	return arg == liveScripts.heartbeat.Hash()
}

func (c *countCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !connectionSetup(cmds) {
			c.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// connectionSetup reports whether cmds is go-redis's set-up of a new pool
// connection (HELLO, CLIENT SETINFO, ...), which a loaded machine may need
// in the middle of a count: not a round trip of the store's.
func connectionSetup(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		switch cmd.Name() {
		case "hello", "client", "auth", "select":
		default:
			return false
		}
	}
	return len(cmds) > 0
}

// BenchmarkReserveReport measures what sharing costs one request on a real
// redis-server over a unix socket: its reservation (on the caller's path,
// "reserve") and the pair with its report (after the answer), and counts
// the round trips.
func BenchmarkReserveReport(b *testing.B) {
	s := newStore(b, redistest.Start(b), Config{Namespace: Namespace("bench"), GlobalLimit: ratelimit.MaxGlobalLimit, Heartbeat: time.Hour})
	rdb := s.rdb
	ctx := context.Background()
	p := s.Reserve(ctx, request())
	require.True(b, p.OK)
	s.Report(ctx, p, answer(1_000_000, 999_999, time.Hour, "h"))
	calls := &countCalls{}
	rdb.AddHook(calls)
	run := func(b *testing.B, report bool) {
		var trips int64
		b.ReportAllocs()
		for b.Loop() {
			r := request()
			r.Hash = "h"
			before := calls.n.Load()
			g := s.Reserve(ctx, r)
			trips += calls.n.Load() - before
			if !g.OK {
				b.Fatalf("refused: %+v", g)
			}
			if report {
				before = calls.n.Load()
				s.Report(ctx, g, answer(1_000_000, 999_000, time.Hour, "h"))
				trips += calls.n.Load() - before
			} else {
				b.StopTimer()
				s.Report(ctx, g, answer(1_000_000, 999_000, time.Hour, "h"))
				b.StartTimer()
			}
		}
		b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/op")
	}
	b.Run("ping", func(b *testing.B) { benchPing(b, rdb) })
	b.Run("reserve", func(b *testing.B) { run(b, false) })
	b.Run("reserve+report", func(b *testing.B) { run(b, true) })
}

// benchPing times the round trip alone, for scale beside a script's.
func benchPing(b *testing.B, rdb redis.UniversalClient) {
	for b.Loop() {
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// A request costs one round trip before it is sent and one after.
func TestOneRoundTripEachWay(t *testing.T) {
	s := newStore(t, redistest.Start(t), Config{Namespace: Namespace("rt"), Heartbeat: time.Hour})
	rdb := s.rdb
	ctx := context.Background()
	p := s.Reserve(ctx, request())
	s.Report(ctx, p, answer(50, 49, time.Minute, "h"))
	calls := &countCalls{}
	rdb.AddHook(calls)
	r := request()
	r.Hash = "h"
	g := s.Reserve(ctx, r)
	require.True(t, g.OK)
	assert.EqualValues(t, 1, calls.n.Load(), "reservation")
	s.Report(ctx, g, answer(50, 48, time.Minute, "h"))
	assert.EqualValues(t, 2, calls.n.Load(), "report")
	assert.Zero(t, s.Stats().Errors)
}

// A limit no header shows goes one request at a time across processes:
// a route the caller sends serially, and, once one process met a shared or
// sublimit 429, the bucket for every process.
func TestSerialAcrossProcesses(t *testing.T) {
	srv := redistest.Start(t)
	ns := Namespace("serial")
	a := newStore(t, srv, Config{Namespace: ns})
	b := newStore(t, srv, Config{Namespace: ns})
	ctx := context.Background()
	p := a.Reserve(ctx, request())
	require.True(t, p.OK)
	a.Report(ctx, p, answer(5, 4, time.Minute, "h"))

	r := request()
	r.Hash, r.Serial = "h", true
	first := a.Reserve(ctx, r)
	require.True(t, first.OK)
	second := b.Reserve(ctx, r)
	assert.False(t, second.OK, "a second serial request while one is in flight")
	assert.True(t, second.Notify, "it waits for the first one's answer")

	// The first meets a sublimit 429: from now on every process is serial
	// there, also one that does not know the route is.
	sub := answer(5, 3, time.Minute, "h")
	sub.Status, sub.Verdict = 429, ratelimit.Verdict{Kind: ratelimit.Sublimit, Wait: 10 * time.Millisecond}
	a.Report(ctx, first, sub)
	plain := request()
	plain.Hash = "h"
	plain.Now = time.Now()
	paused := b.Reserve(ctx, plain)
	require.False(t, paused.OK, "the 429's pause holds every process")
	require.LessOrEqual(t, paused.Wait, 10*time.Millisecond)
	<-time.After(paused.Wait + time.Millisecond) // the pause the store told (whole ms), on Redis's clock
	g := b.Reserve(ctx, plain)
	require.True(t, g.OK, "after the pause: %+v", g)
	again := a.Reserve(ctx, plain)
	assert.False(t, again.OK, "one at a time once the sublimit was met")
	assert.True(t, again.Notify)
	b.Report(ctx, g, answer(5, 2, time.Minute, "h"))
	assert.Zero(t, a.Stats().Errors+b.Stats().Errors)
}

// A caller whose context ended while it reserved is refused, and Redis is
// not taken for unreachable because of it.
func TestCancelledCallerIsNotAnOutage(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, Config{Namespace: Namespace("cancel")})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g := s.Reserve(ctx, request())
	assert.False(t, g.OK)
	assert.Equal(t, Shared, s.Mode(), "a cancelled request switched the store to its fallback")
	assert.True(t, s.Reserve(context.Background(), request()).OK)
}

// channelRequest is a request on "GET /channels/{channel_id}/<name>" of
// channel 1, whose bucket's window is known to last window (0: unknown).
func channelRequest(name string, window time.Duration) ratelimit.SharedRequest {
	r := request()
	r.Route, r.Template, r.Window = "GET /channels/{channel_id}/"+name+" channel_id=1", "GET /channels/{channel_id}/"+name, window
	return r
}

// hashAnswer is an answer to channelRequest(name) from bucket "h", in the
// window that ends at reset.
func hashAnswer(name string, limit, remaining int, reset time.Time) ratelimit.SharedAnswer {
	return ratelimit.SharedAnswer{Now: time.Now(), Sent: true, Status: 200, Major: "channel_id=1",
		Template: "GET /channels/{channel_id}/" + name,
		Headers: ratelimit.Headers{Limit: limit, Remaining: remaining, ResetAfter: time.Until(reset), Reset: reset, Bucket: "h",
			Has: ratelimit.Present{Limit: true, Remaining: true, ResetAfter: true, Reset: true, Bucket: true}}}
}

// A second template of a major whose bucket is known (two routes on one
// hash): its pioneer holds a slot of the known bucket while in flight, and
// its answer, which names the same bucket, counts it there: the two
// templates together never get more than the bucket's limit in a window.
func TestSecondTemplateOnAKnownHash(t *testing.T) {
	srv := redistest.Start(t)
	ns := Namespace("tok-2tpl")
	a := newStore(t, srv, Config{Namespace: ns})
	b := newStore(t, srv, Config{Namespace: ns})
	ctx := context.Background()
	reset := time.Now().Add(time.Second).Truncate(time.Millisecond)
	tpl := func(name string) ratelimit.SharedRequest { return channelRequest(name, 0) }
	ans := func(name string, remaining int) ratelimit.SharedAnswer { return hashAnswer(name, 50, remaining, reset) }
	p := a.Reserve(ctx, tpl("pins"))
	require.True(t, p.OK && p.Pioneer)
	a.Report(ctx, p, ans("pins", 49))

	m := b.Reserve(ctx, tpl("messages"))
	require.True(t, m.OK, "the second template's pioneer: %+v", m)
	require.True(t, m.Pioneer)
	granted := 1 + 1 // the two pioneers
	var held []ratelimit.SharedGrant
	for range 60 {
		if g := a.Reserve(ctx, tpl("pins")); g.OK {
			granted++
			held = append(held, g)
		}
	}
	assert.Equal(t, 50, granted, "the messages pioneer holds one slot of the known bucket")
	b.Report(ctx, m, ans("messages", 50-granted+len(held)))
	for range 10 {
		if g := a.Reserve(ctx, tpl("pins")); g.OK {
			granted++
			held = append(held, g)
		}
		if g := b.Reserve(ctx, tpl("messages")); g.OK {
			granted++
			held = append(held, g)
		}
	}
	assert.Equal(t, 50, granted, "over the limit after the second template's answer")
	for _, g := range held {
		a.Report(ctx, g, ans("pins", 0))
	}
}

// A new template's pioneer may land in any known bucket of its major: while
// one of them has no slot left in its window (or is paused by a 429), it
// waits, and goes once the window has ended.
func TestNewTemplatePioneerWaitsForAFullBucket(t *testing.T) {
	srv := redistest.Start(t)
	ns := Namespace("tok-full")
	a := newStore(t, srv, Config{Namespace: ns})
	b := newStore(t, srv, Config{Namespace: ns})
	ctx := context.Background()
	const window = 300 * time.Millisecond
	reset := time.Now().Add(window).Truncate(time.Millisecond)
	tpl := func(name string) ratelimit.SharedRequest { return channelRequest(name, window) }
	p := a.Reserve(ctx, tpl("pins"))
	require.True(t, p.OK && p.Pioneer)
	a.Report(ctx, p, hashAnswer("pins", 5, 4, reset))
	for range 4 {
		require.True(t, a.Reserve(ctx, tpl("pins")).OK)
	}
	require.False(t, a.Reserve(ctx, tpl("pins")).OK, "the bucket is full")
	w := b.Reserve(ctx, tpl("messages"))
	require.False(t, w.OK, "a new template's pioneer while the major's known bucket is full")
	assert.Equal(t, "bucket", w.Scope)
	assert.Greater(t, w.Wait, window/2, "until the window ends")
	assert.LessOrEqual(t, w.Wait, window+100*time.Millisecond)
	// Once it has ended, the pioneer goes (Redis's clock: wait for it).
	deadline := time.Now().Add(5 * time.Second)
	for {
		m := b.Reserve(ctx, tpl("messages"))
		if m.OK {
			assert.True(t, m.Pioneer)
			break
		}
		require.True(t, time.Now().Before(deadline), "the pioneer never went: %+v", m)
		<-time.After(m.Wait)
	}
}

func TestNamespaceIgnoresTheBotScheme(t *testing.T) {
	assert.Equal(t, Namespace("abc"), Namespace("Bot abc"))
	assert.Equal(t, Namespace("abc"), Namespace(" bot  abc "))
	assert.NotEqual(t, Namespace("abc"), Namespace("Bearer abc"), "an OAuth token is another identity")
	assert.NotContains(t, Namespace("abc"), "abc")
}

// A store hears every wake-up published after New returns: the
// subscription is active before New returns (else a limiter told to wait
// for another process's pioneer could wait for the lease to expire).
func TestNewIsSubscribedOnReturn(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	for i := range 20 {
		woken := make(chan string, 1)
		ns := Namespace("sub-" + strconv.Itoa(i))
		s, err := New(rdb, Config{Namespace: ns, Wake: func(major string) {
			select {
			case woken <- major:
			default:
			}
		}})
		require.NoError(t, err)
		n, err := rdb.Publish(context.Background(), ns+":wake", "w|channel_id=1").Result()
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "round %d: one subscriber when New returned", i)
		select {
		case m := <-woken:
			assert.Equal(t, "channel_id=1", m)
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the wake-up was lost", i)
		}
		s.Close()
	}
}
