package actorhost

import (
	"strconv"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/twmb/murmur3"
)

// What spawning a bucket actor costs protoactor's process registry and
// its mailbox.
//
// Bucket actors' names are chosen so that a bot touching many channels
// does not keep protoactor's process registry large for good.
//
// protoactor keeps every live actor in its process registry: 1,024
// concurrent maps (RegistrySlices), each of 32 Go maps, one picked by a
// murmur3 hash of the actor's id. A Go map never gives back what it
// allocated, and its first entry allocates a whole group of slots, so
// names spread over all 32,768 maps leave about 9 MB behind once tens of
// thousands of buckets have lived, even after every one has stopped.
// Names are therefore drawn (counter values skipped) until the id hashes
// into one of the first RegistryUsed slices: the registry then keeps at
// most 1,024 Go maps, which grow with the most bucket actors alive at once
// and stay at that size. It costs RegistrySlices/RegistryUsed hashes of a
// short id per spawn on average (0.74 µs, BenchmarkNamerNext), nothing per
// message: protoactor looks the registry up only to spawn, stop and reach
// an actor whose cached process is gone.

// Mailbox is the bucket actors' mailbox: protoactor's lock-free
// queue, which holds a small stub while empty (the default ring buffer
// keeps ten slots, about 180 B more per idle-but-live bucket actor) and
// allocates a node per message instead.
var Mailbox = actor.UnboundedLockfree()

const (
	// RegistrySlices is the number of concurrent maps in protoactor's
	// process registry (actor.SliceMap; TestRegistrySlices checks it).
	RegistrySlices = 1024
	// RegistryUsed is how many of them bucket actors' ids hash into.
	RegistryUsed = 32
)

// Namer draws bucket actors' names ("b" and a counter) whose full ids
// (parent id + "/" + name) hash into the first RegistryUsed registry
// slices. The zero value is ready to use; not safe for concurrent use
// (the supervisor holds one and is its only user).
type Namer struct {
	n   uint64
	buf []byte
}

// Next returns the next name for a child of the actor whose id is parent.
func (nm *Namer) Next(parent string) string {
	for {
		nm.n++
		nm.buf = append(nm.buf[:0], parent...)
		nm.buf = append(nm.buf, "/b"...)
		nm.buf = strconv.AppendUint(nm.buf, nm.n, 10)
		if Slice(nm.buf) < RegistryUsed {
			return string(nm.buf[len(parent)+1:])
		}
	}
}

// Slice is the registry slice protoactor keeps the actor id in
// (actor.SliceMap.GetBucket).
func Slice(id []byte) int {
	return int(murmur3.Sum32(id)) % RegistrySlices
}
