package fsm_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/fsm"
)

// The expected transitions are restated here from the specification rather
// than derived from the package's tables, so that a wrong table fails.

var supervisorStates = []fsm.SupervisorState{fsm.Disconnected, fsm.Connecting, fsm.Connected, fsm.GlobalLimit}

var supervisorEvents = []fsm.SupervisorEvent{fsm.Dial, fsm.Up, fsm.DialFailed, fsm.GlobalHit, fsm.GlobalClear, fsm.Down}

var supervisorWant = map[fsm.SupervisorState]map[fsm.SupervisorEvent]fsm.SupervisorState{
	fsm.Disconnected: {fsm.Dial: fsm.Connecting},
	fsm.Connecting:   {fsm.Up: fsm.Connected, fsm.DialFailed: fsm.Disconnected, fsm.Down: fsm.Disconnected},
	fsm.Connected:    {fsm.GlobalHit: fsm.GlobalLimit, fsm.Down: fsm.Disconnected},
	fsm.GlobalLimit:  {fsm.GlobalHit: fsm.GlobalLimit, fsm.GlobalClear: fsm.Connected, fsm.Down: fsm.Disconnected},
}

// supervisorPath leads from the initial state to each state.
var supervisorPath = map[fsm.SupervisorState][]fsm.SupervisorEvent{
	fsm.Disconnected: nil,
	fsm.Connecting:   {fsm.Dial},
	fsm.Connected:    {fsm.Dial, fsm.Up},
	fsm.GlobalLimit:  {fsm.Dial, fsm.Up, fsm.GlobalHit},
}

var bucketStates = []fsm.BucketState{fsm.Initial, fsm.Open, fsm.Exhausted, fsm.Limited, fsm.Idle}

var bucketEvents = []fsm.BucketEvent{fsm.Discovered, fsm.Drained, fsm.Reset, fsm.RateLimited, fsm.Quiet, fsm.Wake}

var bucketWant = map[fsm.BucketState]map[fsm.BucketEvent]fsm.BucketState{
	fsm.Initial:   {fsm.Discovered: fsm.Open, fsm.Drained: fsm.Exhausted, fsm.RateLimited: fsm.Limited},
	fsm.Open:      {fsm.Drained: fsm.Exhausted, fsm.RateLimited: fsm.Limited, fsm.Quiet: fsm.Idle},
	fsm.Exhausted: {fsm.Reset: fsm.Open, fsm.RateLimited: fsm.Limited},
	fsm.Limited:   {fsm.Reset: fsm.Open, fsm.RateLimited: fsm.Limited},
	fsm.Idle:      {fsm.Wake: fsm.Open},
}

var bucketPath = map[fsm.BucketState][]fsm.BucketEvent{
	fsm.Initial:   nil,
	fsm.Open:      {fsm.Discovered},
	fsm.Exhausted: {fsm.Drained},
	fsm.Limited:   {fsm.RateLimited},
	fsm.Idle:      {fsm.Discovered, fsm.Quiet},
}

var windowWant = map[fsm.WindowState]map[fsm.WindowEvent]fsm.WindowState{
	fsm.WindowOpen:   {fsm.WindowHit: fsm.WindowPaused},
	fsm.WindowPaused: {fsm.WindowHit: fsm.WindowPaused, fsm.WindowClear: fsm.WindowOpen},
}

var windowPath = map[fsm.WindowState][]fsm.WindowEvent{
	fsm.WindowOpen:   nil,
	fsm.WindowPaused: {fsm.WindowHit},
}

// machine is the API shared by Supervisor, Bucket and Window.
type machine[S, E any] interface {
	Fire(ctx context.Context, e E) error
	Current() S
	Can(e E) bool
}

type step[S, E any] struct {
	event    E
	from, to S
}

// recorder collects the hook's calls.
type recorder[S, E any] struct{ steps []step[S, E] }

func (r *recorder[S, E]) hook(e E, from, to S) { r.steps = append(r.steps, step[S, E]{e, from, to}) }

// table describes one machine for the generic checks below.
type table[S, E interface {
	comparable
	fmt.Stringer
}] struct {
	name     string
	newM     func(hook func(E, S, S)) machine[S, E]
	states   []S
	events   []E
	badEvent E // a value out of range
	want     map[S]map[E]S
	path     map[S][]E
}

var supervisorTable = table[fsm.SupervisorState, fsm.SupervisorEvent]{
	name: "supervisor",
	newM: func(h func(fsm.SupervisorEvent, fsm.SupervisorState, fsm.SupervisorState)) machine[fsm.SupervisorState, fsm.SupervisorEvent] {
		return fsm.NewSupervisor(h)
	},
	states: supervisorStates, events: supervisorEvents, badEvent: fsm.SupervisorEvent(200),
	want: supervisorWant, path: supervisorPath,
}

var bucketTable = table[fsm.BucketState, fsm.BucketEvent]{
	name: "bucket",
	newM: func(h func(fsm.BucketEvent, fsm.BucketState, fsm.BucketState)) machine[fsm.BucketState, fsm.BucketEvent] {
		return fsm.NewBucket(h)
	},
	states: bucketStates, events: bucketEvents, badEvent: fsm.BucketEvent(200),
	want: bucketWant, path: bucketPath,
}

var windowTable = table[fsm.WindowState, fsm.WindowEvent]{
	name: "window",
	newM: func(h func(fsm.WindowEvent, fsm.WindowState, fsm.WindowState)) machine[fsm.WindowState, fsm.WindowEvent] {
		return fsm.NewWindow(h)
	},
	states: []fsm.WindowState{fsm.WindowOpen, fsm.WindowPaused}, events: []fsm.WindowEvent{fsm.WindowHit, fsm.WindowClear},
	badEvent: fsm.WindowEvent(200), want: windowWant, path: windowPath,
}

// in returns a machine driven into state s, and its recorder, emptied.
func (tb table[S, E]) in(t *testing.T, s S) (machine[S, E], *recorder[S, E]) {
	t.Helper()
	rec := &recorder[S, E]{}
	m := tb.newM(rec.hook)
	for _, e := range tb.path[s] {
		require.NoError(t, m.Fire(context.Background(), e))
	}
	require.Equal(t, s, m.Current())
	rec.steps = nil
	return m, rec
}

// checkAllPairs fires every event, plus one out of range, in every state.
func (tb table[S, E]) checkAllPairs(t *testing.T) {
	for _, s := range tb.states {
		for _, e := range append(tb.events[:len(tb.events):len(tb.events)], tb.badEvent) {
			t.Run(s.String()+"/"+e.String(), func(t *testing.T) {
				m, rec := tb.in(t, s)
				dst, ok := tb.want[s][e]
				require.Equal(t, ok, m.Can(e), "Can")

				err := m.Fire(context.Background(), e)
				if ok {
					require.NoError(t, err)
					require.Equal(t, dst, m.Current())
					require.Equal(t, []step[S, E]{{e, s, dst}}, rec.steps)
					return
				}
				require.ErrorIs(t, err, fsm.ErrInvalidEvent)
				var inv *fsm.InvalidEventError
				require.ErrorAs(t, err, &inv)
				require.Equal(t, fsm.InvalidEventError{Machine: tb.name, Event: e.String(), State: s.String()}, *inv)
				require.Equal(t, s, m.Current(), "state must be unchanged")
				require.Empty(t, rec.steps, "hook must not run")
			})
		}
	}
}

func TestSupervisorTransitions(t *testing.T) { supervisorTable.checkAllPairs(t) }

func TestBucketTransitions(t *testing.T) { bucketTable.checkAllPairs(t) }

func TestWindowTransitions(t *testing.T) { windowTable.checkAllPairs(t) }

func TestSelfLoops(t *testing.T) {
	ctx := context.Background()
	t.Run("supervisor global_hit", func(t *testing.T) {
		m, rec := supervisorTable.in(t, fsm.GlobalLimit)
		require.NoError(t, m.Fire(ctx, fsm.GlobalHit))
		require.NoError(t, m.Fire(ctx, fsm.GlobalHit))
		require.Equal(t, fsm.GlobalLimit, m.Current())
		loop := step[fsm.SupervisorState, fsm.SupervisorEvent]{fsm.GlobalHit, fsm.GlobalLimit, fsm.GlobalLimit}
		require.Equal(t, []step[fsm.SupervisorState, fsm.SupervisorEvent]{loop, loop}, rec.steps)
	})
	t.Run("bucket rate_limited", func(t *testing.T) {
		m, rec := bucketTable.in(t, fsm.Limited)
		require.NoError(t, m.Fire(ctx, fsm.RateLimited))
		require.NoError(t, m.Fire(ctx, fsm.RateLimited))
		require.Equal(t, fsm.Limited, m.Current())
		loop := step[fsm.BucketState, fsm.BucketEvent]{fsm.RateLimited, fsm.Limited, fsm.Limited}
		require.Equal(t, []step[fsm.BucketState, fsm.BucketEvent]{loop, loop}, rec.steps)
	})
}

func TestNilHook(t *testing.T) {
	ctx := context.Background()
	s := fsm.NewSupervisor(nil)
	require.NoError(t, s.Fire(ctx, fsm.Dial))
	b := fsm.NewBucket(nil)
	require.NoError(t, b.Fire(ctx, fsm.RateLimited))
	require.NoError(t, b.Fire(ctx, fsm.RateLimited)) // self-loop with no hook
	require.Error(t, b.Fire(ctx, fsm.Wake))
}

func TestInvalidEventError(t *testing.T) {
	b := fsm.NewBucket(nil)
	require.NoError(t, b.Fire(context.Background(), fsm.Discovered))
	err := b.Fire(context.Background(), fsm.Reset)
	require.EqualError(t, err, `fsm: event "reset" inappropriate in state "open" of bucket machine`)
	require.ErrorIs(t, err, fsm.ErrInvalidEvent)

	s := fsm.NewSupervisor(nil)
	err = s.Fire(context.Background(), fsm.SupervisorEvent(9))
	require.EqualError(t, err, `fsm: event "SupervisorEvent(9)" inappropriate in state "disconnected" of supervisor machine`)
	require.ErrorIs(t, err, fsm.ErrInvalidEvent)
	require.False(t, s.Can(fsm.SupervisorEvent(9)))
}

// An event records a fact; a canceled context must not drop it (looplab
// alone would drop real transitions but keep self-loops).
func TestFireIgnoresCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := fsm.NewSupervisor(nil)
	require.NoError(t, s.Fire(ctx, fsm.Dial))
	require.Equal(t, fsm.Connecting, s.Current())
	b := fsm.NewBucket(nil)
	require.NoError(t, b.Fire(ctx, fsm.RateLimited))
	require.NoError(t, b.Fire(ctx, fsm.RateLimited))
	require.Equal(t, fsm.Limited, b.Current())
}

// The hook runs after the transition with no lock held: reading Current and
// Can from it must not deadlock, and must already show the new state.
func TestHookMayReadMachine(t *testing.T) {
	type seen struct {
		to, current fsm.SupervisorState
		canDown     bool
	}
	var got []seen
	var s *fsm.Supervisor
	s = fsm.NewSupervisor(func(_ fsm.SupervisorEvent, _, to fsm.SupervisorState) {
		got = append(got, seen{to, s.Current(), s.Can(fsm.Down)})
	})
	var bucketSeen []fsm.BucketState
	var b *fsm.Bucket
	b = fsm.NewBucket(func(_ fsm.BucketEvent, _, to fsm.BucketState) {
		bucketSeen = append(bucketSeen, b.Current())
		_ = b.Can(fsm.Wake)
	})

	done := make(chan error, 1)
	go func() {
		ctx := context.Background()
		for _, e := range []fsm.SupervisorEvent{fsm.Dial, fsm.Up, fsm.GlobalHit, fsm.GlobalHit, fsm.GlobalClear, fsm.Down} {
			if err := s.Fire(ctx, e); err != nil {
				done <- err
				return
			}
		}
		for _, e := range []fsm.BucketEvent{fsm.RateLimited, fsm.RateLimited, fsm.Reset, fsm.Quiet, fsm.Wake} {
			if err := b.Fire(ctx, e); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Fire deadlocked with a hook reading the machine")
	}
	require.Equal(t, []seen{
		{fsm.Connecting, fsm.Connecting, true},
		{fsm.Connected, fsm.Connected, true},
		{fsm.GlobalLimit, fsm.GlobalLimit, true},
		{fsm.GlobalLimit, fsm.GlobalLimit, true},
		{fsm.Connected, fsm.Connected, true},
		{fsm.Disconnected, fsm.Disconnected, false},
	}, got)
	require.Equal(t, []fsm.BucketState{fsm.Limited, fsm.Limited, fsm.Open, fsm.Idle, fsm.Open}, bucketSeen)
}

// Current and Can may be read from other goroutines (snapshots) while the
// owning actor fires events. Meaningful under -race.
func TestConcurrentReads(t *testing.T) {
	ctx := context.Background()
	s := fsm.NewSupervisor(nil)
	b := fsm.NewBucket(nil)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if st := s.Current(); strings.Contains(st.String(), "(") {
					panic("invalid supervisor state " + st.String())
				}
				if st := b.Current(); strings.Contains(st.String(), "(") {
					panic("invalid bucket state " + st.String())
				}
				_ = s.Can(fsm.Down)
				_ = b.Can(fsm.Wake)
			}
		}()
	}
	require.NoError(t, b.Fire(ctx, fsm.Discovered))
	for range 500 {
		for _, e := range []fsm.SupervisorEvent{fsm.Dial, fsm.Up, fsm.GlobalHit, fsm.GlobalHit, fsm.GlobalClear, fsm.Down} {
			require.NoError(t, s.Fire(ctx, e))
		}
		for _, e := range []fsm.BucketEvent{fsm.Drained, fsm.Reset, fsm.RateLimited, fsm.RateLimited, fsm.Reset, fsm.Quiet, fsm.Wake} {
			require.NoError(t, b.Fire(ctx, e))
		}
	}
	stop.Store(true)
	wg.Wait()
	require.Equal(t, fsm.Disconnected, s.Current())
	require.Equal(t, fsm.Open, b.Current())
}

func TestString(t *testing.T) {
	tests := []struct {
		v    fmt.Stringer
		want string
	}{
		{fsm.Disconnected, "disconnected"},
		{fsm.Connecting, "connecting"},
		{fsm.Connected, "connected"},
		{fsm.GlobalLimit, "global_limit"},
		{fsm.SupervisorState(9), "SupervisorState(9)"},

		{fsm.Dial, "dial"},
		{fsm.Up, "up"},
		{fsm.DialFailed, "dial_failed"},
		{fsm.GlobalHit, "global_hit"},
		{fsm.GlobalClear, "global_clear"},
		{fsm.Down, "down"},
		{fsm.SupervisorEvent(6), "SupervisorEvent(6)"},

		{fsm.Initial, "initial"},
		{fsm.Open, "open"},
		{fsm.Exhausted, "exhausted"},
		{fsm.Limited, "limited"},
		{fsm.Idle, "idle"},
		{fsm.BucketState(255), "BucketState(255)"},

		{fsm.Discovered, "discovered"},
		{fsm.Drained, "drained"},
		{fsm.Reset, "reset"},
		{fsm.RateLimited, "rate_limited"},
		{fsm.Quiet, "quiet"},
		{fsm.Wake, "wake"},
		{fsm.BucketEvent(6), "BucketEvent(6)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			require.Equal(t, tt.want, tt.v.String())
		})
	}
}

func TestZeroValuesAreInitialStates(t *testing.T) {
	var s fsm.SupervisorState
	var b fsm.BucketState
	require.Equal(t, fsm.Disconnected, s)
	require.Equal(t, fsm.Initial, b)
	require.Equal(t, fsm.Disconnected, fsm.NewSupervisor(nil).Current())
	require.Equal(t, fsm.Initial, fsm.NewBucket(nil).Current())
}

func TestMermaidGolden(t *testing.T) {
	require.Equal(t, `stateDiagram-v2
    [*] --> disconnected
    disconnected --> connecting: dial
    connecting --> connected: up
    connecting --> disconnected: dial_failed
    connecting --> disconnected: down
    connected --> global_limit: global_hit
    connected --> disconnected: down
    global_limit --> global_limit: global_hit
    global_limit --> connected: global_clear
    global_limit --> disconnected: down
`, fsm.SupervisorMermaid())

	require.Equal(t, `stateDiagram-v2
    [*] --> initial
    initial --> open: discovered
    initial --> exhausted: drained
    initial --> limited: rate_limited
    open --> exhausted: drained
    open --> limited: rate_limited
    open --> idle: quiet
    exhausted --> open: reset
    exhausted --> limited: rate_limited
    limited --> open: reset
    limited --> limited: rate_limited
    idle --> open: wake
`, fsm.BucketMermaid())
}

// The diagrams must contain exactly the transitions the tests expect.
func TestMermaidMatchesSpec(t *testing.T) {
	check := func(t *testing.T, got string, initial string, want map[string]string) {
		lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
		require.Equal(t, "stateDiagram-v2", lines[0])
		require.Equal(t, "    [*] --> "+initial, lines[1])
		edges := map[string]string{}
		for _, l := range lines[2:] {
			edges[l] = ""
		}
		require.Equal(t, want, edges)
	}
	want := map[string]string{}
	for s, m := range supervisorWant {
		for e, d := range m {
			want[fmt.Sprintf("    %s --> %s: %s", s, d, e)] = ""
		}
	}
	check(t, fsm.SupervisorMermaid(), "disconnected", want)
	want = map[string]string{}
	for s, m := range bucketWant {
		for e, d := range m {
			want[fmt.Sprintf("    %s --> %s: %s", s, d, e)] = ""
		}
	}
	check(t, fsm.BucketMermaid(), "initial", want)
}
