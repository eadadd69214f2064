package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/sluicehq/sluice/leakybucket"
)

// redisKeys is how many keys the Redis benchmarks spread their checks over.
const redisKeys = 10_000

// keyNames are the keys of the benchmarks, built once.
var keyNames = func() []string {
	keys := make([]string, redisKeys)
	for i := range keys {
		keys[i] = "client-" + strconv.Itoa(i)
	}
	return keys
}()

// redisBenches returns the Redis benchmarks, each limiter with a client of
// its own, and a function that closes the clients.
func redisBenches(url string, pool int) ([]bench, func(), error) {
	var clients []*redis.Client
	closeAll := func() {
		for _, c := range clients {
			c.Close()
		}
	}
	client := func() (*redis.Client, error) {
		c, err := newClient(url, pool)
		if err == nil {
			clients = append(clients, c)
		}
		return c, err
	}
	fail := func(err error) ([]bench, func(), error) {
		closeAll()
		return nil, nil, err
	}

	// Limits no check reaches, under which every check writes its key and
	// the key outlives the round over the keys (about 1 s), as it does for
	// ulule's hour: a bucket of 2^20 that drains at once every second;
	// redis_rate's GCRA at 1,000 a second (its script then SETs the key
	// with EX 1 on every call; at a rate whose emission interval is below
	// the resolution of its float seconds, about 6e-8 s, it writes nothing
	// and limits nothing).
	lbLimit := leakybucket.Limit{Name: "api", Size: 1 << 20, DripRate: time.Second, DripSize: 1 << 20}
	var benches []bench
	for _, v := range []struct {
		name    string
		timeout time.Duration
	}{{"leakybucket", 0}, {"leakybucket-notimeout", -1}} {
		c, err := client()
		if err != nil {
			return fail(err)
		}
		store, err := leakybucket.NewRedis(c, leakybucket.RedisOptions{Timeout: v.timeout})
		if err != nil {
			return fail(err)
		}
		benches = append(benches, bench{"Redis", v.name, redisRun(c, func(ctx context.Context, key string) (bool, error) {
			_, err := store.Check(ctx, key, lbLimit)
			if errors.Is(err, leakybucket.ErrUnavailable) {
				return true, nil
			}
			return false, err
		})})
	}

	c, err := client()
	if err != nil {
		return fail(err)
	}
	rr := redis_rate.NewLimiter(c)
	rrLimit := redis_rate.Limit{Rate: 1000, Burst: 1 << 20, Period: time.Second}
	benches = append(benches, bench{"Redis", "redis_rate", redisRun(c, func(ctx context.Context, key string) (bool, error) {
		_, err := rr.Allow(ctx, key, rrLimit)
		return false, err
	})})

	c, err = client()
	if err != nil {
		return fail(err)
	}
	ulStore, err := ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "ulule", MaxRetry: limiter.DefaultMaxRetry})
	if err != nil {
		return fail(err)
	}
	ul := limiter.New(ulStore, limiter.Rate{Period: time.Hour, Limit: 1 << 40})
	benches = append(benches, bench{"Redis", "ulule", redisRun(c, func(ctx context.Context, key string) (bool, error) {
		_, err := ul.Get(ctx, key)
		return false, err
	})})
	return benches, closeAll, nil
}

// redisRun returns the run function of a Redis benchmark of check, whose
// client is c: it flushes Redis, warms one connection per goroutine, and
// measures b.N checks over the keys from the goroutines. check reports a
// refusal (a check its limiter could not decide in time) or an error.
func redisRun(c *redis.Client, check func(ctx context.Context, key string) (refused bool, err error)) func(*testing.B, int) error {
	return func(b *testing.B, goroutines int) error {
		ctx := context.Background()
		b.StopTimer()
		if err := c.FlushAll(ctx).Err(); err != nil {
			return err
		}
		if _, err := check(ctx, "warm"); err != nil {
			return err
		}
		before, err := scriptUsec(ctx, c)
		if err != nil {
			return err
		}
		b.StartTimer()
		var refused, failed atomic.Int64
		var firstErr atomic.Value
		began := time.Now()
		each := func(i uint64) {
			r, err := check(ctx, keyNames[i%redisKeys])
			if r {
				refused.Add(1)
			}
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
		}
		if goroutines == 1 {
			for i := range b.N {
				each(uint64(i) * 7919)
			}
		} else {
			var seq atomic.Uint64
			b.SetParallelism(max(1, goroutines/gomaxprocs()))
			b.RunParallel(func(pb *testing.PB) {
				i := seq.Add(1) * 104729
				for pb.Next() {
					i += 7919
					each(i)
				}
			})
		}
		elapsed := time.Since(began)
		b.StopTimer()
		after, err := scriptUsec(ctx, c)
		if err != nil {
			return err
		}
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
		b.ReportMetric((after-before)/float64(b.N), "redis-µs/op")
		b.ReportMetric(float64(refused.Load())/float64(b.N), "refused/op")
		b.ReportMetric(float64(failed.Load())/float64(b.N), "errors/op")
		// The keys the limiter holds at the end: 0 would mean it wrote
		// nothing (a limit it cannot represent).
		keys, err := c.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		b.ReportMetric(float64(keys), "keys")
		if failed.Load() > int64(b.N)/100 {
			return firstErr.Load().(error)
		}
		return nil
	}
}

// scriptUsec returns the microseconds Redis has spent running scripts
// (EVALSHA and EVAL in INFO commandstats) since its statistics were last
// reset.
func scriptUsec(ctx context.Context, c *redis.Client) (float64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var usec float64
	for line := range strings.Lines(info) {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for field := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(field, "usec="); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, err
				}
				usec += n
			}
		}
	}
	return usec, nil
}
