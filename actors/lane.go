package actors

import (
	"time"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/lanes"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// lane is one rate-limit bucket inside a bucket actor (lanes.Lane: its
// queue, its count and its state machine, and the rules that read them),
// over calls.
type lane = lanes.Lane[*Call, callRules]

// callRules is how the pure packages read a call: a lane and its queue
// (lanes.LaneRules) and its template's first pioneer turn
// (pioneers.Rules).
type callRules struct{}

func (callRules) Class(c *Call) admission.Class   { return c.Class }
func (callRules) Seq(c *Call) uint64              { return c.ID }
func (callRules) Finished(c *Call) bool           { return c.Finished() }
func (callRules) Place(c *Call) (time.Time, bool) { return c.place.Start() }
func (callRules) NotBefore(c *Call) time.Time     { return c.notBefore }
func (callRules) Submitted(c *Call) time.Time     { return c.Submitted }
func (callRules) Exempt(c *Call) bool             { return c.Route.GlobalExempt }
func (callRules) OnWire(c *Call) bool             { return c.onWire() }

// newLane makes the lane of key for route, whose TemplateKey is template,
// with the count the store kept for its bucket, and its machine's
// transitions traced.
func newLane(b *bucket, key, template string, routeKeyed, first bool, route routes.Route) *lane {
	var st ratelimit.Bucket
	if s, ok := b.sys.store.Load(key); ok && !routeKeyed {
		st = s
	}
	return lanes.NewLane(key, template, routeKeyed, first, route, st, func(l *lane) *fsm.Bucket {
		return fsm.NewBucket(func(e fsm.BucketEvent, from, to fsm.BucketState) {
			b.sys.transition(b, b.self, l.Key, e.String(), from.String(), to.String())
		})
	}, b.sys.now())
}
