package actors

import (
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// TEMPORARY: stand-ins until ratelimit.ServerClock and the bucket margin land.
type serverClock struct{}

func (*serverClock) Observe(time.Time, ratelimit.Headers)                          {}
func (*serverClock) Annotate(*ratelimit.Headers)                                   {}
func (*serverClock) CountedAt(sent, recv time.Time, h ratelimit.Headers) time.Time { return recv }

func margin(st *ratelimit.Bucket, now time.Time) time.Duration              { return 0 }
func lateReopen(st *ratelimit.Bucket, now, sent time.Time, w time.Duration) {}
