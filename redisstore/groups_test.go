package redisstore

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// groupRequest is a request of its own bucket (a pioneer each, so only the
// group binds) under group g, with id.
func groupRequest(i int, id string, g ratelimit.SharedGroup) ratelimit.SharedRequest {
	r := request()
	r.Global = false
	r.Route, r.Template, r.Hash = "GET /x/{id} id="+strconv.Itoa(i), "GET /x/{id}", "x"
	r.Major = "id=" + strconv.Itoa(i)
	r.Groups, r.GroupID = []ratelimit.SharedGroup{g}, id
	return r
}

// Three processes reserve in one group of 3 per window: places follow the
// order of reservation across processes, three per window, windows one
// window apart; a released place goes to the next to reserve, and an
// estimate tells a reservation as it was given.
func TestGroupReservationsAcrossProcesses(t *testing.T) {
	srv := redistest.Start(t)
	ns := Namespace("tok-groups")
	stores := []*Store{newStore(t, srv, Config{Namespace: ns}), newStore(t, srv, Config{Namespace: ns}), newStore(t, srv, Config{Namespace: ns})}
	const window = 400 * time.Millisecond
	g := []ratelimit.SharedGroup{{Key: "member_roles|guild_id=1", Count: 3, Window: window}}
	ctx := context.Background()
	now := time.Now()
	var slots []ratelimit.Slot
	for i := range 9 {
		s, err := stores[i%3].ReserveGroups(ctx, now, strconv.Itoa(i), 0, g)
		require.NoError(t, err)
		require.Len(t, s, 1)
		slots = append(slots, s[0])
	}
	for i, s := range slots {
		assert.Equal(t, i, s.Position, "place %d", i)
		assert.Equal(t, window, s.End.Sub(s.Start))
		w := i / 3 // its window
		// Each slot is told in ms from Redis's now and placed on the local
		// clock from the call's own timing: calls agree within their round
		// trips (about 1 ms idle, 3.8 ms once under a loaded -race suite),
		// far inside the 400 ms that would tell another window.
		assert.WithinDuration(t, slots[3*w].Start, s.Start, 20*time.Millisecond, "%d shares the window of %d", i, 3*w)
		if w > 0 {
			assert.InDelta(t, window, s.Start.Sub(slots[3*(w-1)].Start), float64(20*time.Millisecond), "windows one window apart")
		}
	}
	assert.WithinDuration(t, now, slots[0].Start, 50*time.Millisecond, "the first window opens at once")

	// Reserving again keeps the place; an estimate tells it.
	again, err := stores[1].ReserveGroups(ctx, now, "4", 0, g)
	require.NoError(t, err)
	assert.WithinDuration(t, slots[4].Start, again[0].Start, 20*time.Millisecond)
	est, found, err := stores[1].EstimateGroups(ctx, now, "4", g)
	require.NoError(t, err)
	assert.True(t, found[0])
	assert.Equal(t, 4, est[0].Position)
	_, found, err = stores[2].EstimateGroups(ctx, now, "unknown", g)
	require.NoError(t, err)
	assert.False(t, found[0], "no reservation: nothing reserved by an estimate")

	// A released place (the request was cancelled) goes to the next.
	stores[1].ReleaseGroups("4", g)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		est, found, err := stores[2].EstimateGroups(ctx, now, "5", g) // its process's
		assert.NoError(c, err)
		assert.True(c, found[0])
		assert.Equal(c, 4, est[0].Position, "one place ahead left")
	}, 5*time.Second, 10*time.Millisecond)
	n, err := stores[0].ReserveGroups(ctx, now, "9", 0, g)
	require.NoError(t, err)
	assert.WithinDuration(t, slots[3].Start, n[0].Start, 20*time.Millisecond, "the freed place in the second window")
}

// Requests of three processes under one group go only in the windows they
// reserved, and never more than Count in any window of the limit, however
// they interleave.
func TestGroupGuardAcrossProcesses(t *testing.T) {
	srv := redistest.Start(t)
	ns := Namespace("tok-guard")
	stores := []*Store{newStore(t, srv, Config{Namespace: ns}), newStore(t, srv, Config{Namespace: ns}), newStore(t, srv, Config{Namespace: ns})}
	const window, count, n = 300 * time.Millisecond, 3, 15
	g := ratelimit.SharedGroup{Key: "dms|", Count: count, Window: window}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	type sent struct {
		at   time.Time
		slot ratelimit.Slot
	}
	var mu sync.Mutex
	var out []sent
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := stores[i%3]
			id := strconv.Itoa(i)
			slots, err := st.ReserveGroups(ctx, time.Now(), id, 0, []ratelimit.SharedGroup{g})
			if !assert.NoError(t, err) {
				return
			}
			for {
				gr := st.Reserve(ctx, groupRequest(i, id, g))
				if gr.OK {
					at := time.Now()
					mu.Lock()
					out = append(out, sent{at, slots[0]})
					mu.Unlock()
					a := answer(5, 4, time.Second, "")
					a.Template, a.Major = "GET /x/{id}", "id="+strconv.Itoa(i)
					st.Report(ctx, gr, a)
					return
				}
				assert.Equal(t, "declared", gr.Scope)
				select {
				case <-time.After(gr.Wait): // the pace the group sets
				case <-ctx.Done():
					t.Error("not granted in time")
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Len(t, out, n)
	slices.SortFunc(out, func(a, b sent) int { return a.at.Compare(b.at) })
	const slack = 15 * time.Millisecond // Redis's clock against ours, and scheduling
	for i, s := range out {
		// The guard: the request count+i went at least a window after i.
		if i+count < len(out) {
			assert.GreaterOrEqual(t, out[i+count].at.Sub(s.at), window-slack, "more than %d in a window at %d", count, i)
		}
		assert.False(t, s.at.Before(s.slot.Start.Add(-slack)), "sent %v before its window", s.slot.Start.Sub(s.at))
		assert.False(t, s.at.After(s.slot.End.Add(slack)), "sent %v after its window", s.at.Sub(s.slot.End))
	}
}

// With Redis unreachable, a group is guarded locally with the fallback
// share of its Count, held for one window at the switch: what the other
// processes sent through Redis before is unknown.
func TestGroupFallbackShare(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, Config{Namespace: Namespace("tok-gfb"), Share: 0.25})
	srv.Kill()
	g := ratelimit.SharedGroup{Key: "member_roles|guild_id=1", Count: 10, Window: time.Second}
	ctx := context.Background()
	_, err := s.ReserveGroups(ctx, time.Now(), "0", 0, []ratelimit.SharedGroup{g})
	require.Error(t, err, "no schedule without Redis")
	assert.Equal(t, Fallback, s.Mode())

	now := time.Now()
	reserve := func(i int, at time.Time) ratelimit.SharedGrant {
		r := groupRequest(i, strconv.Itoa(i), g)
		r.Now = at
		return s.Reserve(ctx, r)
	}
	first := reserve(0, now)
	assert.False(t, first.OK, "nothing is sent in the hold at the switch, nor in the group's window under way")

	// Past the hold at the switch (Store.silence, over a window): a
	// quarter of 10 (2), held one window after their answers.
	at := now.Add(3 * time.Second)
	var granted []ratelimit.SharedGrant
	for i := 1; i <= 5; i++ {
		if gr := reserve(i, at); gr.OK {
			granted = append(granted, gr)
		}
	}
	require.Len(t, granted, 2, "a quarter of 10")
	for _, gr := range granted {
		s.Report(ctx, gr, ratelimit.SharedAnswer{Now: at, Sent: true, Status: 204})
	}
	assert.False(t, reserve(6, at.Add(time.Second/2)).OK, "held a window after the answers")
	gr := reserve(7, at.Add(time.Second+time.Millisecond))
	assert.True(t, gr.OK, "free again a window after")
	s.Report(ctx, gr, ratelimit.SharedAnswer{Now: at, Sent: false})
	assert.True(t, reserve(8, at.Add(time.Second+2*time.Millisecond)).OK, "a slot never used is given back")
}

// A window's start is counted from when the script ran, not from the now
// the caller read before its call waited (for a connection, behind other
// commands): a caller whose now is a second old still gets the first
// window opening now, not a second ago, so its request is not sent early.
func TestGroupWindowsCountFromTheReply(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, Config{})
	g := []ratelimit.SharedGroup{{Key: "member_roles|guild_id=1", Count: 1, Window: 300 * time.Millisecond}}
	stale := time.Now().Add(-time.Second)
	slots, err := s.ReserveGroups(context.Background(), stale, "1", 0, g)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), slots[0].Start, 50*time.Millisecond)
	second, err := s.ReserveGroups(context.Background(), stale, "2", 0, g)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, second[0].Start.Sub(time.Now()), 250*time.Millisecond, "the next window, one window on")
	est, found, err := s.EstimateGroups(context.Background(), stale, "2", g)
	require.NoError(t, err)
	require.True(t, found[0])
	assert.WithinDuration(t, second[0].Start, est[0].Start, 5*time.Millisecond)
}

// GroupStates reads, in one round trip and without changing them, each
// group's waiting reservations and held guard slots, every process's
// requests together: a place released stops waiting, a slot taken is
// held until one window after its answer, a group never used is empty.
// An ended ctx is no outage; while the store counts locally, Redis is
// not asked.
func TestGroupStates(t *testing.T) {
	srv := redistest.Start(t)
	ns := Namespace("tok-states")
	opt, err := redis.ParseURL(srv.URL)
	require.NoError(t, err)
	opt.ContextTimeoutEnabled = true // the store uses it as it is, hooks and all
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	calls := &scriptCalls{sha: liveScripts.groupState.Hash()}
	rdb.AddHook(calls)
	a, err := New(rdb, Config{Namespace: ns, Heartbeat: time.Hour}) // no heartbeat notices the kill below
	require.NoError(t, err)
	defer a.Close()
	b := newStore(t, srv, Config{Namespace: ns})
	const window = 300 * time.Millisecond
	g := ratelimit.SharedGroup{Key: "member_roles|guild_id=1", Count: 2, Window: window}
	other := ratelimit.SharedGroup{Key: "member_roles|guild_id=2", Count: 2, Window: window}
	ctx := context.Background()
	states := func() []ratelimit.SharedGroupState {
		t.Helper()
		before := calls.n.Load()
		st, err := a.GroupStates(ctx, []ratelimit.SharedGroup{g, other})
		require.NoError(t, err)
		assert.Equal(t, int64(1), calls.n.Load()-before, "one round trip for every group")
		return st
	}
	_, err = a.GroupStates(ctx, []ratelimit.SharedGroup{g}) // loads the script (EVAL after EVALSHA)
	require.NoError(t, err)

	// Five places, in two processes: three windows.
	for i := range 5 {
		st := []*Store{a, b}[i%2]
		_, err := st.ReserveGroups(ctx, time.Now(), strconv.Itoa(i), 0, []ratelimit.SharedGroup{g})
		require.NoError(t, err)
	}
	assert.Equal(t, []ratelimit.SharedGroupState{{Waiting: 5}, {}}, states())

	// The first window's two take their slots (one in each process): no
	// longer waiting, held while in flight and one window after the answer.
	var granted []ratelimit.SharedGrant
	for i := range 2 {
		st := []*Store{a, b}[i%2]
		gr := st.Reserve(ctx, groupRequest(i, strconv.Itoa(i), g))
		require.True(t, gr.OK, "%d: %+v", i, gr)
		granted = append(granted, gr)
	}
	assert.Equal(t, []ratelimit.SharedGroupState{{Waiting: 3, Held: 2}, {}}, states())
	ans := answer(5, 4, time.Second, "")
	ans.Template, ans.Major = "GET /x/{id}", "id=0"
	a.Report(ctx, granted[0], ans)
	answered := time.Now()
	assert.Equal(t, []ratelimit.SharedGroupState{{Waiting: 3, Held: 2}, {}}, states(), "held after its answer")

	// A released place stops waiting (released in the background: Close
	// waits for it).
	rb := newStore(t, srv, Config{Namespace: ns})
	_, err = rb.ReserveGroups(ctx, time.Now(), "r", 0, []ratelimit.SharedGroup{other})
	require.NoError(t, err)
	assert.Equal(t, []ratelimit.SharedGroupState{{Waiting: 3, Held: 2}, {Waiting: 1}}, states())
	rb.ReleaseGroups("r", []ratelimit.SharedGroup{other})
	require.NoError(t, rb.Close())
	assert.Equal(t, []ratelimit.SharedGroupState{{Waiting: 3, Held: 2}, {}}, states())

	// The answered slot frees one window after its answer; the one in
	// flight stays held. Redis's clock decides: read after the window.
	<-time.After(time.Until(answered.Add(window + 20*time.Millisecond)))
	assert.Equal(t, []ratelimit.SharedGroupState{{Waiting: 3, Held: 1}, {}}, states())

	// A ctx that ended fails the read, and is no outage.
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err = a.GroupStates(done, []ratelimit.SharedGroup{g})
	require.Error(t, err)
	assert.Equal(t, Shared, a.Mode())
	assert.Zero(t, a.Stats().Outages)

	// Redis gone: the failed read is counted, and switches nothing (a
	// snapshot only observes); once a request's call has switched the
	// store to counting locally, Redis is not asked.
	srv.Kill()
	errs := a.Stats().Errors
	_, err = a.GroupStates(ctx, []ratelimit.SharedGroup{g})
	require.Error(t, err)
	assert.Equal(t, errs+1, a.Stats().Errors)
	assert.Zero(t, a.Stats().Outages, "a failed read is no outage")
	_, err = a.ReserveGroups(ctx, time.Now(), "9", 0, []ratelimit.SharedGroup{g})
	require.Error(t, err)
	require.Equal(t, Fallback, a.Mode())
	before := calls.n.Load()
	_, err = a.GroupStates(ctx, []ratelimit.SharedGroup{g})
	require.ErrorIs(t, err, errGroupsLocal)
	assert.Equal(t, before, calls.n.Load(), "no call to Redis while counting locally")
}

// scriptCalls counts the calls of one script (by its SHA), whatever
// else the client sends (heartbeats, other scripts).
type scriptCalls struct {
	sha string
	n   atomic.Int64
}

func (c *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "evalsha" && len(args) > 1 && args[1] == c.sha {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// BenchmarkGroupReservation measures what a declared group in Redis costs
// one request on a real redis-server over a unix socket: its place
// reserved when it is submitted (ReserveGroups, on the caller's path),
// and with the estimate Future.ETA asks (EstimateGroups) and the release
// of a place never taken (ReleaseGroups, in the background: waited for
// here, so its round trip is in the figure). One group, one request
// waiting at a time. It counts the round trips.
func BenchmarkGroupReservation(b *testing.B) {
	s := newStore(b, redistest.Start(b), Config{Namespace: Namespace("bench-groups"), Heartbeat: time.Hour})
	rdb := s.rdb
	ctx := context.Background()
	g := []ratelimit.SharedGroup{{Key: "member_roles|guild_id=1", Count: 10, Window: time.Hour}}
	calls := &countCalls{ends: make(chan struct{}, 1)}
	rdb.AddHook(calls)
	// release drops id's place and waits for the script's answer.
	release := func(id string) {
		want := calls.answered.Load() + 1
		s.ReleaseGroups(id, g)
		for calls.answered.Load() < want {
			<-calls.ends
		}
	}
	for _, warm := range []string{"w1", "w2"} { // loads the scripts
		_, err := s.ReserveGroups(ctx, time.Now(), warm, 0, g)
		require.NoError(b, err)
		_, _, err = s.EstimateGroups(ctx, time.Now(), warm, g)
		require.NoError(b, err)
		release(warm)
	}
	run := func(b *testing.B, all bool) {
		var trips int64
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			id := strconv.Itoa(i)
			before := calls.n.Load()
			if _, err := s.ReserveGroups(ctx, time.Now(), id, 0, g); err != nil {
				b.Fatal(err)
			}
			if !all {
				trips += calls.n.Load() - before
				b.StopTimer()
				release(id)
				b.StartTimer()
				continue
			}
			if _, found, err := s.EstimateGroups(ctx, time.Now(), id, g); err != nil || !found[0] {
				b.Fatalf("estimate: %v, found %v", err, found)
			}
			release(id)
			trips += calls.n.Load() - before
		}
		b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/op")
	}
	b.Run("ping", func(b *testing.B) { benchPing(b, rdb) })
	b.Run("reserve", func(b *testing.B) { run(b, false) })
	b.Run("reserve+estimate+release", func(b *testing.B) { run(b, true) })
}

// BenchmarkGroupStates measures Snapshot's read of the groups this
// process used (GroupStates), in one round trip: 1 group, and 256 (the
// most a limiter remembers), each with a request waiting.
func BenchmarkGroupStates(b *testing.B) {
	s := newStore(b, redistest.Start(b), Config{Namespace: Namespace("bench-states"), Heartbeat: time.Hour})
	rdb := s.rdb
	ctx := context.Background()
	gs := make([]ratelimit.SharedGroup, 256)
	for i := range gs {
		gs[i] = ratelimit.SharedGroup{Key: "member_roles|guild_id=" + strconv.Itoa(i), Count: 10, Window: time.Hour}
		_, err := s.ReserveGroups(ctx, time.Now(), "r"+strconv.Itoa(i), 0, gs[i:i+1])
		require.NoError(b, err)
	}
	_, err := s.GroupStates(ctx, gs[:1]) // loads the script
	require.NoError(b, err)
	calls := &countCalls{}
	rdb.AddHook(calls)
	for _, n := range []int{1, 256} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			before := calls.n.Load()
			for b.Loop() {
				st, err := s.GroupStates(ctx, gs[:n])
				if err != nil || st[n-1].Waiting != 1 {
					b.Fatalf("states: %v, %+v", err, st)
				}
			}
			b.ReportMetric(float64(calls.n.Load()-before)/float64(b.N), "roundtrips/op")
		})
	}
}

// A request in two groups that the second holds back has reserved in the
// first already: the first group's keys, made by that reservation, expire
// like every group's (they were left without a TTL).
func TestGroupKeysExpireWhenALaterGroupHolds(t *testing.T) {
	srv := redistest.Start(t)
	ns := Namespace("tok-two-groups")
	s := newStore(t, srv, Config{Namespace: ns})
	ctx := context.Background()
	first := ratelimit.SharedGroup{Key: "renames|channel_id=1", Count: 5, Window: time.Second}
	second := ratelimit.SharedGroup{Key: "dms|", Count: 1, Window: time.Minute}
	_, err := s.ReserveGroups(ctx, time.Now(), "a", 0, []ratelimit.SharedGroup{second}) // the second's only place in its first window
	require.NoError(t, err)

	r := groupRequest(1, "b", first)
	r.Groups = []ratelimit.SharedGroup{first, second}
	g := s.Reserve(ctx, r)
	require.False(t, g.OK)
	assert.Equal(t, "declared", g.Scope)
	assert.Greater(t, g.Wait, 50*time.Second, "b waits for the second group's next window")

	rdb := srv.Client(t)
	D := ns + ":d:" + first.Key
	keys, err := rdb.Keys(ctx, D+":*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys, "b reserved in the first group")
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, "%s expires", k)
	}
}
