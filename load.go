package sluice

import (
	"time"

	"github.com/sluicehq/sluice/redisstore"
)

// Load is a limiter's load, read without disturbing it: no actor message,
// no Redis call, a few atomic loads. It holds the figures the observable
// metrics of Options.MeterProvider report, for code that exports its own
// (package proxy aggregates it over its tokens on /metrics) or checks a
// limiter's health often. Snapshot gives the whole state, bucket by bucket.
type Load struct {
	// Time is when it was read (the limiter's clock).
	Time time.Time
	// State is the supervisor's state: "disconnected", "connecting",
	// "connected" or "global_limit".
	State string
	// Pending counts the requests submitted and not yet answered (queued,
	// waiting for admission or on the wire), Running those on the wire.
	Pending, Running int
	// Buckets is the number of live bucket actors.
	Buckets int
	// InvalidLeft is the number of invalid answers (401, 403, non-shared
	// 429) the limiter still accepts before refusing requests to avoid a
	// ban; -1 without a budget (Options.InvalidRequestLimit < 0).
	InvalidLeft int
	// Windows are the two global limits, "bot" and "ip", as in Snapshot.
	Windows []WindowSnapshot
	// Shared and IPShared are the Redis stores' counters (nil without
	// Options.Redis), as in Snapshot.
	Shared, IPShared *redisstore.Stats
}

// Load reads the limiter's load; see Load. It is safe to call at any
// time from any goroutine, also after Close.
func (l *Limiter) Load() Load {
	s := l.sys.Load()
	out := Load{Time: s.Time, State: s.State, Pending: s.Pending, Running: s.Running, Buckets: s.Buckets, InvalidLeft: s.InvalidLeft}
	for _, w := range s.Windows {
		out.Windows = append(out.Windows, WindowSnapshot(w))
	}
	if l.shared != nil {
		st, ip := l.shared.Stats(), l.ipShared.Stats()
		out.Shared, out.IPShared = &st, &ip
	}
	return out
}
