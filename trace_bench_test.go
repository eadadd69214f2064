package sluice_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// BenchmarkTrace measures what the message trace costs per request: off (the
// default: no middleware is installed) and on, with a callback that only
// counts events. Compare with benchstat:
//
//	go test -run '^$' -bench BenchmarkTrace -count 6 . | tee trace.txt
//	benchstat -col /trace trace.txt
func BenchmarkTrace(b *testing.B) {
	rs := sluicetest.RuleSet{GlobalLimit: 1_000_000, Rules: []sluicetest.Rule{{
		Name: "get", Method: "GET", Route: "/channels/{channel_id}", Bucket: "h",
		Limit: 1_000_000, Window: sluicetest.Duration(time.Second),
	}}}
	for _, on := range []bool{false, true} {
		name := "trace=off"
		if on {
			name = "trace=on"
		}
		b.Run(name, func(b *testing.B) {
			srv, err := sluicetest.NewServer(sluicetest.Options{Rules: rs, TimelineLimit: -1})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			var events atomic.Int64
			opts := sluice.Options{BaseURL: srv.APIBase(), Token: "bench", TLSConfig: srv.ClientTLSConfig(), GlobalLimit: 1_000_000}
			if on {
				opts.Trace = func(sluice.TraceEvent) { events.Add(1) }
			}
			lim, err := sluice.New(opts)
			if err != nil {
				b.Fatal(err)
			}
			defer lim.Close(context.Background())
			b.ReportAllocs()
			b.SetParallelism(8)
			var n atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					resp, err := lim.Do(context.Background(), req("GET", fmt.Sprintf("/channels/%d", i%100), ""))
					if err != nil {
						b.Error(err)
						return
					}
					resp.Body.Close()
				}
			})
			b.StopTimer()
			if on {
				b.ReportMetric(float64(events.Load())/float64(b.N), "events/op")
			}
		})
	}
}
