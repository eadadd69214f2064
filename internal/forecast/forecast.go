// Package forecast replays the global admission over the requests
// waiting for a global window, to tell when each is expected to take its
// slot: the global part of an ETA. It is pure: time is an argument, and
// the replay works on its own copy of what it is given.
//
// The replay does not model the admission: it runs it. The supervisor
// serves bucket actors from an admission.Queue (the highest class first,
// with the lower classes' share; then the earliest virtual deadline; a
// grant of a slot for each ready request of an actor, so a channel's
// window goes whole; slots kept for a bucket about to reopen; the pacer).
// Replay goes on from a copy of that queue as it stands (admission.Copy)
// and serves it from a replayed window, so an ETA follows every rule of
// the live line, and a change there is a change here.
//
// What the replay models is the rest: what the queue is asked, and when
// its slots free.
//   - Requests become ready window by window, as their bucket lets them
//     (laneState): the global limit may hold a window's requests past its
//     reset, and then the next window opens late; a window that holds for
//     a probe lets one go and the rest a round trip after it; a bucket
//     whose limit is not known sends one pioneer, the rest of its queue a
//     round trip after it. Each waiting request publishes what this needs
//     (its bucket actor's stamps, its route, its submission: Waiter).
//   - The calls of an actor that become ready together ask the line
//     together (a batch, as the actor's ask), under the actor's key.
//   - The window's free slots: those it holds free at their forecast
//     times (ratelimit.SlidingWindow.Forecast); a slot taken at t frees
//     again at t + round trip + period.
//
// Time goes from one event to the next (a request due, a bucket window
// ending, the line's retry); at each, the line serves. O(n log n) in the
// requests waiting for the window; it stops once every asked request has
// its slot.
package forecast

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
	"sort"
	"strconv"
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

	early int64 // the earliest it may go (Unix ns): due, or its pioneer's earliest answer
}

// Lane names a lane in the replay: its bucket actor's key and its route
// family ("METHOD /template"), which never change, unlike the lane a
// bucket actor keeps a call in.
type Lane struct{ Actor, Route string }

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
	actor   *actorState
}

// actorState is one bucket actor in the replay: its latest batch, made
// at at.
type actorState struct {
	batch *batch
	at    int64
}

// batch is calls of one actor that became ready together, in line under
// key: by class (the highest first: the actor spends a grant on its
// lanes' heads of the highest class first), then id; those not served
// yet.
type batch struct {
	key   string
	calls []int
	asked int64 // the last admit that asked for it
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
// out, its other calls wait for its answer. line is a copy of the window's
// admission queue now, keyed by actor (admission.Copy; nil: an empty
// line): the replay serves from it as the supervisor does, with its places,
// keeps, pacer and share, and changes it. ws is not modified.
func Replay(ws []Waiter, src Source, now time.Time, rtt, lag time.Duration, held int, onWire map[Lane]bool, line *admission.Queue[string]) []Slot {
	out := make([]Slot, len(ws))
	if len(ws) == 0 {
		return out
	}
	// The replay moves a call's due to the window its lane releases it in;
	// the caller compares the forecast with the due it gave (a slot later
	// than that raises the ETA), so it works on its own copy.
	ws = slices.Clone(ws)
	n, per := src.Limit()
	if line == nil {
		line = admission.New[string](n, per)
	}
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
	var wakes wakeHeap // lanes' window ends

	// Each lane in submission order.
	lanes := map[Lane]*laneState{}
	actors := map[string]*actorState{}
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
			a := actors[w.Actor]
			if a == nil {
				a = &actorState{}
				actors[w.Actor] = a
			}
			li = &laneState{pioneer: -1, limit: w.Limit, probe: w.Probe, actor: a}
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
	// answer (the actors' bucket.probeAwaited); the first to take a slot is the probe,
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
	// t, at its bucket's pace (the actors' lane.backlog: the refills its last call
	// waits for).
	path := func(li *laneState, t int64) int64 {
		switch {
		case li.guess:
			return int64(li.out+len(li.queue)) * int64(admission.UnknownPace)
		case li.pace <= 0:
			return 0
		case li.limit > 0:
			if len(li.queue) == 0 {
				return 0
			}
			return int64(1+(len(li.queue)-1)/li.limit) * li.pace
		}
		later := len(li.dues) - sort.Search(len(li.dues), func(k int) bool { return li.dues[k] > t+int64(sameWindow) })
		return int64(later) * li.pace
	}

	// ready holds the batches in line by their key there; nReady counts
	// their calls.
	ready := map[string]*batch{}
	nReady := 0
	cut := newBurstCut(len(ws), n, rtt)
	// The window's free slots: those it holds free at their forecast
	// times, then each slot taken again one round trip and one period
	// after it was. Each slot also keeps its earliest time, had every
	// answer come back in half the round trip: the forecast is less sure
	// the more cycles of the window it looks ahead.
	win := &window{limit: n, held: held}
	for k := range min(n, len(ws)) {
		at := src.Forecast(now, k).UnixNano()
		win.slots = append(win.slots, Slot{At: at, Early: at})
	}
	win.spare = max(0, n-len(win.slots))
	heap.Init(&win.slots)
	recycle, quick := int64(rtt+per), int64(rtt/2+per)

	// burst is, for a burst beginning at t, its free slots and the next
	// burst's first (zero when none begins: burstCut.serve).
	burst := func(t int64) (within int, next int64) {
		if cut.begins(t) {
			return win.within(t + cut.horizon)
		}
		return 0, 0
	}
	// serve is call i taking sl (At -1: a slot granted before) at t.
	serve := func(i int, sl Slot, t int64, within int, next int64) {
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
		if sl.At >= 0 {
			cut.serve(t, sl.Early, within, next, i)
			early = max(early, sl.Early)
			heap.Push(&win.slots, Slot{At: sent + recycle, Early: early + quick})
			cut.freed(sent + recycle)
			if cut.tail(nReady) {
				late = cut.next // it may slip to the next burst
			}
			if cut.head(i) {
				early = min(early, max(ws[i].early, cut.prevEarly)) // it may have gone in the last one
			}
		}
		if t > ws[i].Due {
			li.waited = true // the window held it past the time its lane released it
		}
		out[i] = Slot{At: sent, Early: early, Late: max(late, sent), Waited: li.waited}
		if ws[i].Target >= 0 {
			targets--
		}
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
				// answer, expected a round trip later; a fast answer (a
				// jittery latency's shortest) may come at once, so they
				// may go as early as it.
				li.answer, li.soonest = t+int64(rtt), early
			}
		}
	}

	// admit opens the windows that end by t and moves the calls due by t
	// to ready. Each actor's calls that become ready together are a batch
	// and ask the line together, as the actor does (bucket.askAdmission):
	// the earliest submission among them, the longest path of their
	// lanes. A batch asks under its actor's key, and at the start it
	// takes the place its actor has in line. A later batch of an actor
	// still in line asks apart, for a place of its own: an actor waiting
	// for admission sets no timer for its bucket's reopening, so it asks
	// for the calls its bucket freed meanwhile at its next pump, most
	// often its grant's, afresh. (Merged into the earlier batch's ask instead, 84-88% of the
	// ETAs of bench/cmd/eta's scenario 17 were in window after the first
	// answer, against 94-97%.)
	var asking []*batch
	batches := 0
	keep := int(float64(n) * (1 - admission.FastShare)) // bucket.admit's fast path leaves these free
	admit := func(t int64) {
		for wakes.Len() > 0 && wakes[0].at <= t {
			wk := heap.Pop(&wakes).(wake)
			open(wk.lane, wk.at)
		}
		asking = asking[:0]
		for pending.Len() > 0 && ws[pending.idx[0]].Due <= t {
			i := heap.Pop(pending).(int)
			a := laneOf[i].actor
			if b := a.batch; b == nil || t-a.at > int64(sameWindow) || ready[b.key] != b {
				// A new batch: calls due within sameWindow of the last
				// one's are its actor's one pump (its bucket's reset,
				// stamped apart only by rounding).
				k := ws[i].Actor
				if t != nowNs && (line.Waiting(k) || ready[k] != nil) {
					batches++
					k += "\x00" + strconv.Itoa(batches)
				}
				a.batch, a.at = &batch{key: k}, t
				ready[k] = a.batch
			}
			if b := a.batch; b.asked != t {
				b.asked = t
				asking = append(asking, b)
			}
			a.batch.calls = append(a.batch.calls, i)
			nReady++
			cut.ready(i)
		}
		for _, b := range asking {
			slices.SortFunc(b.calls, func(x, y int) int {
				return cmp.Or(cmp.Compare(ws[y].Class, ws[x].Class), cmp.Compare(ws[x].ID, ws[y].ID))
			})
			// While nobody waits in line, an actor reserves its slots on
			// its own, as long as more than the window's fast share is
			// left (admission.FastShare): not through the line, and not
			// paced.
			for len(b.calls) > 0 && line.Len() == 0 && win.fast(t, keep) {
				i := b.calls[0]
				b.calls = b.calls[1:]
				nReady--
				within, next := burst(t)
				serve(i, win.take(), t, within, next)
			}
			if len(b.calls) == 0 {
				delete(ready, b.key)
				continue
			}
			calls := b.calls
			ask := admission.Ask{Want: len(calls), Global: true, Since: time.Unix(0, ws[calls[0]].Submitted), First: ws[calls[0]].ID, Class: admission.Bulk}
			long := int64(0)
			for _, j := range calls {
				w := &ws[j]
				if s := time.Unix(0, w.Submitted); s.Before(ask.Since) || s.Equal(ask.Since) && w.ID < ask.First {
					ask.Since, ask.First = s, w.ID
				}
				ask.Class = max(ask.Class, w.Class)
				long = max(long, path(laneOf[j], w.Due))
				ask.Pioneer = ask.Pioneer || laneOf[j].pioneer == j
			}
			ask.Path = time.Duration(long)
			line.Want(time.Unix(0, t), b.key, ask)
		}
	}

	// Time goes from one event to the next: a call due, a lane's window
	// ending, or the line's next try (a slot freeing, the pacer, a keep
	// lapsing). At each, the line serves as the supervisor does, and each
	// grant goes to its actor's ready calls.
	for t := nowNs; targets > 0; {
		admit(t)
		retry, again := time.Duration(0), false
		for line.Len() > 0 {
			within, next := burst(t)
			var grants []admission.Grant[string]
			grants, retry, again = line.Serve(time.Unix(0, t), win, false)
			used := 0
			for _, g := range grants {
				b := ready[g.Key]
				if b == nil {
					continue // in line live, no call ready here
				}
				k := min(g.Slots, len(b.calls))
				for _, i := range b.calls[:k] {
					nReady--
					serve(i, win.taken[used], t, within, next)
					used++
				}
				if b.calls = b.calls[k:]; len(b.calls) == 0 {
					delete(ready, g.Key)
				}
			}
			// Slots granted to an actor with fewer calls ready in the
			// replay than it asked for live: given back, as its actor
			// does, and the line served again.
			back := win.giveBack(used)
			if back == 0 {
				break
			}
			line.Refund(back)
		}
		next := int64(math.MaxInt64)
		if pending.Len() > 0 {
			next = ws[pending.idx[0]].Due
		}
		if wakes.Len() > 0 {
			next = min(next, wakes[0].at)
		}
		if again {
			next = min(next, t+int64(retry))
		}
		if next == math.MaxInt64 {
			break // only calls no event reaches would be left: none here
		}
		t = max(t+1, next)
	}
	return out
}

// window is the replay's global window, the admission.Window the line
// serves from: its free slots, each free from its time; the slots already
// granted to actors and not used (held), which the first reservations
// take; and the slots reserved in the Serve under way (taken, in order;
// At -1: a held one).
type window struct {
	limit int
	spare int // slots never taken in the replay (beyond the waiters' count)
	held  int
	slots slotHeap
	taken []Slot
}

// Reserve takes the first free slot at now.
func (w *window) Reserve(now time.Time) (bool, time.Duration) {
	if w.held > 0 {
		w.held--
		w.taken = append(w.taken, Slot{At: -1})
		return true, 0
	}
	t := now.UnixNano()
	if len(w.slots) == 0 {
		return false, time.Second // a window without slots: nothing frees
	}
	if w.slots[0].At > t {
		return false, time.Duration(w.slots[0].At - t)
	}
	w.taken = append(w.taken, heap.Pop(&w.slots).(Slot))
	return true, 0
}

// Count is how many slots are taken at now.
func (w *window) Count(now time.Time) int {
	k, _ := w.within(now.UnixNano())
	return max(0, w.limit-w.spare-k)
}

// within is how many slots free by t, and when the first after t does
// (math.MaxInt64: none).
func (w *window) within(t int64) (k int, next int64) {
	next = math.MaxInt64
	for _, sl := range w.slots {
		if sl.At <= t {
			k++
		} else {
			next = min(next, sl.At)
		}
	}
	return k, next
}

// fast reports whether an actor may reserve a slot on its own at t: one
// is free, and more than keep are left after it.
func (w *window) fast(t int64, keep int) bool {
	if len(w.slots) == 0 || w.slots[0].At > t {
		return false
	}
	return w.Count(time.Unix(0, t))+1+keep <= w.limit
}

// take takes the first free slot (fast).
func (w *window) take() Slot { return heap.Pop(&w.slots).(Slot) }

// giveBack returns the slots taken from the k-th on, unused, and forgets
// the taken ones; it returns how many it gave back.
func (w *window) giveBack(k int) int {
	back := w.taken[k:]
	for _, sl := range back {
		if sl.At < 0 {
			w.held++
		} else {
			heap.Push(&w.slots, sl)
		}
	}
	w.taken = w.taken[:0]
	return len(back)
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
	// next is when the next burst after the current one begins: the
	// first free slot past it (a slot taken in the burst frees again
	// past it, and the burst takes none past it).
	next int64
	// bursts counts the bursts begun; readyAt holds, by waiter, how many
	// had begun when it became ready: it was ready for every burst begun
	// since (and passed over by each before the one that serves it).
	bursts  int32
	readyAt []int32
}

func newBurstCut(waiters, limit int, rtt time.Duration) *burstCut {
	return &burstCut{edge: max(1, limit/cutShare), horizon: int64(rtt / 2), at: math.MinInt64, readyAt: make([]int32, waiters)}
}

// begins reports whether a call served at t begins a new burst.
func (b *burstCut) begins(t int64) bool { return t > b.at+b.horizon }

// ready notes that call i became ready (before any burst begun at the
// same time).
func (b *burstCut) ready(i int) { b.readyAt[i] = b.bursts }

// serve counts call i served at t from a slot whose earliest time is
// early; within is how many free slots the window had within the horizon
// of t before the line served at t, and next the first past it (needed
// only when a burst begins).
func (b *burstCut) serve(t, early int64, within int, next int64, i int) {
	if b.begins(t) {
		// A new burst: the calls still ready were passed over by the last.
		b.bursts++
		b.prevEarly, b.curEarly = b.curEarly, early
		b.at, b.left, b.rank, b.next = t, within, 0, next
	}
	b.left--
	b.rank++
}

// tail tells whether the call just served is one of the last edge of its
// burst with more calls ready than the burst has slots left.
func (b *burstCut) tail(ready int) bool {
	return b.left < b.edge && ready > b.left
}

// freed notes a slot freeing at t, after the current burst.
func (b *burstCut) freed(t int64) { b.next = min(b.next, t) }

// head tells whether call i, just served, is one of the first edge of its
// burst and was passed over by the previous one.
func (b *burstCut) head(i int) bool {
	// Ready before the last burst began, or, but for the call that began
	// this one, before this one began.
	passed := b.bursts-b.readyAt[i] >= 2 || b.bursts-b.readyAt[i] == 1 && b.rank > 1
	return passed && b.rank <= b.edge && b.prevEarly != 0
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
