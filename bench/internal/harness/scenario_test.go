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
		// 15: 150 messages with the token and 150 webhook executions
		// without one, each side on its own global window of 50/s: 50 of
		// each at 0, 1 and 2 s. On one window it would be 6 batches, 5 s.
		2*time.Second + 20*ms,
		// 16: 1,000 messages at 250 per sliding second, 4 batches (each
		// channel's 10 in 2 bucket windows of 5 per 1 s, which the global
		// limit never lets it need sooner): the last batch at 3 s.
		3*time.Second + 20*ms,
		// 17: 250 messages at 50 per sliding second: 5 batches, the last
		// at 4 s.
		4*time.Second + 20*ms,
		// 18: 300 messages at 50 per sliding second: 6 batches, the last
		// at 5 s, and the hot channels' sixth windows at 5 s too (each
		// batch: the 5 hot channels' windows and 5 cold channels' first or
		// last messages).
		5*time.Second + 20*ms,
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

// Scenario 15: requests without a token (webhook executions) count on the
// per-IP global window, apart from the bot's. Each window's limit and
// outages bind only its own requests.
func TestIdealTwoGlobalWindows(t *testing.T) {
	ms := time.Millisecond
	s := Scenarios()[14]
	var bot, ip int
	for _, op := range s.Ops {
		if op.Tokenless() {
			ip++
		} else {
			bot++
		}
	}
	if bot != 150 || ip != 150 {
		t.Fatalf("scenario 15 has %d ops with the token and %d without, want 150 and 150", bot, ip)
	}
	for _, c := range []struct {
		name string
		edit func(*Scenario)
		want time.Duration
	}{
		{"as is", func(*Scenario) {}, 2*time.Second + 20*ms},
		// The webhooks alone, or the messages alone: the same 3 batches.
		{"webhooks only", func(s *Scenario) {
			s.Ops = slices.DeleteFunc(s.Ops, func(o Op) bool { return !o.Tokenless() })
		}, 2*time.Second + 20*ms},
		// A per-IP limit of 25/s: the webhooks take 6 batches, 0 to 5 s;
		// the messages still end at 2 s.
		{"IP limit 25", func(s *Scenario) { s.Rules.IPGlobalLimit = 25 }, 5*time.Second + 20*ms},
		// The token's limit raised does not speed the webhooks up.
		{"token limit 500", func(s *Scenario) { s.Rules.GlobalLimit = 500 }, 2*time.Second + 20*ms},
		// An outage of the IP window from 0.5 s to 3 s holds the webhooks'
		// second and third batches until 3 s (the third at 4 s: 50 per
		// sliding second); the messages are done at 2 s.
		{"IP outage", func(s *Scenario) {
			s.Faults.ExternalGlobal = []sluicetest.GlobalOutage{{After: 500 * ms, For: 2500 * ms, IP: true}}
		}, 4*time.Second + 20*ms},
		// The same outage on the token's window holds the messages instead.
		{"token outage", func(s *Scenario) {
			s.Faults.ExternalGlobal = []sluicetest.GlobalOutage{{After: 500 * ms, For: 2500 * ms}}
		}, 4*time.Second + 20*ms},
	} {
		p := s
		p.Ops = slices.Clone(s.Ops)
		p.Faults.ExternalGlobal = nil
		c.edit(&p)
		if got := Ideal(p); got != c.want {
			t.Errorf("%s: ideal %v, want %v", c.name, got, c.want)
		}
	}
	// An outage of the IP window does not touch a scenario whose requests
	// all carry the token (scenario 2).
	s2 := Scenarios()[1]
	s2.Faults.ExternalGlobal = []sluicetest.GlobalOutage{{After: 0, For: 10 * time.Second, IP: true}}
	if got, want := Ideal(s2), Scenarios()[1].Ideal; got != want {
		t.Errorf("scenario 2 under an IP outage: ideal %v, want %v (its requests carry the token)", got, want)
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
			auth := Token
			if op.Tokenless() {
				auth = "" // as Sluice sends it
			}
			d := eng.Handle(now, sluicetest.Request{Method: req.Method, Path: "/api/v10" + req.URL.EscapedPath(),
				Authorization: auth, IP: "127.0.0.1", Body: body})
			if d.Rule != op.rule() || d.Status >= 300 {
				t.Errorf("scenario %d: %v %s %s: rule %q status %d, want rule %q and success", s.ID, op.Kind, req.Method, req.URL.EscapedPath(), d.Rule, d.Status, op.rule())
			}
		}
	}
}
