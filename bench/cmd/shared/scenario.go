package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/sluicetest"
)

// sharedGlobal is the global limit per second, in the simulator (token and
// IP) and in every process's limiter (GlobalLimit, IPGlobalLimit).
const sharedGlobal = 200

// scenario is a load every process runs, and the rules it meets. They are
// the root module's sharedScenarios (shared_test.go), with its 4 processes
// × 100 goroutines made -processes × -goroutines.
type scenario struct {
	name string
	// about is what the load is, for the report.
	about string
	rules sluicetest.RuleSet
	// path is the one request of goroutine w of process p, with g
	// goroutines per process.
	path func(p, w, g int) string
	// limit per window is the bucket the load saturates; limit 0 means
	// the global limit is what binds.
	limit  int
	window time.Duration
}

// binding is the limit that sets the scenario's pace: its bucket's, or
// the global limit of sharedGlobal per second.
func (sc scenario) binding() (limit int, window time.Duration) {
	if sc.limit == 0 {
		return sharedGlobal, time.Second
	}
	return sc.limit, sc.window
}

// bindingText is the binding limit as the report shows it ("50 / 500ms").
func (sc scenario) bindingText() string {
	limit, window := sc.binding()
	what := "bucket"
	if sc.limit == 0 {
		what = "global"
	}
	return fmt.Sprintf("%s %d / %v", what, limit, window)
}

// sharedRules is a rule set of rules, each limited to limit per window,
// under the global limit of sharedGlobal per second for tokens and IPs.
func sharedRules(limit int, window time.Duration, rules ...sluicetest.Rule) sluicetest.RuleSet {
	for i := range rules {
		rules[i].Limit, rules[i].Window = limit, sluicetest.Duration(window)
	}
	return sluicetest.RuleSet{GlobalLimit: sharedGlobal, IPGlobalLimit: sharedGlobal, Rules: rules}
}

// channelMessages is the path of GET /channels/{id}/messages.
func channelMessages(id int) string { return "/channels/" + strconv.Itoa(id) + "/messages" }

// scenarios are the loads, in the report's order.
var scenarios = []scenario{
	{
		name:  "saturated",
		about: "one bucket every process saturates, unknown to all at first: every goroutine GET /channels/1/messages",
		rules: sharedRules(50, 500*time.Millisecond,
			sluicetest.Rule{Name: "messages", Method: "GET", Route: "/channels/{channel_id}/messages", Bucket: "msgs"}),
		path:  func(p, w, g int) string { return channelMessages(1) },
		limit: 50, window: 500 * time.Millisecond,
	},
	{
		name:  "shared-hash",
		about: "two routes on one hash, on one channel (one bucket): even goroutines GET /channels/1/messages, odd ones /channels/1/pins",
		rules: sharedRules(50, 500*time.Millisecond,
			sluicetest.Rule{Name: "messages", Method: "GET", Route: "/channels/{channel_id}/messages", Bucket: "same"},
			sluicetest.Rule{Name: "pins", Method: "GET", Route: "/channels/{channel_id}/pins", Bucket: "same"}),
		path: func(p, w, g int) string {
			if w%2 == 0 {
				return channelMessages(1)
			}
			return "/channels/1/pins"
		},
		limit: 50, window: 500 * time.Millisecond,
	},
	{
		name:  "fan-out",
		about: "one request per channel on processes × goroutines channels (buckets of 5 per second): only the global limit binds",
		rules: sharedRules(5, time.Second,
			sluicetest.Rule{Name: "messages", Method: "GET", Route: "/channels/{channel_id}/messages", Bucket: "msgs"}),
		path: func(p, w, g int) string { return channelMessages(1000 + p*g + w) },
	},
	{
		name:  "unknown-burst",
		about: "one channel per goroutine index, never seen, hit by every process at once (2 per 500 ms each): one pioneer per bucket across processes; the global limit binds",
		rules: sharedRules(2, 500*time.Millisecond,
			sluicetest.Rule{Name: "messages", Method: "GET", Route: "/channels/{channel_id}/messages", Bucket: "msgs"}),
		path: func(p, w, g int) string { return channelMessages(5000 + w) },
	},
}

// scenarioNamed returns the scenario called name.
func scenarioNamed(name string) (scenario, bool) {
	for _, sc := range scenarios {
		if sc.name == name {
			return sc, true
		}
	}
	return scenario{}, false
}
