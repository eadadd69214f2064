package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/internal/tracing"
)

// bucketCell is what protoactor holds for a bucket actor. One Props spawns
// every bucket actor of a System (System.bucketProps: a Props of their own
// cost 234 B per live bucket), so its producer cannot hand each actor its
// bucket: the supervisor sends it with the actor's first message
// (enqueueMsg.bind). protoactor calls the producer again when it restarts
// a crashed actor; the incarnation that crashed leaves its bucket in
// System.restarted on Restarting, and the new one takes it on Started, so
// a restart keeps the queues and limits.
//
// Invariant: b is nil only before the first message, and from then on is
// the same *bucket in every incarnation of the actor.
type bucketCell struct {
	sys *System
	b   *bucket
}

func (c *bucketCell) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if c.b == nil { // the first start (the bucket is on its way), or a restart
			v, ok := c.sys.restarted.LoadAndDelete(ctx.Self().Id)
			if !ok {
				return
			}
			c.b = v.(*bucket)
		}
	case *enqueueMsg:
		if m.bind != nil {
			c.b = m.bind
			c.b.attach(ctx)
		}
	case *actor.Restarting:
		if c.b != nil {
			c.b.Receive(ctx)
			c.sys.restarted.Store(ctx.Self().Id, c.b)
		}
		return
	}
	if c.b != nil {
		c.b.Receive(ctx)
	}
}

// bound is the bucket that handles msg: the cell's, or the one msg binds.
func (c *bucketCell) bound(msg any) *bucket {
	if c.b == nil {
		if m, ok := msg.(*enqueueMsg); ok {
			return m.bind
		}
	}
	return c.b
}

func (c *bucketCell) TraceName() string { return "bucket" }

func (c *bucketCell) TraceState(msg any) string {
	if b := c.bound(msg); b != nil {
		return b.TraceState(msg)
	}
	return ""
}

func (c *bucketCell) TraceKey(msg any) string {
	if b := c.bound(msg); b != nil {
		return b.TraceKey(msg)
	}
	return ""
}

func (c *bucketCell) TraceBuffer(msg any) *tracing.Buffer {
	if b := c.bound(msg); b != nil {
		return b.TraceBuffer(msg)
	}
	return &tracing.Buffer{} // Started before the bucket came: nothing to hold
}
