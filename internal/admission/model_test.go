package admission_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/ratelimit"
)

// The model: time in ticks, every answer at once. A bucket counts limit
// requests per window of per ticks, its window starting at the first
// request it counts (as Discord's do); the global window counts global
// requests in any gper ticks (ratelimit.SlidingWindow). Requests arrive on
// their buckets at given ticks and go in order within a bucket.

const tick = 100 * time.Millisecond

type mBucket struct{ limit, per int }

type mCase struct {
	global, gper int
	buckets      []mBucket
	arrivals     [][]int           // per bucket, ascending ticks
	classes      []admission.Class // per bucket (nil: all Normal)
}

func (c mCase) class(i int) admission.Class {
	if c.classes == nil {
		return admission.Normal
	}
	return c.classes[i]
}

func (c mCase) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "global %d/%d ticks;", c.global, c.gper)
	for i, bk := range c.buckets {
		fmt.Fprintf(&b, " b%d %d/%d at %v;", i, bk.limit, bk.per, c.arrivals[i])
	}
	return b.String()
}

func (c mCase) requests() int {
	n := 0
	for _, a := range c.arrivals {
		n += len(a)
	}
	return n
}

// bucketState is a bucket's window in the model.
type bucketState struct {
	start, used int // start -1: no window running
}

func (s *bucketState) room(b mBucket, t int) int {
	if s.start < 0 || t >= s.start+b.per {
		return b.limit
	}
	return b.limit - s.used
}

func (s *bucketState) send(b mBucket, t int) {
	if s.start < 0 || t >= s.start+b.per {
		s.start, s.used = t, 0
	}
	s.used++
}

func arrived(a []int, t int) int {
	n := 0
	for n < len(a) && a[n] <= t {
		n++
	}
	return n
}

// optimal is the least makespan (the tick of the last request sent) any
// work-conserving schedule reaches, by exhaustive search over what each
// bucket sends at each tick.
func optimal(c mCase) int {
	lo := 0
	for _, a := range c.arrivals {
		if len(a) > 0 {
			lo = max(lo, a[len(a)-1])
		}
	}
	for T := lo; ; T++ {
		o := &optSearch{c: c, T: T, failed: map[string]bool{}}
		sent := make([]int, len(c.buckets))
		st := make([]bucketState, len(c.buckets))
		for i := range st {
			st[i].start = -1
		}
		if o.feasible(0, sent, st, nil) {
			return T
		}
	}
}

type optSearch struct {
	c      mCase
	T      int
	failed map[string]bool
}

func (o *optSearch) feasible(t int, sent []int, st []bucketState, global []int) bool {
	done := true
	for i, a := range o.c.arrivals {
		if sent[i] < len(a) {
			done = false
		}
	}
	if done {
		return true
	}
	if t > o.T {
		return false
	}
	// The state at t: windows over are no window; global sends over are
	// gone.
	g := global[:0:0]
	for _, s := range global {
		if t < s+o.c.gper {
			g = append(g, s)
		}
	}
	key := strconv.Itoa(t) + "|" + fmt.Sprint(sent) + "|" + fmt.Sprint(g)
	for i := range st {
		if st[i].start >= 0 && t >= st[i].start+o.c.buckets[i].per {
			st[i] = bucketState{start: -1}
		}
		key += "|" + strconv.Itoa(st[i].start) + "," + strconv.Itoa(st[i].used)
	}
	if o.failed[key] {
		return false
	}
	caps := make([]int, len(st))
	for i, b := range o.c.buckets {
		caps[i] = min(arrived(o.c.arrivals[i], t)-sent[i], st[i].room(b, t))
	}
	room := o.c.global - len(g)
	x := make([]int, len(st))
	var try func(i, left int) bool
	try = func(i, left int) bool {
		if i == len(st) {
			nsent := slices.Clone(sent)
			nst := slices.Clone(st)
			ng := slices.Clone(g)
			for j, k := range x {
				for range k {
					nst[j].send(o.c.buckets[j], t)
					ng = append(ng, t)
				}
				nsent[j] += k
			}
			return o.feasible(t+1, nsent, nst, ng)
		}
		// More first: a schedule that sends sooner is found sooner.
		for k := min(caps[i], left); k >= 0; k-- {
			x[i] = k
			if try(i+1, left-k) {
				return true
			}
		}
		return false
	}
	if try(0, room) {
		return true
	}
	o.failed[key] = true
	return false
}

// mRun is what the scheduler did with a case.
type mRun struct {
	makespan int
	sends    [][]int // per bucket, the ticks it sent at
	grants   []mGrant
}

// mGrant is a grant the scheduler made, and the classes of the buckets in
// line when it did.
type mGrant struct {
	tick, bucket, slots int
	class, hi, lo       admission.Class // the grant's; the highest and lowest in line
}

// schedule runs the case through a Queue as the bucket actors and the
// supervisor use it: a bucket with requests ready and room asks until it
// is served whole, again when more are ready (Ask), a bucket whose window is full and reopens
// within the global period with a backlog of a period or more tells it
// (Soon), and the queue is served at every tick.
func schedule(t *testing.T, c mCase) mRun {
	t.Helper()
	base := time.Unix(1_700_000_000, 0)
	at := func(k int) time.Time { return base.Add(time.Duration(k) * tick) }
	q := admission.New[int](c.global, time.Duration(c.gper)*tick)
	w := ratelimit.NewSlidingWindow(c.global, time.Duration(c.gper)*tick)
	sent := make([]int, len(c.buckets))
	st := make([]bucketState, len(c.buckets))
	for i := range st {
		st[i].start = -1
	}
	wanting := make([]bool, len(c.buckets))
	inLine := func() (hi, lo admission.Class) {
		hi, lo = admission.Bulk, admission.Interactive
		for i, w := range wanting {
			if w {
				hi, lo = max(hi, c.class(i)), min(lo, c.class(i))
			}
		}
		return hi, lo
	}
	soonAt := make([]int, len(c.buckets))
	asked := make([]int, len(c.buckets)) // its want in line
	run := mRun{sends: make([][]int, len(c.buckets))}
	total := c.requests()
	// backlog is a lane's (admission.Backlog): the refills the last
	// queued request waits for, times the bucket's window.
	backlog := func(i, queued, room int) time.Duration {
		b := c.buckets[i]
		return admission.Backlog(queued, room, b.limit, time.Duration(b.per)*tick)
	}
	id := func(i int) uint64 { return uint64(i*1000 + sent[i]) }
	for k, done := 0, 0; done < total; k++ {
		if k > 1000 {
			t.Fatalf("%v: %d of %d requests sent after 1000 ticks", c, done, total)
		}
		now := at(k)
		for again := true; again; {
			again = false
			for i, b := range c.buckets {
				queued := arrived(c.arrivals[i], k) - sent[i]
				if queued == 0 {
					continue
				}
				since := at(c.arrivals[i][sent[i]])
				room := st[i].room(b, k)
				switch {
				case room > 0 && (!wanting[i] || min(queued, room) > asked[i]):
					wanting[i], asked[i] = true, min(queued, room)
					q.Want(now, i, admission.Ask{Want: min(queued, room), Global: true, Path: backlog(i, queued, room), Since: since, First: id(i), Class: c.class(i)})
				case room == 0:
					reopen := st[i].start + b.per
					path := backlog(i, queued, b.limit)
					if reopen-k <= c.gper && path >= time.Duration(c.gper)*tick && soonAt[i] != reopen {
						soonAt[i] = reopen
						q.Soon(now, i, admission.Keep{At: at(reopen), Want: min(queued, b.limit), Path: path, Since: since, First: id(i), Class: c.class(i)})
					}
				}
			}
			hi, lo := inLine()
			grants, _, _ := q.Serve(now, w, false)
			for _, g := range grants {
				i := g.Key
				run.grants = append(run.grants, mGrant{tick: k, bucket: i, slots: g.Slots, class: c.class(i), hi: hi, lo: lo})
				if !g.More {
					wanting[i] = false
					hi, lo = inLine()
				}
				if g.Slots > st[i].room(c.buckets[i], k) || g.Slots > arrived(c.arrivals[i], k)-sent[i] {
					t.Fatalf("%v: tick %d: bucket %d granted %d slots with room %d", c, k, i, g.Slots, st[i].room(c.buckets[i], k))
				}
				for range g.Slots {
					st[i].send(c.buckets[i], k)
					w.Settle(now)
					run.sends[i] = append(run.sends[i], k)
					sent[i]++
					done++
					run.makespan = k
				}
				wanting[i] = g.More
				asked[i] -= g.Slots
				again = again || !g.More // it asks at once for what else is ready
			}
		}
	}
	return run
}

// check verifies a run kept every limit.
func (r mRun) check(t *testing.T, c mCase) {
	t.Helper()
	var all []int
	for i, s := range r.sends {
		all = append(all, s...)
		b := c.buckets[i]
		// Every window of a bucket, from its first request, counts at
		// most its limit.
		for j := 0; j < len(s); {
			end := s[j] + b.per
			n := 0
			for j < len(s) && s[j] < end {
				j++
				n++
			}
			if n > b.limit {
				t.Fatalf("%v: bucket %d sent %d in its window from tick %d: %v", c, i, n, end-b.per, r.sends)
			}
		}
	}
	slices.Sort(all)
	for j := range all {
		if j+c.global < len(all) && all[j+c.global] < all[j]+c.gper {
			t.Fatalf("%v: %d requests within %d ticks from tick %d", c, c.global+1, c.gper, all[j])
		}
	}
}

func randomCase(rng *rand.Rand) mCase {
	c := mCase{global: 1 + rng.IntN(4), gper: 1 + rng.IntN(4)}
	nb := 1 + rng.IntN(3)
	budget := 3 + rng.IntN(7)
	for range nb {
		c.buckets = append(c.buckets, mBucket{limit: 1 + rng.IntN(3), per: 1 + rng.IntN(4)})
		c.arrivals = append(c.arrivals, nil)
	}
	for range budget {
		i := rng.IntN(nb)
		c.arrivals[i] = append(c.arrivals[i], rng.IntN(4))
	}
	for i := range c.arrivals {
		slices.Sort(c.arrivals[i])
	}
	return c
}

// TestModelAgainstOptimal runs small random cases (one to three buckets,
// up to nine requests, a global window of one to four per one to four
// ticks) through the scheduler and against the best schedule an
// exhaustive search finds. That search knows the future: with requests
// arriving over time it may hold a bucket's first request back to align
// its windows with later arrivals, which no scheduler that answers as
// requests come can do. Measured (seeded, 1,000 cases each): with every
// request queued at the start, 19 cases finish later than the optimum, by
// 2 ticks at most, never more than one global period; with arrivals
// spread over four ticks, 27, by 3 at most (one where a bucket's second
// request came after the scheduler had to choose). At most 3% later at
// all. The cases it loses are those where a slot is kept for a bucket
// about to reopen (Soon) although the global window, not that bucket, was
// the longer road: the kept slot stands idle until the reopening.
func TestModelAgainstOptimal(t *testing.T) {
	for _, backlog := range []bool{true, false} {
		t.Run(fmt.Sprint("backlog=", backlog), func(t *testing.T) {
			t.Parallel()
			modelAgainstOptimal(t, backlog)
		})
	}
}

func modelAgainstOptimal(t *testing.T, backlog bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	worse, worst, cases := 0, 0, 0
	for range 1000 {
		c := randomCase(rng)
		if backlog {
			for _, a := range c.arrivals {
				clear(a)
			}
		}
		if c.requests() == 0 {
			continue
		}
		cases++
		run := schedule(t, c)
		run.check(t, c)
		opt := optimal(c)
		if run.makespan < opt {
			t.Fatalf("%v: the scheduler finished at %d, before the optimal %d: the search is wrong", c, run.makespan, opt)
		}
		d, bound := run.makespan-opt, c.gper
		if !backlog {
			// What a later arrival would have had a bucket's window
			// aligned for.
			for _, b := range c.buckets {
				bound = max(bound, c.gper+b.per)
			}
		}
		if d > bound {
			t.Errorf("%v: %d ticks, optimal %d: more than %d later; sends %v", c, run.makespan, opt, bound, run.sends)
		}
		if d > 0 {
			worse++
			if d > worst {
				worst = d
				t.Logf("%v: %d ticks, optimal %d; sends %v", c, run.makespan, opt, run.sends)
			}
		}
	}
	t.Logf("%d of %d cases later than optimal, worst by %d ticks", worse, cases, worst)
	if worse*100 > 3*cases {
		t.Errorf("%d of %d cases later than optimal: more than 3%%", worse, cases)
	}
}

// lowerBound is the least makespan the limits allow, each on its own: a
// bucket's queue at its own pace, and every request at the global rate.
func lowerBound(c mCase) int {
	lb, n := 0, 0
	for i, a := range c.arrivals {
		n += len(a)
		if len(a) > 0 {
			b := c.buckets[i]
			lb = max(lb, a[len(a)-1], (len(a)-1)/b.limit*b.per)
		}
	}
	return max(lb, (n-1)/c.global*c.gper)
}

// TestModelGlobalBoundBacklogs runs backlogs too large for the search:
// 3 to 22 buckets of Discord's 5 per window (5 to 24 ticks), 1 to 12
// requests each, under a global window of 4 to 11 per 10 ticks, every
// request queued at the start. Each finishes within 1.08x of the limits'
// lower bound (measured, 40 seeded cases: 30 at it, the
// worst 1.066x: 64 ticks for 60, where a slot kept for a bucket about to
// reopen stood idle for 4 ticks of each period while the global window
// was the longer road, as in TestModelAgainstOptimal).
func TestModelGlobalBoundBacklogs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	at, worst := 0, 1.0
	defer func() { t.Logf("%d of 40 at the lower bound, the worst %.3fx", at, worst) }()
	for range 40 {
		c := mCase{global: 4 + rng.IntN(8), gper: 10}
		nb := 3 + rng.IntN(20)
		for range nb {
			c.buckets = append(c.buckets, mBucket{limit: 5, per: 5 + rng.IntN(20)})
			c.arrivals = append(c.arrivals, make([]int, 1+rng.IntN(12)))
		}
		run := schedule(t, c)
		run.check(t, c)
		lb := lowerBound(c)
		ratio := float64(run.makespan+1) / float64(lb+1)
		worst = max(worst, ratio)
		if run.makespan == lb {
			at++
		}
		if ratio > 1.08 {
			t.Errorf("global %d/%d, %d buckets, %d requests: %d ticks, lower bound %d (%.2fx)", c.global, c.gper, nb, c.requests(), run.makespan, lb, ratio)
		}
	}
}

// TestModelClasses runs global-bound loads of bulk work with interactive
// requests arriving over the run on buckets of their own, and checks the class rule: every limit kept; a grant to a lower class than
// one in line only as the share, after ShareEvery-1 slots in a row to
// higher classes; and each interactive request sent within one global
// period of when its own bucket let it go (its arrival, or a window after
// its bucket's earlier sends), however much bulk work waits.
func TestModelClasses(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	worstWait, worstRatio := 0, 1.0
	defer func() {
		t.Logf("interactive: the longest wait past its bucket %d ticks (global period 10); bulk makespan at worst %.3fx the lower bound", worstWait, worstRatio)
	}()
	for range 40 {
		c := mCase{global: 4 + rng.IntN(8), gper: 10}
		nb := 3 + rng.IntN(12)
		for range nb {
			c.buckets = append(c.buckets, mBucket{limit: 5, per: 5 + rng.IntN(20)})
			c.arrivals = append(c.arrivals, make([]int, 1+rng.IntN(12)))
			c.classes = append(c.classes, admission.Bulk)
		}
		// Interactive requests on buckets of their own, fewer in any
		// global period than the window's count less one (the share): a
		// load the global limit can serve beside the bulk work.
		var all []int
		for range 1 + rng.IntN(3) {
			arr := make([]int, 1+rng.IntN(3))
			for j := range arr {
				for {
					arr[j] = rng.IntN(40)
					if within(append(slices.Clone(all), arr[:j+1]...), c.gper) < c.global-1 {
						break
					}
				}
			}
			all = append(all, arr...)
			slices.Sort(arr)
			c.buckets = append(c.buckets, mBucket{limit: 5, per: 5 + rng.IntN(20)})
			c.arrivals = append(c.arrivals, arr)
			c.classes = append(c.classes, admission.Interactive)
		}
		run := schedule(t, c)
		run.check(t, c)
		streak := 0
		for _, g := range run.grants {
			switch {
			case g.slots == 0:
			case g.class < g.hi:
				if streak < admission.ShareEvery-1 {
					t.Fatalf("%v: tick %d: %d slots to %v with %v in line, after %d slots to higher classes", c, g.tick, g.slots, g.class, g.hi, streak)
				}
				streak = 0
			case g.lo < g.class:
				streak += g.slots
			default:
				streak = 0
			}
		}
		for i, arr := range c.arrivals {
			if c.classes[i] != admission.Interactive {
				continue
			}
			b, sends := c.buckets[i], run.sends[i]
			for k, a := range arr {
				ready := a
				if k >= b.limit {
					ready = max(ready, sends[k-b.limit]+b.per)
				}
				wait := sends[k] - ready
				worstWait = max(worstWait, wait)
				if wait > c.gper {
					t.Errorf("%v: interactive request %d of bucket %d sent at %d, its bucket let it go at %d: more than a global period", c, k, i, sends[k], ready)
				}
			}
		}
		ratio := float64(run.makespan+1) / float64(lowerBound(c)+1)
		worstRatio = max(worstRatio, ratio)
	}
}

// within is the most of ticks that fall in one span of per ticks.
func within(ticks []int, per int) int {
	most := 0
	for _, a := range ticks {
		n := 0
		for _, b := range ticks {
			if b >= a && b < a+per {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}
