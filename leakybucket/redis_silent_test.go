package leakybucket

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestRedisSilentConnection: connections already open and pooled go silent
// (a network partition: the relay drops every byte, closes nothing), with a
// client of go-redis's default settings (ReadTimeout 5 s, 3 retries,
// context deadlines not honoured on sockets) and with one that honours
// them. Each check must still end within Timeout, decided by the policy,
// from one goroutine or many, and the store must use Redis again once the
// partition heals.
func TestRedisSilentConnection(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  func(*redis.Options)
	}{
		{"default client", func(*redis.Options) {}},
		{"ContextTimeoutEnabled", func(o *redis.Options) { o.ContextTimeoutEnabled = true }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := redistest.Start(t)
			relay := redistest.NewRelay(t, s.Socket)
			opt, err := redis.ParseURL(relay.URL)
			if err != nil {
				t.Fatal(err)
			}
			c.opt(opt)
			client := redis.NewClient(opt)
			defer client.Close()
			lim := Limit{Name: "api", Size: 1000, DripRate: time.Millisecond}
			closed, _ := NewRedis(client, RedisOptions{})
			open, _ := NewRedis(client, RedisOptions{OnUnavailable: FailOpen})
			ctx := context.Background()
			// Open and pool a few connections through the relay.
			errs := make(chan error, 8)
			for range 8 {
				go func() { _, err := closed.Check(ctx, "warm", lim); errs <- err }()
			}
			for range 8 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}

			relay.BlackHole()
			type outcome struct {
				res  Result
				err  error
				took time.Duration
			}
			results := make(chan outcome, 16)
			for i := range 16 {
				go func() {
					store := closed
					if i%2 == 1 {
						store = open
					}
					began := time.Now()
					res, err := store.Check(ctx, "k", lim)
					results <- outcome{res, err, time.Since(began)}
				}()
			}
			for range 16 {
				o := <-results
				var uerr *UnavailableError
				if !errors.As(o.err, &uerr) || o.took > DefaultTimeout+400*time.Millisecond {
					t.Fatalf("a check through a silent connection: %+v %v after %v", o.res, o.err, o.took)
				}
				if o.res.Blocked != (uerr.Policy == FailClosed) {
					t.Fatalf("%v decided %+v", uerr.Policy, o.res)
				}
			}

			relay.Heal()
			// The connections cut by the timeouts were dropped; new ones
			// go through.
			if res, err := closed.Check(ctx, "after", lim); err != nil || res.Blocked {
				t.Fatalf("after the partition: %+v %v", res, err)
			}
		})
	}
}
