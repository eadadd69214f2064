package fsm

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	lfsm "github.com/looplab/fsm"
)

// enum is the constraint on state and event types: small integers whose
// String method gives the name used inside looplab/fsm and in diagrams.
type enum interface {
	~uint8
	String() string
}

// transition is one row of a transition table: event moves the machine from
// any state in src to dst. A row whose src contains dst is a self-loop.
type transition[S, E enum] struct {
	event E
	src   []S
	dst   S
}

// spec is a machine definition. Its table is the single source of truth: the
// looplab/fsm event list and the Mermaid diagram are both derived from it.
type spec[S, E enum] struct {
	name      string
	initial   S
	numStates int // valid states are 0..numStates-1
	numEvents int // valid events are 0..numEvents-1
	table     []transition[S, E]

	// Derived once by newSpec; read-only afterwards.
	events  lfsm.Events
	states  map[string]S
	mermaid string
	allowed [][]bool // allowed[state][event]: the table, for Can

	// engine is the one looplab machine of this spec. Every instance's
	// transitions are executed by it, under mu: it is set to the
	// instance's state, fires the event, and reports the new state. So a
	// machine instance holds only its state (a few bytes) instead of a
	// looplab machine of its own (about 1.2 KB, which was most of a bucket
	// actor's memory).
	mu     sync.Mutex
	engine *lfsm.FSM
}

// newSpec validates a transition table and derives everything the machines
// need from it. It panics on an invalid table: that is a programming error
// caught by any test run, since the specs are package-level variables.
func newSpec[S, E enum](name string, initial S, numStates, numEvents int, table []transition[S, E]) *spec[S, E] {
	sp := &spec[S, E]{
		name:      name,
		initial:   initial,
		numStates: numStates,
		numEvents: numEvents,
		table:     table,
	}
	if err := sp.validate(); err != nil {
		panic(err)
	}
	sp.states = make(map[string]S, numStates)
	for i := range numStates {
		s := S(i)
		sp.states[s.String()] = s
	}
	for _, row := range table {
		src := make([]string, len(row.src))
		for i, s := range row.src {
			src[i] = s.String()
		}
		sp.events = append(sp.events, lfsm.EventDesc{Name: row.event.String(), Src: src, Dst: row.dst.String()})
	}
	sp.mermaid = sp.renderMermaid()
	sp.allowed = make([][]bool, numStates)
	for i := range sp.allowed {
		sp.allowed[i] = make([]bool, numEvents)
	}
	for _, row := range table {
		for _, src := range row.src {
			sp.allowed[src][row.event] = true
		}
	}
	sp.engine = lfsm.NewFSM(initial.String(), sp.events, nil)
	return sp
}

// validate checks the table for the mistakes looplab/fsm would accept
// silently: a repeated (event, source) pair (the last one would win),
// values without a name, and events with no transition at all.
func (sp *spec[S, E]) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("fsm: invalid %s table: "+format, append([]any{sp.name}, args...)...)
	}
	if int(sp.initial) >= sp.numStates {
		return bad("initial state %v out of range", sp.initial)
	}
	names := make(map[string]bool)
	for i := range sp.numStates {
		n := S(i).String()
		if n == "" || strings.ContainsAny(n, "() \t\n:") || names[n] {
			return bad("state %d has an unusable or duplicate name %q", i, n)
		}
		names[n] = true
	}
	for i := range sp.numEvents {
		n := E(i).String()
		if n == "" || strings.ContainsAny(n, "() \t\n:") || names[n] {
			return bad("event %d has an unusable or duplicate name %q", i, n)
		}
		names[n] = true
	}
	type key struct {
		e E
		s S
	}
	seen := make(map[key]bool)
	used := make([]bool, sp.numEvents)
	for _, row := range sp.table {
		if int(row.event) >= sp.numEvents {
			return bad("event %v out of range", row.event)
		}
		if int(row.dst) >= sp.numStates {
			return bad("event %v: destination %v out of range", row.event, row.dst)
		}
		if len(row.src) == 0 {
			return bad("event %v has no source state", row.event)
		}
		used[row.event] = true
		for _, s := range row.src {
			if int(s) >= sp.numStates {
				return bad("event %v: source %v out of range", row.event, s)
			}
			if seen[key{row.event, s}] {
				return bad("event %v from %v defined twice", row.event, s)
			}
			seen[key{row.event, s}] = true
		}
	}
	for i, ok := range used {
		if !ok {
			return bad("event %v has no transition", E(i))
		}
	}
	return nil
}

// renderMermaid renders the table as a Mermaid stateDiagram-v2, one line per
// (source, event, destination), ordered by source then event in declaration
// order. The line format is the one lfsm.VisualizeWithType uses, but the order
// follows the declarations rather than the alphabet, which reads better.
func (sp *spec[S, E]) renderMermaid() string {
	type edge struct {
		src S
		ev  E
		dst S
	}
	var edges []edge
	for _, row := range sp.table {
		for _, s := range row.src {
			edges = append(edges, edge{s, row.event, row.dst})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		return cmp.Or(cmp.Compare(a.src, b.src), cmp.Compare(a.ev, b.ev))
	})
	var b strings.Builder
	b.WriteString("stateDiagram-v2\n")
	fmt.Fprintf(&b, "    [*] --> %s\n", sp.initial)
	for _, e := range edges {
		fmt.Fprintf(&b, "    %s --> %s: %s\n", e.src, e.dst, e.ev)
	}
	return b.String()
}

// machine is one instance of a state machine: its state, and the hook.
// Supervisor and Bucket are thin exported shells around it. Its
// transitions are executed by the spec's looplab machine (see spec.engine).
//
// No looplab callbacks are registered, so none of looplab's callback traps
// (silently ignored misspelled keys, deadlocks on re-entry from before_ and
// leave_ callbacks) can arise. The transition hook is called by fire after
// looplab's Event has returned and every lock has been released.
type machine[S, E enum] struct {
	spec *spec[S, E]
	hook func(event E, from, to S)

	// mu serializes fire so that the from and to states passed to the hook
	// are exactly those of this event, even if Fire were misused from several
	// goroutines. current and can do not take it.
	mu    sync.Mutex
	state atomic.Uint32 // an S
}

// init sets up a machine in its spec's initial state.
func (m *machine[S, E]) init(sp *spec[S, E], hook func(event E, from, to S)) {
	m.spec, m.hook = sp, hook
	m.state.Store(uint32(sp.initial))
}

func (m *machine[S, E]) fire(ctx context.Context, e E) error {
	// An event records something that already happened (a dial returned, a
	// timer fired), so it must not be lost because some request's context was
	// canceled. looplab would drop a real transition on a canceled context yet
	// accept a self-loop; detaching the cancellation keeps both consistent.
	ctx = context.WithoutCancel(ctx)

	m.mu.Lock()
	from := m.current()
	sp := m.spec
	sp.mu.Lock()
	sp.engine.SetState(from.String())
	err := sp.engine.Event(ctx, e.String())
	name := sp.engine.Current()
	sp.mu.Unlock()
	to, ok := sp.states[name]
	if !ok {
		m.mu.Unlock()
		return fmt.Errorf("fsm: %s machine: looplab reported unknown state %q", sp.name, name)
	}
	m.state.Store(uint32(to))
	m.mu.Unlock()

	if err != nil && !isSelfLoop(err) {
		var invalid lfsm.InvalidEventError
		var unknown lfsm.UnknownEventError
		if errors.As(err, &invalid) || errors.As(err, &unknown) {
			return &InvalidEventError{Machine: sp.name, Event: e.String(), State: from.String()}
		}
		// Unreachable without callbacks; kept so that a future looplab
		// error is reported rather than mistaken for success.
		return fmt.Errorf("fsm: %s machine: event %q in state %q: %w", sp.name, e, from, err)
	}
	if m.hook != nil {
		m.hook(e, from, to)
	}
	return nil
}

// isSelfLoop reports whether err is looplab's NoTransitionError for a
// transition whose source and destination are the same state. looplab returns
// it as a value type, with Err set only if a callback failed (we have none).
func isSelfLoop(err error) bool {
	var nt lfsm.NoTransitionError
	return errors.As(err, &nt) && nt.Err == nil
}

func (m *machine[S, E]) current() S { return S(m.state.Load()) }

// can answers from the transition table the engine was built from, without
// taking the engine's lock.
func (m *machine[S, E]) can(e E) bool {
	s := m.current()
	return int(e) < m.spec.numEvents && m.spec.allowed[s][e]
}
