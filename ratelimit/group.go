package ratelimit

import (
	"cmp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/admission"
)

// Group is a limit the API enforces without announcing it in headers, for
// one group of requests: at most n requests per window for a guild's role
// updates, a channel's renames, or a bot's own rule ("100 DMs a minute").
// It answers two questions: may this request go now (never over the
// limit, whatever the latency), and when will it go (an exact window and a
// place in line, from the moment it joins).
//
// Two parts, under one lock:
//
//   - The guard is a SlidingWindow of n per window: a request holds its
//     slot from its send until its answer arrives and then for one more
//     window, because the server counted it at some moment between the
//     two. However the server aligns its windows (opened by a first
//     request, as Discord's buckets are, or sliding), it never sees more
//     than n in one window.
//   - The schedule is a chain of windows: [start, start+window) each
//     admitting n reservations, the next starting one window plus the
//     observed round trip later (when the guard frees the slots the
//     previous window's requests took). A request reserves its (window,
//     slot) when it joins, in order: that is its ETA and its position,
//     the job queues' estimate (nextWindowStart + floor(waiting/n) ×
//     window) made exact. It may go only inside its window, and only when
//     the guard allows; one that misses its window (its own bucket held
//     it) reserves again, keeping its place among the others.
//
// Classes (ReserveClass): a request of a higher class takes a place in
// the earliest full window that holds a waiting request of a lower class,
// which moves back to the next window where it has a place (the next one,
// unless that holds no one it may pass), and that one's move may push the last of
// its class in the next window back too, and so on to the end of the
// chain (the schedule stays in order: each class FIFO). A request moved
// back MaxGroupMoves times is moved no more, and nothing that reserves
// after it passes it: a lower class is moved back at most MaxGroupMoves
// times (a window each, unless the next holds no one it may pass),
// whatever keeps coming. A newcomer passes only
// within the last MaxGroupShift windows of the chain (the cost of a pass
// is one step per window behind it).
//
// Cost: each window keeps its waiting reservations by class, each class
// in order of arrival, so a pass looks at one reservation per window
// (the latest of a class: past the last window holding one of its class
// that moves no more, every one of that class can still move), and a
// request's place in line is counted per window, not per reservation:
// a reservation, a pass and a slot cost O(windows) steps, whatever the
// backlog (keeping a window's line in order moves at most its count of
// pointers).
//
// Invariants: every window of the schedule holds at most n reservations
// (outstanding or taken); every reservation names a window of the
// schedule, or one that is over (it is then missed); every waiting one
// is in the wait list of the window it names, or, that window over,
// counted in strays; a request id has at most one outstanding
// reservation; the guard's invariant (SlidingWindow)
// holds for the sends taken; of two waiting reservations of one class,
// the later is never in an earlier window (unless a miss or a release
// came between: a missed one is placed again, behind; a released place
// goes to the next to reserve); no reservation moved more than
// MaxGroupMoves times; aged[c] is at or after the window of every
// reservation of class c that did.
//
// Every successful Take must be followed by exactly one Settle (answered)
// or Cancel (never sent: the request keeps its reservation); every
// reservation ends with a Settle or a Release.
//
// A Group is safe for concurrent use; methods take the time as an argument
// and times must come from one monotonic clock. Its zero value is not
// usable: use NewGroup.
type Group struct {
	mu    sync.Mutex
	n     int
	per   time.Duration
	guard *SlidingWindow
	// rtt is the longest recent round trip (send to answer, rounded up to
	// the millisecond), decaying by an eighth per answer, in whole
	// milliseconds (as a shared store's scripts count it): the chain's
	// windows are spaced per+rtt.
	rtt  time.Duration
	wins []groupWindow // the schedule, oldest first; none is over
	out  map[uint64]*reservation
	seq  uint64
	// classes counts the reservations of each class (index class+1),
	// waiting or taken: a class with none below it looks for no one to
	// pass.
	classes [classHighest - classLowest + 1]int
	// aged is, per class (index class+1), the latest window holding a
	// reservation of that class moved MaxGroupMoves times (zero: none).
	// A request of a higher class passes only in later windows. It may
	// name a window whose aged reservation is gone: a newcomer then
	// passes a little less than it could, never more.
	aged [classHighest - classLowest + 1]time.Time
	// strays counts the waiting reservations whose window is not in the
	// schedule: over (they are missed, and placed again when next asked
	// about), or, for one taken before a Block and cancelled after it,
	// discarded by the Block. Each is ahead of every reservation that has
	// a window.
	strays int
}

type groupWindow struct {
	start time.Time
	n     int // reservations in it, outstanding or taken
	// wait holds its waiting reservations (not taken) by class (index
	// class+1), each in order of seq.
	wait [classHighest - classLowest + 1][]*reservation
}

// add puts waiting reservation r in w's line.
func (w *groupWindow) add(r *reservation) {
	ws := w.wait[r.class-classLowest]
	i, _ := slices.BinarySearchFunc(ws, r.seq, bySeq)
	w.wait[r.class-classLowest] = slices.Insert(ws, i, r)
}

// del takes r out of w's line.
func (w *groupWindow) del(r *reservation) {
	ws := w.wait[r.class-classLowest]
	if i, ok := slices.BinarySearchFunc(ws, r.seq, bySeq); ok {
		w.wait[r.class-classLowest] = slices.Delete(ws, i, i+1)
	}
}

func bySeq(r *reservation, seq uint64) int { return cmp.Compare(r.seq, seq) }

// waiting returns how many reservations wait in w.
func (w *groupWindow) waiting() int {
	n := 0
	for _, ws := range w.wait {
		n += len(ws)
	}
	return n
}

// ahead returns how many of w's waiting reservations go before r (ahead):
// those of a higher class, and those of r's class that reserved first.
func (w *groupWindow) ahead(r *reservation) int {
	n := 0
	for c := r.class + 1; c <= classHighest; c++ {
		n += len(w.wait[c-classLowest])
	}
	i, _ := slices.BinarySearchFunc(w.wait[r.class-classLowest], r.seq, bySeq)
	return n + i
}

// passed returns the waiting reservation of w that r takes the place of,
// if any: one of a lower class (or, when r is moved itself, of r's class
// and later than r), moved fewer than MaxGroupMoves times; the lowest
// class, the latest of it. nil: r passes no one there. Past the windows
// aged names, the latest of a class can move: this looks at one.
func (w *groupWindow) passed(r *reservation, moving bool) *reservation {
	for c := classLowest; c < r.class || moving && c == r.class; c++ {
		ws := w.wait[c-classLowest]
		for j := len(ws) - 1; j >= 0; j-- {
			o := ws[j]
			if o == r || o.moves >= MaxGroupMoves {
				continue
			}
			if c == r.class && o.seq < r.seq {
				return nil
			}
			return o
		}
	}
	return nil
}

type reservation struct {
	start time.Time // the window's start
	seq   uint64    // order of the first Reserve: kept across misses
	taken bool      // Take succeeded: a guard slot is held until Settle or Cancel
	class int8      // ReserveClass: a higher one goes first
	moves int8      // windows given up to higher classes, at most MaxGroupMoves
}

// MaxGroupMoves is how many times a request's reservation in a Group is
// moved back one window for requests of higher classes (ReserveClass):
// then it keeps its window, and no request that reserves later passes
// it. Each move takes it to the next window where it has a place: the
// first with room, or one where it passes a request of its own class that
// reserved after it; so a move may skip full windows, and a request waits
// at most this many moves, not windows, longer than without priorities.
const MaxGroupMoves = 7

// MaxGroupShift is how many windows from the end of a group's chain a
// request of a higher class may pass in (ReserveClass): the cascade of
// moves a pass makes costs one step per window behind it, in a shared
// store's script too, which uses the same number.
const MaxGroupShift = 256

// Classes of ReserveClass: admission.Class's (sluice.Priority's) values.
const (
	classLowest  = int8(admission.Bulk)
	classHighest = int8(admission.Interactive)
)

// Slot is a request's place in a Group: the window it is scheduled in and
// how many of the group's requests are ahead of it.
type Slot struct {
	// Start and End bound the window: the request may go from Start, and
	// is expected to go before End.
	Start, End time.Time
	// Position is the number of the group's requests scheduled ahead of
	// this one (0: the next to go, or one on its way).
	Position int
}

// clampClass takes a class outside the classes as the nearest.
func clampClass(c int8) int8 { return min(max(c, classLowest), classHighest) }

// MaxGroupLimit bounds the n of NewGroup.
const MaxGroupLimit = MaxGlobalLimit

// NewGroup returns a group of n requests per window. It panics if n is not
// in [1, MaxGroupLimit] or window is not positive: both are programming
// errors, not input (callers validate configuration first).
func NewGroup(n int, window time.Duration) *Group {
	if n < 1 || n > MaxGroupLimit {
		panic("ratelimit: NewGroup: n out of range [1, " + strconv.Itoa(MaxGroupLimit) + "]: " + strconv.Itoa(n))
	}
	if window <= 0 || window > MaxWait {
		panic("ratelimit: NewGroup: window out of range (0, " + MaxWait.String() + "]: " + window.String())
	}
	return &Group{n: n, per: window, guard: NewSlidingWindow(n, window), out: map[uint64]*reservation{}}
}

// Limit returns the group's n and window.
func (g *Group) Limit() (n int, window time.Duration) { return g.n, g.per }

// Reserve schedules request id (unique per group while it waits) and
// returns its slot. A request that has a reservation keeps it, unless its
// window is over: it then takes the first window with room, keeping its
// place among the requests that wait.
func (g *Group) Reserve(now time.Time, id uint64) Slot {
	return g.ReserveClass(now, id, 0)
}

// ReserveClass is Reserve for a request of a class: -1 (bulk), 0 (normal,
// Reserve's) or 1 (interactive), as sluice.Priority; a class outside
// them is taken as the nearest. A request that has a reservation keeps
// the class it reserved with. A request of a higher class goes ahead of
// the waiting requests of lower classes, which keep their order and move
// back at most MaxGroupMoves times each (see Group).
func (g *Group) ReserveClass(now time.Time, id uint64, class int8) Slot {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.slot(g.reserveClass(now, id, clampClass(class)))
}

// Ready reports whether request id may be sent at now, reserving its slot
// if it has none, without taking it; otherwise wait is how long until it
// may be: the later of its window's start and when the guard frees a slot
// (one window while only requests in flight fill it: ask again when their
// answers have told when).
func (g *Group) Ready(now time.Time, id uint64) (ok bool, wait time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ready(now, g.reserve(now, id))
}

// ReadyClass is Ready for a request of a class (ReserveClass's, when it
// has no reservation yet: a retry after its attempt settled keeps its
// class), in one look: when it may not go, slot is its place (Estimate's).
func (g *Group) ReadyClass(now time.Time, id uint64, class int8) (ok bool, wait time.Duration, slot Slot) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.reserveClass(now, id, clampClass(class))
	if ok, wait = g.ready(now, r); ok {
		return true, 0, Slot{}
	}
	return false, wait, g.slot(r)
}

// Take is Ready that takes the slot when the request may go. Taking a
// slot taken already succeeds.
func (g *Group) Take(now time.Time, id uint64) (ok bool, wait time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.reserve(now, id)
	if r.taken {
		return true, 0
	}
	if ok, wait := g.ready(now, r); !ok {
		return false, wait
	}
	if ok, wait := g.guard.Reserve(now); !ok {
		return false, wait
	}
	g.unwait(r)
	r.taken = true
	return true, 0
}

// unwait takes waiting reservation r out of line: out of its window's,
// or out of strays.
func (g *Group) unwait(r *reservation) {
	if i := g.window(r.start); i >= 0 {
		g.wins[i].del(r)
	} else {
		g.strays--
	}
}

// enwait puts reservation r, waiting again, in line: in its window's, or
// in strays if that is over.
func (g *Group) enwait(r *reservation) {
	if i := g.window(r.start); i >= 0 {
		g.wins[i].add(r)
	} else {
		g.strays++
	}
}

// window returns the index of the window starting at start, or -1.
func (g *Group) window(start time.Time) int {
	i, ok := slices.BinarySearchFunc(g.wins, start, func(w groupWindow, t time.Time) int { return w.start.Compare(t) })
	if !ok {
		return -1
	}
	return i
}

func (g *Group) ready(now time.Time, r *reservation) (bool, time.Duration) {
	if r.taken {
		return true, 0
	}
	if wait := max(r.start.Sub(now), g.guard.Wait(now)); wait > 0 {
		return false, wait
	}
	return true, 0
}

// Settle records the answer, at now, of request id, taken at sentAt: its
// reservation ends (its window keeps counting it). Without a taken slot it
// does nothing.
func (g *Group) Settle(now, sentAt time.Time, id uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.out[id]
	if !ok || !r.taken {
		return
	}
	g.forget(id, r)
	g.guard.Settle(now)
	if d := now.Sub(sentAt); d > 0 {
		d = (d + time.Millisecond - 1).Truncate(time.Millisecond) // whole ms, up
		g.rtt = max(d, g.rtt-(g.rtt/8).Truncate(time.Millisecond))
	}
}

// Cancel gives back the slot request id took and never used (it was not
// sent); the request keeps its reservation and its place. Without a taken
// slot it does nothing.
func (g *Group) Cancel(now time.Time, id uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, ok := g.out[id]; ok && r.taken {
		r.taken = false
		g.enwait(r)
		g.noteAged(r) // a Block may have made its window afresh, without it
		g.guard.Cancel(now)
	}
}

// Release drops request id's reservation (it ended, or left the group)
// unless its slot is taken (Settle or Cancel ends that): its place in the
// window goes to the next request that reserves.
func (g *Group) Release(id uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.out[id]
	if !ok || r.taken {
		return
	}
	g.forget(id, r)
	if i := g.window(r.start); i >= 0 {
		g.wins[i].del(r)
		g.wins[i].n--
	} else {
		g.strays--
	}
}

// forget drops id's reservation r.
func (g *Group) forget(id uint64, r *reservation) {
	delete(g.out, id)
	g.classes[r.class-classLowest]--
}

// Estimate returns request id's slot at now, without reserving (false:
// it has no reservation). A reservation whose window is over is reported
// as it would be reserved again.
func (g *Group) Estimate(now time.Time, id uint64) (Slot, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.out[id]; !ok {
		return Slot{}, false
	}
	return g.slot(g.reserve(now, id)), true
}

// Block holds every request of the group until until (a 429 the API gave
// a request of the group although the schedule let it go: the limit is
// stricter than declared, or someone else spends it). The waiting requests
// are scheduled again from until, in their order (by window, and within
// one by class, then arrival). A window from until on keeps counting the
// requests taken in it (one opened as until came); the others' windows
// are gone, and such a request, cancelled, waits as a stray. A block that
// ends no later than the current one changes nothing.
func (g *Group) Block(until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !until.After(g.guard.blockEnd()) {
		return
	}
	g.guard.Block(until)
	waiting := make([]*reservation, 0, len(g.out))
	for _, r := range g.out {
		if !r.taken {
			waiting = append(waiting, r)
		}
	}
	sortReservations(waiting)
	kept := 0
	for _, w := range g.wins {
		if taken := w.n - w.waiting(); taken > 0 && !w.start.Before(until) {
			g.wins[kept] = groupWindow{start: w.start, n: taken}
			kept++
		}
	}
	clear(g.wins[kept:])
	g.wins = g.wins[:kept]
	g.aged = [classHighest - classLowest + 1]time.Time{}
	g.strays = 0
	for _, r := range waiting {
		g.put(g.fill(until), r)
	}
}

// Idle reports whether the group holds nothing at now: no reservation, no
// slot held, no block. An idle group can be dropped and made again.
func (g *Group) Idle(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.out) == 0 && g.guard.Count(now) == 0 && g.guard.Blocked(now) == 0
}

// Held returns the number of the guard's slots held at now: requests in
// flight and answered within the last window.
func (g *Group) Held(now time.Time) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.guard.Count(now)
}

// Waiting returns the number of requests with a reservation they have not
// taken.
func (g *Group) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting()
}

// waiting is Waiting, g.mu held: O(windows), since every waiting
// reservation is in a window's line or a stray.
func (g *Group) waiting() int {
	n := g.strays
	for i := range g.wins {
		n += g.wins[i].waiting()
	}
	return n
}

// reserve returns id's reservation, valid at now (of class 0 if it is
// made now).
func (g *Group) reserve(now time.Time, id uint64) *reservation {
	return g.reserveClass(now, id, 0)
}

// reserveClass returns id's reservation, valid at now, made of class if
// it has none.
func (g *Group) reserveClass(now time.Time, id uint64, class int8) *reservation {
	g.drop(now)
	r := g.out[id]
	if r != nil && (r.taken || !g.missed(r, now)) {
		return r
	}
	if r == nil {
		g.seq++
		r = &reservation{seq: g.seq, class: class}
		g.out[id] = r
		g.classes[class-classLowest]++
	} else {
		g.strays-- // missed: its window is over (drop)
	}
	g.place(now, r)
	return r
}

// missed reports whether r's window is over at now.
func (g *Group) missed(r *reservation, now time.Time) bool {
	return !now.Before(r.start.Add(g.per))
}

// place puts r, counted in no window, in the first window with room or,
// before that, in the first full window where it passes a waiting request
// of a lower class (pass), opening a window if neither is.
func (g *Group) place(now time.Time, r *reservation) {
	if g.lowerWaits(r.class) {
		floor := g.floor(r.class)
		for i := range g.wins {
			w := &g.wins[i]
			if w.n < g.n {
				break // fill takes it
			}
			if i < len(g.wins)-MaxGroupShift || !w.start.After(floor) {
				continue
			}
			if v := w.passed(r, false); v != nil {
				w.del(v)
				g.put(i, r)
				g.cascade(now, v, i+1)
				return
			}
		}
	}
	g.put(g.fill(now), r)
}

// put puts waiting reservation r, counted already, in window i.
func (g *Group) put(i int, r *reservation) {
	r.start = g.wins[i].start
	g.wins[i].add(r)
	g.noteAged(r)
}

// lowerWaits reports whether a reservation of a class below class is
// held.
func (g *Group) lowerWaits(class int8) bool {
	for c := classLowest; c < class; c++ {
		if g.classes[c-classLowest] > 0 {
			return true
		}
	}
	return false
}

// floor is the latest window holding a reservation of a class below
// class that was moved MaxGroupMoves times: class passes only after it.
func (g *Group) floor(class int8) time.Time {
	var f time.Time
	for c := classLowest; c < class; c++ {
		f = later(f, g.aged[c-classLowest])
	}
	return f
}

// noteAged records r's window in aged if r moves no more.
func (g *Group) noteAged(r *reservation) {
	if r.moves >= MaxGroupMoves {
		g.aged[r.class-classLowest] = later(g.aged[r.class-classLowest], r.start)
	}
}

// cascade moves v, whose place was taken in window i-1 (and who is out
// of its line), back: into the first window from i with room, or into the
// first where it passes someone (passed), who moves on in turn; or into a
// new window at the end. The windows' counts change only where the
// cascade ends.
func (g *Group) cascade(now time.Time, v *reservation, i int) {
	v.moves++
	for ; i < len(g.wins); i++ {
		w := &g.wins[i]
		if w.n < g.n {
			w.n++
			g.put(i, v)
			return
		}
		u := w.passed(v, true)
		if u == nil {
			continue
		}
		w.del(u)
		g.put(i, v)
		v = u
		v.moves++
	}
	g.put(g.fill(now), v)
}

// fill counts one more request in the first window with room, opening
// one if none has, and returns its index. A chain that ran dry opens its
// first window when the guard has room (from notBefore at the earliest).
func (g *Group) fill(notBefore time.Time) int {
	for i := range g.wins {
		if g.wins[i].n < g.n {
			g.wins[i].n++
			return i
		}
	}
	start := notBefore
	if len(g.wins) > 0 {
		start = later(start, g.wins[len(g.wins)-1].start.Add(g.per+g.rtt))
	} else if wait := g.guard.Wait(notBefore); wait > 0 {
		start = notBefore.Add(wait)
	}
	g.wins = append(g.wins, groupWindow{start: start, n: 1})
	return len(g.wins) - 1
}

// drop forgets the windows that are over at now; their reservations still
// waiting are missed (strays) and reserve again when next asked about.
func (g *Group) drop(now time.Time) {
	i := 0
	for i < len(g.wins) && !now.Before(g.wins[i].start.Add(g.per)) {
		g.strays += g.wins[i].waiting()
		i++
	}
	if i > 0 {
		k := copy(g.wins, g.wins[i:])
		clear(g.wins[k:])
		g.wins = g.wins[:k]
	}
}

// slot describes r; the position counts the reservations ahead of it:
// the strays, those waiting in earlier windows, and those ahead in its
// own; none for a request on its way (taken).
func (g *Group) slot(r *reservation) Slot {
	if r.taken {
		return Slot{Start: r.start, End: r.start.Add(g.per)} // on its way: no one is ahead
	}
	pos := g.strays
	if g.window(r.start) < 0 {
		pos-- // r is a stray itself (a taken one that Block left without a window, then cancelled)
	}
	for i := range g.wins {
		w := &g.wins[i]
		if w.start.Before(r.start) {
			pos += w.waiting()
			continue
		}
		if w.start.Equal(r.start) {
			pos += w.ahead(r)
		}
		break
	}
	return Slot{Start: r.start, End: r.start.Add(g.per), Position: pos}
}

// ahead reports whether o goes before r in line within a window: a
// higher class, then the one that reserved first.
func ahead(o, r *reservation) bool {
	if o.class != r.class {
		return o.class > r.class
	}
	return o.seq < r.seq
}

// sortReservations sorts rs in line: by window, then ahead.
func sortReservations(rs []*reservation) {
	slices.SortFunc(rs, func(a, b *reservation) int {
		switch {
		case a.start.Before(b.start), a.start.Equal(b.start) && ahead(a, b):
			return -1
		case b.start.Before(a.start), a.start.Equal(b.start) && ahead(b, a):
			return 1
		}
		return 0
	})
}
