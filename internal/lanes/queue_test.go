package lanes

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admission"
)

// item is a request as the tests queue it.
type item struct {
	id        uint64
	class     admission.Class
	done      bool
	place     time.Time // a declared window's start; zero: none
	notBefore time.Time
	back      bool // it was sent and came back (a retry): it goes first, not by class
	submitted time.Time
	exempt    bool // needs no global slot
}

type itemRules struct{}

func (itemRules) Class(i *item) admission.Class   { return i.class }
func (itemRules) Seq(i *item) uint64              { return i.id }
func (itemRules) Finished(i *item) bool           { return i.done }
func (itemRules) Place(i *item) (time.Time, bool) { return i.place, !i.place.IsZero() }
func (itemRules) NotBefore(i *item) time.Time     { return i.notBefore }
func (itemRules) Submitted(i *item) time.Time     { return i.submitted }
func (itemRules) Exempt(i *item) bool             { return i.exempt }

type queue = Queue[*item, itemRules]

func ids(cs []*item) []uint64 {
	var out []uint64
	for _, c := range cs {
		if !c.done {
			out = append(out, c.id)
		}
	}
	return out
}

// join queues c as a bucket actor does.
func join(q *queue, c *item) {
	q.NoteClass(c)
	q.Insert(q.PlaceOf(c), c)
}

// send takes the head to be sent, as a bucket actor does.
func send(q *queue) *item {
	c := q.Head()
	if c == nil {
		return nil
	}
	q.Pop()
	q.Served(c)
	return c
}

// A request joins behind its class and the higher ones, ahead of the lower
// ones, passing finished requests; FIFO within a class.
func TestQueuePlacesByClass(t *testing.T) {
	var q queue
	join(&q, &item{id: 1, class: admission.Bulk})
	join(&q, &item{id: 2, class: admission.Normal})
	join(&q, &item{id: 3, class: admission.Bulk})
	join(&q, &item{id: 4, class: admission.Interactive})
	join(&q, &item{id: 5, class: admission.Normal})
	assert.Equal(t, []uint64{4, 2, 5, 1, 3}, ids(q.Items()))
	// A cancelled request at the head is dropped as the next joins.
	q.Items()[0].done = true
	join(&q, &item{id: 6, class: admission.Interactive})
	assert.Equal(t, []uint64{6, 2, 5, 1, 3}, ids(q.Items()))
	assert.Equal(t, admission.Bulk, q.lowest)
	assert.Equal(t, admission.Interactive, q.TopClass(2))
	assert.Equal(t, admission.Bulk, q.TopClass(0), "no request: the lowest class")
}

// While a lower class waits, the eighth send in a row goes to its oldest
// request: the share (admission.Share).
func TestQueueShareMovesALowerClassToTheHead(t *testing.T) {
	var q queue
	join(&q, &item{id: 1, class: admission.Bulk})
	join(&q, &item{id: 2, class: admission.Normal})
	for id := uint64(10); id < 30; id++ {
		join(&q, &item{id: id, class: admission.Interactive})
	}
	var sent []uint64
	for c := send(&q); c != nil; c = send(&q) {
		sent = append(sent, c.id)
	}
	// Seven interactive, then the oldest lower one (bulk 1, submitted
	// first), seven more, then normal 2; the rest.
	assert.Equal(t, []uint64{10, 11, 12, 13, 14, 15, 16, 1, 17, 18, 19, 20, 21, 22, 23, 2, 24, 25, 26, 27, 28, 29}, sent)
}

// All of one class: no promotion.
func TestQueueOneClassKeepsFIFO(t *testing.T) {
	var q queue
	for id := uint64(1); id <= 20; id++ {
		join(&q, &item{id: id, class: admission.Normal})
	}
	for want := uint64(1); want <= 20; want++ {
		c := q.Head()
		q.Pop()
		assert.False(t, q.Served(c))
		assert.Equal(t, want, c.id)
	}
}

// Interactive requests that keep arriving, one before each send, never
// keep the bulk ones waiting past their share: the oldest bulk request
// goes at least once in admission.ShareEvery sends, also when it is the
// head already when its share comes due.
func TestQueueShareHoldsWhileHigherClassesKeepArriving(t *testing.T) {
	var q queue
	for id := uint64(1); id <= 5; id++ {
		join(&q, &item{id: id, class: admission.Bulk})
	}
	var sent, low []uint64
	next := uint64(100)
	run := 0
	for range 40 {
		join(&q, &item{id: next, class: admission.Interactive})
		next++
		c := send(&q)
		require.NotNil(t, c)
		sent = append(sent, c.id)
		if c.id >= 100 {
			run++
			require.Less(t, run, admission.ShareEvery, "interactive requests in a row while bulk waited: %v", sent)
		} else {
			run = 0
			low = append(low, c.id)
		}
	}
	assert.Equal(t, []uint64{1, 2, 3, 4, 5}, low, "the bulk requests go, in their order: %v", sent)
}

// Requests with a declared place go by their window's start, whatever
// order they joined in; a request without one stops the scan.
func TestQueueOrdersDeclaredPlaces(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var q queue
	join(&q, &item{id: 1, place: t0.Add(2 * time.Second)})
	join(&q, &item{id: 2, place: t0.Add(time.Second)})
	join(&q, &item{id: 3, place: t0.Add(3 * time.Second)})
	assert.Equal(t, []uint64{2, 1, 3}, ids(q.Items()))
	join(&q, &item{id: 4}) // no place: behind them, FIFO
	join(&q, &item{id: 5, place: t0})
	assert.Equal(t, []uint64{2, 1, 3, 4, 5}, ids(q.Items()), "a placed request does not pass one without a place")
	// A request whose window moved later goes behind the ones now first.
	q.Items()[0].place = t0.Add(5 * time.Second)
	assert.True(t, q.Order(0))
	assert.Equal(t, []uint64{1, 3, 2, 4, 5}, ids(q.Items()))
}

// Retries go back to the front of the queue once their backoff ends, in
// the order they failed; the wait is for the next one.
func TestQueueDueRetries(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var q queue
	join(&q, &item{id: 10})
	a := &item{id: 1, notBefore: t0.Add(time.Second)}
	b := &item{id: 2, notBefore: t0.Add(3 * time.Second)}
	c := &item{id: 3, notBefore: t0.Add(2 * time.Second)}
	d := &item{id: 4, notBefore: t0, done: true}
	for _, r := range []*item{a, b, c, d} {
		q.Retry(r)
	}
	due, next := q.DueRetries(t0)
	assert.Empty(t, due)
	assert.Equal(t, time.Second, next)
	due, next = q.DueRetries(t0.Add(2 * time.Second))
	assert.Equal(t, []uint64{1, 3}, ids(due))
	assert.Equal(t, time.Second, next)
	assert.Equal(t, []uint64{1, 3, 10}, ids(q.Items()))
	assert.Equal(t, []uint64{2}, ids(q.Retries()), "the finished retry is dropped")
	due, next = q.DueRetries(t0.Add(3 * time.Second))
	assert.Equal(t, []uint64{2}, ids(due))
	assert.Zero(t, next)
	assert.Empty(t, q.Retries())
}

// A retry back in line goes to its declared place, as one PushFront puts
// back: a request reserved in a later window never holds the lane before
// one reserved earlier. And a retry still waiting costs no allocation at
// each look.
func TestQueueDueRetriesKeepDeclaredPlaces(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var q queue
	join(&q, &item{id: 10, place: t0.Add(time.Second)})
	join(&q, &item{id: 11, place: t0.Add(3 * time.Second)})
	q.Retry(&item{id: 1, place: t0.Add(2 * time.Second), notBefore: t0})
	q.Retry(&item{id: 2, place: t0.Add(4 * time.Second), notBefore: t0})
	q.Retry(&item{id: 3, notBefore: t0.Add(time.Hour)})
	due, _ := q.DueRetries(t0)
	assert.Equal(t, []uint64{1, 2}, ids(due))
	assert.Equal(t, []uint64{10, 1, 11, 2}, ids(q.Items()), "retries by their windows among the placed requests")
	allocs := testing.AllocsPerRun(100, func() { q.DueRetries(t0) })
	assert.Zero(t, allocs, "a look at a retry still waiting allocates")
	assert.Equal(t, []uint64{3}, ids(q.Retries()))
}

// The request the share promoted is forgotten once Head, Compact or
// Filter drop it (it finished): the queue keeps no finished request alive. An emptied
// queue keeps its room.
func TestQueueForgetsADroppedPromotion(t *testing.T) {
	var q queue
	for _, c := range []*item{{id: 1, class: admission.Interactive}, {id: 2, class: admission.Interactive}, {id: 3, class: admission.Bulk}} {
		join(&q, c)
	}
	id := uint64(10)
	for i := 0; q.promoted == nil && i < 2*admission.ShareEvery; i++ {
		id++
		join(&q, &item{id: id, class: admission.Interactive})
		send(&q)
	}
	require.NotNil(t, q.promoted, "the share promoted no request")
	p := q.promoted
	require.Same(t, p, q.Head())
	p.done = true
	q.Compact()
	assert.Nil(t, q.promoted, "Compact kept the finished promoted request")

	id++
	join(&q, &item{id: id, class: admission.Bulk})
	for i := 0; q.promoted == nil && i < 2*admission.ShareEvery; i++ {
		id++
		join(&q, &item{id: id, class: admission.Interactive})
		send(&q)
	}
	require.NotNil(t, q.promoted, "the share promoted no request")
	q.promoted.done = true
	q.Head()
	assert.Nil(t, q.promoted, "Head dropped the finished promoted request and kept it")

	for i := 0; q.promoted == nil && i < 2*admission.ShareEvery; i++ {
		id++
		join(&q, &item{id: id, class: admission.Bulk})
		id++
		join(&q, &item{id: id, class: admission.Interactive})
		send(&q)
	}
	require.NotNil(t, q.promoted, "the share promoted no request")
	q.Filter(func(c *item) bool { return c != q.promoted })
	assert.Nil(t, q.promoted, "Filter kept the dropped promoted request")
	q.Filter(func(*item) bool { return false })
	assert.Zero(t, q.Len())
	assert.NotZero(t, cap(q.Items()), "the emptied queue lost its room")
}

// Two lanes found to share a bucket: one queue by class then submission,
// the retries together, the merged one empty.
func TestQueueMerge(t *testing.T) {
	var a, b queue
	for _, c := range []*item{{id: 1}, {id: 4, class: admission.Bulk}, {id: 6, class: admission.Interactive}} {
		join(&a, c)
	}
	for _, c := range []*item{{id: 2}, {id: 3, class: admission.Bulk}, {id: 5, class: admission.Interactive}} {
		join(&b, c)
	}
	b.Retry(&item{id: 7, class: admission.Bulk, notBefore: time.Unix(1, 0)})
	a.Merge(&b)
	assert.Equal(t, []uint64{5, 6, 1, 2, 3, 4}, ids(a.Items()))
	assert.Equal(t, []uint64{7}, ids(a.Retries()))
	assert.Equal(t, admission.Bulk, a.lowest)
	assert.True(t, b.Empty())
}

// The queue against a model: random joins, cancellations, sends, retries
// and merges. After each step the live requests are in the order the rules
// give (class, then submission, the promoted one first), and while a lower
// class waits, at most ShareEvery-1 sends in a row go to the top class.
func TestQueueModel(t *testing.T) {
	for seed := range uint64(300) {
		checkQueueModel(t, rand.New(rand.NewPCG(seed, 7)), 200)
	}
}

func FuzzQueue(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		checkQueueModel(t, rand.New(rand.NewPCG(a, b)), 300)
	})
}

func checkQueueModel(t *testing.T, rng *rand.Rand, steps int) {
	t.Helper()
	var q, other queue
	var live []*item // every request joined and not finished, sent or retrying
	id := uint64(0)
	run := 0 // sends in a row above the lowest class waiting
	// most is how long run may get: ShareEvery-1, one more each time the
	// request the share promoted was cancelled (its slot went to the head
	// behind it, and the share to the next send).
	most := admission.ShareEvery - 1
	t0 := time.Unix(1000, 0)
	now := t0
	for step := range steps {
		switch op := rng.IntN(12); {
		case op < 4:
			id++
			c := &item{id: id, class: admission.Classes[rng.IntN(3)]}
			join(&q, c)
			live = append(live, c)
		case op < 5 && len(live) > 0:
			i := rng.IntN(len(live))
			live[i].done = true
			if live[i] == q.promoted {
				most++
			}
			live = slices.Delete(live, i, i+1)
		case op < 8:
			// The lowest and highest class queued (not retrying).
			lowest, top := admission.Interactive+1, admission.Bulk-1
			for _, c := range q.Items() {
				if !c.done {
					lowest, top = min(lowest, c.class), max(top, c.class)
				}
			}
			promoted := q.promoted
			c := send(&q)
			if c == nil {
				break
			}
			require.False(t, c.done, "step %d: a finished request sent", step)
			i := slices.Index(live, c)
			require.GreaterOrEqual(t, i, 0, "step %d: request %d sent twice or never queued", step, c.id)
			live = slices.Delete(live, i, i+1)
			// A run: the top class served while a lower one waited. It
			// ends when a lower class is served (a retry back in line), or
			// the request the share promoted (the oldest of a class below
			// the top's: one class lower may take it, the next share goes
			// lower).
			if c.class >= top && c.class > lowest && c != promoted {
				run++
				require.LessOrEqual(t, run, most, "step %d: %d sends in a row while class %v waited", step, run, lowest)
			} else {
				run, most = 0, admission.ShareEvery-1
			}
			switch rng.IntN(6) {
			case 0, 1: // it failed: back after a backoff
				c.notBefore = now.Add(time.Duration(rng.IntN(3)) * time.Second)
				c.back = true
				q.Retry(c)
				live = append(live, c)
			case 2: // a 429, or the shared count refused it: back in line at once
				c.back = true
				q.PushFront(c)
				live = append(live, c)
			}
		case op < 9:
			now = now.Add(time.Second)
			q.DueRetries(now)
		case op < 10: // another lane of the bucket, merged later
			id++
			c := &item{id: id, class: admission.Classes[rng.IntN(3)]}
			join(&other, c)
			live = append(live, c)
		case op < 11:
			q.Merge(&other)
		default:
			if rng.IntN(2) == 0 {
				q.Compact()
				break
			}
			// Close fails the requests of one class.
			class := admission.Classes[rng.IntN(3)]
			q.Filter(func(c *item) bool {
				if c.class == class {
					if c == q.promoted {
						most++
					}
					c.done = true
					return false
				}
				return true
			})
			live = slices.DeleteFunc(live, func(c *item) bool { return c.done })
		}
		// The request the share promoted holds the head until it is sent.
		items := ids(q.Items())
		if p := q.promoted; p != nil && !p.done && slices.Contains(q.Items(), p) {
			require.Same(t, p, q.Items()[0], "step %d: the promoted request lost the head: %v", step, items)
		}
		// The live queue is by class then submission, but for the promoted
		// request and the requests back in line at the front.
		var got []*item
		n := 0
		for _, c := range q.Items() {
			if c.done {
				continue
			}
			n++
			if !c.back && c != q.promoted {
				got = append(got, c)
			}
		}
		for i := 1; i < len(got); i++ {
			a, b := got[i-1], got[i]
			require.True(t, a.class > b.class || a.class == b.class && a.id < b.id, "step %d: queue out of order: %v", step, items)
		}
		// Every live request is queued or retrying, here or in the lane
		// to merge, once.
		for _, c := range slices.Concat(q.Retries(), other.Items(), other.Retries()) {
			if !c.done {
				n++
			}
		}
		require.Equal(t, len(live), n, "step %d: live requests lost or doubled", step)
		for _, c := range slices.Concat(q.Items(), q.Retries()) {
			if !c.done {
				require.GreaterOrEqual(t, c.class, q.lowest, "step %d: lowest above a waiting class", step)
			}
		}
	}
}
