package redisstore

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/conformance"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// fakeClockLua defines clockNow as the Unix ms a test wrote to the key
// "<namespace>:clock": the scripts' one clock, driven by the test.
const fakeClockLua = `local function clockNow()
  local v = redis.call('GET', KEYS[1] .. ':clock')
  if not v then
    error('redisstore test: no clock set at ' .. KEYS[1] .. ':clock')
  end
  return tonumber(v)
end
`

// fakeClockScripts run on the clock a test sets (fakeClockLua).
var fakeClockScripts = compileScripts(fakeClockLua)

// fakeClock is one clock for a store and the scripts it runs.
type fakeClock struct {
	t    testing.TB
	rdb  *redis.Client
	ns   string
	unix atomic.Int64 // ns
}

// set moves the clock to now, in the store and in Redis.
func (c *fakeClock) set(now time.Time) {
	c.unix.Store(now.UnixNano())
	require.NoError(c.t, c.rdb.Set(context.Background(), c.ns+":clock", now.UnixMilli(), 0).Err())
}

func (c *fakeClock) now() time.Time { return time.Unix(0, c.unix.Load()) }

// newClockedStore opens a store whose scripts and Config.Clock run on one
// fake clock, set to start. (A reservation's deadline is its call's
// timeout from Redis's clock, as the store measured it against the local
// one: a minute, longer than any row.)
func newClockedStore(t testing.TB, srv *redistest.Server, ns string, start time.Time) (*Store, *fakeClock) {
	c := &fakeClock{t: t, rdb: srv.Client(t), ns: ns}
	c.set(start)
	s, err := open(srv.Client(t), Config{Namespace: ns, GlobalLimit: 50, Heartbeat: time.Hour, Timeout: time.Minute,
		Clock: c.now}, fakeClockScripts)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, c
}

// TestWindowsRedis runs the window table on the shared store's scripts,
// against a real redis-server on a clock the test drives: one process,
// each request reserved (its bucket only) and its answer reported, with
// nothing the process's own bucket knows (SharedRequest.Local is empty).
func TestWindowsRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	start := time.Unix(1_700_000_000, 0)
	const template, major = "GET /channels/{channel_id}/messages", "channel_id=1"
	for i, c := range conformance.Windows {
		t.Run(c.Name, func(t *testing.T) {
			s, clock := newClockedStore(t, srv, Namespace("windows-"+strconv.Itoa(i)), start)
			var grants []ratelimit.SharedGrant
			var sent []time.Time
			hash := "" // what the process learned, as a bucket actor does (BucketStore.Alias)
			for j, st := range c.Steps {
				now := start.Add(st.At)
				clock.set(now)
				if a := st.Answer; a != nil {
					h := a.Headers(start)
					s.Report(ctx, grants[a.To], ratelimit.SharedAnswer{Now: now, Sent: !a.Unsent, Status: a.Status, Headers: h,
						Verdict: ratelimit.Classify(a.Status, h, nil), RoundTrip: now.Sub(sent[a.To]),
						Template: template, Major: major})
					require.Zero(t, s.Stats().Owed, "step %d: the report was made", j)
					if h.Has.Bucket {
						hash = h.Bucket
					}
					continue
				}
				got := 0
				for range st.Send {
					g := s.Reserve(ctx, ratelimit.SharedRequest{Now: now, Route: template + " " + major,
						Template: template, Major: major, Hash: hash})
					require.False(t, g.Local, "step %d: counted in Redis", j)
					if g.OK {
						got++
						grants, sent = append(grants, g), append(sent, now)
					}
				}
				if got != st.Granted {
					t.Fatalf("step %d (%v): %d of %d requests went, want %d; bucket %v", j, st.At, got, st.Send, st.Granted,
						srv.Client(t).HGetAll(ctx, s.ns+":b:bucket "+conformance.BucketHash+" "+major).Val())
				}
			}
		})
	}
}
