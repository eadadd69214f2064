package actors

import (
	"strconv"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/twmb/murmur3"

	"github.com/sluicehq/sluice/internal/tracing"
)

// What spawning a bucket actor costs protoactor's process registry and
// its mailbox.
//
// Bucket actors' names are chosen so that a bot touching many channels
// does not keep protoactor's process registry large for good.
//
// protoactor keeps every live actor in its process registry: 1,024
// concurrent maps (registrySlices), each of 32 Go maps, one picked by a
// murmur3 hash of the actor's id. A Go map never gives back what it
// allocated, and its first entry allocates a whole group of slots, so
// names spread over all 32,768 maps leave about 9 MB behind once tens of
// thousands of buckets have lived, even after every one has stopped.
// Names are therefore drawn (counter values skipped) until the id hashes
// into one of the first registryUsed slices: the registry then keeps at
// most 1,024 Go maps, which grow with the most bucket actors alive at once
// and stay at that size. It costs registrySlices/registryUsed hashes of a
// short id per spawn on average (0.74 µs, BenchmarkNamerNext), nothing per
// message: protoactor looks the registry up only to spawn, stop and reach
// an actor whose cached process is gone.

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
		return &b.tbuf
	}
	return &tracing.Buffer{} // Started before the bucket came: nothing to hold
}

// bucketMailbox is the bucket actors' mailbox: protoactor's lock-free
// queue, which holds a small stub while empty (the default ring buffer
// keeps ten slots, about 180 B more per idle-but-live bucket actor) and
// allocates a node per message instead.
var bucketMailbox = actor.UnboundedLockfree()

const (
	// registrySlices is the number of concurrent maps in protoactor's
	// process registry (actor.SliceMap; TestRegistrySlices checks it).
	registrySlices = 1024
	// registryUsed is how many of them bucket actors' ids hash into.
	registryUsed = 32
)

// namer draws bucket actors' names ("b" and a counter) whose full ids
// (parent id + "/" + name) hash into the first registryUsed registry
// slices. Used by the supervisor only.
type namer struct {
	n   uint64
	buf []byte
}

// next returns the next name for a child of the actor whose id is parent.
func (nm *namer) next(parent string) string {
	for {
		nm.n++
		nm.buf = append(nm.buf[:0], parent...)
		nm.buf = append(nm.buf, "/b"...)
		nm.buf = strconv.AppendUint(nm.buf, nm.n, 10)
		if registrySlice(nm.buf) < registryUsed {
			return string(nm.buf[len(parent)+1:])
		}
	}
}

// registrySlice is the registry slice protoactor keeps the actor id in
// (actor.SliceMap.GetBucket).
func registrySlice(id []byte) int {
	return int(murmur3.Sum32(id)) % registrySlices
}
