package lanes

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/ratelimit"
)

// knownBucket is a known count with room at t0: 2 a window, reset at
// t0+1s.
func knownBucket() ratelimit.Bucket {
	return ratelimit.Bucket{Known: true, Limit: 2, Remaining: 2, ResetAt: t0.Add(time.Second)}
}

// Ready is the lane's state machine, synced at now: the shared count's
// hold first, then an unknown bucket's pioneers (a first pioneer alone,
// asking its turn once no other is out; the others behind a first
// pioneer), a serial lane's one request, then the count.
func TestLaneReady(t *testing.T) {
	type want struct {
		ok   bool
		wait time.Duration
		turn bool
	}
	for _, tc := range []struct {
		name     string
		st       ratelimit.Bucket // the lane's count when made (a first lane's)
		set      func(*lane)
		out      int  // the actor's pioneers out
		firstOut bool // one of them a first pioneer
		want     want
		state    fsm.BucketState // the machine's after Ready
	}{
		{name: "a known lane with room goes", st: knownBucket(),
			want: want{ok: true}, state: fsm.Open},
		{name: "the shared count holds it", st: knownBucket(), set: func(l *lane) { l.SharedUntil = t0.Add(2 * time.Second) },
			want: want{wait: 2 * time.Second}, state: fsm.Open},
		{name: "the shared hold ends at its time", st: knownBucket(), set: func(l *lane) { l.SharedUntil = t0 },
			want: want{ok: true}, state: fsm.Open},
		{name: "a first pioneer waits for the actor's other pioneers", out: 1,
			want: want{}, state: fsm.Initial},
		{name: "a first pioneer with none out asks its template's turn",
			want: want{turn: true}, state: fsm.Initial},
		{name: "a first pioneer does not ask while a first pioneer is out", out: 1, firstOut: true,
			want: want{}, state: fsm.Initial},
		{name: "an unknown lane waits behind a first pioneer", set: func(l *lane) { l.First = false }, out: 1, firstOut: true,
			want: want{}, state: fsm.Initial},
		{name: "an unknown lane goes beside other pioneers, by its count", set: func(l *lane) { l.First = false }, out: 1,
			want: want{ok: true}, state: fsm.Initial},
		{name: "an unknown lane's own pioneer out: its count waits",
			set: func(l *lane) {
				l.First = false
				ok, _ := l.State.Take(t0.Add(-time.Second))
				require.True(t, ok)
			},
			want: want{wait: ratelimit.PioneerTimeout - time.Second}, state: fsm.Initial},
		{name: "a serial lane with a request out waits", st: knownBucket(), set: func(l *lane) { l.Serial, l.Running = true, 1 },
			want: want{}, state: fsm.Open},
		{name: "a serial lane with none out goes", st: knownBucket(), set: func(l *lane) { l.Serial = true },
			want: want{ok: true}, state: fsm.Open},
		{name: "a lane that is not serial goes beside its requests out", st: knownBucket(), set: func(l *lane) { l.Running = 1 },
			want: want{ok: true}, state: fsm.Open},
		{name: "an exhausted count waits for its reset", st: knownBucket(), set: func(l *lane) { l.State.Remaining = 0 },
			want: want{wait: time.Second}, state: fsm.Exhausted},
		{name: "a paused count waits for its pause", st: knownBucket(), set: func(l *lane) { l.State.PausedUntil = t0.Add(3 * time.Second) },
			want: want{wait: 3 * time.Second}, state: fsm.Limited},
		{name: "synced first: a count learned since goes, whatever the pioneers",
			set: func(l *lane) { l.State = knownBucket() }, out: 1, firstOut: true,
			want: want{ok: true}, state: fsm.Open},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLane("k", "GET /channels/{channel_id}/messages", tc.st, t0, nil)
			if tc.set != nil {
				tc.set(l)
			}
			before := l.State
			var got want
			got.ok, got.wait, got.turn = l.Ready(t0, tc.out, tc.firstOut)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.state, l.Machine.Current())
			assert.Equal(t, before, l.State, "Ready takes nothing")
		})
	}
}

// FirstReady: a first pioneer goes with a slot in every known lane it may
// share (the first that cannot spare one tells the wait), and as its own
// count lets it; it takes nothing.
func TestLaneFirstReady(t *testing.T) {
	const (
		reactions = "GET /channels/{channel_id}/messages/{message_id}/reactions"
		message   = "GET /channels/{channel_id}/messages/{message_id}"
		edit      = "PATCH /channels/{channel_id}/messages/{message_id}"
		members   = "GET /guilds/{guild_id}/members"
	)
	exhausted := func(reset time.Duration) ratelimit.Bucket {
		st := knownBucket()
		st.Remaining, st.ResetAt = 0, t0.Add(reset)
		return st
	}
	pioneerOut := func() ratelimit.Bucket { // unknown, its own pioneer out
		var st ratelimit.Bucket
		ok, _ := st.Take(t0)
		require.True(t, ok)
		return st
	}
	type other struct {
		template string
		st       ratelimit.Bucket
	}
	for _, tc := range []struct {
		name   string
		others []other
		own    bool // its own pioneer is out
		ok     bool
		wait   time.Duration
	}{
		{name: "alone: its own count", ok: true},
		{name: "a related known lane with room", others: []other{{message, knownBucket()}}, ok: true},
		{name: "a related known lane exhausted holds it", others: []other{{message, exhausted(time.Second)}}, wait: time.Second},
		{name: "an unrelated known lane exhausted does not", others: []other{{members, exhausted(time.Second)}}, ok: true},
		{name: "a related unknown lane has no slot to hold", others: []other{{message, pioneerOut()}}, ok: true},
		{name: "the first lane that cannot spare one tells the wait",
			others: []other{{members, exhausted(5 * time.Second)}, {message, exhausted(2 * time.Second)}, {edit, exhausted(time.Second)}},
			wait:   2 * time.Second},
		{name: "its own count last", others: []other{{message, knownBucket()}}, own: true, wait: ratelimit.PioneerTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLane("k", reactions, ratelimit.Bucket{}, t0, nil)
			if tc.own {
				ok, _ := l.State.Take(t0)
				require.True(t, ok)
			}
			ls := []*lane{l}
			for i, o := range tc.others {
				ls = append(ls, newLane("other"+string(rune('a'+i)), o.template, o.st, t0, nil))
			}
			var before []ratelimit.Bucket
			for _, k := range ls {
				before = append(before, k.State)
			}
			ok, wait := l.FirstReady(ls, t0)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.wait, wait)
			for i, k := range ls {
				assert.Equal(t, before[i], k.State, "FirstReady takes nothing (%s)", k.Key)
			}
		})
	}
}

// Place puts a request behind the live ones of its class; only when its
// bucket's start is further than a positive limit does it drop the
// cancelled requests first and count again.
func TestLanePlace(t *testing.T) {
	// One a window, none left: the window after the reset (1s) is
	// 1s + ReopenMargin long.
	const window = time.Second + ratelimit.ReopenMargin
	startAt := func(pos int) time.Duration { return time.Second + time.Duration(pos)*window }
	for _, tc := range []struct {
		name    string
		unknown bool
		limit   time.Duration
		pos     int // and its start
		known   bool
		left    int // the queue's length after (the new request not in it)
	}{
		{name: "no limit: counted as the queue is", limit: 0, pos: 4, known: true, left: 4},
		{name: "within the limit", limit: 10 * time.Second, pos: 4, known: true, left: 4},
		{name: "at the limit", limit: startAt(4), pos: 4, known: true, left: 4},
		{name: "over the limit: the live ones alone", limit: 3 * time.Second, pos: 2, known: true, left: 2},
		{name: "a limit not positive is none", limit: -time.Second, pos: 4, known: true, left: 4},
		{name: "an unknown bucket: now, a lower bound", unknown: true, limit: time.Nanosecond, pos: 4, left: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := ratelimit.Bucket{Known: true, Limit: 1, Remaining: 0, ResetAt: t0.Add(time.Second)}
			if tc.unknown {
				st = ratelimit.Bucket{}
			}
			l := newLane("k", "GET /x", st, t0, nil)
			l.Window = time.Second
			q := queueN(l, 1, 4)
			q[1].done, q[2].done = true, true // cancelled while they waited, behind the head
			c := &item{id: 9, submitted: t0}
			l.Line.NoteClass(c)
			pos, start, known := l.Place(c, t0, tc.limit)
			assert.Equal(t, tc.pos, pos)
			assert.Equal(t, tc.known, known)
			if tc.known {
				assert.Equal(t, t0.Add(startAt(tc.pos)), start)
			} else {
				assert.Equal(t, t0, start)
			}
			assert.Equal(t, tc.left, l.Line.Len())
		})
	}
}

// A lane's Snapshot: its figures, what counts down as at the snapshot's
// time and never below 0.
func TestLaneSnapshot(t *testing.T) {
	st := ratelimit.Bucket{Known: true, Limit: 5, Remaining: 3, ResetAt: t0.Add(time.Second), PausedUntil: t0.Add(2 * time.Second)}
	l := newLane("bucket h", "GET /x", st, t0, nil)
	l.Serial, l.Running = true, 1
	q := queueN(l, 1, 2)
	q[1].done = true // still in the queue until compacted
	l.Line.Retry(&item{id: 3})
	for _, tc := range []struct {
		name string
		at   time.Time
		want Snapshot
	}{
		{name: "during the pause", at: t0, want: Snapshot{Key: "bucket h", State: fsm.Limited.String(), Known: true, Limit: 5, Remaining: 3,
			ResetIn: time.Second, PausedFor: 2 * time.Second, Margin: ratelimit.ReopenMargin, Queued: 2, Retrying: 1, Running: 1, Serial: true}},
		{name: "both over", at: t0.Add(5 * time.Second), want: Snapshot{Key: "bucket h", State: fsm.Limited.String(), Known: true, Limit: 5, Remaining: 3,
			Margin: ratelimit.ReopenMargin, Queued: 2, Retrying: 1, Running: 1, Serial: true}},
	} {
		assert.Equal(t, tc.want, l.Snapshot(tc.at), tc.name)
	}
}
