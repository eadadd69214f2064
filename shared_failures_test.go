package sluice_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// The failures a shared Redis really has, met by 4 OS processes on one
// token under load (TestSharedChild), judged by the simulator: a Redis that
// loses its data, freezes, is cut off from one process, or evicts (and the
// API's connections dropping under the processes' feet). In each,
// no request draws a user or a global 429 (the hold after a loss costs
// time, never a 429), every request gets its one outcome, and every
// process's Close ends by its deadline.

func init() {
	// 20 channels every process uses (5 per 500 ms each: 200/s in all),
	// under a global 200/s: both bind. 2,000 requests, about 10 s.
	sharedScenarios["failures"] = sharedScenario{
		rules: sharedRules(5, 500*time.Millisecond,
			sluicetest.Rule{Name: "messages", Method: "GET", Route: "/channels/{channel_id}/messages", Bucket: "msgs"}),
		paths: func(p, w int) []string {
			out := make([]string, 5)
			for i := range out {
				out[i] = "/channels/" + strconv.Itoa(7000+(w+7*i+p)%20) + "/messages"
			}
			return out
		},
	}
}

// sharedFailure is a fault injected while the "failures" load runs.
type sharedFailure struct {
	name string
	// args are the redis-server's own (maxmemory, policy).
	args []string
	// faults are the simulator's (dropped connections).
	faults sluicetest.Faults
	// start is called before the load, with the server; it returns the
	// Redis URL of each process (nil: all on the server) and a function
	// called with the number of outcomes so far. The fault marks end when
	// Redis answers again (none for a lasting one).
	start func(t *testing.T, rs *redistest.Server, end *faultEnd) (urls []string, progress func(n int))
}

// faultEnd is when a fault ended: Redis answers again.
type faultEnd struct {
	mu sync.Mutex
	at time.Time
}

func (f *faultEnd) mark() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = time.Now()
}

func (f *faultEnd) get() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at
}

// recovery is how long after end the simulator first saw a second with at
// least share of rate requests in it (0 and false if it never did), from
// the answers' times in st (since the server started at began).
func recovery(st sluicetest.Stats, began, end time.Time, rate int, share float64) (time.Duration, bool) {
	var at []time.Duration
	for _, b := range st.Buckets {
		for _, e := range b.Timeline {
			at = append(at, e.At)
		}
	}
	slices.Sort(at)
	from := end.Sub(began)
	j := 0
	for i, a := range at {
		if a < from {
			continue
		}
		for j < len(at) && at[j] < a+time.Second {
			j++
		}
		if float64(j-i) >= share*float64(rate) {
			return a - from, true
		}
	}
	return 0, false
}

// at returns a progress function that calls f once, when n outcomes came.
func at(n int, f func()) func(int) {
	var once sync.Once
	return func(got int) {
		if got >= n {
			once.Do(f)
		}
	}
}

func sharedFailures() []sharedFailure {
	return []sharedFailure{
		{name: "flushall", start: func(t *testing.T, rs *redistest.Server, end *faultEnd) ([]string, func(int)) {
			// A FLUSHALL (or a failover to an empty replica) twice under
			// load: go-redis sees no error, only empty state.
			first, second := at(500, func() { rs.FlushAll(t) }), at(1200, func() { rs.FlushAll(t); end.mark() })
			return nil, func(n int) { first(n); second(n) }
		}},
		{name: "restart-empty", start: func(t *testing.T, rs *redistest.Server, end *faultEnd) ([]string, func(int)) {
			// Redis restarts without persistence: its connections drop and
			// it comes back empty at once.
			return nil, at(500, func() { rs.Restart(t); end.mark() })
		}},
		{name: "freeze", start: func(t *testing.T, rs *redistest.Server, end *faultEnd) ([]string, func(int)) {
			// Redis stops for 3 s (a fork for a snapshot, a VM stall): every
			// command queues, and runs when it resumes.
			return nil, at(500, func() {
				rs.Pause()
				time.AfterFunc(3*time.Second, func() { rs.Resume(); end.mark() })
			})
		}},
		{name: "cut-off", start: func(t *testing.T, rs *redistest.Server, end *faultEnd) ([]string, func(int)) {
			// One process's connections are black-holed for 6 s (a
			// partition: packets vanish, nothing is closed); the others
			// keep Redis. Long enough for it to send on its share (past
			// the hold at the switch and a period), so that its return
			// has grants on the share that may still count.
			relay := redistest.NewRelay(t, rs.Socket)
			urls := []string{relay.URL, rs.URL, rs.URL, rs.URL}
			return urls, at(500, func() {
				relay.BlackHole()
				time.AfterFunc(6*time.Second, func() { relay.Heal(); end.mark() })
			})
		}},
		{name: "dropped-connections", faults: sluicetest.Faults{DropRate: 0.02, GoAwayRate: 0.01},
			start: func(t *testing.T, rs *redistest.Server, _ *faultEnd) ([]string, func(int)) {
				// Not Redis's failure: the API's connections drop under
				// load (2% of requests lost with their connection after
				// Discord counted them, 1% of answers followed by GOAWAY).
				// A lost answer's reservation is settled at once by its
				// process (counted in its window, its lease released), so
				// its bucket is not held until the lease expires: the load
				// takes about as long as without drops.
				return nil, nil
			}},
		{name: "evicting", args: []string{"--maxmemory", evictMaxMemory(), "--maxmemory-policy", evictPolicy()},
			start: func(t *testing.T, rs *redistest.Server, _ *faultEnd) ([]string, func(int)) {
				// A Redis shared with a cache at its maxmemory: another
				// application writes keys with an expiry all along (500
				// 2 KiB values a second), and Redis evicts keys, some of
				// them Sluice's.
				logEvictions(t, rs)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				c := rs.Client(t)
				junk := strings.Repeat("x", 2048)
				// Filled to its maxmemory first: evicting from the start.
				for i := 0; ; i++ {
					pipe := c.Pipeline()
					for j := range 500 {
						pipe.Set(ctx, "cache:"+strconv.Itoa(i*500+j), junk, time.Hour)
					}
					_, err := pipe.Exec(ctx)
					require.NoError(t, err)
					info, err := c.Info(ctx, "stats").Result()
					require.NoError(t, err)
					if !strings.Contains(info, "evicted_keys:0\r") {
						break
					}
				}
				go func() {
					defer close(done)
					tick := time.NewTicker(10 * time.Millisecond)
					defer tick.Stop()
					for i := 0; ; i++ {
						select {
						case <-ctx.Done():
							return
						case <-tick.C:
						}
						pipe := c.Pipeline()
						for j := range evictRate() / 100 {
							pipe.Set(ctx, "cache:"+strconv.Itoa((i*100+j)%50000), junk, time.Hour)
						}
						_, _ = pipe.Exec(ctx)
					}
				}()
				t.Cleanup(func() { cancel(); <-done })
				return nil, nil
			}},
	}
}

// The evicting Redis: its maxmemory, its policy and how many keys a second
// the cache beside Sluice writes (SLUICE_EVICT_MEM, SLUICE_EVICT_POLICY,
// SLUICE_EVICT_RATE override them, to try others). A random policy evicts
// Sluice's keys in use at a steady pace (measured on 2026-11-27: 2-7
// losses found per process in 10 s; the code at 7039bdb drew a user 429,
// and at 31114c9 one in 3 runs of 8); an LRU policy with this much memory never evicts them at all, and
// with too little memory for the clients' buffers it evicts everything
// within a second, and the shared limits hold (0 429s) at a fraction of
// the pace (docs/scale-out.md, "When Redis loses state").
func evictMaxMemory() string { return envOr("SLUICE_EVICT_MEM", "16mb") }
func evictPolicy() string    { return envOr("SLUICE_EVICT_POLICY", "volatile-random") }
func evictRate() int         { n, _ := strconv.Atoi(envOr("SLUICE_EVICT_RATE", "500")); return n }
func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

func TestSharedLimitsSurviveRedisFailures(t *testing.T) {
	for _, f := range sharedFailures() {
		t.Run(f.name, func(t *testing.T) {
			rs := redistest.StartWith(t, f.args...)
			sc := sharedScenarios["failures"]
			serverStart := time.Now() // (the simulator's times are since its start)
			srv, err := sluicetest.NewServer(sluicetest.Options{H2C: true, Rules: sc.rules, Faults: f.faults})
			require.NoError(t, err)
			defer srv.Close()
			var end faultEnd
			urls, progress := f.start(t, rs, &end)
			if urls == nil {
				urls = []string{rs.URL, rs.URL, rs.URL, rs.URL}
			}
			began := time.Now()
			res := runSharedURLs(t, "failures", srv.APIBase(), urls, 1.0/sharedProcesses, func(n int) {
				if progress != nil {
					progress(n)
				}
			})
			took := time.Since(began)
			ok := 0
			for i, r := range res {
				ok += r.OK
				assert.Zero(t, r.Failed, "process %d errors: %v", i, r.Errors)
				assert.LessOrEqual(t, r.Close, r.CloseDeadline+100*time.Millisecond, "process %d: Close by its deadline", i)
			}
			assert.Equal(t, 2000, ok, "every request has its outcome")
			st := srv.Stats()
			assert.Zero(t, st.ClientUser429s(), "user 429s")
			assert.Zero(t, st.ClientGlobal429s(), "global 429s")
			srv.AssertNoViolations(t)
			var shared []string
			for i, r := range res {
				shared = append(shared, fmt.Sprintf("p%d %+v close %v", i, r.Shared, r.Close.Round(time.Millisecond)))
			}
			back := "the fault lasts"
			if e := end.get(); !e.IsZero() {
				// Measured, not asserted (a wall-clock pace): the target is
				// 90% of the pace within the global period + 1 s (2 s) of
				// Redis answering again (docs/scale-out.md).
				if d, ok := recovery(st, serverStart, e, sharedGlobal, 0.9); ok {
					back = fmt.Sprintf("back to 90%% of the pace %v after Redis answered again", d.Round(10*time.Millisecond))
				} else {
					back = "never back to 90% of the pace after Redis answered again"
				}
			}
			// The answers per 250 ms, to see the pace around the fault
			// (shown with -v, or when the test fails).
			var quarters []int
			for _, b := range st.Buckets {
				for _, e := range b.Timeline {
					i := int(e.At / (250 * time.Millisecond))
					for len(quarters) <= i {
						quarters = append(quarters, 0)
					}
					quarters[i]++
				}
			}
			t.Logf("answers per 250 ms since the simulator started: %v", quarters)
			t.Logf("%s: 2000 requests in %v (10 s at the global limit); %s; %s\n%s", f.name, took.Round(time.Millisecond),
				back, st.Summary(), strings.Join(shared, "\n"))
			if t.Failed() {
				if info, err := rs.Client(t).Info(context.Background(), "errorstats", "stats").Result(); err == nil {
					t.Logf("Redis: %s", info)
				}
				if e := end.get(); !e.IsZero() {
					t.Logf("the fault ended at %v (simulator time)", e.Sub(serverStart).Round(time.Millisecond))
				}
				var arrivals []time.Duration // every answer's time, to show the global window at a 429
				for _, b := range st.Buckets {
					for _, e := range b.Timeline {
						arrivals = append(arrivals, e.At)
					}
				}
				slices.Sort(arrivals)
				perSecond := func(at time.Duration) (per [10]int) {
					for _, a := range arrivals {
						if a > at-time.Second && a <= at {
							per[int((a-(at-time.Second))/(100*time.Millisecond))%10]++
						}
					}
					return per
				}
				for _, g := range st.Globals {
					for _, r := range g.Refused {
						t.Logf("global 429 at %v; the second before it, per 100 ms: %v", r.D().Round(time.Millisecond), perSecond(r.D()))
					}
				}
				for _, b := range st.Buckets {
					for i, e := range b.Timeline {
						if e.Status == 429 {
							t.Logf("%s %s 429 at %v; the second before it, per 100 ms: %v", b.Key, e.Scope, e.At.Round(time.Millisecond), perSecond(e.At))
							for _, e := range b.Timeline[max(0, i-8) : i+1] {
								t.Logf("%s %v %d %d", b.Key, e.At.Round(time.Millisecond), e.Status, e.Remaining)
							}
						}
					}
				}
			}
		})
	}
}

// New fails when Redis refuses the client (a password it lacks, a wrong
// one) rather than running on a silent fallback share for good; with
// RedisFallbackOnRefusal it starts on the fallback share.
func TestNewFailsWhenRedisRefusesTheClient(t *testing.T) {
	rs := redistest.StartWith(t, "--requirepass", "right-password")
	srv, err := sluicetest.NewServer(sluicetest.Options{H2C: true})
	require.NoError(t, err)
	defer srv.Close()
	for _, pw := range []string{"", "wrong-password"} {
		opt, err := redis.ParseURL(rs.URL)
		require.NoError(t, err)
		opt.Password = pw
		rdb := redis.NewClient(opt)
		defer rdb.Close()
		opts := sluice.Options{BaseURL: srv.APIBase(), H2C: true, Token: testToken, Redis: rdb}
		_, err = sluice.New(opts)
		require.ErrorIs(t, err, redisstore.ErrRefused, "password %q", pw)
		assert.NotContains(t, err.Error(), "right-password")
		assert.NotContains(t, err.Error(), testToken)

		opts.RedisFallbackOnRefusal = true
		lim, err := sluice.New(opts)
		require.NoError(t, err)
		snap, err := lim.Snapshot(context.Background())
		require.NoError(t, err)
		require.NotNil(t, snap.Shared)
		assert.Equal(t, redisstore.Fallback, snap.Shared.Mode)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		require.NoError(t, lim.Close(ctx))
		cancel()
	}
}

// logEvictions logs, when t fails, which of Sluice's keys Redis evicted and
// when (since the load began, near the simulator's time): Redis tells each
// eviction (notify-keyspace-events Ee).
func logEvictions(t *testing.T, rs *redistest.Server) {
	c := rs.Client(t)
	ctx := context.Background()
	require.NoError(t, c.ConfigSet(ctx, "notify-keyspace-events", "Ee").Err())
	sub := c.Subscribe(ctx, "__keyevent@0__:evicted")
	_, err := sub.Receive(ctx) // subscribed
	require.NoError(t, err)
	began := time.Now()
	var mu sync.Mutex
	var evicted []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range sub.Channel() {
			if strings.HasPrefix(m.Payload, "{sluice") && len(evicted) < 1000 {
				mu.Lock()
				evicted = append(evicted, fmt.Sprintf("%v %s", time.Since(began).Round(time.Millisecond), m.Payload))
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		sub.Close()
		<-done
		if t.Failed() {
			mu.Lock()
			t.Logf("Sluice's keys evicted:\n%s", strings.Join(evicted, "\n"))
			mu.Unlock()
		}
	})
}
