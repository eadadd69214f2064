package lanes

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/ratelimit"
)

// A first lane whose pioneer waits for its turn (its template's first
// pioneer on another actor) tells a keep for its queue, as a queue behind
// its own pioneer does, ready two round trips away (that answer, then its
// own pioneer's): once a period (Behind), or again when its backlog has
// doubled since the keep last told (Told), as its requests keep coming.
func TestKeepForAQueueAwaitingItsTurn(t *testing.T) {
	now := t0
	sub := t0.Add(-time.Second)
	l := queued(ratelimit.Bucket{}, 0, bulk(1, 20, sub)...)
	at := now.Add(2 * rtt)
	path := l.Backlog(at, 20)
	assert.Equal(t, 2*time.Second, path)
	assert.True(t, AwaitsTurn([]*lane{l}))

	keep, needed := Keep([]*lane{l}, now, Soon{Per: per, RTT: rtt, Behind: true}, (&readiness{}).ready)
	assert.True(t, needed)
	assert.Equal(t, admission.Keep{At: at, Want: 10, Path: path, Since: sub, First: 1, Class: admission.Bulk}, keep)

	keep, needed = Keep([]*lane{l}, now, Soon{Per: per, RTT: rtt}, (&readiness{}).ready)
	assert.True(t, needed)
	assert.Zero(t, keep.Want, "told within the period, nothing told since")
	keep, _ = Keep([]*lane{l}, now, Soon{Per: per, RTT: rtt, Told: path/2 + time.Millisecond}, (&readiness{}).ready)
	assert.Zero(t, keep.Want, "its backlog did not double")
	keep, _ = Keep([]*lane{l}, now, Soon{Per: per, RTT: rtt, Told: path / 2}, (&readiness{}).ready)
	assert.Equal(t, 10, keep.Want, "its backlog doubled: told again")

	l.First = false // behind another of the actor's pioneers: it asks at that one's answer
	keep, _ = Keep([]*lane{l}, now, Soon{Per: per, RTT: rtt, Behind: true}, (&readiness{}).ready)
	assert.Zero(t, keep.Want)
	assert.False(t, AwaitsTurn([]*lane{l}))

	l.First, l.Running = true, 1 // its pioneer on the wire: a round trip away
	assert.False(t, AwaitsTurn([]*lane{l}))
	keep, _ = Keep([]*lane{l}, now, Soon{Per: per, RTT: rtt, Told: path / 2}, (&readiness{}).ready)
	assert.Equal(t, now.Add(rtt), keep.At)
	assert.Equal(t, 10, keep.Want, "its backlog doubled: told again")

	assert.False(t, AwaitsTurn([]*lane{queued(ratelimit.Bucket{}, 0)}), "no queue")
	assert.False(t, AwaitsTurn([]*lane{queued(known(5, 0, time.Second), time.Second, bulk(1, 3, sub)...)}), "known")
}

// A known lane's keep counts its slots by its reopening and a round trip
// (Slack), or, if later, by when the global slots of its last window free:
// a period after the latest answer its bucket counted; at most a quarter
// period.
func TestKeepSlackCoversItsOwnSlots(t *testing.T) {
	now := t0
	sub := t0.Add(-time.Second)
	l := queued(known(5, 0, 300*time.Millisecond), time.Second, bulk(1, 6, sub)...)
	at := now.Add(300 * time.Millisecond)
	slack := func() time.Duration {
		k, _ := Keep([]*lane{l}, now, Soon{Per: per, RTT: rtt, Others: true}, (&readiness{}).ready)
		assert.Equal(t, at, k.At)
		return k.Slack
	}
	assert.Equal(t, rtt, slack(), "no answer yet: a round trip")

	sent := now.Add(-720 * time.Millisecond)
	l.Settle(now.Add(-680*time.Millisecond), sent, ratelimit.Headers{}, ratelimit.ChargeArrived)
	assert.Equal(t, rtt, slack(), "its slots free within a round trip of its reopening")

	l.Settle(now.Add(-600*time.Millisecond), sent, ratelimit.Headers{}, ratelimit.ChargeArrived) // a late answer
	assert.Equal(t, 100*time.Millisecond, slack(), "a period after the latest answer")

	l.Settle(now.Add(-650*time.Millisecond), sent, ratelimit.Headers{}, ratelimit.ChargeArrived) // an earlier answer, told later
	assert.Equal(t, 100*time.Millisecond, slack(), "the latest answer counts")

	// A lane whose reopening is not told (it is ready now) lends its
	// answers to no keep.
	other := queued(known(5, 5, 300*time.Millisecond), time.Second, bulk(20, 6, sub)...)
	other.Settle(now.Add(-200*time.Millisecond), sent, ratelimit.Headers{}, ratelimit.ChargeArrived)
	k, _ := Keep([]*lane{l, other}, now, Soon{Per: per, RTT: rtt, Others: true}, (&readiness{set: map[*lane]verdict{other: {true, 0}}}).ready)
	assert.Equal(t, 100*time.Millisecond, k.Slack)

	l.Settle(now.Add(-300*time.Millisecond), sent, ratelimit.Headers{}, ratelimit.ChargeNone)
	assert.Equal(t, 100*time.Millisecond, slack(), "an attempt no bucket counted settles nothing")

	l.Settle(now.Add(-100*time.Millisecond), sent, ratelimit.Headers{}, ratelimit.ChargeArrived)
	assert.Equal(t, per/4, slack(), "at most a quarter period")
}
