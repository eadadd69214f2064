package fsm

import (
	"slices"
	"strings"
	"testing"

	lfsm "github.com/looplab/fsm"
	"github.com/stretchr/testify/require"
)

// The diagram rendered from a table must describe the same transitions as the
// looplab machine built from that table.
func TestMermaidAgreesWithLooplab(t *testing.T) {
	lines := func(s string) []string {
		l := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
		slices.Sort(l)
		return l
	}
	sup := lfsm.NewFSM(supervisorSpec.initial.String(), supervisorSpec.events, nil)
	got, err := lfsm.VisualizeWithType(sup, lfsm.MERMAID)
	require.NoError(t, err)
	require.Equal(t, lines(got), lines(SupervisorMermaid()))

	bkt := lfsm.NewFSM(bucketSpec.initial.String(), bucketSpec.events, nil)
	got, err = lfsm.VisualizeWithType(bkt, lfsm.MERMAID)
	require.NoError(t, err)
	require.Equal(t, lines(got), lines(BucketMermaid()))
}

// Can answers from the table; it must agree with the looplab engine in every
// state, for every event.
func TestCanAgreesWithLooplab(t *testing.T) {
	for s := range numBucketStates {
		for e := range numBucketEvents {
			f := lfsm.NewFSM(BucketState(s).String(), bucketSpec.events, nil)
			var m machine[BucketState, BucketEvent]
			m.init(bucketSpec, nil)
			m.state.Store(uint32(s))
			require.Equal(t, f.Can(BucketEvent(e).String()), m.can(BucketEvent(e)), "%v %v", BucketState(s), BucketEvent(e))
		}
	}
	for s := range numSupervisorStates {
		for e := range numSupervisorEvents {
			f := lfsm.NewFSM(SupervisorState(s).String(), supervisorSpec.events, nil)
			var m machine[SupervisorState, SupervisorEvent]
			m.init(supervisorSpec, nil)
			m.state.Store(uint32(s))
			require.Equal(t, f.Can(SupervisorEvent(e).String()), m.can(SupervisorEvent(e)), "%v %v", SupervisorState(s), SupervisorEvent(e))
		}
	}
}

func TestSpecValidate(t *testing.T) {
	type row = transition[BucketState, BucketEvent]
	all := func(rows ...row) []row {
		// Every event needs a transition; start from a valid table.
		base := slices.Clone(bucketSpec.table)
		return append(base, rows...)
	}
	tests := []struct {
		name      string
		initial   BucketState
		numStates int
		numEvents int
		table     []row
		want      string // substring of the error; "" means valid
	}{
		{"valid", Initial, numBucketStates, numBucketEvents, all(), ""},
		{"duplicate pair", Initial, numBucketStates, numBucketEvents, all(row{Reset, []BucketState{Limited}, Idle}), "reset from limited defined twice"},
		{"unused event", Initial, numBucketStates, numBucketEvents, bucketSpec.table[1:], "discovered has no transition"},
		{"no source", Initial, numBucketStates, numBucketEvents, all(row{Wake, nil, Open}), "wake has no source"},
		{"source out of range", Initial, numBucketStates, numBucketEvents, all(row{Wake, []BucketState{9}, Open}), "source BucketState(9) out of range"},
		{"destination out of range", Initial, numBucketStates, numBucketEvents, all(row{Wake, []BucketState{Open}, 9}), "destination BucketState(9) out of range"},
		{"event out of range", Initial, numBucketStates, numBucketEvents, all(row{9, []BucketState{Open}, Open}), "event BucketEvent(9) out of range"},
		{"initial out of range", 9, numBucketStates, numBucketEvents, all(), "initial state BucketState(9)"},
		{"unnamed state", Initial, numBucketStates + 1, numBucketEvents, all(), `state 5 has an unusable or duplicate name "BucketState(5)"`},
		{"unnamed event", Initial, numBucketStates, numBucketEvents + 1, all(), `event 6 has an unusable or duplicate name "BucketEvent(6)"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := &spec[BucketState, BucketEvent]{name: "bucket", initial: tt.initial, numStates: tt.numStates, numEvents: tt.numEvents, table: tt.table}
			err := sp.validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, "fsm: invalid bucket table: ")
			require.ErrorContains(t, err, tt.want)
		})
	}
	require.Panics(t, func() {
		newSpec("bucket", Initial, numBucketStates, numBucketEvents, all(row{Reset, []BucketState{Open}, Idle}, row{Reset, []BucketState{Open}, Idle}))
	})
}
