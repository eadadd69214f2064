package conformance

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// GroupCase is one row of the group table: one declared group
// (ratelimit.Group, and the shared store's Redis scripts for groups)
// met at one instant by reservations of requests of three classes and by
// releases, and the window and place in line each waiting request has
// after the last step. It is what every implementation of the groups'
// classes must do: a higher class takes the place of a lower one in the
// earliest full window, the lower ones move back in order, each at most
// ratelimit.MaxGroupMoves windows.
//
// Every step happens at the row's start, on an idle group: the first
// window opens then, and the next ones GroupWindow apart (no round trip
// is known yet).
type GroupCase struct {
	// Name says what the row shows, in a few words.
	Name string
	// Count is the group's limit per window.
	Count int
	// Steps run in order.
	Steps []GroupStep
	// Want is every waiting request's place after the last step, by id.
	Want map[int]GroupPlace
}

// GroupStep reserves request ID of a Class (-1 bulk, 0 normal, 1
// interactive), or releases it.
type GroupStep struct {
	ID      int
	Class   int8
	Release bool
}

// GroupPlace is a request's window (0: the first; its start is that many
// GroupWindow after the row's start) and its position (ratelimit.Slot's:
// the waiting requests ahead of it).
type GroupPlace struct {
	Window, Position int
}

// GroupWindow is every row's window.
const GroupWindow = time.Second

// Classes of the rows.
const (
	bulk, normal, interactive int8 = -1, 0, 1
)

func res(id int, class int8) GroupStep { return GroupStep{ID: id, Class: class} }
func rel(id int) GroupStep             { return GroupStep{ID: id, Release: true} }

// steps returns a reservation of each id from..to, of class.
func steps(from, to int, class int8) []GroupStep {
	var s []GroupStep
	for id := from; id <= to; id++ {
		s = append(s, res(id, class))
	}
	return s
}

// Groups is the group table.
var Groups = []GroupCase{
	{
		Name:  "an interaction takes the last bulk place of the first window; each window's last moves back one",
		Count: 2, Steps: append(steps(1, 6, bulk), res(7, interactive)),
		Want: map[int]GroupPlace{7: {0, 0}, 1: {0, 1}, 2: {1, 2}, 3: {1, 3}, 4: {2, 4}, 5: {2, 5}, 6: {3, 6}},
	},
	{
		Name:  "a normal request passes bulk, not an interaction",
		Count: 2, Steps: append(steps(1, 6, bulk), res(7, interactive), res(8, normal)),
		Want: map[int]GroupPlace{7: {0, 0}, 8: {0, 1}, 1: {1, 2}, 2: {1, 3}, 3: {2, 4}, 4: {2, 5}, 5: {3, 6}, 6: {3, 7}},
	},
	{
		Name:  "bulk passes no one",
		Count: 1, Steps: []GroupStep{res(1, bulk), res(2, normal), res(3, bulk)},
		Want: map[int]GroupPlace{2: {0, 0}, 1: {1, 1}, 3: {2, 2}},
	},
	{
		Name:  "an interaction passes the lowest class first",
		Count: 2, Steps: []GroupStep{res(1, normal), res(2, bulk), res(3, interactive)},
		Want: map[int]GroupPlace{3: {0, 0}, 1: {0, 1}, 2: {1, 2}},
	},
	{
		Name:  "a normal backlog keeps its order behind an interaction",
		Count: 2, Steps: append(steps(1, 4, normal), res(5, interactive)),
		Want: map[int]GroupPlace{5: {0, 0}, 1: {0, 1}, 2: {1, 2}, 3: {1, 3}, 4: {2, 4}},
	},
	{
		Name:  "a released place goes to the next to reserve",
		Count: 2, Steps: append(steps(1, 4, bulk), rel(1), res(5, interactive)),
		Want: map[int]GroupPlace{5: {0, 0}, 2: {0, 1}, 3: {1, 2}, 4: {1, 3}},
	},
	{
		Name:  "a moved request fills the place a release left",
		Count: 1, Steps: append(steps(1, 3, bulk), rel(2), res(4, interactive), res(5, interactive)),
		Want: map[int]GroupPlace{4: {0, 0}, 5: {1, 1}, 1: {2, 2}, 3: {3, 3}},
	},
	{
		Name:  "bulk moves back seven windows at most, then keeps its window",
		Count: 1, Steps: append([]GroupStep{res(1, bulk)}, steps(2, 10, interactive)...),
		Want: map[int]GroupPlace{2: {0, 0}, 3: {1, 1}, 4: {2, 2}, 5: {3, 3}, 6: {4, 4}, 7: {5, 5}, 8: {6, 6}, 1: {7, 7}, 9: {8, 8}, 10: {9, 9}},
	},
	{
		Name:  "an interaction behind interactions only goes at the end: no one to pass",
		Count: 2, Steps: steps(1, 5, interactive),
		Want: map[int]GroupPlace{1: {0, 0}, 2: {0, 1}, 3: {1, 2}, 4: {1, 3}, 5: {2, 4}},
	},
	{
		Name:  "an interaction passes the one bulk request behind a line of interactions",
		Count: 2, Steps: append(steps(1, 3, interactive), res(4, bulk), res(5, interactive)),
		Want: map[int]GroupPlace{1: {0, 0}, 2: {0, 1}, 3: {1, 2}, 5: {1, 3}, 4: {2, 4}},
	},
	{
		Name:  "normal requests pass bulk as they come; an interaction passes the latest normal one, which passes the latest bulk one",
		Count: 3, Steps: []GroupStep{res(1, bulk), res(2, normal), res(3, bulk), res(4, normal), res(5, bulk), res(6, normal), res(7, interactive)},
		Want: map[int]GroupPlace{7: {0, 0}, 2: {0, 1}, 4: {0, 2}, 6: {1, 3}, 1: {1, 4}, 3: {1, 5}, 5: {2, 6}},
	},
	{
		Name:  "nothing passes a request that moved seven times; later ones it may",
		Count: 1, Steps: append(append([]GroupStep{res(1, bulk)}, steps(2, 8, interactive)...), res(9, bulk), res(10, interactive)),
		Want: map[int]GroupPlace{2: {0, 0}, 3: {1, 1}, 4: {2, 2}, 5: {3, 3}, 6: {4, 4}, 7: {5, 5}, 8: {6, 6}, 1: {7, 7}, 10: {8, 8}, 9: {9, 9}},
	},
}

// GroupTable renders Groups as the Markdown table of docs/architecture.md.
func GroupTable() string {
	var b strings.Builder
	b.WriteString("| Row | Limit | Steps (B bulk, N normal, I interactive, R release) | Windows after (in line) |\n|---|---|---|---|\n")
	for _, c := range Groups {
		var st []string
		kind := map[int]string{}
		for _, s := range c.Steps {
			if s.Release {
				st = append(st, fmt.Sprintf("R%d", s.ID))
				continue
			}
			kind[s.ID] = map[int8]string{bulk: "B", normal: "N", interactive: "I"}[s.Class]
			st = append(st, kind[s.ID]+fmt.Sprint(s.ID))
		}
		ids := make([]int, 0, len(c.Want))
		last := 0
		for id, p := range c.Want {
			ids = append(ids, id)
			last = max(last, p.Window)
		}
		slices.SortFunc(ids, func(a, b int) int { return c.Want[a].Position - c.Want[b].Position })
		wins := make([][]string, last+1)
		for _, id := range ids {
			w := c.Want[id].Window
			wins[w] = append(wins[w], kind[id]+fmt.Sprint(id))
		}
		var ws []string
		for _, w := range wins {
			ws = append(ws, strings.Join(w, " "))
		}
		fmt.Fprintf(&b, "| %s | %d per window | %s | %s |\n", c.Name, c.Count, strings.Join(st, " "), strings.Join(ws, " · "))
	}
	return b.String()
}
