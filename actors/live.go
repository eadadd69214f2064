package actors

import "sync"

// liveShards spreads the live calls over this many maps, each under its
// own lock, so that 64 callers submitting at once rarely meet.
const liveShards = 32

// liveCalls is every submitted call without an outcome, by id. protoactor
// drops user messages still in a mailbox when an actor stops, so Close
// answers whatever is left here once every actor has stopped: every call
// gets exactly one outcome. (A sync.Map allocated an entry and a boxed
// key per call; these maps reuse their room.) Safe for concurrent use.
type liveCalls struct {
	shards [liveShards]liveShard
}

type liveShard struct {
	mu sync.Mutex
	m  map[uint64]*Call
	_  [48]byte // a shard per cache line: callers on two cores do not share one
}

func (l *liveCalls) shard(id uint64) *liveShard { return &l.shards[id%liveShards] }

func (l *liveCalls) add(c *Call) {
	sh := l.shard(c.ID)
	sh.mu.Lock()
	if sh.m == nil {
		sh.m = make(map[uint64]*Call)
	}
	sh.m[c.ID] = c
	sh.mu.Unlock()
}

// get returns the live call of id, or nil.
func (l *liveCalls) get(id uint64) *Call {
	sh := l.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[id]
}

func (l *liveCalls) remove(id uint64) {
	sh := l.shard(id)
	sh.mu.Lock()
	delete(sh.m, id)
	sh.mu.Unlock()
}

// each calls f for the calls live when it reads their shard, outside the
// shard's lock (f may complete a call, which removes it), until f returns
// false. Calls added or removed meanwhile may be seen or not.
func (l *liveCalls) each(f func(*Call) bool) {
	var batch []*Call
	for i := range l.shards {
		sh := &l.shards[i]
		batch = batch[:0]
		sh.mu.Lock()
		for _, c := range sh.m {
			batch = append(batch, c)
		}
		sh.mu.Unlock()
		for _, c := range batch {
			if !f(c) {
				return
			}
		}
	}
}
