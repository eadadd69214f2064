package admission_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/ratelimit"
)

var t0 = time.Unix(1_700_000_000, 0)

func TestDeadlineOrdersBuckets(t *testing.T) {
	now := t0.Add(time.Minute)
	older := admission.Deadline(now, t0, 0, false)
	newer := admission.Deadline(now, t0.Add(time.Second), 0, false)
	assert.True(t, older.Before(newer), "the earlier submission first")
	assert.Equal(t, now, admission.Deadline(now, time.Time{}, 0, false), "no submission known: now")
	assert.Equal(t, now, admission.Deadline(now, now.Add(time.Hour), 0, false), "a submission in the future counts as now")
	long := admission.Deadline(now, t0.Add(time.Second), 2*time.Second, false)
	assert.True(t, long.Before(older), "a backlog weighs PathWeight times its length")
	pioneer := admission.Deadline(now, now, 0, true)
	assert.True(t, pioneer.Before(long), "a pioneer before every known bucket")
}

func TestServeOrderAndWholeGrants(t *testing.T) {
	q := admission.New[string](4, time.Second)
	w := ratelimit.NewSlidingWindow(4, time.Second)
	q.Want(t0, "cold", admission.Ask{Want: 2, Global: true, Since: t0, First: 1})
	q.Want(t0, "hot", admission.Ask{Want: 3, Global: true, Since: t0.Add(time.Millisecond), First: 2, Path: 5 * time.Second})
	q.Want(t0, "callback", admission.Ask{Want: 1, Since: t0.Add(2 * time.Millisecond), First: 3})
	grants, retry, again := q.Serve(t0, w, false)
	require.Equal(t, []admission.Grant[string]{
		{Key: "hot", Slots: 3},
		{Key: "cold", Slots: 1, More: true},
		{Key: "callback"},
	}, grants, "the longest backlog first, whole; the rest in part; the exempt one without a slot")
	assert.True(t, again)
	assert.Equal(t, 250*time.Millisecond, retry, "hot's backlog paces the window: a slot each 250 ms after its burst")
	assert.Equal(t, 1, q.Len(), "served in part: it keeps its place")
	assert.Equal(t, 1, q.Pending())

	// A newcomer with an earlier submission does not pass it: the place
	// stands.
	q.Want(t0, "late", admission.Ask{Want: 1, Global: true, Since: t0.Add(time.Hour), First: 9})
	for _, g := range grants {
		w.Settle(t0)
		_ = g
	}
	for range 3 {
		w.Settle(t0)
	}
	grants, _, _ = q.Serve(t0.Add(time.Second), w, false)
	assert.Equal(t, []admission.Grant[string]{{Key: "cold", Slots: 1}, {Key: "late", Slots: 1}}, grants)
	assert.Zero(t, q.Len())
}

func TestServePausedAnswersOnlyExempt(t *testing.T) {
	q := admission.New[string](4, time.Second)
	w := ratelimit.NewSlidingWindow(4, time.Second)
	q.Want(t0, "a", admission.Ask{Want: 1, Global: true, First: 1})
	q.Want(t0, "callback", admission.Ask{Want: 1, First: 2})
	grants, _, again := q.Serve(t0, w, true)
	assert.Equal(t, []admission.Grant[string]{{Key: "callback"}}, grants)
	assert.False(t, again, "the window's clear admits again")
	assert.True(t, q.Waiting("a"))
}

// A bucket about to reopen within the period has its slots kept from the
// buckets behind it, until it asks or its keep lapses; a reopening a
// period away or more keeps nothing: a slot handed out now is free again
// by then.
func TestServeKeepsSlotsForABucketAboutToReopen(t *testing.T) {
	q := admission.New[string](2, time.Second)
	w := ratelimit.NewSlidingWindow(2, time.Second)
	q.Soon(t0, "hot", admission.Keep{At: t0.Add(300 * time.Millisecond), Want: 2, Path: 3 * time.Second, Since: t0, First: 1})
	q.Want(t0, "cold", admission.Ask{Want: 1, Global: true, Since: t0, First: 2})
	grants, retry, again := q.Serve(t0, w, false)
	assert.Empty(t, grants, "both slots are kept for hot")
	assert.True(t, again)
	assert.Equal(t, 300*time.Millisecond+admission.SoonGrace, retry, "until the keep lapses")

	at := t0.Add(300 * time.Millisecond)
	q.Want(at, "hot", admission.Ask{Want: 2, Global: true, Path: 3 * time.Second, Since: t0, First: 1})
	grants, _, _ = q.Serve(at, w, false)
	assert.Equal(t, []admission.Grant[string]{{Key: "hot", Slots: 2}}, grants)

	// A keep that lapses gives its slots back.
	q2 := admission.New[string](2, time.Second)
	q2.Soon(t0, "hot", admission.Keep{At: t0.Add(100 * time.Millisecond), Want: 2, Path: 3 * time.Second, Since: t0, First: 1})
	q2.Want(t0, "cold", admission.Ask{Want: 1, Global: true, Since: t0, First: 2})
	late := t0.Add(100*time.Millisecond + admission.SoonGrace + time.Millisecond)
	grants, _, _ = q2.Serve(late, ratelimit.NewSlidingWindow(2, time.Second), false)
	assert.Equal(t, []admission.Grant[string]{{Key: "cold", Slots: 1}}, grants)

	// A reopening a period away keeps nothing.
	q3 := admission.New[string](2, time.Second)
	q3.Soon(t0, "hot", admission.Keep{At: t0.Add(time.Second), Want: 2, Path: 3 * time.Second, Since: t0, First: 1})
	q3.Want(t0, "cold", admission.Ask{Want: 1, Global: true, Since: t0, First: 2})
	grants, _, _ = q3.Serve(t0, ratelimit.NewSlidingWindow(2, time.Second), false)
	assert.Equal(t, []admission.Grant[string]{{Key: "cold", Slots: 1}}, grants)

	// A bucket behind the one served keeps nothing from it.
	q4 := admission.New[string](2, time.Second)
	q4.Soon(t0, "later", admission.Keep{At: t0.Add(300 * time.Millisecond), Want: 2, Since: t0.Add(time.Minute), First: 9})
	q4.Want(t0, "first", admission.Ask{Want: 2, Global: true, Since: t0, First: 1})
	grants, _, _ = q4.Serve(t0, ratelimit.NewSlidingWindow(2, time.Second), false)
	assert.Equal(t, []admission.Grant[string]{{Key: "first", Slots: 2}}, grants)
}

// countOnly is a window that tells no FreeAt (as a custom
// ratelimit.GlobalLimiter may): a keep holds back every slot it wants from
// now.
type countOnly struct{ w *ratelimit.SlidingWindow }

func (c countOnly) Reserve(now time.Time) (bool, time.Duration) { return c.w.Reserve(now) }
func (c countOnly) Count(now time.Time) int                     { return c.w.Count(now) }

// A keep holds back only the slots its bucket would find missing at its
// reopening: the slots the window frees by then count. A hot bucket that
// took half the window a period before its reopening finds those slots
// free again, so the other half goes now rather than standing idle until
// the hot bucket asks (scenario 18 of docs/comparison.md: 20 of 50 slots
// stood idle for most of each second).
func TestServeKeepsOnlyWhatAReopeningBucketWouldMiss(t *testing.T) {
	serve := func(w admission.Window, want int) []admission.Grant[string] {
		t.Helper()
		q := admission.New[string](4, time.Second)
		q.Soon(t0.Add(100*time.Millisecond), "hot", admission.Keep{At: t0.Add(time.Second), Want: want, Path: 3 * time.Second, Since: t0, First: 1})
		q.Want(t0.Add(100*time.Millisecond), "cold", admission.Ask{Want: 2, Global: true, Since: t0, First: 2})
		grants, _, _ := q.Serve(t0.Add(100*time.Millisecond), w, false)
		return grants
	}
	// the hot bucket's last window: two slots, answered at t0
	window := func() *ratelimit.SlidingWindow {
		w := ratelimit.NewSlidingWindow(4, time.Second)
		for range 2 {
			ok, _ := w.Reserve(t0)
			require.True(t, ok)
			w.Settle(t0)
		}
		return w
	}
	assert.Equal(t, []admission.Grant[string]{{Key: "cold", Slots: 2}}, serve(window(), 2),
		"hot finds its own two slots free again at its reopening, and two more")
	assert.Equal(t, []admission.Grant[string]{{Key: "cold", Slots: 1, More: true}}, serve(window(), 3),
		"hot wants three: one slot may go")
	assert.Empty(t, serve(countOnly{window()}, 2), "a window that cannot tell holds every slot kept")

	// The hot bucket's slots free a period after their answers, a round
	// trip after it reopens (by the server's count): within its slack,
	// they count.
	answered := func() *ratelimit.SlidingWindow {
		w := ratelimit.NewSlidingWindow(4, time.Second)
		for range 2 {
			ok, _ := w.Reserve(t0)
			require.True(t, ok)
			w.Settle(t0.Add(20 * time.Millisecond))
		}
		return w
	}
	for _, c := range []struct {
		slack time.Duration
		cold  int
	}{{0, 0}, {20 * time.Millisecond, 2}} {
		q := admission.New[string](4, time.Second)
		now := t0.Add(100 * time.Millisecond)
		q.Soon(now, "hot", admission.Keep{At: t0.Add(time.Second), Slack: c.slack, Want: 2, Path: 3 * time.Second, Since: t0, First: 1})
		q.Want(now, "cold", admission.Ask{Want: 2, Global: true, Since: t0, First: 2})
		grants, _, _ := q.Serve(now, answered(), false)
		got := 0
		for _, g := range grants {
			got += g.Slots
		}
		assert.Equal(t, c.cold, got, "slack %v", c.slack)
	}
}

// A keep that wants nothing withdraws the bucket's keep at once (its queue
// was cancelled, or its pioneer's answer shut its bucket for longer): the
// slots it held go to the line, where they waited for the keep to lapse.
// It changes nothing while the bucket is in line.
func TestSoonWithdrawsAKeep(t *testing.T) {
	now := t0.Add(100 * time.Millisecond)
	served := func(q *admission.Queue[string]) int {
		grants, _, _ := q.Serve(now, countOnly{ratelimit.NewSlidingWindow(4, time.Second)}, false)
		got := 0
		for _, g := range grants {
			got += g.Slots
		}
		return got
	}
	q := admission.New[string](4, time.Second)
	q.Soon(now, "hot", admission.Keep{At: t0.Add(time.Second), Want: 4, Path: 3 * time.Second, Since: t0, First: 1})
	q.Want(now, "cold", admission.Ask{Want: 2, Global: true, Since: t0, First: 2})
	assert.Zero(t, served(q), "the keep holds the window's slots")

	q.Soon(now, "hot", admission.Keep{})
	assert.Equal(t, 2, served(q), "withdrawn, its slots go to the line")

	q = admission.New[string](4, time.Second)
	q.Want(now, "hot", admission.Ask{Want: 1, Global: true, Since: t0, First: 1})
	q.Soon(now, "hot", admission.Keep{})
	assert.Equal(t, 1, q.Len(), "a withdrawal leaves a bucket in line where it is")
}

// A pioneer's ask leaves the keep of the queue behind it (it asks a round
// trip later); any other ask replaces its keep.
func TestPioneerAskLeavesItsKeep(t *testing.T) {
	now := t0.Add(100 * time.Millisecond)
	q := admission.New[string](4, time.Second)
	q.Soon(now, "hot", admission.Keep{At: now.Add(50 * time.Millisecond), Want: 4, Path: 3 * time.Second, Since: t0, First: 1})
	q.Want(now, "hot", admission.Ask{Want: 1, Global: true, Pioneer: true, Since: t0, First: 1})
	assert.Equal(t, 1, q.Keeps(), "the pioneer's ask")
	grants, _, _ := q.Serve(now, countOnly{ratelimit.NewSlidingWindow(4, time.Second)}, false)
	assert.Equal(t, []admission.Grant[string]{{Key: "hot", Slots: 1}}, grants, "the pioneer goes before its queue's keep")
	assert.Equal(t, 1, q.Keeps(), "served, its queue's keep stands")
	q.Want(now, "hot", admission.Ask{Want: 4, Global: true, Path: 2 * time.Second, Since: t0, First: 1})
	assert.Zero(t, q.Keeps(), "its queue asks: the keep is replaced")
}

// A bucket's place is its latest ask's: one whose backlog shrank while it
// waited (its bucket refilled) goes behind one whose backlog is now
// longer, though it asked first; its earliest request still counts.
func TestPlaceFollowsTheLatestAsk(t *testing.T) {
	q := admission.New[string](10, time.Second)
	sw := ratelimit.NewSlidingWindow(10, time.Second)
	for range 10 { // the window is full until t0 + 1 s
		sw.Reserve(t0)
		sw.Settle(t0)
	}
	w := countOnly{sw}
	q.Want(t0, "cold", admission.Ask{Want: 4, Global: true, Path: time.Second, Since: t0, First: 1})
	now := t0.Add(900 * time.Millisecond)
	q.Want(now, "cold", admission.Ask{Want: 5, Global: true, Since: t0, First: 1}) // its bucket refilled: no window after this one
	q.Want(now, "hot", admission.Ask{Want: 5, Global: true, Path: time.Second, Since: t0.Add(time.Millisecond), First: 2})
	grants, _, _ := q.Serve(t0.Add(time.Second), w, false)
	require.NotEmpty(t, grants)
	assert.Equal(t, admission.Grant[string]{Key: "hot", Slots: 5}, grants[0], "the longer backlog first")

	q = admission.New[string](10, time.Second)
	q.Want(t0, "cold", admission.Ask{Want: 4, Global: true, Path: time.Second, Since: t0, First: 1})
	q.Want(now, "hot", admission.Ask{Want: 5, Global: true, Path: time.Second, Since: t0.Add(time.Millisecond), First: 2})
	grants, _, _ = q.Serve(now, countOnly{ratelimit.NewSlidingWindow(10, time.Second)}, false)
	require.NotEmpty(t, grants)
	assert.Equal(t, admission.Grant[string]{Key: "cold", Slots: 4}, grants[0], "equal backlogs: the earlier request first")
}

// While a bucket with a backlog longer than the period waits, slots go at
// the window's rate after its burst: a window filled at once would free
// at once, a period later. Slots given back unused give their tokens back.
func TestServePacesWhileALongBacklogWaits(t *testing.T) {
	q := admission.New[string](4, time.Second)
	w := ratelimit.NewSlidingWindow(4, time.Second)
	q.Want(t0, "hot", admission.Ask{Want: 4, Global: true, Path: 5 * time.Second, Since: t0, First: 1})
	grants, _, _ := q.Serve(t0, w, false)
	assert.Equal(t, []admission.Grant[string]{{Key: "hot", Slots: 4}}, grants, "the burst")
	w.Cancel(t0) // two were never sent
	w.Cancel(t0)

	now := t0.Add(100 * time.Millisecond)
	q.Want(now, "cold", admission.Ask{Want: 1, Global: true, Since: now, First: 5})
	grants, retry, again := q.Serve(now, w, false)
	assert.Empty(t, grants, "the window has room, the pacer not yet")
	assert.True(t, again)
	assert.Equal(t, 150*time.Millisecond, retry, "the next token")

	q.Refund(2)
	grants, _, _ = q.Serve(now, w, false)
	assert.Equal(t, []admission.Grant[string]{{Key: "cold", Slots: 1}}, grants, "the slots given back gave their tokens back")

	// Without a long backlog waiting nothing is paced: the window's room
	// is all there is.
	q2 := admission.New[string](4, time.Second)
	w2 := ratelimit.NewSlidingWindow(4, time.Second)
	q2.Want(t0, "a", admission.Ask{Want: 4, Global: true, Since: t0, First: 1})
	grants, _, _ = q2.Serve(t0, w2, false)
	require.Equal(t, []admission.Grant[string]{{Key: "a", Slots: 4}}, grants)
	for range 4 {
		w2.Cancel(t0)
	}
	q2.Want(t0, "b", admission.Ask{Want: 4, Global: true, Since: t0, First: 2})
	grants, _, _ = q2.Serve(t0, w2, false)
	assert.Equal(t, []admission.Grant[string]{{Key: "b", Slots: 4}}, grants)
}

// While a lower class waits, a bucket of a higher class is served
// ShareEvery-1 slots, then the lower class one, in one Serve too: a
// bucket that wants many slots at once does not take them all ahead of
// the share. Each bucket gets one grant with all its slots of the call.
func TestServeShareWithinOneServe(t *testing.T) {
	q := admission.New[string](40, 10*time.Second)
	w := ratelimit.NewSlidingWindow(40, 10*time.Second)
	var slots []string
	admission.SetSlotHook(q, func(k string) { slots = append(slots, k) })
	q.Want(t0, "bulk", admission.Ask{Want: 20, Global: true, Since: t0, First: 1, Class: admission.Bulk})
	q.Want(t0, "user", admission.Ask{Want: 30, Global: true, Since: t0, First: 2, Class: admission.Interactive})
	grants, _, _ := q.Serve(t0, w, false)
	var want []string
	for range 4 {
		want = append(want, "user", "user", "user", "user", "user", "user", "user", "bulk")
	}
	want = append(want, "user", "user", "bulk", "bulk", "bulk", "bulk", "bulk", "bulk")
	assert.Equal(t, want, slots, "seven to the interactions, one to bulk; bulk takes the rest once they are served")
	assert.Equal(t, []admission.Grant[string]{{Key: "user", Slots: 30}, {Key: "bulk", Slots: 10, More: true}}, grants,
		"one grant each")
}

// When the share is due but its pick's slots are kept for a bucket ahead
// of it (reopening within the period), the head is served: the slots the
// pick cannot use do not stay unused.
func TestServeShareHeldByAKeepServesTheHead(t *testing.T) {
	q := admission.New[string](10, time.Second)
	w := ratelimit.NewSlidingWindow(10, time.Second)
	q.Soon(t0, "reopening", admission.Keep{At: t0.Add(100 * time.Millisecond), Want: 3, Since: t0, First: 1, Class: admission.Normal})
	q.Want(t0, "bulk", admission.Ask{Want: 1, Global: true, Since: t0, First: 2, Class: admission.Bulk})
	q.Want(t0, "user", admission.Ask{Want: 7, Global: true, Since: t0, First: 3, Class: admission.Interactive})
	grants, _, again := q.Serve(t0, w, false)
	require.Equal(t, []admission.Grant[string]{{Key: "user", Slots: 7}}, grants, "the bulk request's slot is kept for the reopening bucket")
	assert.True(t, again)

	q.Want(t0, "user", admission.Ask{Want: 2, Global: true, Since: t0, First: 4, Class: admission.Interactive})
	grants, _, again = q.Serve(t0, w, false)
	assert.Equal(t, []admission.Grant[string]{{Key: "user", Slots: 2}}, grants, "the share is due, its pick held: the interaction goes")
	assert.True(t, again)
	assert.True(t, q.Waiting("bulk"))
}

// The share goes to the first in line of the classes below the top one
// that may take it, whatever their own order.
func TestSharePickTakesTheFirstInLineBelowTheTop(t *testing.T) {
	type item struct {
		class admission.Class
		seq   int
		ok    bool
	}
	pick := func(line []item, top admission.Class) int {
		return admission.SharePick(line, top, func(x item) (admission.Class, bool) { return x.class, x.ok },
			func(a, b item) bool { return a.seq < b.seq })
	}
	line := []item{{admission.Interactive, 1, true}, {admission.Normal, 5, true}, {admission.Bulk, 3, true}, {admission.Bulk, 2, false}, {admission.Normal, 4, true}}
	assert.Equal(t, 2, pick(line, admission.Interactive), "bulk 3 is first in line below interactive (bulk 2 may not take it)")
	assert.Equal(t, 2, pick(line, admission.Normal))
	assert.Equal(t, -1, pick(line, admission.Bulk), "nothing is below bulk")
	assert.Equal(t, -1, pick(line[:2], admission.Normal))
	assert.Equal(t, -1, pick(nil, admission.Interactive))
}
