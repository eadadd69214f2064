package actors

import (
	"cmp"
	"container/heap"
	"slices"
	"sort"
	"time"
)

// The global part of an ETA: a replay of the supervisor's admission over
// the calls waiting for a global window.
//
// The window does not serve calls in submission order. The supervisor
// serves bucket actors, earliest virtual deadline first (supervisor.want):
// the submission time of the actor's earliest ready call, less pathWeight
// times how long the actor's queue still needs at its bucket's pace; ties
// go to the earliest call's id. An actor served gets a slot for each of
// its ready calls in one grant, so a channel's calls that its bucket lets
// go together go together, ahead of other channels' calls submitted
// between them; a hot channel's long backlog goes ahead of everything.
// And a bucket whose limit is not known yet sends one pioneer, the rest
// of its queue a round trip after it.
//
// The forecast replays that, from what every waiting call publishes
// (Call.due and Call.guess, the bucket actor's stamps; its route; its
// submission): time advances from one free global slot to the next (the
// window's own forecast, ratelimit.SlidingWindow.Forecast, for the slots
// it holds; a slot taken at t frees again at t + round trip + period); at
// each, the ready calls (due no later) of the actor with the earliest
// deadline take it. O(n log n) in the calls waiting for the window; it
// stops once every asked call has its slot.

// waiter is a call waiting for a global window's slot, as the forecast
// sees it.
type waiter struct {
	id        uint64
	submitted int64  // Unix ns
	due       int64  // when its bucket and groups let it go, Unix ns
	guess     bool   // its bucket's limit is unknown: due is a lower bound
	pace      int64  // its bucket's window with the margin (ns), 0: unknown
	actor     string // its bucket actor's key (Route.Major)
	lane      string // its lane: forecastLane
	window    Window // the global window it counts on
	target    int    // index of the asked ETA it answers, -1: it only counts

	key, first int64 // the virtual deadline of the grant it is forecast in, and its tie-break
	follows    bool  // waits for its lane's pioneer's answer
	early      int64 // the earliest it may go (Unix ns): due, or its pioneer's earliest answer
}

// slotSource is what the forecast needs of a global window.
type slotSource interface {
	Forecast(now time.Time, k int) time.Time
	Limit() (int, time.Duration)
}

// admissionForecast returns, for each waiter, when the supervisor is
// expected to let it take a global slot, and the earliest it may (zero
// for those not reached: only counting waiters may be left so). held is how many slots the
// window has already granted to actors that have not used them: the first
// calls served use those. onWire holds the lanes (forecastLane) with a
// call on the wire: an unknown lane's pioneer is out, its other
// calls wait for its answer.
func admissionForecast(ws []waiter, src slotSource, now time.Time, rtt time.Duration, held int, onWire map[string]bool) []slotTime {
	out := make([]slotTime, len(ws))
	if len(ws) == 0 {
		return out
	}
	n, per := src.Limit()
	targets := 0
	for i := range ws {
		if ws[i].target >= 0 {
			targets++
		}
	}
	nowNs := now.UnixNano()

	// Each lane in submission order: its calls' due times (the windows its
	// queue needs at its bucket's pace), and for an unknown lane with no
	// pioneer out, its pioneer (the first), whose slot releases the rest.
	type laneInfo struct {
		dues    []int64 // its waiters' due times
		pace    int64   // its bucket's window (with the margin), 0: unknown
		count   int
		guess   bool
		pioneer int // index into ws, -1: none waiting
		rest    []int
	}
	lanes := map[string]*laneInfo{}
	order := make([]int, len(ws))
	for i := range ws {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(ws[a].id, ws[b].id) })
	laneOf := make([]*laneInfo, len(ws))
	for _, i := range order {
		w := &ws[i]
		li := lanes[w.lane]
		if li == nil {
			li = &laneInfo{pioneer: -1}
			lanes[w.lane] = li
			if w.guess && !onWire[w.lane] {
				li.pioneer = i
			}
		} else if li.pioneer >= 0 && w.guess {
			w.follows = true
			li.rest = append(li.rest, i)
		}
		li.dues = append(li.dues, max(w.due, nowNs))
		li.pace = max(li.pace, w.pace)
		li.count++
		li.guess = li.guess || w.guess
		laneOf[i] = li
	}
	// path is how long a lane still needs after its calls due at due, in
	// whole windows (lane.backlog): the windows its later calls are due
	// in, each counted once.
	for _, li := range lanes {
		slices.Sort(li.dues)
		if li.pace <= 0 {
			continue
		}
		windows := li.dues[:0]
		for _, d := range li.dues {
			if len(windows) == 0 || d-windows[len(windows)-1] > int64(sameWindow) {
				windows = append(windows, d)
			}
		}
		li.dues = windows
	}
	path := func(li *laneInfo, due int64) int64 {
		if li.guess {
			return int64(li.count) * int64(unknownPace)
		}
		if li.pace <= 0 {
			return 0
		}
		due = max(due, nowNs)
		later := len(li.dues) - sort.Search(len(li.dues), func(k int) bool { return li.dues[k] > due+int64(sameWindow) })
		return int64(later) * li.pace
	}

	pending := &waiterHeap{ws: ws, less: func(a, b *waiter) bool {
		return a.due < b.due || a.due == b.due && a.id < b.id
	}}
	ready := &waiterHeap{ws: ws, less: func(a, b *waiter) bool {
		if a.key != b.key {
			return a.key < b.key
		}
		if a.first != b.first {
			return a.first < b.first
		}
		return a.id < b.id
	}}
	for i := range ws {
		if !ws[i].follows {
			pending.idx = append(pending.idx, i)
		}
	}
	heap.Init(pending)

	// admit moves the waiters due by t to ready, one grant per actor: the
	// actor's earliest submission less pathWeight times its longest path.
	var batch []int
	admit := func(t int64) {
		batch = batch[:0]
		for pending.Len() > 0 && ws[pending.idx[0]].due <= t {
			batch = append(batch, heap.Pop(pending).(int))
		}
		if len(batch) == 0 {
			return
		}
		slices.SortFunc(batch, func(a, b int) int {
			return cmp.Or(cmp.Compare(ws[a].actor, ws[b].actor), cmp.Compare(ws[a].id, ws[b].id))
		})
		for lo := 0; lo < len(batch); {
			hi, since, first, long := lo, ws[batch[lo]].submitted, int64(ws[batch[lo]].id), int64(0)
			for ; hi < len(batch) && ws[batch[hi]].actor == ws[batch[lo]].actor; hi++ {
				w := &ws[batch[hi]]
				if w.submitted < since {
					since, first = w.submitted, int64(w.id)
				}
				long = max(long, path(laneOf[batch[hi]], w.due))
			}
			key := min(since, t) - int64(pathWeight)*long
			for _, i := range batch[lo:hi] {
				ws[i].key, ws[i].first = key, first
				heap.Push(ready, i)
			}
			lo = hi
		}
	}

	// The window's free slots: those it holds free at their forecast
	// times, then each slot taken again one round trip and one period
	// after it was. Each slot also keeps its earliest time, had every
	// answer come back in half the round trip: the forecast is less sure
	// the more cycles of the window it looks ahead.
	slots := make(slotHeap, 0, min(n, len(ws)))
	for k := range min(n, len(ws)) {
		at := src.Forecast(now, k).UnixNano()
		slots = append(slots, slotTime{at: at, early: at})
	}
	heap.Init(&slots)
	recycle, quick := int64(rtt+per), int64(rtt/2+per)
	for i := range ws {
		ws[i].early = ws[i].due
	}

	clock := nowNs // the replay's time: it never goes back
	for served := 0; targets > 0; {
		t := clock
		if served >= held {
			t = max(t, slots[0].at)
		}
		admit(t)
		if ready.Len() == 0 {
			if pending.Len() == 0 {
				break // only pioneers' followers would be left: none here
			}
			t = max(t, ws[pending.idx[0]].due)
			admit(t)
		}
		clock = t
		i := heap.Pop(ready).(int)
		early := ws[i].early
		if served >= held {
			early = max(early, slots[0].early)
			slots[0] = slotTime{at: t + recycle, early: early + quick}
			heap.Fix(&slots, 0)
		}
		out[i] = slotTime{at: t, early: early}
		if ws[i].target >= 0 {
			targets--
		}
		served++
		if li := laneOf[i]; li.pioneer == i {
			// Its answer, a round trip later, makes the bucket known: the
			// rest of its queue goes then, as its bucket allows.
			for _, j := range li.rest {
				ws[j].due = max(ws[j].due, t+int64(rtt))
				ws[j].early = max(ws[j].early, early+int64(rtt/2))
				ws[j].follows = false
				heap.Push(pending, j)
			}
			li.guess, li.rest, li.dues = false, nil, nil
		}
	}
	return out
}

// forecastLane names c's lane for the forecast: its actor and its route
// family (method, template), which is immutable, unlike the lane a bucket
// actor keeps it in.
func forecastLane(c *Call) string {
	return c.Route.Major + "\x00" + c.Route.Method + " " + c.Route.Template
}

// sameWindow is how close two due times of a lane are for the forecast
// to take them for one window of its bucket: those of a later window come
// from one reset time, apart only by rounding; those of the current one
// are counted from now.
const sameWindow = time.Millisecond

// slotTime is when a global slot is forecast to be taken (at), and the
// earliest it may be (early), in Unix ns.
type slotTime struct{ at, early int64 }

// slotHeap is a min-heap of slots by their forecast time.
type slotHeap []slotTime

func (h slotHeap) Len() int           { return len(h) }
func (h slotHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h slotHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *slotHeap) Push(x any)        { *h = append(*h, x.(slotTime)) }
func (h *slotHeap) Pop() any {
	x := (*h)[len(*h)-1]
	*h = (*h)[:len(*h)-1]
	return x
}

// waiterHeap is a heap of indexes into ws.
type waiterHeap struct {
	ws   []waiter
	idx  []int
	less func(a, b *waiter) bool
}

func (h *waiterHeap) Len() int           { return len(h.idx) }
func (h *waiterHeap) Less(i, j int) bool { return h.less(&h.ws[h.idx[i]], &h.ws[h.idx[j]]) }
func (h *waiterHeap) Swap(i, j int)      { h.idx[i], h.idx[j] = h.idx[j], h.idx[i] }
func (h *waiterHeap) Push(x any)         { h.idx = append(h.idx, x.(int)) }
func (h *waiterHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}

// observeRTT adds an answer's round trip to System.rtt, which follows the
// shortest at once and longer ones slowly (1/32 per answer): close to the
// least round trip lately, so a burst's queueing does not stretch every
// later forecast, and a global forecast starts early rather than late (a
// forecast window is one period wide from its start). Concurrent answers
// may overwrite each other's updates: an estimate loses little.
func (s *System) observeRTT(d time.Duration) {
	if d <= 0 {
		return
	}
	old := s.rtt.Load()
	if old == 0 {
		s.rtt.Store(int64(d))
		return
	}
	if int64(d) < old {
		s.rtt.Store(int64(d))
		return
	}
	s.rtt.Store(old + (int64(d)-old)/32)
}
