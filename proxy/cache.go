package proxy

import (
	"container/list"
	"net/http"
	"sync"
	"time"
)

// cached is an answer kept for replay: status, headers and the whole body.
type cached struct {
	key    string
	status int
	header http.Header
	body   []byte
	stored time.Time
	until  time.Time
}

// answerCache keeps hopeless answers (404, 401 by default) per token,
// method, path and query for their status's TTL, so a bot asking again
// for a deleted message is answered without spending its limits or the
// invalid-request budget.
//
// Invariants: every entry of byKey is in order and the other way round;
// order runs from the oldest stored to the newest; len(byKey) <= size.
// Expired entries may linger until looked up or pushed out: get never
// returns one.
type answerCache struct {
	ttl  map[int]time.Duration
	size int

	mu    sync.Mutex
	byKey map[string]*list.Element // of *cached
	order *list.List
}

func newAnswerCache(ttl map[int]time.Duration, size int) *answerCache {
	return &answerCache{ttl: ttl, size: size, byKey: map[string]*list.Element{}, order: list.New()}
}

// cacheable reports whether an answer with status is kept at all.
func (c *answerCache) cacheable(status int) bool { _, ok := c.ttl[status]; return ok }

// get returns the live answer under key, if any.
func (c *answerCache) get(key string, now time.Time) (*cached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	a := e.Value.(*cached)
	if !now.Before(a.until) {
		c.order.Remove(e)
		delete(c.byKey, key)
		return nil, false
	}
	return a, true
}

// put keeps an answer under key for its status's TTL, replacing an older
// one and pushing out the oldest at the cap.
func (c *answerCache) put(key string, status int, header http.Header, body []byte, now time.Time) {
	ttl, ok := c.ttl[status]
	if !ok {
		return
	}
	a := &cached{key: key, status: status, header: header, body: body, stored: now, until: now.Add(ttl)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		c.order.Remove(e)
	}
	c.byKey[key] = c.order.PushBack(a)
	for len(c.byKey) > c.size {
		oldest := c.order.Front()
		c.order.Remove(oldest)
		delete(c.byKey, oldest.Value.(*cached).key)
	}
}

// len is the number of entries, expired ones included.
func (c *answerCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byKey)
}
