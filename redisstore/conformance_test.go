package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/conformance"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/ratelimit"
)

// conformanceRequest is a request on the table's bucket, with a global slot.
func conformanceRequest(now time.Time) ratelimit.SharedRequest {
	r := request()
	r.Now, r.Hash = now, conformance.BucketHash
	return r
}

// conformanceAnswer is row c's answer to a request sent at sent.
func conformanceAnswer(c conformance.OutcomeCase, sent, now time.Time) ratelimit.SharedAnswer {
	a := c.Attempt(now)
	return ratelimit.SharedAnswer{Now: now, Sent: a.Sent, Status: a.Status, Headers: a.Headers, Verdict: a.Verdict,
		RoundTrip: now.Sub(sent), Template: request().Template, Major: request().Major}
}

// TestOutcomeConformanceRedis runs the outcome table on the report script,
// against a real redis-server: after each row's answer, the shared count
// holds what the outcome says — the bucket's slot and the global slot kept
// or given back (Charge), the bucket paused for the verdict's wait and
// made serial, or the global window blocked (Pause), and the invalid
// answer counted (Invalid). (Next is the caller's: Report does not see
// the retry budgets.)
func TestOutcomeConformanceRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for i, c := range conformance.Outcomes {
		t.Run(c.Name, func(t *testing.T) {
			s := newStore(t, srv, Config{Namespace: Namespace("conformance-" + strconv.Itoa(i)), GlobalLimit: 50, Heartbeat: time.Hour})
			P := s.ns
			// The bucket becomes known from a pioneer's answer: 5 per
			// window, 4 left.
			now := time.Now()
			p := s.Reserve(ctx, conformanceRequest(now))
			require.True(t, p.OK)
			seed := answer(conformance.BucketLimit, conformance.BucketLimit-1, conformance.Period, conformance.BucketHash)
			s.Report(ctx, p, seed)

			g := s.Reserve(ctx, conformanceRequest(time.Now()))
			require.True(t, g.OK, "a second request in the known window")
			require.True(t, g.Global)
			B := P + ":b:" + g.Key
			used := func() int {
				u, err := s.rdb.HGet(ctx, B, "u").Int()
				require.NoError(t, err)
				return u
			}
			require.Equal(t, 2, used(), "the pioneer's and this one")
			lease := splitLease(g.Lease)
			require.NotEmpty(t, lease)

			sent := time.Now()
			s.Report(ctx, g, conformanceAnswer(c, sent, time.Now()))
			tm, err := s.rdb.Time(ctx).Result()
			require.NoError(t, err)
			redisNow := tm.UnixMilli()

			// Charge: the bucket's slot, and the global slot with it.
			_, err = s.rdb.ZScore(ctx, P+":g", lease).Result()
			if c.Want.Counted() {
				assert.GreaterOrEqual(t, used(), 2, "counted: the slot stays used")
				assert.NoError(t, err, "counted: the global slot is held a period from the answer")
			} else {
				assert.Equal(t, 1, used(), "not counted: the slot is given back")
				assert.Error(t, err, "not counted: the global slot is given back")
			}

			// Pause.
			pausedUntil, _ := s.rdb.HGet(ctx, B, "p").Int64()
			serial, _ := s.rdb.HGet(ctx, B, "z").Result()
			blockedUntil, _ := s.rdb.HGet(ctx, P+":gen", "b").Int64()
			switch c.Want.Pause {
			case ratelimit.PauseBucket, ratelimit.PauseSerial:
				left := time.Duration(pausedUntil-redisNow) * time.Millisecond
				assert.InDelta(t, float64(c.Want.Wait), float64(left), float64(time.Second), "the bucket is paused for the verdict's wait")
			default:
				assert.LessOrEqual(t, pausedUntil, redisNow, "the bucket is not paused")
			}
			assert.Equal(t, c.Want.Pause == ratelimit.PauseSerial, serial == "1", "serial from now on")
			if c.Want.Pause == ratelimit.PauseGlobal {
				left := time.Duration(blockedUntil-redisNow) * time.Millisecond
				assert.InDelta(t, float64(c.Want.Wait), float64(left), float64(time.Second), "the global window is blocked for the verdict's wait")
			} else {
				assert.LessOrEqual(t, blockedUntil, redisNow, "the global window is not blocked")
			}

			// Invalid.
			keys, err := s.rdb.Keys(ctx, P+":i:*").Result()
			require.NoError(t, err)
			invalid := 0
			for _, k := range keys {
				n, _ := s.rdb.Get(ctx, k).Int()
				invalid += n
			}
			assert.Equal(t, b2i(c.Want.Invalid), invalid, "counted against the invalid-request limit")
		})
	}
}

// TestOutcomeConformanceFallback runs the outcome table on the fallback
// share, which counts in this process while Redis is unreachable: its
// global window holds or gives back the slot, and is blocked, and its
// bucket counts the request or gives its turn back, as the outcome says.
func TestOutcomeConformanceFallback(t *testing.T) {
	for _, c := range conformance.Outcomes {
		t.Run(c.Name, func(t *testing.T) {
			f := newFallback(1, time.Second, 0, func() float64 { return 1 })
			now := time.Unix(1_700_000_000, 0)
			var local ratelimit.Bucket
			local.Observe(now, now, ratelimit.Headers{Limit: conformance.BucketLimit, Remaining: conformance.BucketLimit - 1,
				ResetAfter: conformance.Period, Has: ratelimit.Present{Limit: true, Remaining: true, ResetAfter: true}})
			r := conformanceRequest(now)
			r.Local, r.Window = local, conformance.Period
			g := f.reserve(r)
			require.True(t, g.OK, "%+v", g)
			require.True(t, g.Global)
			key, _ := parseGrantKey(g.Key)

			at := now.Add(20 * time.Millisecond)
			a := conformanceAnswer(c, now, at)
			a.Headers.Reset = at.Add(conformance.Period) // the window's identity (Discord sends it with the others)
			a.Headers.Has.Reset = a.Headers.Has.ResetAfter
			f.report(ratelimit.SharedGrant{Key: g.Key, Global: true}, a, false)

			// Charge: the global slot (a limit of 1: a held slot refuses
			// the next), and the bucket's count.
			after := at.Add(time.Millisecond)
			blocked := f.global.Blocked(after) > 0
			if !blocked {
				ok, _ := f.global.Reserve(after)
				assert.Equal(t, !c.Want.Counted(), ok, "the global slot given back only when not counted")
			}
			w := f.buckets[key]
			require.NotNil(t, w)
			assert.Equal(t, 0, w.inflight)
			if c.Want.Counted() {
				assert.False(t, w.next.Equal(w.prevNext) && w.used == 0 && w.ends.IsZero(), "counted: the bucket keeps it")
			} else {
				assert.Equal(t, 0, w.used, "not counted: nothing used")
				assert.Equal(t, w.prevNext, w.next, "not counted: its turn goes to the next request")
			}
			// Pause: only the global one is the fallback's (the bucket's
			// own pause is the caller's Bucket, in front of it).
			assert.Equal(t, c.Want.Pause == ratelimit.PauseGlobal, blocked, "the global window blocked")
			if blocked {
				assert.Equal(t, c.Want.Wait, f.global.Blocked(at), "for the verdict's wait")
			}
		})
	}
}
