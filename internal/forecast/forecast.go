// Package forecast tells when a waiting request is expected to be sent:
// its ETA. It is pure: time is an argument, and it works on its own copy
// of what it is given.
//
// Assemble puts an ETA together from its parts (eta.go): the part its
// bucket actor knows (Part: its stage, its place, its bucket's window),
// its declared groups' window (Declared), and its global window's, which
// Replay tells. The actors only gather those inputs (System.finish: the
// bucket actor's part, the live requests' stamps, the windows' limiters
// and granted slots, the clock) and call Assemble, for Future.ETA and
// Snapshot alike. ETA.Limit names the limit that sets an ETA's Start,
// the latest of them; the global window raises an ETA only when it held
// the request past the time its other limits let it go.
//
// MaxWait and Waits.Weigh (wait.go) weigh a request's wait as it joins
// its bucket's queue, from what is certain then (its bucket's window, its
// declared window, the global window's pause), and say whether MaxWait
// refuses it; the bucket actor gathers the parts (bucket.enqueue).
//
// Replay replays the global admission over the requests waiting for a
// global window, to tell when each is expected to take its slot: the
// global part of an ETA.
//
// The window does not serve requests in submission order. The supervisor
// serves bucket actors, the highest class first (admission.Class, with the
// lower classes' share: admission.Share, from the line's count), then
// earliest virtual deadline first (admission.Deadline): the submission
// time of the actor's earliest ready request, less admission.PathWeight
// times how long the actor's queue still needs at its bucket's pace; ties
// go to the earliest request's id. An actor served gets a slot for each of
// its ready requests in one grant, so a channel's requests that its
// bucket lets go together go together, ahead of other channels' requests
// submitted between them; a hot channel's long backlog goes ahead of
// everything. And a bucket whose limit is not known yet sends one
// pioneer, the rest of its queue a round trip after it.
//
// Replay replays that, from what every waiting request publishes (its
// bucket actor's stamps, its route, its submission: Waiter) and the
// admission queue now (Line: an actor served in part keeps its place for
// the rest): time advances from one free global slot to the next (the
// window's own forecast, ratelimit.SlidingWindow.Forecast, for the slots
// it holds; a slot taken at t frees again at t + round trip + period); at
// each, the ready requests of the actor first in line take it. A bucket's
// requests become ready window by window, as its bucket lets them
// (laneState): the global limit may hold a window's requests past its
// reset, and then the next window opens late. O(n log n) in the requests
// waiting for the window; it stops once every asked request has its slot.
package forecast

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/sluicehq/sluice/internal/admission"
)

// Waiter is a request waiting for a global window's slot, as the forecast
// sees it (the bucket actor's stamps on its call).
type Waiter struct {
	ID        uint64
	Submitted int64  // Unix ns
	Due       int64  // when its bucket and groups let it go, Unix ns
	Guess     bool   // its bucket's limit is unknown: Due is a lower bound
	Pace      int64  // its bucket's window with the margin (ns), 0: unknown
	Limit     int    // its bucket's count per window, 0: unknown
	Probe     bool   // its bucket's next window holds for a probe
	Actor     string // its bucket actor's key (Route.Major)
	Route     string // its route family, "METHOD /template": with Actor, its lane (Lane)
	Target    int    // index of the asked ETA it answers, -1: it only counts
	Class     admission.Class

	rank       admission.Class // the class of the grant it is forecast in: its actor's highest ready
	key, first int64           // the virtual deadline of the grant it is forecast in, and its tie-break
	early      int64           // the earliest it may go (Unix ns): due, or its pioneer's earliest answer
}

// Lane names a lane in the replay: its bucket actor's key and its route
// family ("METHOD /template"), which never change, unlike the lane a
// bucket actor keeps a call in.
type Lane struct{ Actor, Route string }

// Line is a window's admission queue as the forecast starts from it: each
// actor waiting (by its key, Route.Major) with its place (a bucket served
// in part keeps its place for the rest of its requests: the forecast
// starts from these places rather than from what the actors would be
// given afresh), and the lower classes' share as it stands (the line
// serves a lower class when its count is due, not after a fresh count).
type Line struct {
	Places map[string]admission.Place
	Share  admission.Share
}

// Source is what the forecast needs of a global window
// (ratelimit.SlidingWindow).
type Source interface {
	Forecast(now time.Time, k int) time.Time
	Limit() (int, time.Duration)
}

// laneState is one lane in the replay.
//
// A lane whose limit is known releases its calls window by window, as its
// bucket actor does: the calls its current window has room for at once
// (those its actor stamped due by now), then, at each window's end, as
// many as the new window has room for, less those released before and
// still waiting for a global slot (they will count in the new window).
// A window ends one pace after its first call takes its slot (and a
// round trip more while the server's clock is not known: the bucket then
// dates its windows from the answers).
// So a bucket whose calls the global limit holds past its reset loses no
// window, and its later calls are not forecast a window early. A window
// that holds for a probe (the bucket's first reopening, Bucket.Probing)
// lets one call go, and the rest of its room a round trip after it.
// A lane whose limit is not known sends its pioneer (the first) alone;
// the rest is released a round trip after it, at the times stamped.
type laneState struct {
	limit   int     // its bucket's count per window; 0: not replayed window by window
	pace    int64   // its bucket's window with the margin (ns), 0: unknown
	guess   bool    // its limit is unknown
	pioneer int     // index into ws, -1: none waiting
	queue   []int   // indexes into ws not yet released, in submission order
	dues    []int64 // a static lane's windows: its calls' due times, one per window
	out     int     // released calls still waiting for a slot
	end     int64   // the current window's end (Unix ns)
	started bool    // a call of the current window has taken its slot
	probe   bool    // its next window holds for a probe
	probing bool    // the current window holds for its probe
	answer  int64   // while probing: its probe's answer (Unix ns), 0: not sent
	soonest int64   // while probing: the earliest the probe may go (its answer may follow at once)
	waited  bool    // a call of it took its slot after it was released: its later windows open late
	last    int64   // when its latest call served went (Unix ns; 0: none): its slots free a round trip and a period later
}

// Replay returns, for each waiter, when the supervisor is
// expected to let it take a global slot, and the earliest it may (zero
// for those not reached: only counting waiters may be left so). A
// bucket's window ends a pace and lag after its first call takes its slot
// (lag: 0 once the server's clock is known, the bucket then sending its
// next window to arrive at the server's reset; a round trip before, while
// it dates windows from the answers). held is
// how many slots the window has already granted to actors that have not
// used them: the first calls served use those. onWire holds the lanes
// with a call on the wire: an unknown lane's pioneer is
// out, its other calls wait for its answer. line is the admission queue
// now: the places of the actors waiting in it (nil: none known) and the
// lower classes' share, which the replay goes on from. ws is not
// modified.
func Replay(ws []Waiter, src Source, now time.Time, rtt, lag time.Duration, held int, onWire map[Lane]bool, line Line) []Slot {
	out := make([]Slot, len(ws))
	if len(ws) == 0 {
		return out
	}
	// The replay moves a call's due to the window its lane releases it in;
	// the caller compares the forecast with the due it gave (a slot later
	// than that raises the ETA), so it works on its own copy.
	ws = slices.Clone(ws)
	n, per := src.Limit()
	targets := 0
	for i := range ws {
		if ws[i].Target >= 0 {
			targets++
		}
	}
	nowNs := now.UnixNano()

	pending := &waiterHeap{ws: ws, less: func(a, b *Waiter) bool {
		return a.Due < b.Due || a.Due == b.Due && a.ID < b.ID
	}}
	// inLine is the order without classes: the share's (admission.Share).
	inLine := func(a, b *Waiter) bool {
		if a.key != b.key {
			return a.key < b.key
		}
		if a.first != b.first {
			return a.first < b.first
		}
		return a.ID < b.ID
	}
	ready := &waiterHeap{ws: ws, less: func(a, b *Waiter) bool {
		if a.rank != b.rank {
			return a.rank > b.rank
		}
		return inLine(a, b)
	}}
	// readyRanks counts the ready calls of each rank (index rank-Bulk); the
	// share gives a lower rank a slot as the line does.
	var readyRanks [len(admission.Classes)]int
	share, places := line.Share, line.Places
	popReady := func() int {
		top := ws[ready.idx[0]].rank
		lower := false
		for r := admission.Bulk; r < top; r++ {
			lower = lower || readyRanks[r-admission.Bulk] > 0
		}
		var i int
		if lower && share.Due() {
			// The first of the lower ranks in line without classes.
			at := admission.SharePick(ready.idx, top,
				func(j int) (admission.Class, bool) { return ws[j].rank, true },
				func(a, b int) bool { return inLine(&ws[a], &ws[b]) })
			i = heap.Remove(ready, at).(int)
			share.Served(1, true, false)
		} else {
			i = heap.Pop(ready).(int)
			share.Served(1, false, lower)
		}
		readyRanks[ws[i].rank-admission.Bulk]--
		return i
	}
	var wakes wakeHeap // lanes' window ends

	// Each lane in submission order.
	lanes := map[Lane]*laneState{}
	order := make([]int, len(ws))
	for i := range ws {
		order[i] = i
		ws[i].early = ws[i].Due
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(ws[a].ID, ws[b].ID) })
	laneOf := make([]*laneState, len(ws))
	for _, i := range order {
		w := &ws[i]
		key := Lane{w.Actor, w.Route}
		li := lanes[key]
		if li == nil {
			li = &laneState{pioneer: -1, limit: w.Limit, probe: w.Probe}
			lanes[key] = li
			if w.Guess && !onWire[key] {
				li.pioneer = i
			}
		}
		if w.Guess || w.Limit <= 0 || w.Pace <= 0 || w.Limit != li.limit {
			li.limit = 0
		}
		li.pace = max(li.pace, w.Pace)
		li.guess = li.guess || w.Guess
		li.queue = append(li.queue, i)
		laneOf[i] = li
	}
	// release makes call i due at (and not before earliest, had every
	// answer come back in half the round trip).
	release := func(i int, at, earliest int64) {
		ws[i].Due = max(ws[i].Due, at)
		ws[i].early = max(ws[i].early, earliest)
		laneOf[i].out++
		heap.Push(pending, i)
	}
	for _, li := range lanes {
		switch {
		case li.pioneer >= 0:
			// The pioneer goes alone; its answer releases the rest.
			release(li.queue[0], nowNs, nowNs)
			li.queue = li.queue[1:]
			li.limit = 0
		case li.limit > 0:
			// Its current window: the calls stamped due by now; it ends
			// when the first call stamped later is due.
			k := 0
			for k < len(li.queue) && ws[li.queue[k]].Due <= nowNs+int64(sameWindow) {
				k++
			}
			li.end, li.started = math.MaxInt64, true
			if k < len(li.queue) {
				li.end = ws[li.queue[k]].Due
				heap.Push(&wakes, wake{at: li.end, lane: li})
			}
			for _, i := range li.queue[:k] {
				release(i, nowNs, nowNs)
			}
			li.queue = li.queue[k:]
		default:
			for _, i := range li.queue {
				ws[i].Due = max(ws[i].Due, nowNs)
				li.dues = append(li.dues, ws[i].Due)
				release(i, nowNs, nowNs)
			}
			li.queue = nil
		}
		// A static lane's windows: its due times, each counted once.
		slices.Sort(li.dues)
		windows := li.dues[:0]
		for _, d := range li.dues {
			if len(windows) == 0 || d-windows[len(windows)-1] > int64(sameWindow) {
				windows = append(windows, d)
			}
		}
		li.dues = windows
	}
	// open starts a replayed lane's next window at t: it releases as many
	// calls as the window has room for beside those still waiting. A
	// window that holds for a probe releases them too: the actor asks
	// slots for all of them and keeps those the probe leaves until its
	// answer (lanes.ProbeAwaited); the first to take a slot is the probe,
	// the others go at its answer.
	open := func(li *laneState, t int64) {
		li.started, li.end = false, math.MaxInt64
		k := min(max(0, li.limit-li.out), len(li.queue))
		if li.probe {
			li.probe, li.probing, li.answer = false, true, 0
		}
		for _, i := range li.queue[:k] {
			release(i, t, t)
		}
		li.queue = li.queue[k:]
	}

	// path is how long a lane still needs after the calls it releases by
	// t, at its bucket's pace (admission.Backlog, as the live lanes weigh
	// it: the refills its last call waits for).
	path := func(li *laneState, t int64) int64 {
		switch {
		case li.guess:
			return int64(admission.Backlog(li.out+len(li.queue), 0, 0, 0))
		case li.pace <= 0:
			return 0
		case li.limit > 0:
			return int64(admission.Backlog(len(li.queue), 0, li.limit, time.Duration(li.pace)))
		}
		later := len(li.dues) - sort.Search(len(li.dues), func(k int) bool { return li.dues[k] > t+int64(sameWindow) })
		return int64(later) * li.pace
	}

	// admit opens the windows that end by t and moves the calls due by t
	// to ready, one grant per actor: the actor's earliest submission less
	// pathWeight times its longest path, or its place in the queue now.
	var batch []int
	placed := map[string]bool{} // the actors whose place in places was taken
	admit := func(t int64) {
		for wakes.Len() > 0 && wakes[0].at <= t {
			wk := heap.Pop(&wakes).(wake)
			open(wk.lane, wk.at)
		}
		batch = batch[:0]
		for pending.Len() > 0 && ws[pending.idx[0]].Due <= t {
			batch = append(batch, heap.Pop(pending).(int))
		}
		if len(batch) == 0 {
			return
		}
		slices.SortFunc(batch, func(a, b int) int {
			return cmp.Or(cmp.Compare(ws[a].Actor, ws[b].Actor), cmp.Compare(ws[a].ID, ws[b].ID))
		})
		for lo := 0; lo < len(batch); {
			hi, since, first, long, pioneer, rank := lo, ws[batch[lo]].Submitted, int64(ws[batch[lo]].ID), int64(0), false, admission.Bulk
			for ; hi < len(batch) && ws[batch[hi]].Actor == ws[batch[lo]].Actor; hi++ {
				w := &ws[batch[hi]]
				rank = max(rank, w.Class)
				if w.Submitted < since {
					since, first = w.Submitted, int64(w.ID)
				}
				long = max(long, path(laneOf[batch[hi]], w.Due))
				pioneer = pioneer || laneOf[batch[hi]].pioneer == batch[hi]
			}
			key := admission.Deadline(time.Unix(0, t), time.Unix(0, since), time.Duration(long), pioneer).UnixNano()
			if p, ok := places[ws[batch[lo]].Actor]; ok && !placed[ws[batch[lo]].Actor] {
				// Waiting in the queue already: its place there stands
				// until it asks again (admission.Queue.Want: the latest
				// ask's place).
				placed[ws[batch[lo]].Actor] = true
				key, first = p.Deadline.UnixNano(), int64(p.First)
			}
			for _, i := range batch[lo:hi] {
				ws[i].rank, ws[i].key, ws[i].first = rank, key, first
				heap.Push(ready, i)
				readyRanks[rank-admission.Bulk]++
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
		slots = append(slots, Slot{At: at, Early: at})
	}
	heap.Init(&slots)
	recycle, quick := int64(rtt+per), int64(rtt/2+per)

	// keptFor is when the window's next slot goes, if it is kept at t
	// for lanes that reopen within the period, ahead in line of the
	// ready call it would go to: the live keeps (admission.Queue.Soon,
	// told a period ahead, lanes.Keep), which hold back what those lanes
	// would find missing at their reopening, a round trip after it (the
	// slots free by then count). 0: not kept.
	keptFor := func(t int64) int64 {
		if len(wakes) == 0 || wakes[0].at > t+int64(per) {
			return 0 // no lane reopens within the period
		}
		h := &ws[ready.idx[0]]
		want, until, first := 0, int64(0), int64(math.MaxInt64)
		for _, wk := range wakes {
			li := wk.lane
			if wk.at <= t || wk.at > t+int64(per) || li.limit <= 0 || len(li.queue) == 0 || li.pace <= 0 {
				continue
			}
			c := &ws[li.queue[0]]
			if c.Class < h.rank {
				continue // behind the call the slot goes to: not kept from it
			}
			avail := max(0, li.limit-li.out)
			long := admission.Backlog(len(li.queue), avail, li.limit, time.Duration(li.pace))
			if long < per {
				continue // no keep: its queue needs no window after the reopening one
			}
			// Its place at its reopening (admission.Deadline, in ns).
			if c.Class == h.rank && min(wk.at, c.Submitted)-admission.PathWeight*int64(long) >= h.key {
				continue // behind the call the slot goes to: not kept from it
			}
			// Its slots come a round trip after it reopens, or when its
			// last window's free, if later: at most a quarter period
			// (lanes.Keep's slack).
			slack := int64(rtt)
			if d := li.last + int64(rtt+per) - wk.at; li.last > 0 && d > slack {
				slack = min(d, int64(per/4))
			}
			want += min(len(li.queue), avail)
			until, first = max(until, wk.at+slack), min(first, wk.at)
		}
		if want == 0 {
			return 0
		}
		free := 0
		for _, s := range slots {
			if s.At <= until {
				free++
			}
		}
		if free > want {
			return 0
		}
		return first
	}

	clock := nowNs // the replay's time: it never goes back
	cut := newBurstCut(len(ws), n, rtt)
	for served := 0; targets > 0; {
		t := clock
		if served >= held {
			t = max(t, slots[0].At)
		}
		admit(t)
		if served >= held && ready.Len() > 0 && per > 0 {
			if at := keptFor(t); at > 0 {
				clock = at // the slot waits for the kept lanes' reopening
				continue
			}
		}
		if ready.Len() == 0 {
			next := int64(math.MaxInt64)
			if pending.Len() > 0 {
				next = ws[pending.idx[0]].Due
			}
			if wakes.Len() > 0 {
				next = min(next, wakes[0].at)
			}
			if next == math.MaxInt64 {
				break // only held calls would be left: none here
			}
			t = max(t, next)
			clock = t
			continue
		}
		clock = t
		i := popReady()
		li := laneOf[i]
		// sent is when the call goes: when it takes its slot, or, in a
		// window that holds for its probe, at the probe's answer, with
		// the slot kept for it meanwhile.
		sent := t
		if li.probing && li.answer != 0 {
			if t < li.answer {
				// Its bucket holds it until then, not the window.
				sent = li.answer
				ws[i].Due = max(ws[i].Due, sent)
				ws[i].early = max(ws[i].early, li.soonest)
			} else {
				li.probing = false
			}
		}
		early, late := ws[i].early, sent
		if served >= held {
			cut.serve(t, slots, ready)
			early = max(early, slots[0].Early)
			slots[0] = Slot{At: sent + recycle, Early: early + quick}
			heap.Fix(&slots, 0)
			cut.freed(sent + recycle)
			if cut.tail(ready) {
				late = cut.next // it may slip to the next burst
			}
			if cut.head(i) {
				early = min(early, max(ws[i].early, cut.prevEarly)) // it may have gone in the last one
			}
		}
		if t > ws[i].Due {
			li.waited = true // the window held it past the time its lane released it
		}
		li.last = max(li.last, sent)
		out[i] = Slot{At: sent, Early: early, Late: max(late, sent), Waited: li.waited}
		if ws[i].Target >= 0 {
			targets--
		}
		served++
		li.out--
		switch {
		case li.pioneer == i:
			// Its answer, a round trip later, makes the bucket known: the
			// rest of its queue goes then, as its bucket allows.
			for _, j := range li.queue {
				release(j, t+int64(rtt), early+int64(rtt/2))
			}
			li.queue, li.guess, li.pioneer = nil, false, -1
		case li.limit > 0 && !li.started:
			// The first call of its window: the window ends one pace
			// after it (and lag).
			li.started, li.end = true, t+li.pace+int64(lag)
			if len(li.queue) > 0 {
				heap.Push(&wakes, wake{at: li.end, lane: li})
			}
			if li.probing {
				// The probe: the rest of the window's room goes at its
				// answer.
				// The rest goes at its answer, expected a round trip
				// later; a fast answer (a jittery latency's shortest)
				// may come at once, so they may go as early as it.
				li.answer, li.soonest = t+int64(rtt), early
			}
		}
	}
	return out
}

// wake is a replayed lane's window end.
type wake struct {
	at   int64
	lane *laneState
}

// wakeHeap is a min-heap of window ends.
type wakeHeap []wake

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h wakeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *wakeHeap) Push(x any)        { *h = append(*h, x.(wake)) }
func (h *wakeHeap) Pop() any {
	x := (*h)[len(*h)-1]
	*h = (*h)[:len(*h)-1]
	return x
}

// sameWindow is how close two due times of a lane are for the forecast
// to take them for one window of its bucket: those of a later window come
// from one reset time, apart only by rounding; those of the current one
// are counted from now.
const sameWindow = time.Millisecond

// cutShare sets how many calls on each side of a burst's cut get both
// bursts in their window: one in cutShare of the window's count, at least
// one. Measured on the mixed scenario of bench/cmd/eta (20 runs each,
// after the first answer, with a slipped call's window ending a whole
// period and round trip later; docs/eta-accuracy.md): one call on each side,
// 94.1% in window; two (1/25 of 50), 96.4%, the windows' 75th percentile
// 3 ms wider; four, 97.0%, but a quarter of the windows a burst wider.
const cutShare = 25

// burstCut follows the replay's bursts of slots, to tell which calls it
// serves near a cut: where a burst of slots runs out while calls are
// still ready for it.
//
// A burst is the slots the replay hands out within half a round trip of
// the first: slots taken together free again together, one round trip
// and one period later. Which ready calls a burst takes is decided by
// their actors' deadlines and by whether their bucket reopens before or
// after the burst, and the replay gets both from estimates: its order is
// least sure at the cut. So the edge calls served last in a burst, with
// calls still ready behind them, may go in the next burst (tail), and
// the edge calls served first in a burst that were ready for the previous
// one and got none of it may have gone in that one (head). Where slots
// free one by one, the next burst is the next slot, a few ms away, not a
// whole period.
type burstCut struct {
	edge    int   // calls on each side of a cut
	horizon int64 // a burst's slots: those within it of its first (ns)
	at      int64 // the current burst's first slot (Unix ns)
	left    int   // its slots not handed out yet
	rank    int   // calls it has served
	// prevEarly is the earliest the previous burst could have begun (its
	// first slot's early time; 0: no previous burst), curEarly the
	// current one's.
	prevEarly, curEarly int64
	passed              []bool // by waiter: ready for a burst that it did not get
	// next is when the next burst after the current one begins: the first
	// free slot past it (a slot taken in the burst frees again past it,
	// freed, and the burst takes none past it).
	next int64
}

func newBurstCut(waiters, limit int, rtt time.Duration) *burstCut {
	return &burstCut{edge: max(1, limit/cutShare), horizon: int64(rtt / 2), at: math.MinInt64, passed: make([]bool, waiters)}
}

// serve counts a call served at t, slots being the free slots before it
// takes one, ready the calls still ready beside it.
func (b *burstCut) serve(t int64, slots slotHeap, ready *waiterHeap) {
	if t > b.at+b.horizon {
		// A new burst: the calls still ready were passed over by the last.
		for _, j := range ready.idx {
			b.passed[j] = true
		}
		b.prevEarly, b.curEarly = b.curEarly, slots[0].Early
		b.at, b.left, b.rank, b.next = t, 0, 0, math.MaxInt64
		for _, sl := range slots {
			if sl.At <= t+b.horizon {
				b.left++
			} else {
				b.next = min(b.next, sl.At)
			}
		}
	}
	b.left--
	b.rank++
}

// tail tells whether the call just served is one of the last edge of its
// burst with more calls ready than the burst has slots left.
func (b *burstCut) tail(ready *waiterHeap) bool {
	return b.left < b.edge && ready.Len() > b.left
}

// freed notes a slot freeing again at t, after the current burst.
func (b *burstCut) freed(t int64) { b.next = min(b.next, t) }

// head tells whether call i, just served, is one of the first edge of its
// burst and was passed over by the previous one.
func (b *burstCut) head(i int) bool {
	return b.passed[i] && b.rank <= b.edge && b.prevEarly != 0
}

// Slot is when a global slot is forecast to be taken (At), the earliest
// it may be (Early), and the latest (Late; At or the next burst's time for
// a request near a cut, see burstCut), in Unix ns; all zero for a request
// the replay did not reach (only requests that count, not asked about,
// may be left so).
//
// Waited is set when the window held the request, or an earlier one of
// its lane, past the time its lane released it: only then does the
// window, not the replay's coarser model of the bucket, put it later than
// its Due.
type Slot struct {
	At, Early, Late int64
	Waited          bool
}

// slotHeap is a min-heap of slots by their forecast time.
type slotHeap []Slot

func (h slotHeap) Len() int           { return len(h) }
func (h slotHeap) Less(i, j int) bool { return h[i].At < h[j].At }
func (h slotHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *slotHeap) Push(x any)        { *h = append(*h, x.(Slot)) }
func (h *slotHeap) Pop() any {
	x := (*h)[len(*h)-1]
	*h = (*h)[:len(*h)-1]
	return x
}

// waiterHeap is a heap of indexes into ws.
type waiterHeap struct {
	ws   []Waiter
	idx  []int
	less func(a, b *Waiter) bool
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
