package proxy

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// errTooManyTokens is the refusal of a new token while MaxTokens limiters
// are all busy.
var errTooManyTokens = errors.New("proxy: every token's limiter is busy and MaxTokens is reached")

// tenant is one token's limiter ("" is the token-less one: requests on the
// per-IP global limit).
//
// Invariants (under registry.mu): inflight counts the acquires not yet
// released; a tenant with inflight > 0 is never closed; elem is its place
// in registry.lru while it is in byKey.
type tenant struct {
	token string // the Authorization value; "" for the per-IP limiter
	name  string // safe to log: "ip" or "tok:" and 8 hex digits of a hash
	ready chan struct{}
	lim   *sluice.Limiter // set before ready closes; nil if err
	err   error

	inflight int
	lastUsed time.Time
	elem     *list.Element
	pinned   bool // never evicted, not counted in max
}

// tokenName is a token's name in logs and errors: never the token.
func tokenName(token string) string {
	if token == "" {
		return "ip"
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return "tok:" + hex.EncodeToString(sum[:4])
}

// registry holds one limiter per token: made on first use, closed after
// IdleTimeout without requests, at most max at once (the least recently
// used idle one makes room). The pinned tokens (the default token and the
// token-less limiter) are neither closed nor counted.
//
// Invariants: byKey and lru hold the same tenants, lru from least to most
// recently used; counted is the number of unpinned tenants in byKey, at
// most max; closing counts the limiters being closed in the background,
// and Close waits for them.
type registry struct {
	newLimiter func(token string) (*sluice.Limiter, error)
	max        int
	pinned     map[string]bool
	idle       time.Duration
	clock      func() time.Time
	onChange   func(live int, evicted string)          // metrics hook, under mu
	retire     func(token string, lim *sluice.Limiter) // metrics hook, under mu: lim is being closed

	mu      sync.Mutex
	byKey   map[string]*tenant
	lru     *list.List // of *tenant
	counted int
	closed  bool
	closing sync.WaitGroup
}

func newRegistry(max int, idle time.Duration, clock func() time.Time, newLimiter func(string) (*sluice.Limiter, error), pinned []string, retire func(string, *sluice.Limiter), onChange func(int, string)) *registry {
	if retire == nil {
		retire = func(string, *sluice.Limiter) {}
	}
	r := &registry{newLimiter: newLimiter, max: max, idle: idle, clock: clock, retire: retire, onChange: onChange, byKey: map[string]*tenant{}, lru: list.New(), pinned: map[string]bool{}}
	for _, t := range pinned {
		r.pinned[t] = true
	}
	return r
}

// acquire returns token's tenant with a request counted in flight; the
// caller must release it. The limiter is made outside the lock; callers
// for the same new token wait for the first.
func (r *registry) acquire(ctx context.Context, token string) (*tenant, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, sluice.ErrClosed
	}
	t, ok := r.byKey[token]
	if !ok {
		pinned := r.pinned[token]
		if !pinned && r.counted >= r.max && !r.evictLocked() {
			r.mu.Unlock()
			return nil, errTooManyTokens
		}
		t = &tenant{token: token, name: tokenName(token), ready: make(chan struct{}), pinned: pinned}
		if !pinned {
			r.counted++
		}
		t.elem = r.lru.PushBack(t)
		r.byKey[token] = t
		r.onChange(len(r.byKey), "")
		t.inflight++
		t.lastUsed = r.clock()
		r.mu.Unlock()
		t.lim, t.err = r.newLimiter(token)
		close(t.ready)
		if t.err != nil {
			r.mu.Lock()
			r.removeLocked(t, "")
			t.inflight--
			r.mu.Unlock()
			return nil, t.err
		}
		return t, nil
	}
	t.inflight++
	t.lastUsed = r.clock()
	r.lru.MoveToBack(t.elem)
	r.mu.Unlock()
	select {
	case <-t.ready:
	case <-ctx.Done():
		r.release(t)
		return nil, context.Cause(ctx)
	}
	if t.err != nil {
		r.release(t)
		return nil, t.err
	}
	return t, nil
}

// release ends one acquire.
func (r *registry) release(t *tenant) {
	r.mu.Lock()
	t.inflight--
	t.lastUsed = r.clock()
	r.mu.Unlock()
}

// evictLocked closes the least recently used tenant with nothing in
// flight; it reports whether there was one.
func (r *registry) evictLocked() bool {
	for e := r.lru.Front(); e != nil; e = e.Next() {
		if t := e.Value.(*tenant); t.inflight == 0 && !t.pinned {
			r.removeLocked(t, "lru")
			return true
		}
	}
	return false
}

// removeLocked drops t and closes its limiter in the background.
func (r *registry) removeLocked(t *tenant, reason string) {
	if r.byKey[t.token] != t {
		return
	}
	delete(r.byKey, t.token)
	r.lru.Remove(t.elem)
	if !t.pinned {
		r.counted--
	}
	r.onChange(len(r.byKey), reason)
	select {
	case <-t.ready:
		if t.lim != nil {
			r.retire(t.token, t.lim)
		}
	default: // still being made: it has counted nothing
	}
	r.closing.Add(1)
	go func() {
		defer r.closing.Done()
		<-t.ready
		if t.lim != nil {
			_ = t.lim.Close(context.Background()) // nothing in flight: returns at once
		}
	}()
}

// sweep closes the tenants idle for longer than the idle timeout; it
// returns when the next one may be due.
func (r *registry) sweep() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock()
	next := r.idle
	for e := r.lru.Front(); e != nil; {
		t := e.Value.(*tenant)
		e = e.Next()
		if t.inflight > 0 || t.pinned {
			continue
		}
		if idle := now.Sub(t.lastUsed); idle >= r.idle {
			r.removeLocked(t, "idle")
		} else if r.idle-idle < next {
			next = r.idle - idle
		}
	}
	return next
}

// peek returns token's limiter if it is live and made, else nil; it
// counts no request.
func (r *registry) peek(token string) *sluice.Limiter {
	r.mu.Lock()
	t := r.byKey[token]
	r.mu.Unlock()
	if t == nil {
		return nil
	}
	select {
	case <-t.ready:
		return t.lim
	default:
		return nil
	}
}

// live returns the names of the tenants with a limiter (for Snapshot).
func (r *registry) tenants() []*tenant {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*tenant, 0, len(r.byKey))
	for e := r.lru.Front(); e != nil; e = e.Next() {
		out = append(out, e.Value.(*tenant))
	}
	return out
}

// close refuses new acquires and closes every limiter: queued requests
// fail with ErrClosed, requests on the wire finish until ctx ends. It
// returns when every limiter has stopped.
func (r *registry) close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	all := make([]*tenant, 0, len(r.byKey))
	for e := r.lru.Front(); e != nil; e = e.Next() {
		all = append(all, e.Value.(*tenant))
	}
	r.byKey = map[string]*tenant{}
	r.lru.Init()
	r.counted = 0
	r.onChange(0, "")
	r.mu.Unlock()
	errs := make([]error, len(all))
	var wg sync.WaitGroup
	for i, t := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-t.ready
			if t.lim != nil {
				errs[i] = t.lim.Close(ctx)
			}
		}()
	}
	wg.Wait()
	r.closing.Wait()
	return errors.Join(errs...)
}
