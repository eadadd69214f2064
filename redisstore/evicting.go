package redisstore

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// A Redis that evicts (a maxmemory with a policy that evicts, and keys
// evicted lately) may drop any of the store's keys, one at a time or
// several at once: Redis evicts in batches when memory runs over, so a
// bucket's record and its in-flight set, which otherwise tell each other's
// loss (lossLua), can go in the same millisecond. Then nothing in Redis
// tells that the bucket was there, and a process that has not learned it
// yet would read it as new and send a pioneer into a window the others
// may have filled. (Measured on 2026-11-27: a 16 MB volatile-random Redis
// beside a cache evicted six of the store's keys within 30 ms as the four
// processes of TestSharedLimitsSurviveRedisFailures started; one run in
// about thirty drew a user 429 in the first window.)
//
// So while Redis evicts, absence is loss: a bucket of which Redis holds
// nothing is held full for one window (the caller's, or the longest any
// process saw for the route, P:w; 1 s if none did) before its first
// request goes, and a generation marker missing for a process that knew
// none holds the global window for a period, as a wipe does. That costs a
// window on each bucket new to Redis, only while Redis evicts.

// evictions follows whether Redis may have evicted the store's keys
// lately: its policy evicts, and its count of evicted keys rose within the
// last DefaultKeep (or was above zero when the store started).
type evictions struct {
	policy atomic.Pointer[string] // the evicting policy last read ("": none)
	keys   atomic.Int64           // evicted_keys at the last read (-1: none yet)
	until  atomic.Int64           // Unix ns until which Redis counts as evicting (0: it does not)
}

// evictingFor is how long Redis counts as evicting after its count of
// evicted keys last rose: as long as a bucket's record is kept after its
// window, so a record evicted then is not read as new afterwards.
const evictingFor = DefaultKeep

// readMemory reads Redis's memory policy and its count of evicted keys
// (INFO memory and stats, which managed Redis services allow where they
// deny CONFIG), in one round trip. policy is "" when no maxmemory is set
// or the policy does not evict; ok is false when they cannot be read.
func readMemory(ctx context.Context, rdb redis.UniversalClient) (policy string, evicted int64, ok bool) {
	var mem, stats *redis.StringCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		mem, stats = p.Info(ctx, "memory"), p.Info(ctx, "stats")
		return nil
	})
	if err != nil {
		return "", 0, false
	}
	var maxmemory string
	evicted = -1
	for _, line := range strings.Split(mem.Val()+"\n"+stats.Val(), "\n") {
		k, v, found := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case !found:
		case k == "maxmemory":
			maxmemory = v
		case k == "maxmemory_policy":
			policy = v
		case k == "evicted_keys":
			evicted, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if policy == "" || evicted < 0 {
		return "", 0, false
	}
	if maxmemory == "" || maxmemory == "0" || policy == "noeviction" {
		return "", evicted, true
	}
	if !evictingPolicies[policy] {
		policy = "unknown" // (not logged as Redis wrote it) may evict: unknown is full
	}
	return policy, evicted, true
}

// evictingPolicies are Redis's maxmemory policies that evict keys.
var evictingPolicies = map[string]bool{
	"allkeys-lru": true, "allkeys-lfu": true, "allkeys-random": true,
	"volatile-lru": true, "volatile-lfu": true, "volatile-random": true, "volatile-ttl": true,
}

// watchEvictions reads Redis's memory policy and evicted keys (before
// each heartbeat's script, which it tells), and updates whether Redis
// counts as evicting (Store.mayEvict). A read that fails changes nothing.
func (s *Store) watchEvictions(ctx context.Context) {
	policy, evicted, ok := readMemory(ctx, s.rdb)
	if !ok {
		return
	}
	s.evict.policy.Store(&policy)
	last := s.evict.keys.Swap(evicted)
	if policy == "" {
		s.evict.until.Store(0)
		return
	}
	// Evicting since the last read, or before the store started (the
	// count is since Redis started: a restart, which resets it, counts
	// as a change).
	if (last < 0 && evicted > 0) || (last >= 0 && evicted != last) {
		if !s.mayEvict() {
			s.log.Warn("sluice: Redis is evicting keys; a bucket Redis holds nothing of waits one window before its first request, until Redis has not evicted for 10 minutes (docs/scale-out.md)",
				slog.String("maxmemory_policy", policy), slog.Int64("evicted_keys", evicted))
		}
		s.evict.until.Store(s.cfg.Clock().Add(evictingFor).UnixNano())
	}
}

// evictingPolicy is Redis's memory policy as last read, if it evicts ("":
// it does not, or it could not be read).
func (s *Store) evictingPolicy() string {
	if p := s.evict.policy.Load(); p != nil {
		return *p
	}
	return ""
}

// mayEvict reports whether Redis counts as evicting now: the scripts then
// read absence as loss.
func (s *Store) mayEvict() bool {
	u := s.evict.until.Load()
	return u != 0 && s.cfg.Clock().UnixNano() < u
}
