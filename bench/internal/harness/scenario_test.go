package harness

import (
	"io"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sluicetest"
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
		// 8: the hot channel's 50 messages need 10 windows of 5 per 500 ms,
		// the last one opening at 4.5 s. The global limit (50 per 100 ms)
		// admits them on time because they go first at every instant: 5 hot
		// + 45 cold at 0 s, and the global window is empty again at each
		// 100 ms step; the 445 cold messages (at most 250 eligible at once)
		// are done in about 1 s, well before.
		9*500*ms + 20*ms,
		9*time.Second + 50*ms, // 9: 10 windows of 5 per 1 s, then the shortest latency
		// 10: sends 3 windows of 5 per 1 s (last at 2 s), deletes 11 windows
		// of 5 per 200 ms (last at 2 s); at most 30 requests in any second.
		2*time.Second + 20*ms,
		// 11: the pool's bound: 200 requests over 8 workers are 25 round
		// trips of 200 ms each; the rules alone would allow 3.2 s (4
		// batches of 50 per second + 200 ms).
		25 * 200 * ms,
		// 12: 9 requests per channel in one shared bucket of 1 per 250 ms:
		// the last at 8 × 250 ms; at most 200 requests in any second.
		8*250*ms + 20*ms,
		// 13: one request of each pair at 0, the other when the shared
		// window ends at 250 ms; 48 requests, under the global 50.
		250*ms + 20*ms,
		// 14: each of 30 channels needs 2 windows of 5 per 5 s; the global
		// 50/s admits the 150 first-window requests at 0, 1 and 2 s and
		// the 150 second-window ones when those windows end, at 5, 6 and
		// 7 s. The faults are not counted: each request is sent once.
		7*time.Second + 20*ms,
	}
	all := Scenarios()
	if len(all) != len(want) {
		t.Fatalf("%d scenarios, %d ideal times", len(all), len(want))
	}
	for i, s := range all {
		if s.ID != i+1 {
			t.Errorf("scenario %d has ID %d", i+1, s.ID)
		}
		if s.Ideal != want[i] {
			t.Errorf("scenario %d (%s): ideal %v, want %v", s.ID, s.Name, s.Ideal, want[i])
		}
		if len(s.Ops) == 0 || s.Setup == "" || s.Name == "" {
			t.Errorf("scenario %d: no ops, name or description", s.ID)
		}
	}
}

// Scenario 8 at full size: the same shape, ten times longer.
func TestIdealFullSize(t *testing.T) {
	s := ScenariosAt(true)[7]
	if len(s.Ops) != 4500 {
		t.Errorf("full scenario 8 has %d ops, want 4,500", len(s.Ops))
	}
	if want := 9*5*time.Second + 20*time.Millisecond; s.Ideal != want {
		t.Errorf("full scenario 8: ideal %v, want %v", s.Ideal, want)
	}
}

// The omniscient client does not depend on the order in which the bot
// issues simultaneous requests: it serves the longest chain first. A first
// come, first served order would serve scenario 8's hot channel (issued
// last) after the cold backlog.
func TestIdealIgnoresIssueOrder(t *testing.T) {
	for _, s := range Scenarios() {
		if s.Concurrency > 0 || slices.ContainsFunc(s.Ops, func(o Op) bool { return o.Delay > 0 }) {
			continue
		}
		r := s
		r.Ops = slices.Clone(s.Ops)
		slices.Reverse(r.Ops)
		if got := Ideal(r); got != s.Ideal {
			t.Errorf("scenario %d (%s): ideal %v with the ops reversed, %v in order", s.ID, s.Name, got, s.Ideal)
		}
	}
}

// A pool's ideal is the larger of the rules' and the round trips'.
func TestIdealPool(t *testing.T) {
	ms := time.Millisecond
	s := Scenarios()[10] // 11: 200 requests, 200 ms latency
	if s.Concurrency != 8 {
		t.Fatalf("scenario 11 has concurrency %d", s.Concurrency)
	}
	for _, c := range []struct {
		workers int
		want    time.Duration
	}{
		{1, 200 * 200 * ms},     // one worker: 200 round trips
		{7, 29 * 200 * ms},      // ceil(200/7) = 29 round trips
		{8, 25 * 200 * ms},      // the scenario
		{16, 3200 * ms},         // 13 round trips (2.6 s) < the global limit's 3 s + latency
		{0, 3*1000*ms + 200*ms}, // all at once: the rules alone
	} {
		p := s
		p.Concurrency = c.workers
		if got := Ideal(p); got != c.want {
			t.Errorf("%d workers: ideal %v, want %v", c.workers, got, c.want)
		}
	}
}

// Every operation's raw request (the one Sluice sends) lands on the rule
// the ideal assumes, and the simulator answers it with success.
func TestOpsMatchRules(t *testing.T) {
	for _, s := range ScenariosAt(false) {
		eng, err := sluicetest.NewEngine(time.Unix(0, 0), sluicetest.Config{Rules: s.Rules})
		if err != nil {
			t.Fatalf("scenario %d: %v", s.ID, err)
		}
		now := time.Unix(0, 0)
		seen := map[OpKind]bool{}
		for _, op := range s.Ops {
			if seen[op.Kind] {
				continue
			}
			seen[op.Kind] = true
			req := Request(op)
			var body []byte
			if req.Body != nil {
				body, _ = io.ReadAll(req.Body)
			}
			now = now.Add(time.Hour) // every window has ended
			d := eng.Handle(now, sluicetest.Request{Method: req.Method, Path: "/api/v10" + req.URL.EscapedPath(),
				Authorization: Token, IP: "127.0.0.1", Body: body})
			if d.Rule != op.rule() || d.Status >= 300 {
				t.Errorf("scenario %d: %v %s %s: rule %q status %d, want rule %q and success", s.ID, op.Kind, req.Method, req.URL.EscapedPath(), d.Rule, d.Status, op.rule())
			}
		}
	}
}
