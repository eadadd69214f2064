package harness

import (
	"context"
	"errors"
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

// The message table counts what became of the messages from the client's
// outcomes and the simulator's counters, and AdmittedIdeal replays the
// ideal for what the buckets admitted.
func TestMessageTable(t *testing.T) {
	var s Scenario
	for _, x := range Scenarios() {
		if x.MessageReport {
			s = x
		}
	}
	if s.ID == 0 {
		t.Fatal("no scenario with MessageReport")
	}
	if got := minWindows(s, SendMessage); got != 60 {
		t.Fatalf("minWindows = %d, want 60 (2 per channel)", got)
	}
	// A run in which op 0 failed although its message was created, op 1
	// failed and was never created, and one resend on op 2's channel
	// created its message a second time; a resend of op 0, whose answer
	// was lost too, and one on op 3's channel were deduplicated. Op 1's
	// channel admitted 9 requests, those of ops 0, 2 and 3 11 (a third
	// window each); one 429 was drawn.
	events := make([]Outcome, len(s.Ops))
	for i := range events {
		events[i] = Outcome{Done: true, At: 12 * time.Second}
	}
	events[0].Err = errors.New("connection died")
	events[1].Err = errors.New("HTTP 502")
	var buckets []sluicetest.BucketStats
	for c := range 30 {
		b := sluicetest.BucketStats{Major: s.Ops[c].major(), Rules: []string{"create_message"}, Admitted: 10, Windows: 2}
		switch c {
		case 1:
			b.Admitted = 9
		case 0, 2, 3:
			b.Admitted, b.Windows = 11, 3
		}
		buckets = append(buckets, b)
	}
	r := Result{Scenario: s, Client: "Sluice", Total: 300, OK: 298, Errors: 2, Elapsed: 12 * time.Second, Events: events,
		Stats: sluicetest.Stats{MessagesCreated: 300, DuplicateMessages: 1, MessagesDeduplicated: 2,
			RateLimited: map[string]int{"user": 1}, Buckets: buckets}}
	m := r.messages()
	if m != (messageCounts{sent: 300, ok: 298, twice: 1, lost: 1, unseen: 1, resends: 3, windows: 63, minWindows: 60}) {
		t.Errorf("messages = %+v", m)
	}
	// Three channels need a third window; the greedy ideal serves them
	// first, so their third windows open at 10 s.
	if got, want := AdmittedIdeal(r), 10*time.Second+20*time.Millisecond; got != want {
		t.Errorf("AdmittedIdeal = %v, want %v", got, want)
	}
	table := MessageTable([]Result{r})
	if !strings.Contains(table, "| **Sluice** | 1 | 298/300 | 1 | 1 | 1 | 12.00 s | 1.71 | 1 | 3 | 63 (60) | 1.20 |") {
		t.Errorf("table:\n%s", table)
	}
	if MessageTable([]Result{{Scenario: Scenarios()[0], Client: "Sluice"}}) != "" {
		t.Error("a scenario without MessageReport has a message table")
	}
}
