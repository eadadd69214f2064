// Package harness runs the same Discord REST workloads through Sluice and
// through other Go Discord libraries, each against its own fresh sluicetest
// simulator, and reports what the simulator counted.
package harness

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/sluicetest"
)

// OpKind is a Discord REST operation a bot performs.
type OpKind int

// The operations the scenarios use.
const (
	SendMessage   OpKind = iota // POST   /channels/{c}/messages          {"content"}
	EditMessage                 // PATCH  /channels/{c}/messages/{m}      {"content"}
	RenameChannel               // PATCH  /channels/{c}                   {"name"}
	AddRole                     // PUT    /guilds/{g}/members/{u}/roles/{r}
	RemoveRole                  // DELETE /guilds/{g}/members/{u}/roles/{r}
)

// Op is one request of a scenario. IDs are decimal snowflakes.
type Op struct {
	Kind    OpKind
	Channel uint64
	Message uint64
	Guild   uint64
	User    uint64
	Role    uint64
	Text    string // message content or channel name
	// Delay is when the bot issues the request, from the scenario's start;
	// 0 for all at once.
	Delay time.Duration
}

// sf turns a small number into a realistic 19-digit snowflake. Libraries
// recognise ids by their shape (@discordjs/rest only takes 17 to 19 digits
// for an id), so scenarios must not use short ones.
func sf(n uint64) uint64 { return 1_200_000_000_000_000_000 + n }

// rule is the name of the simulator rule op lands on.
func (o Op) rule() string {
	switch o.Kind {
	case SendMessage:
		return "create_message"
	case EditMessage:
		return "edit_message"
	case RenameChannel:
		return "modify_channel"
	case AddRole:
		return "add_role"
	default:
		return "remove_role"
	}
}

// major is the op's major parameter, as the simulator keys buckets.
func (o Op) major() string {
	if o.Kind == AddRole || o.Kind == RemoveRole {
		return "guild_id=" + strconv.FormatUint(o.Guild, 10)
	}
	return "channel_id=" + strconv.FormatUint(o.Channel, 10)
}

// Scenario is one workload with the simulated API's rules and faults.
type Scenario struct {
	ID    int
	Name  string
	Setup string // one line: what is sent, under which limits
	Rules sluicetest.RuleSet
	// Faults apply from the moment the client starts sending (outages are
	// relative to it).
	Faults sluicetest.Faults
	Ops    []Op
	// Ideal is the completion time of an omniscient client that sends each
	// request at the earliest instant the rules admit it (see Ideal).
	Ideal time.Duration
}

// Timeout is how long the harness waits for a client before counting its
// unfinished requests as hangs: 3 × ideal + 10 s.
func (s Scenario) Timeout() time.Duration { return 3*s.Ideal + 10*time.Second }

// setRule changes the limit and window of the named rule and of every rule
// sharing its bucket hash.
func setRule(rs *sluicetest.RuleSet, name string, limit int, window time.Duration) {
	hash := ""
	for _, r := range rs.Rules {
		if r.Name == name {
			hash = r.Bucket
		}
	}
	if hash == "" {
		panic("harness: no rule " + name)
	}
	for i := range rs.Rules {
		if rs.Rules[i].Bucket == hash {
			rs.Rules[i].Limit = limit
			rs.Rules[i].Window = sluicetest.Duration(window)
		}
	}
}

func setSublimit(rs *sluicetest.RuleSet, rule string, limit int, window time.Duration) {
	for i := range rs.Rules {
		if rs.Rules[i].Name == rule {
			for j := range rs.Rules[i].Sublimits {
				rs.Rules[i].Sublimits[j].Limit = limit
				rs.Rules[i].Sublimits[j].Window = sluicetest.Duration(window)
			}
			return
		}
	}
	panic("harness: no rule " + rule)
}

// base returns Discord's default rules, copied so scenarios can edit them.
func base() sluicetest.RuleSet { return sluicetest.DefaultRules().Scaled(1) }

// Scenarios returns the seven scenarios with their ideal times computed.
func Scenarios() []Scenario {
	var out []Scenario
	add := func(s Scenario) {
		s.ID = len(out) + 1
		s.Ideal = Ideal(s)
		out = append(out, s)
	}

	// 1. One saturated bucket with latency: pipelining. Limit × latency
	// (5 × 150 ms) exceeds the window (500 ms), so a client with one
	// request in flight per bucket cannot keep up.
	{
		rs := base()
		setRule(&rs, "create_message", 5, 500*time.Millisecond)
		var ops []Op
		for i := range 50 {
			ops = append(ops, Op{Kind: SendMessage, Channel: sf(1001), Text: fmt.Sprintf("s1 message %d", i)})
		}
		add(Scenario{Name: "one saturated bucket, 150 ms latency",
			Setup: "50 messages to one channel; bucket 5 per 500 ms; 150 ms latency",
			Rules: rs, Faults: sluicetest.Faults{Latency: 150 * time.Millisecond}, Ops: ops})
	}

	// 2. Fan-out: 300 messages over 100 channels. Each channel's bucket (5
	// per 5 s) has room for its 3; only the global limit binds.
	{
		rs := base()
		var ops []Op
		for i := range 300 {
			ops = append(ops, Op{Kind: SendMessage, Channel: sf(2000 + uint64(i%100)), Text: fmt.Sprintf("s2 message %d", i)})
		}
		add(Scenario{Name: "fan-out under the global limit",
			Setup: "300 messages over 100 channels; buckets 5 per 5 s; global 50/s; 20 ms latency",
			Rules: rs, Faults: sluicetest.Faults{Latency: 20 * time.Millisecond}, Ops: ops})
	}

	// 3. A burst onto a route the client has never seen.
	{
		rs := base()
		setRule(&rs, "edit_message", 5, 500*time.Millisecond)
		var ops []Op
		for i := range 25 {
			ops = append(ops, Op{Kind: EditMessage, Channel: sf(3001), Message: sf(30000 + uint64(i)), Text: fmt.Sprintf("s3 edit %d", i)})
		}
		add(Scenario{Name: "burst onto an unknown route",
			Setup: "25 simultaneous message edits in one channel; bucket 5 per 500 ms; 20 ms latency",
			Rules: rs, Faults: sluicetest.Faults{Latency: 20 * time.Millisecond}, Ops: ops})
	}

	// 4. Two routes sharing a bucket hash: adding and removing roles.
	{
		rs := base()
		setRule(&rs, "add_role", 10, time.Second)
		var ops []Op
		for i := range 40 {
			k := AddRole
			if i%2 == 1 {
				k = RemoveRole
			}
			ops = append(ops, Op{Kind: k, Guild: sf(4001), User: sf(40000 + uint64(i/2)), Role: sf(4999)})
		}
		add(Scenario{Name: "routes sharing a hash",
			Setup: "20 role adds + 20 role removes on one guild (one shared bucket, 10 per 1 s); 20 ms latency",
			Rules: rs, Faults: sluicetest.Faults{Latency: 20 * time.Millisecond}, Ops: ops})
	}

	// 5. A hidden sublimit: channel renames, 2 per window, no header says so.
	{
		rs := base()
		setRule(&rs, "modify_channel", 5, time.Second)
		setSublimit(&rs, "modify_channel", 2, time.Second)
		var ops []Op
		for i := range 10 {
			ops = append(ops, Op{Kind: RenameChannel, Channel: sf(5001), Text: fmt.Sprintf("renamed-%d", i)})
		}
		add(Scenario{Name: "hidden sublimit (channel rename)",
			Setup: "10 renames of one channel; bucket 5 per 1 s; hidden sublimit 2 per 1 s (Discord: 2 per 10 min); 20 ms latency",
			Rules: rs, Faults: sluicetest.Faults{Latency: 20 * time.Millisecond}, Ops: ops})
	}

	// 6. An external consumer exhausts the global limit mid-run.
	{
		rs := base()
		var ops []Op
		for i := range 150 {
			ops = append(ops, Op{Kind: SendMessage, Channel: sf(6000 + uint64(i%50)), Text: fmt.Sprintf("s6 message %d", i)})
		}
		add(Scenario{Name: "external global 429 mid-run",
			Setup: "150 messages over 50 channels; global 50/s; global limit exhausted by someone else from 1.2 s to 2.2 s; 20 ms latency",
			Rules: rs, Faults: sluicetest.Faults{Latency: 20 * time.Millisecond,
				ExternalGlobal: []sluicetest.GlobalOutage{{After: 1200 * time.Millisecond, For: time.Second}}},
			Ops: ops})
	}

	// 7. Faults on steady traffic: 40 requests per second, under every
	// limit, half of them non-idempotent (POST message), half idempotent
	// (PUT role). Injected 502s are answered before the rules see the
	// request; a dropped connection was processed first, and takes every
	// other request in flight on it down too.
	{
		rs := base()
		setRule(&rs, "create_message", 5, 500*time.Millisecond)
		setRule(&rs, "add_role", 10, time.Second)
		var ops []Op
		for i := range 200 {
			d := time.Duration(i) * 25 * time.Millisecond
			if i%2 == 0 {
				ops = append(ops, Op{Kind: SendMessage, Channel: sf(7000 + uint64(i/2%20)), Text: fmt.Sprintf("s7 message %d", i), Delay: d})
			} else {
				ops = append(ops, Op{Kind: AddRole, Guild: sf(7100 + uint64(i/2%10)), User: sf(70000 + uint64(i)), Role: sf(7999), Delay: d})
			}
		}
		add(Scenario{Name: "faults: 5% 502s, 2% drops",
			Setup: "steady 40 requests/s for 5 s, under every limit: 100 messages over 20 channels + 100 role adds over 10 guilds; 5% answered 502 (not processed), 2% of requests drop their connection after processing; 15–25 ms latency",
			Rules: rs, Faults: sluicetest.Faults{Latency: 15 * time.Millisecond, Jitter: 10 * time.Millisecond,
				ServerErrorRate: 0.05, DropRate: 0.02},
			Ops: ops})
	}
	return out
}

// Ideal computes, from the scenario's rules alone, when an omniscient client
// that knows every limit (hidden ones and outages included) would receive
// its last answer: each request is sent at the earliest instant its bucket
// window, its sublimit window and the global sliding window admit it, and
// its answer arrives one latency later; none is sent before the bot issues
// it (Op.Delay). All requests are equivalent apart
// from their bucket, so admitting greedily in order is optimal.
func Ideal(s Scenario) time.Duration {
	rs := s.Rules
	if rs.GlobalLimit == 0 {
		rs.GlobalLimit = 50
	}
	if rs.GlobalWindow == 0 {
		rs.GlobalWindow = sluicetest.Duration(time.Second)
	}
	rules := map[string]sluicetest.Rule{}
	for _, r := range rs.Rules {
		rules[r.Name] = r
	}
	type win struct {
		limit  int
		length time.Duration
		open   bool
		start  time.Duration
		count  int
	}
	fits := func(w *win, t time.Duration) bool {
		return !w.open || t >= w.start+w.length || w.count < w.limit
	}
	take := func(w *win, t time.Duration) {
		if !w.open || t >= w.start+w.length {
			w.open, w.start, w.count = true, t, 0
		}
		w.count++
	}
	nextFree := func(w *win) time.Duration { return w.start + w.length }

	buckets := map[string]*win{}
	subs := map[string]*win{}
	type pending struct {
		bucket, sub *win
		release     time.Duration
	}
	var queue []pending
	for _, op := range s.Ops {
		r := rules[op.rule()]
		key := r.Bucket + "/" + op.major()
		b := buckets[key]
		if b == nil {
			b = &win{limit: r.Limit, length: r.Window.D()}
			buckets[key] = b
		}
		p := pending{bucket: b, release: op.Delay}
		for _, sl := range r.Sublimits {
			touched := len(sl.Fields) == 0
			for _, f := range sl.Fields {
				if (f == "name" && op.Kind == RenameChannel) || (f == "content" && (op.Kind == SendMessage || op.Kind == EditMessage)) {
					touched = true
				}
			}
			if touched {
				sk := key + "/" + sl.Name
				if subs[sk] == nil {
					subs[sk] = &win{limit: sl.Limit, length: sl.Window.D()}
				}
				p.sub = subs[sk]
			}
		}
		queue = append(queue, p)
	}
	var global []time.Duration // admission times, ascending
	gw := rs.GlobalWindow.D()
	inOutage := func(t time.Duration) (bool, time.Duration) {
		for _, o := range s.Faults.ExternalGlobal {
			if t >= o.After && t < o.After+o.For {
				return true, o.After + o.For
			}
		}
		return false, 0
	}
	globalCount := func(t time.Duration) int {
		n := 0
		for _, a := range global {
			if a > t-gw {
				n++
			}
		}
		return n
	}
	var t, last time.Duration
	for len(queue) > 0 {
		var rest []pending
		for _, p := range queue {
			out, _ := inOutage(t)
			if out || t < p.release || globalCount(t) >= rs.GlobalLimit || !fits(p.bucket, t) || (p.sub != nil && !fits(p.sub, t)) {
				rest = append(rest, p)
				continue
			}
			take(p.bucket, t)
			if p.sub != nil {
				take(p.sub, t)
			}
			global = append(global, t)
			last = t
		}
		queue = rest
		if len(queue) == 0 {
			break
		}
		// Advance to the next instant anything could change.
		var cands []time.Duration
		if out, end := inOutage(t); out {
			cands = append(cands, end)
		}
		for _, a := range global {
			if a+gw > t {
				cands = append(cands, a+gw)
			}
		}
		for _, p := range queue {
			if p.release > t {
				cands = append(cands, p.release)
			}
			if p.bucket.open && nextFree(p.bucket) > t {
				cands = append(cands, nextFree(p.bucket))
			}
			if p.sub != nil && p.sub.open && nextFree(p.sub) > t {
				cands = append(cands, nextFree(p.sub))
			}
		}
		sort.Slice(cands, func(i, j int) bool { return cands[i] < cands[j] })
		if len(cands) == 0 {
			panic("harness: ideal schedule is stuck")
		}
		t = cands[0]
	}
	return last + s.Faults.Latency
}
