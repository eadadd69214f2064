package harness

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sluicetest"
)

// fakeClient answers every op after a short sleep and records how many
// were in flight at once.
type fakeClient struct {
	mu            sync.Mutex
	inFlight, max int
	calls         int
}

func (c *fakeClient) Do(ctx context.Context, op Op) error {
	c.mu.Lock()
	c.inFlight++
	c.calls++
	c.max = max(c.max, c.inFlight)
	c.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	c.mu.Lock()
	c.inFlight--
	c.mu.Unlock()
	return nil
}

func (c *fakeClient) Close() {}

func TestRunHonoursConcurrency(t *testing.T) {
	s := Scenarios()[10] // the worker pool
	s.Ops = s.Ops[:40]
	for _, workers := range []int{0, 1, 4} {
		s.Concurrency = workers
		fc := &fakeClient{}
		spec := ClientSpec{Name: "fake", New: func(*sluicetest.Server, Config) (Client, error) { return fc, nil }}
		r := Run(s, spec)
		if r.OK != 40 || r.Hangs != 0 {
			t.Fatalf("%d workers: %d ok, %d hangs", workers, r.OK, r.Hangs)
		}
		want := workers
		if workers == 0 {
			want = 40 // all at once; fewer if some finished before others started
		}
		if fc.max > want || (workers > 0 && fc.max != workers) {
			t.Errorf("%d workers: %d requests in flight at most, want %d", workers, fc.max, want)
		}
	}
}

func TestRunSkipsUnsupportedOps(t *testing.T) {
	s := Scenarios()[12] // reactions
	spec := ClientSpec{Name: "fake", New: func(*sluicetest.Server, Config) (Client, error) { return &fakeClient{}, nil },
		Unsupported: map[OpKind]string{RemoveOwnReaction: "no such method"}}
	if r := Run(s, spec); !strings.Contains(r.NA, "no API for unreact") {
		t.Errorf("NA = %q", r.NA)
	}
}

func TestMultiRunTable(t *testing.T) {
	s := Scenarios()[0]
	run := func(n int, elapsed time.Duration, hangs int) Result {
		return Result{Scenario: s, Client: "Sluice", Run: n, Total: 50, OK: 50 - hangs, Hangs: hangs, Elapsed: elapsed}
	}
	results := []Result{
		run(0, s.Ideal*13/10, 0),
		run(1, s.Ideal, 0),
		run(2, s.Timeout(), 3),
		run(3, s.Ideal*11/10, 0),
		run(4, s.Ideal*12/10, 0),
	}
	table := Table(results)
	if !strings.Contains(table, "| 5 | 247/250 | 5.58 s | 1.20 (1.00–hang) |") {
		t.Errorf("table:\n%s", table)
	}
	if notes := RunNotes(results); !strings.Contains(notes, "1.00, 1.10, 1.20, 1.30, hang") {
		t.Errorf("notes: %s", notes)
	}
	single := Table(results[:1])
	if !strings.Contains(single, "| 50/50 | 6.04 s | 1.30 |") {
		t.Errorf("single-run table:\n%s", single)
	}
}
