package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// Declared group limits (ratelimit.SharedGroups) in Redis: ratelimit.Group
// with its schedule and its guard kept where every process reaches them.
// Per group, below D = P:d:<group key>:
//
//	D:s  hash  seq (reservations so far), rtt (ms: the longest recent round
//	           trip, decaying by an eighth per answer; windows are spaced
//	           window + rtt), blk (held until, ms: a 429 met the group)
//	D:w  zset  the schedule's windows: start -> start (ms)
//	D:c  hash  start -> reservations in that window, waiting or taken
//	D:r  hash  request id -> "start|seq|lease" (lease "" while waiting)
//	D:q  zset  the waiting reservations, "%012x seq|id" -> start: a
//	           request's place is its rank (window, then order of arrival)
//	D:g  zset  the guard: lease -> held until (ms); in flight until the
//	           lease expires, then one window after the answer
//
// Invariants (every script keeps them, atomically): a window of D:w holds
// at most Count reservations (D:c); a waiting reservation is in D:r and D:q
// with one start; at most Count leases in D:g are live at any moment a slot
// is taken (Reserve takes one only below Count); a lease stays in D:g from
// its take until one window after its answer, so however the API aligns its
// windows it never sees more than Count of the group's requests in one.
// A request id is "<process>:<call id>", unique across processes.

// groupLua is the group functions every group script starts with. Numbers
// are written with S (Lua 5.1 would print a large one in exponent form).
const groupLua = `
local function S(x) return string.format('%.0f', x) end
local function qm(seq, id) return string.format('%012x', seq) .. '|' .. id end
-- gkey is the prefix of a group's keys, D = P:d:<group key>: the only
-- place that names them (every script takes its groups' keys through it).
local function gkey(P, key) return P .. ':d:' .. key end
-- gstale is the time at or before which a waiting reservation's window
-- start makes it stale: missed for longer than a lease lives, its process
-- is gone (gdrop forgets it; a snapshot no longer counts it).
local function gstale(per, ttl, now) return now - per - ttl end
local function gparse(rec)
  local a, b, c = string.match(rec, '^(%d+)|(%d+)|(.*)$')
  return tonumber(a), tonumber(b), c
end
-- gkeep keeps the group's keys while it has a window, a lease or a block
-- to come, and ttl + window after.
local function gkeep(D, per, now, ttl)
  local h = now
  local last = redis.call('ZRANGE', D .. ':w', -1, -1, 'WITHSCORES')
  if last[2] then h = math.max(h, tonumber(last[2]) + per) end
  local gl = redis.call('ZRANGE', D .. ':g', -1, -1, 'WITHSCORES')
  if gl[2] then h = math.max(h, tonumber(gl[2])) end
  h = math.max(h, tonumber(redis.call('HGET', D .. ':s', 'blk') or '0'))
  local ms = h - now + ttl + per
  for _, k in ipairs({':s', ':w', ':c', ':r', ':q', ':g'}) do
    redis.call('PEXPIRE', D .. k, ms)
  end
end
-- gheld counts the guard's slots held at now: a lease holds its slot
-- until its score.
local function gheld(D, now)
  return redis.call('ZCOUNT', D .. ':g', '(' .. S(now), '+inf')
end
-- gguard returns how long until the guard has a free slot (0: now).
local function gguard(D, n, per, now)
  local blk = tonumber(redis.call('HGET', D .. ':s', 'blk') or '0')
  if blk > now then return blk - now end
  local G = D .. ':g'
  redis.call('ZREMRANGEBYSCORE', G, '-inf', now)
  if redis.call('ZCARD', G) < n then return 0 end
  local first = redis.call('ZRANGE', G, 0, 0, 'WITHSCORES')
  return math.max(1, math.min(tonumber(first[2]) - now, per))
end
-- gdrop forgets the windows that are over, and the reservations missed
-- for longer than a lease lives (their process is gone: they no longer
-- count ahead of anyone; a live one reserves again when it asks).
local function gdrop(D, per, ttl, now)
  local W = D .. ':w'
  local over = redis.call('ZRANGEBYSCORE', W, '-inf', now - per)
  for _, s in ipairs(over) do redis.call('HDEL', D .. ':c', s) end
  if #over > 0 then redis.call('ZREMRANGEBYSCORE', W, '-inf', now - per) end
  local Q = D .. ':q'
  local cut = gstale(per, ttl, now)
  local stale = redis.call('ZRANGEBYSCORE', Q, '-inf', cut)
  for _, m in ipairs(stale) do redis.call('HDEL', D .. ':r', string.sub(m, 14)) end
  if #stale > 0 then redis.call('ZREMRANGEBYSCORE', Q, '-inf', cut) end
end
-- gplace counts one more reservation in the first window with room, or
-- opens one: one window plus the round trip after the last, or when the
-- guard has room if the chain ran dry. Returns its start.
local function gplace(D, n, per, now)
  local W, C = D .. ':w', D .. ':c'
  local wins = redis.call('ZRANGE', W, 0, -1)
  for _, s in ipairs(wins) do
    if tonumber(redis.call('HGET', C, s) or '0') < n then
      redis.call('HINCRBY', C, s, 1)
      return tonumber(s)
    end
  end
  local st = redis.call('HMGET', D .. ':s', 'rtt', 'blk')
  local rtt, blk = tonumber(st[1]) or 0, tonumber(st[2]) or 0
  local start = math.max(now, blk)
  if #wins > 0 then
    start = math.max(start, tonumber(wins[#wins]) + per + rtt)
  else
    local w = gguard(D, n, per, now)
    if w > 0 then start = math.max(start, now + w) end
  end
  redis.call('ZADD', W, start, S(start))
  redis.call('HSET', C, S(start), 1)
  return start
end
-- greserve returns id's reservation (start, seq, lease), placing it if it
-- has none or its window is over (it keeps its seq: its place among the
-- others).
local function greserve(D, n, per, ttl, id, now)
  gdrop(D, per, ttl, now)
  local R = D .. ':r'
  local rec = redis.call('HGET', R, id)
  local seq
  if rec then
    local start, sq, lease = gparse(rec)
    if lease ~= '' or now < start + per then return start, sq, lease end
    redis.call('ZREM', D .. ':q', qm(sq, id))
    seq = sq
  else
    seq = redis.call('HINCRBY', D .. ':s', 'seq', 1)
  end
  local start = gplace(D, n, per, now)
  redis.call('HSET', R, id, S(start) .. '|' .. S(seq) .. '|')
  redis.call('ZADD', D .. ':q', start, qm(seq, id))
  return start, seq, ''
end
-- gblock holds the group until untilT (a 429 met it) and schedules every
-- waiting reservation again from then, in their order.
local function gblock(D, n, per, untilT)
  local blk = tonumber(redis.call('HGET', D .. ':s', 'blk') or '0')
  if untilT <= blk then return end
  redis.call('HSET', D .. ':s', 'blk', untilT)
  local Q, R = D .. ':q', D .. ':r'
  local waiting = redis.call('ZRANGE', Q, 0, -1)
  table.sort(waiting) -- by seq: the first 12 characters
  redis.call('DEL', D .. ':w', D .. ':c', Q)
  for _, m in ipairs(waiting) do
    local id, seq = string.sub(m, 14), tonumber(string.sub(m, 1, 12), 16)
    local start = gplace(D, n, per, untilT)
    redis.call('HSET', R, id, S(start) .. '|' .. S(seq) .. '|')
    redis.call('ZADD', Q, start, qm(seq, id))
  end
end
`

// groupPlaceLua reserves a request's place in each of its groups, or,
// for an estimate, tells the place it has (a group where it has none
// answers found 0 and reserves nothing).
//
// ARGV: 1 request id, 2 lease ttl ms, 3 estimate only (0/1), 4 number of
// groups, then per group: key, count, window ms. Returns, per group,
// {start in ms from now (negative: the window is under way), position,
// found 0/1}.
var groupPlaceLua = groupLua + `
local P, id, ttl, estimate, ng = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1', tonumber(ARGV[4])
local now = clockNow()
local out = {}
for j = 0, ng - 1 do
  local D = gkey(P, ARGV[5 + 3 * j])
  local n, per = tonumber(ARGV[6 + 3 * j]), tonumber(ARGV[7 + 3 * j])
  if estimate and redis.call('HEXISTS', D .. ':r', id) == 0 then
    table.insert(out, 0); table.insert(out, 0); table.insert(out, 0)
  else
    local start, seq, lease = greserve(D, n, per, ttl, id, now)
    local pos = 0
    if lease == '' then pos = redis.call('ZRANK', D .. ':q', qm(seq, id)) or 0 end
    gkeep(D, per, now, ttl)
    table.insert(out, start - now); table.insert(out, pos); table.insert(out, 1)
  end
end
return out
`

// groupReleaseLua drops a request's waiting reservations: its place in
// its window goes to the next request that reserves.
//
// ARGV: 1 request id, 2 number of groups, then per group: key.
var groupReleaseLua = groupLua + `
local P, id, ng = KEYS[1], ARGV[1], tonumber(ARGV[2])
for j = 0, ng - 1 do
  local D = gkey(P, ARGV[3 + j])
  local rec = redis.call('HGET', D .. ':r', id)
  if rec then
    local start, seq, lease = gparse(rec)
    if lease == '' then
      redis.call('HDEL', D .. ':r', id)
      redis.call('ZREM', D .. ':q', qm(seq, id))
      if redis.call('ZSCORE', D .. ':w', S(start)) then
        redis.call('HINCRBY', D .. ':c', S(start), -1)
      end
    end
  end
end
return 0
`

// groupStateLua reads groups' states without changing them: per
// group, the waiting reservations (D:q, those gdrop would keep) and the
// guard's slots held (gheld).
//
// ARGV: 1 lease ttl ms, 2 number of groups, then per group: key, count,
// window ms (groupArgs). Returns, per group, {waiting, held}.
var groupStateLua = groupLua + `
local P, ttl, ng = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
local now = clockNow()
local out = {}
for j = 0, ng - 1 do
  local D = gkey(P, ARGV[3 + 3 * j])
  local per = tonumber(ARGV[5 + 3 * j])
  table.insert(out, redis.call('ZCOUNT', D .. ':q', '(' .. S(gstale(per, ttl, now)), '+inf'))
  table.insert(out, gheld(D, now))
end
return out
`

// errGroupsLocal is returned by ReserveGroups and EstimateGroups while the
// store counts locally (Redis is unreachable): the caller treats the
// request as unscheduled, and Reserve guards it with the fallback share.
var errGroupsLocal = errors.New("redisstore: counting locally (Redis unreachable)")

var _ ratelimit.SharedGroups = (*Store)(nil)

// groupArgs appends each group's key, count and window (ms) to args.
func groupArgs(args []any, gs []ratelimit.SharedGroup, withCount bool) []any {
	for _, g := range gs {
		args = append(args, g.Key)
		if withCount {
			args = append(args, g.Count, ms(g.Window))
		}
	}
	return args
}

// ReserveGroups implements ratelimit.SharedGroups.
func (s *Store) ReserveGroups(ctx context.Context, now time.Time, id string, gs []ratelimit.SharedGroup) ([]ratelimit.Slot, error) {
	out, _, err := s.placeGroups(ctx, now, id, gs, false)
	return out, err
}

// EstimateGroups implements ratelimit.SharedGroups.
func (s *Store) EstimateGroups(ctx context.Context, now time.Time, id string, gs []ratelimit.SharedGroup) ([]ratelimit.Slot, []bool, error) {
	return s.placeGroups(ctx, now, id, gs, true)
}

// placeGroups runs groupPlaceLua.
func (s *Store) placeGroups(parent context.Context, now time.Time, id string, gs []ratelimit.SharedGroup, estimate bool) ([]ratelimit.Slot, []bool, error) {
	if s.Mode() == Fallback {
		return nil, nil, errGroupsLocal
	}
	ctx, cancel := context.WithTimeout(parent, s.cfg.Timeout)
	defer cancel()
	args := groupArgs([]any{s.groupID(id), ms(s.cfg.LeaseTTL), b2i(estimate), len(gs)}, gs, true)
	res, err := s.sc.groupPlace.Run(ctx, s.rdb, []string{s.ns}, args...).Slice()
	if err == nil && len(res) != 3*len(gs) {
		err = fmt.Errorf("redisstore: group script: %d results for %d groups", len(res), len(gs))
	}
	if err != nil {
		if parent.Err() == nil {
			s.failed(err, now) // not the caller's context ending
		}
		return nil, nil, err
	}
	// The script tells each start in ms from Redis's now, which is when
	// the script ran: after the wait for a connection and the queue ahead
	// of it, not at now. Counted from the reply's arrival instead, a start
	// is late by the reply's way back at most, never early by the wait
	// before the script (a request sent early is refused, and its lane
	// held, a round trip for nothing).
	base := now
	if at := s.cfg.Clock(); at.After(base) {
		base = at
	}
	out, found := make([]ratelimit.Slot, len(gs)), make([]bool, len(gs))
	for i, g := range gs {
		start, _ := res[3*i].(int64)
		pos, _ := res[3*i+1].(int64)
		f, _ := res[3*i+2].(int64)
		if found[i] = f == 1; found[i] {
			start := base.Add(time.Duration(start) * time.Millisecond)
			out[i] = ratelimit.Slot{Start: start, End: start.Add(g.Window), Position: int(pos)}
		}
	}
	return out, found, nil
}

var _ ratelimit.SharedGroupStates = (*Store)(nil)

// GroupStates implements ratelimit.SharedGroupStates: one script reads
// every group, each process's requests counted. It waits at most
// Config.Timeout (and no longer than ctx). A failure other than ctx's end
// counts in Stats.Errors but switches nothing: a snapshot is an
// observation, and the next reservation finds out whether Redis answers.
// While the store counts locally it does not ask Redis and returns an
// error.
func (s *Store) GroupStates(parent context.Context, gs []ratelimit.SharedGroup) ([]ratelimit.SharedGroupState, error) {
	if len(gs) == 0 {
		return nil, nil
	}
	if s.Mode() == Fallback {
		return nil, errGroupsLocal
	}
	ctx, cancel := context.WithTimeout(parent, s.cfg.Timeout)
	defer cancel()
	args := groupArgs([]any{ms(s.cfg.LeaseTTL), len(gs)}, gs, true)
	res, err := s.sc.groupState.Run(ctx, s.rdb, []string{s.ns}, args...).Int64Slice()
	if err == nil && len(res) != 2*len(gs) {
		err = fmt.Errorf("redisstore: group state script: %d results for %d groups", len(res), len(gs))
	}
	if err != nil {
		if parent.Err() == nil {
			s.errs.Add(1) // not the caller's context ending
		}
		return nil, err
	}
	out := make([]ratelimit.SharedGroupState, len(gs))
	for i := range out {
		out[i] = ratelimit.SharedGroupState{Waiting: int(res[2*i]), Held: int(res[2*i+1])}
	}
	return out, nil
}

// ReleaseGroups implements ratelimit.SharedGroups: the script runs on a
// goroutine of its own, which Close waits for (one timeout at most).
func (s *Store) ReleaseGroups(id string, gs []ratelimit.SharedGroup) {
	if len(gs) == 0 || s.Mode() == Fallback {
		return // the reservations are missed, then dropped (gdrop)
	}
	s.relMu.Lock()
	if s.relClosed {
		s.relMu.Unlock()
		return
	}
	s.wg.Add(1)
	s.relMu.Unlock()
	args := groupArgs([]any{s.groupID(id), len(gs)}, gs, false)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
		defer cancel()
		if err := s.sc.groupRelease.Run(ctx, s.rdb, []string{s.ns}, args...).Err(); err != nil {
			s.failed(err, s.cfg.Clock())
		}
	}()
}

// groupID names a request of this process in the groups.
func (s *Store) groupID(id string) string { return s.procID + ":" + id }
