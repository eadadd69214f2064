package conformance

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// GroupCase is one row of the group table: one declared group
// (ratelimit.Group, and the shared store's Redis scripts for groups) met
// by reservations of requests of three classes, releases, takes (a
// request going), cancels (it never went), answers, blocks (a 429 met the
// group) and the clock moving on; and the window and place in line each
// request with a reservation has after the last step. It is what every
// implementation of a group must do: a higher class takes the place of a
// lower one in the earliest full window, the lower ones move back in
// order, each at most ratelimit.MaxGroupMoves windows; a request goes
// only inside its window and while the guard has a slot; a sent request
// is on its way (position 0) and its window keeps counting it; a block
// places the waiting requests again, in order, from its end.
//
// A row begins on an idle group at its start: the first window opens
// then, and the next ones GroupWindow apart plus the longest recent round
// trip (none is known until an answer).
type GroupCase struct {
	// Name says what the row shows, in a few words.
	Name string
	// Count is the group's limit per window.
	Count int
	// Steps run in order.
	Steps []GroupStep
	// Want is the place of every request that has a reservation after the
	// last step (waiting or sent), by id, read in order of id: asking
	// about a request whose window is over places it again. Every other
	// request of the row has none.
	Want map[int]GroupPlace
}

// GroupOp is what a step does.
type GroupOp int8

// The steps' operations. Each happens at the row's current time (the
// start, until a Move).
const (
	// Reserve reserves request ID's place, of Class (ReserveClass; in
	// Redis, the place script).
	Reserve GroupOp = iota
	// Release drops request ID's waiting reservation.
	Release
	// Take lets request ID, waiting, go if it may (Take; in Redis, the
	// reserve script's groups), which must be OK. (A take of a request on
	// its way differs by contract: Go's Take succeeds again, a shared
	// store's reserve is a new attempt, which reserves afresh.)
	Take
	// Cancel gives back request ID's taken slot: it was never sent, and
	// keeps its reservation.
	Cancel
	// Settle answers request ID, sent when it was taken: its reservation
	// ends, its window keeps counting it, and the guard holds its slot
	// one window more. The time since the take is its round trip.
	Settle
	// Block holds the group until At (a 429 met it).
	Block
	// Move moves the clock to At.
	Move
)

// GroupStep is one step of a row.
type GroupStep struct {
	Op    GroupOp
	ID    int
	Class int8
	// At is Block's end and Move's time, from the row's start.
	At time.Duration
	// OK is whether a Take lets the request go; Wait, when it does not,
	// how long until it may: the later of its window's start and the
	// guard's next free slot (one window while only requests on their way
	// hold it).
	OK   bool
	Wait time.Duration
}

// GroupPlace is a request's window and its position (ratelimit.Slot's:
// the waiting requests ahead of it; 0 for a request on its way). The
// window starts Window × GroupWindow + Plus after the row's start.
type GroupPlace struct {
	Window, Position int
	Plus             time.Duration
}

// Start returns when p's window starts, from the row's start.
func (p GroupPlace) Start() time.Duration { return time.Duration(p.Window)*GroupWindow + p.Plus }

// PlaceAt returns the place of a request whose window starts start after
// the row's start, position pos.
func PlaceAt(start time.Duration, pos int) GroupPlace {
	w := int(start / GroupWindow)
	return GroupPlace{Window: w, Position: pos, Plus: start - time.Duration(w)*GroupWindow}
}

// GroupWindow is every row's window.
const GroupWindow = time.Second

// Classes of the rows.
const (
	bulk, normal, interactive int8 = -1, 0, 1
)

func res(id int, class int8) GroupStep { return GroupStep{ID: id, Class: class} }
func rel(id int) GroupStep             { return GroupStep{Op: Release, ID: id} }
func take(id int) GroupStep            { return GroupStep{Op: Take, ID: id, OK: true} }
func refused(id int, wait time.Duration) GroupStep {
	return GroupStep{Op: Take, ID: id, Wait: wait}
}
func cancel(id int) GroupStep { return GroupStep{Op: Cancel, ID: id} }
func settle(id int) GroupStep { return GroupStep{Op: Settle, ID: id} }
func block(until time.Duration) GroupStep {
	return GroupStep{Op: Block, At: until}
}
func move(to time.Duration) GroupStep { return GroupStep{Op: Move, At: to} }

// each returns step(id) for each id from..to.
func each(from, to int, step func(id int) GroupStep) []GroupStep {
	var s []GroupStep
	for id := from; id <= to; id++ {
		s = append(s, step(id))
	}
	return s
}

// steps returns a reservation of each id from..to, of class.
func steps(from, to int, class int8) []GroupStep {
	return each(from, to, func(id int) GroupStep { return res(id, class) })
}

// IDs returns the ids of c's Want, in order.
func (c GroupCase) IDs() []int {
	ids := make([]int, 0, len(c.Want))
	for id := range c.Want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Gone returns the ids the row reserved that have no reservation after
// it, in order.
func (c GroupCase) Gone() []int {
	var ids []int
	for _, s := range c.Steps {
		if _, ok := c.Want[s.ID]; s.Op == Reserve && !ok && !slices.Contains(ids, s.ID) {
			ids = append(ids, s.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// Sent reports whether request id is on its way after the row: its last
// take, cancel or answer is a take that let it go.
func (c GroupCase) Sent(id int) bool {
	sent := false
	for _, s := range c.Steps {
		if s.ID == id && (s.Op == Take || s.Op == Cancel || s.Op == Settle) {
			sent = s.Op == Take && s.OK
		}
	}
	return sent
}

// Waiting returns how many requests wait after the row: those in Want
// not on their way.
func (c GroupCase) Waiting() int {
	n := 0
	for id := range c.Want {
		if !c.Sent(id) {
			n++
		}
	}
	return n
}

// Groups is the group table.
var Groups = []GroupCase{
	{
		Name:  "an interaction takes the last bulk place of the first window; each window's last moves back one",
		Count: 2, Steps: append(steps(1, 6, bulk), res(7, interactive)),
		Want: map[int]GroupPlace{7: {0, 0, 0}, 1: {0, 1, 0}, 2: {1, 2, 0}, 3: {1, 3, 0}, 4: {2, 4, 0}, 5: {2, 5, 0}, 6: {3, 6, 0}},
	},
	{
		Name:  "a normal request passes bulk, not an interaction",
		Count: 2, Steps: append(steps(1, 6, bulk), res(7, interactive), res(8, normal)),
		Want: map[int]GroupPlace{7: {0, 0, 0}, 8: {0, 1, 0}, 1: {1, 2, 0}, 2: {1, 3, 0}, 3: {2, 4, 0}, 4: {2, 5, 0}, 5: {3, 6, 0}, 6: {3, 7, 0}},
	},
	{
		Name:  "bulk passes no one",
		Count: 1, Steps: []GroupStep{res(1, bulk), res(2, normal), res(3, bulk)},
		Want: map[int]GroupPlace{2: {0, 0, 0}, 1: {1, 1, 0}, 3: {2, 2, 0}},
	},
	{
		Name:  "an interaction passes the lowest class first",
		Count: 2, Steps: []GroupStep{res(1, normal), res(2, bulk), res(3, interactive)},
		Want: map[int]GroupPlace{3: {0, 0, 0}, 1: {0, 1, 0}, 2: {1, 2, 0}},
	},
	{
		Name:  "a normal backlog keeps its order behind an interaction",
		Count: 2, Steps: append(steps(1, 4, normal), res(5, interactive)),
		Want: map[int]GroupPlace{5: {0, 0, 0}, 1: {0, 1, 0}, 2: {1, 2, 0}, 3: {1, 3, 0}, 4: {2, 4, 0}},
	},
	{
		Name:  "a released place goes to the next to reserve",
		Count: 2, Steps: append(steps(1, 4, bulk), rel(1), res(5, interactive)),
		Want: map[int]GroupPlace{5: {0, 0, 0}, 2: {0, 1, 0}, 3: {1, 2, 0}, 4: {1, 3, 0}},
	},
	{
		Name:  "a moved request fills the place a release left",
		Count: 1, Steps: append(steps(1, 3, bulk), rel(2), res(4, interactive), res(5, interactive)),
		Want: map[int]GroupPlace{4: {0, 0, 0}, 5: {1, 1, 0}, 1: {2, 2, 0}, 3: {3, 3, 0}},
	},
	{
		Name:  "bulk moves back seven windows at most, then keeps its window",
		Count: 1, Steps: append([]GroupStep{res(1, bulk)}, steps(2, 10, interactive)...),
		Want: map[int]GroupPlace{2: {0, 0, 0}, 3: {1, 1, 0}, 4: {2, 2, 0}, 5: {3, 3, 0}, 6: {4, 4, 0}, 7: {5, 5, 0}, 8: {6, 6, 0}, 1: {7, 7, 0}, 9: {8, 8, 0}, 10: {9, 9, 0}},
	},
	{
		Name:  "an interaction behind interactions only goes at the end: no one to pass",
		Count: 2, Steps: steps(1, 5, interactive),
		Want: map[int]GroupPlace{1: {0, 0, 0}, 2: {0, 1, 0}, 3: {1, 2, 0}, 4: {1, 3, 0}, 5: {2, 4, 0}},
	},
	{
		Name:  "an interaction passes the one bulk request behind a line of interactions",
		Count: 2, Steps: append(steps(1, 3, interactive), res(4, bulk), res(5, interactive)),
		Want: map[int]GroupPlace{1: {0, 0, 0}, 2: {0, 1, 0}, 3: {1, 2, 0}, 5: {1, 3, 0}, 4: {2, 4, 0}},
	},
	{
		Name:  "normal requests pass bulk as they come; an interaction passes the latest normal one, which passes the latest bulk one",
		Count: 3, Steps: []GroupStep{res(1, bulk), res(2, normal), res(3, bulk), res(4, normal), res(5, bulk), res(6, normal), res(7, interactive)},
		Want: map[int]GroupPlace{7: {0, 0, 0}, 2: {0, 1, 0}, 4: {0, 2, 0}, 6: {1, 3, 0}, 1: {1, 4, 0}, 3: {1, 5, 0}, 5: {2, 6, 0}},
	},
	{
		Name:  "nothing passes a request that moved seven times; later ones it may",
		Count: 1, Steps: append(append([]GroupStep{res(1, bulk)}, steps(2, 8, interactive)...), res(9, bulk), res(10, interactive)),
		Want: map[int]GroupPlace{2: {0, 0, 0}, 3: {1, 1, 0}, 4: {2, 2, 0}, 5: {3, 3, 0}, 6: {4, 4, 0}, 7: {5, 5, 0}, 8: {6, 6, 0}, 1: {7, 7, 0}, 10: {8, 8, 0}, 9: {9, 9, 0}},
	},
	{
		Name:  "a request sent is on its way (position 0), and those behind it move up",
		Count: 2, Steps: []GroupStep{res(1, normal), res(2, normal), res(3, normal), take(2)},
		Want: map[int]GroupPlace{1: {0, 0, 0}, 2: {0, 0, 0}, 3: {1, 1, 0}},
	},
	{
		Name:  "a cancelled request keeps its place",
		Count: 2, Steps: []GroupStep{res(1, normal), res(2, normal), res(3, normal), take(1), cancel(1)},
		Want: map[int]GroupPlace{1: {0, 0, 0}, 2: {0, 1, 0}, 3: {1, 2, 0}},
	},
	{
		Name:  "an answered request's window keeps counting it",
		Count: 2, Steps: []GroupStep{res(1, normal), res(2, normal), take(1), settle(1), res(3, normal)},
		Want: map[int]GroupPlace{2: {0, 0, 0}, 3: {1, 1, 0}},
	},
	{
		Name:  "an interaction passes the bulk request waiting, not the one sent",
		Count: 2, Steps: []GroupStep{res(1, bulk), res(2, bulk), take(1), res(3, interactive)},
		Want: map[int]GroupPlace{1: {0, 0, 0}, 3: {0, 0, 0}, 2: {1, 1, 0}},
	},
	{
		Name:  "the guard holds a slot while its request is on its way, and one window after the answer, which spaces the next windows by its round trip",
		Count: 1, Steps: []GroupStep{res(1, normal), res(2, normal), take(1), move(time.Second), refused(2, time.Second),
			settle(1), refused(2, time.Second), res(3, normal)},
		Want: map[int]GroupPlace{2: {1, 0, 0}, 3: {3, 1, 0}},
	},
	{
		Name:  "a request waits for the later of its window's start and a free slot",
		Count: 1, Steps: []GroupStep{res(1, normal), res(2, normal), take(1), move(500 * time.Millisecond), refused(2, time.Second)},
		Want: map[int]GroupPlace{1: {0, 0, 0}, 2: {1, 0, 0}},
	},
	{
		Name:  "a window opened after an answer starts a window plus the round trip after the last",
		Count: 1, Steps: append(steps(1, 3, normal), take(1), move(100*time.Millisecond), settle(1), res(4, normal)),
		Want: map[int]GroupPlace{2: {1, 0, 0}, 3: {2, 1, 0}, 4: {3, 2, 100 * time.Millisecond}},
	},
	{
		Name:  "the round trip decays by an eighth per answer, in whole milliseconds",
		Count: 1, Steps: []GroupStep{res(1, normal), take(1), move(2 * time.Second), settle(1), res(2, normal),
			move(3 * time.Second), take(2), move(4 * time.Second), settle(2), res(3, normal), res(4, normal),
			move(5 * time.Second), take(3), move(6 * time.Second), settle(3), res(5, normal)},
		Want: map[int]GroupPlace{4: {7, 0, 750 * time.Millisecond}, 5: {10, 1, 282 * time.Millisecond}},
	},
	{
		Name:  "a request whose window is over is placed again, behind those with a window",
		Count: 1, Steps: []GroupStep{res(1, normal), res(2, normal), move(time.Second)},
		Want: map[int]GroupPlace{1: {2, 1, 0}, 2: {1, 0, 0}},
	},
	{
		Name:  "a block places the waiting requests again from its end, in order",
		Count: 2, Steps: []GroupStep{res(1, bulk), res(2, normal), res(3, interactive), block(2500 * time.Millisecond)},
		Want: map[int]GroupPlace{3: {2, 0, 500 * time.Millisecond}, 2: {2, 1, 500 * time.Millisecond}, 1: {3, 2, 500 * time.Millisecond}},
	},
	{
		Name:  "a second, shorter block changes nothing",
		Count: 1, Steps: append(steps(1, 3, normal), block(2*time.Second), rel(2), block(time.Second), res(4, normal)),
		Want: map[int]GroupPlace{1: {2, 0, 0}, 4: {3, 1, 0}, 3: {4, 2, 0}},
	},
	{
		Name:  "a request sent before a block and cancelled after it goes first",
		Count: 1, Steps: []GroupStep{res(1, normal), res(2, normal), take(1), block(2 * time.Second), cancel(1)},
		Want: map[int]GroupPlace{1: {0, 0, 0}, 2: {3, 1, 0}}, // the guard is full while 1 is on its way: a window later
	},
	{
		Name:  "a request that moves no more, sent before a block and cancelled after it, is still passed by no one",
		Count: 2, Steps: append(append(append(append([]GroupStep{res(1, bulk)}, steps(2, 15, interactive)...), each(2, 15, rel)...),
			move(7*time.Second), take(1), res(100, bulk), block(7*time.Second)), cancel(1), res(200, interactive)),
		Want: map[int]GroupPlace{1: {7, 0, 0}, 100: {7, 1, 0}, 200: {8, 2, 0}},
	},
	{
		Name:  "a block that ends as a sent request's window began leaves that window counting it",
		Count: 2, Steps: []GroupStep{res(1, normal), res(2, normal), take(1), block(0), cancel(1), res(3, normal)},
		Want: map[int]GroupPlace{1: {0, 0, 0}, 2: {0, 1, 0}, 3: {1, 2, 0}},
	},
}

// GroupTable renders Groups as the Markdown table of docs/architecture.md.
func GroupTable() string {
	var b strings.Builder
	b.WriteString("| Row | Limit | Steps | Windows after, from the row's start (in line; * on its way) |\n|---|---|---|---|\n")
	for _, c := range Groups {
		var st []string
		kind := map[int]string{}
		for _, s := range c.Steps {
			id := fmt.Sprint(s.ID)
			switch s.Op {
			case Reserve:
				kind[s.ID] = map[int8]string{bulk: "B", normal: "N", interactive: "I"}[s.Class]
				st = append(st, kind[s.ID]+id)
			case Release:
				st = append(st, "R"+id)
			case Take:
				if s.OK {
					st = append(st, "T"+id)
				} else {
					st = append(st, "T"+id+" (waits "+seconds(s.Wait)+")")
				}
			case Cancel:
				st = append(st, "C"+id)
			case Settle:
				st = append(st, "A"+id)
			case Block:
				st = append(st, "block until "+seconds(s.At))
			case Move:
				st = append(st, "["+seconds(s.At)+"]")
			}
		}
		ids := c.IDs()
		slices.SortFunc(ids, func(a, b int) int {
			if d := cmp.Compare(c.Want[a].Start(), c.Want[b].Start()); d != 0 {
				return d
			}
			return c.Want[a].Position - c.Want[b].Position
		})
		var ws []string
		for i, id := range ids {
			p := c.Want[id]
			name := kind[id] + fmt.Sprint(id)
			if c.Sent(id) {
				name += "*"
			}
			if i == 0 || c.Want[ids[i-1]].Start() != p.Start() {
				ws = append(ws, seconds(p.Start())+": "+name)
			} else {
				ws[len(ws)-1] += " " + name
			}
		}
		fmt.Fprintf(&b, "| %s | %d per window | %s | %s |\n", c.Name, c.Count, strings.Join(st, " "), strings.Join(ws, " · "))
	}
	b.WriteString("\nSteps: B, N, I reserve a bulk, normal or interactive request; R releases one; T takes its slot (it goes); C cancels it (never sent); A answers it; [t] the clock moves to t.\n")
	return b.String()
}

// seconds writes d as seconds ("2.5 s").
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}
