package lanes

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/forecast"
)

// Live yields the queue's live requests in order, each at its position
// among them: finished ones take no place.
func TestQueueLive(t *testing.T) {
	l := newLane("k", "GET /x", known(2, 1, time.Second), t0, nil)
	cs := queueN(l, 1, 4)
	cs[1].done = true
	var got []uint64
	var pos []int
	for p, c := range l.Line.Live() {
		got, pos = append(got, c.id), append(pos, p)
	}
	assert.Equal(t, []uint64{1, 3, 4}, got)
	assert.Equal(t, []int{0, 1, 2}, pos)
	for p, c := range l.Line.Live() {
		require.Equal(t, 0, p)
		require.Equal(t, uint64(1), c.id)
		break // a stop is kept
	}
}

// A queued request's part is its stage and position, the window its
// bucket lets that position go in (Slot) and how early it may go
// (Earliest).
func TestPaceQueued(t *testing.T) {
	p := Pace{State: known(2, 1, time.Second), Window: time.Second}
	now := t0.Add(100 * time.Millisecond)
	for pos := range 4 {
		got := p.Queued(now, pos)
		start, end, ok := p.Slot(now, pos)
		assert.Equal(t, forecast.Part{Stage: forecast.StageQueued, Pos: pos, Start: start, End: end, Known: ok,
			Early: p.Earliest(now, pos, start)}, got, "pos %d", pos)
	}
	assert.Equal(t, now, p.Queued(now, 0).Start, "room now")
	assert.Equal(t, t0.Add(time.Second), p.Queued(now, 1).Start, "the next window")
	var unknown Pace
	assert.False(t, unknown.Queued(now, 0).Known, "unknown: a lower bound")
}

// A retrying request goes at its backoff's end as the head would then
// (Retry: that end is its start), or later if its bucket holds it then.
func TestPaceRetrying(t *testing.T) {
	now := t0
	p := Pace{State: known(2, 1, time.Second), Window: time.Second}
	back := t0.Add(300 * time.Millisecond)
	got := p.Retrying(now, back)
	assert.Equal(t, forecast.StageRetrying, got.Stage)
	assert.Equal(t, back, got.Start, "at its backoff's end")
	assert.Equal(t, back, got.Early)
	assert.True(t, got.Known)
	assert.True(t, got.Retry)
	assert.Zero(t, got.Pos)

	got = p.Retrying(now, t0.Add(-time.Second)) // its backoff is over: now, as the head
	assert.Equal(t, now, got.Start)
	assert.False(t, got.Retry, "not the backoff's end")

	p.State.Remaining = 0 // nothing left before the reset, after the backoff
	got = p.Retrying(now, back)
	start, end, _ := p.Slot(back, 0)
	assert.Equal(t, t0.Add(time.Second), start)
	assert.Equal(t, start, got.Start, "its bucket holds it after its backoff")
	assert.Equal(t, end, got.End)
	assert.Equal(t, p.Earliest(back, 0, start), got.Early)
	assert.False(t, got.Retry)
}

// A lane's part of a request's ETA: queued at its place among the live
// requests ahead of it (a finished one asked for is at the place it holds
// still), retrying, or not its request.
func TestLanePart(t *testing.T) {
	now := t0.Add(100 * time.Millisecond)
	l := queued(known(2, 1, time.Second), time.Second)
	cs := queueN(l, 1, 4)
	cs[1].done = true
	r := &item{id: 9, notBefore: t0.Add(300 * time.Millisecond)}
	l.Line.Retry(r)
	for _, tc := range []struct {
		c   *item
		pos int
	}{{cs[0], 0}, {cs[1], 1}, {cs[2], 1}, {cs[3], 2}} {
		got, ok := l.Part(tc.c, now)
		require.True(t, ok, "%d", tc.c.id)
		assert.Equal(t, l.Queued(now, tc.pos), got, "%d", tc.c.id)
	}
	got, ok := l.Part(r, now)
	require.True(t, ok)
	assert.Equal(t, l.Retrying(now, r.notBefore), got)
	assert.True(t, got.Retry)

	got, ok = l.Part(&item{id: 10}, now)
	assert.False(t, ok)
	assert.Zero(t, got)
}

// slack is a bucket whose window's end was dated from an answer's arrival
// (t0+200ms, sent at t0): it may end up to that round trip earlier
// (ratelimit.Bucket.ResetSlack), nothing left before.
func slack(t *testing.T) Pace {
	p := Pace{Window: time.Second}
	ok, _ := p.State.Take(t0)
	require.True(t, ok)
	p.State.Observe(t0.Add(200*time.Millisecond), t0, full("h", 0))
	require.Positive(t, p.State.ResetSlack())
	p.Window = 10 * time.Second
	return p
}

// A request waiting for a refill may go as early as its window's end less
// the reset slack, not before now (or a retry's backoff's end).
func TestPartsEarliest(t *testing.T) {
	now := t0.Add(300 * time.Millisecond)
	p := slack(t)
	q := p.Queued(now, 0)
	assert.Equal(t, p.State.ResetAt, q.Start)
	assert.Equal(t, q.Start.Add(-p.State.ResetSlack()), q.Early)

	back := q.Start.Add(-p.State.ResetSlack() / 2) // within the slack
	r := p.Retrying(now, back)
	assert.Equal(t, q.Start, r.Start)
	assert.Equal(t, back, r.Early, "not before the backoff's end")
	assert.False(t, r.Retry)
}
