package harness

import (
	"testing"
	"time"
)

// The ideal times, worked out by hand from each scenario's rules.
func TestIdeal(t *testing.T) {
	ms := time.Millisecond
	want := []time.Duration{
		9*500*ms + 150*ms,     // 1: 50 messages, 10 windows of 5 per 500 ms, then one latency
		5*time.Second + 20*ms, // 2: 300 requests at 50 per sliding second: 6 batches
		4*500*ms + 20*ms,      // 3: 25 edits, 5 windows of 5 per 500 ms
		3*time.Second + 20*ms, // 4: 40 role changes, 4 windows of 10 per 1 s
		4*time.Second + 20*ms, // 5: 10 renames, 5 sublimit windows of 2 per 1 s
		2200*ms + 20*ms,       // 6: 50 at 0 s, 50 at 1 s, the last 50 when the outage ends at 2.2 s
		199*25*ms + 15*ms,     // 7: paced; the last request is issued at 4.975 s
	}
	for i, s := range Scenarios() {
		if s.Ideal != want[i] {
			t.Errorf("scenario %d (%s): ideal %v, want %v", s.ID, s.Name, s.Ideal, want[i])
		}
		if len(s.Ops) == 0 || s.Setup == "" {
			t.Errorf("scenario %d: no ops or no description", s.ID)
		}
	}
}
