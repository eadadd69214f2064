package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/ratelimit"
)

// Declared group limits (ratelimit.SharedGroups) in Redis: ratelimit.Group
// with its schedule and its guard kept where every process reaches them.
// Per group, below D = P:d:<group key>:
//
//	D:s  hash  seq (reservations so far), rtt (ms: the longest recent round
//	           trip, decaying by an eighth per answer; windows are spaced
//	           window + rtt), blk (held until, ms: a 429 met the group),
//	           a-1 and a0 (below)
//	D:w  zset  the schedule's windows: start -> start (ms)
//	D:c  hash  start -> reservations in that window, waiting or taken
//	D:o  zset  the windows with room (fewer than Count): start -> start
//	D:r  hash  request id -> "start|seq|lease|class|moves" (lease "" while
//	           waiting; class -1, 0, 1; moves: times moved back for a
//	           higher class): the reservation itself
//	D:b  zset  the waiting reservations of class bulk, "%012x seq|id" ->
//	           start: by window, then order of arrival
//	D:n  zset  the same, of class normal
//	D:i  zset  the same, of class interactive
//	D:g  zset  the guard: lease -> held until (ms); in flight until the
//	           lease expires, then one window after the answer
//	D:t  zset  the taken reservations: request id -> when its lease
//	           expires (ms); a record still taken then is dropped (its
//	           process is gone, or its answer comes too late to matter:
//	           the guard let its slot go)
//
// Invariants (every script keeps them, atomically): a window of D:w holds
// at most Count reservations (D:c); a waiting reservation is in D:r and in
// its class's set (D:b, D:n or D:i) with one start; at most Count leases
// in D:g are live at any moment a slot is taken (Reserve takes one only
// below Count); a lease stays in D:g from its take until one window after
// its answer, so however the API aligns its windows it never sees more
// than Count of the group's requests in one. A request id is
// "<process>:<call id>", unique across processes.
//
// Classes follow ratelimit.Group (ReserveClass) step for step, and the
// conformance table (conformance.Groups) checks that they do: a request of
// a higher class takes the place of a waiting one of a lower class in the
// earliest full window (gplace), which moves back in a cascade (gcascade);
// D:s's a-1 and a0 hold the latest window of a bulk or normal reservation
// moved ratelimit.MaxGroupMoves times, which nothing passes.
//
// Cost, as ratelimit.Group's: a class's set read from its end at a
// window's start gives the latest of that class there (past the window
// a-1 or a0 names, it can move), so a pass reads one member per window;
// a place in line is a few counts and a rank. A reservation, a pass and
// an estimate cost O(windows × log(waiting)) commands, whatever the
// backlog. Where D:s was lost (a-1, a0 gone) a set's latest members may
// be ones that move no more: a pass reads at most GPAGE of them per
// window and passes no one there beyond (less than it could, never
// more).
//
// State lost is never taken as freedom: a set member whose record is gone
// or names another window is dropped, never moved (moving it would bring
// an ended reservation back); a record whose class or moves are unreadable
// moves no more.

// groupLua is the group functions every group script starts with. Numbers
// are written with S (Lua 5.1 would print a large one in exponent form).
var groupLua = `
local GMOVES, GSHIFT, GPAGE = ` + strconv.Itoa(ratelimit.MaxGroupMoves) + `, ` + strconv.Itoa(ratelimit.MaxGroupShift) + `, 16
local function S(x) return string.format('%.0f', x) end
local function qm(seq, id) return string.format('%012x', seq) .. '|' .. id end
-- GSETS names each class's set of waiting reservations (D:b, D:n, D:i).
local GSETS = {[-1] = ':b', [0] = ':n', [1] = ':i'}
-- gkey is the prefix of a group's keys, D = P:d:<group key>: the only
-- place that names them (every script takes its groups' keys through it).
local function gkey(P, key) return P .. ':d:' .. key end
-- gstale is the time at or before which a waiting reservation's window
-- start makes it stale: missed for longer than a lease lives, its process
-- is gone (gdrop forgets it; a snapshot no longer counts it).
local function gstale(per, ttl, now) return now - per - ttl end
-- grec writes a reservation's record (D:r), gparse reads it: start,
-- seq, lease, class, moves. A record without a readable class or moves
-- (written by an older version, or damaged) is normal and moves no more.
local function grec(start, seq, lease, c, mv)
  return S(start) .. '|' .. S(seq) .. '|' .. lease .. '|' .. c .. '|' .. mv
end
local function gparse(rec)
  local a, b, l, c, m = string.match(rec, '^(%d+)|(%d+)|([^|]*)|(-?%d)|(%d+)$')
  if a then
    c = tonumber(c)
    if c < -1 or c > 1 then c, m = 0, GMOVES end
    return tonumber(a), tonumber(b), l, c, tonumber(m)
  end
  a, b, l = string.match(rec, '^(%d+)|(%d+)|([^|]*)')
  return tonumber(a), tonumber(b), l, 0, GMOVES
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
  for _, k in ipairs({':s', ':w', ':c', ':o', ':r', ':b', ':n', ':i', ':g', ':t'}) do
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
-- gdrop forgets the windows that are over, the reservations missed for
-- longer than a lease lives (their process is gone: they no longer count
-- ahead of anyone; a live one reserves again when it asks), and the
-- records of takes whose lease ended unanswered (D:t).
local function gdrop(D, per, ttl, now)
  local W = D .. ':w'
  local over = redis.call('ZRANGEBYSCORE', W, '-inf', now - per)
  for _, s in ipairs(over) do redis.call('HDEL', D .. ':c', s) end
  if #over > 0 then
    redis.call('ZREMRANGEBYSCORE', W, '-inf', now - per)
    redis.call('ZREMRANGEBYSCORE', D .. ':o', '-inf', now - per)
  end
  -- taken, and never answered while the lease lived
  local T = D .. ':t'
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', T, '-inf', now)) do
    local rec = redis.call('HGET', D .. ':r', id)
    if rec then
      local _, _, lease = gparse(rec)
      if lease and lease ~= '' then redis.call('HDEL', D .. ':r', id) end
    end
  end
  redis.call('ZREMRANGEBYSCORE', T, '-inf', now)
  local cut = gstale(per, ttl, now)
  for _, k in pairs(GSETS) do
    local stale = redis.call('ZRANGEBYSCORE', D .. k, '-inf', cut)
    for _, m in ipairs(stale) do redis.call('HDEL', D .. ':r', string.sub(m, 14)) end
    if #stale > 0 then redis.call('ZREMRANGEBYSCORE', D .. k, '-inf', cut) end
  end
end
-- gwaiting counts the waiting reservations whose window starts in
-- [lo, hi] (Redis score bounds).
local function gwaiting(D, lo, hi)
  local n = 0
  for _, k in pairs(GSETS) do n = n + redis.call('ZCOUNT', D .. k, lo, hi) end
  return n
end
-- gqadd and gqrem put a waiting reservation of class c in line (its
-- class's set) and take it out (of every set: a member left in another
-- class's set would be stale).
local function gqadd(D, start, seq, id, c)
  redis.call('ZADD', D .. GSETS[c], start, qm(seq, id))
end
local function gqrem(D, seq, id)
  for _, k in pairs(GSETS) do redis.call('ZREM', D .. k, qm(seq, id)) end
end
-- gaged records start as the window of a reservation of class c that
-- moves no more (moved GMOVES times).
local function gaged(D, c, moves, start)
  if moves < GMOVES or c >= 1 then return end
  local f = 'a' .. c
  if start > tonumber(redis.call('HGET', D .. ':s', f) or '0') then redis.call('HSET', D .. ':s', f, S(start)) end
end
-- gcount adds d to the count of the window at w (its D:c field) and
-- keeps D:o: the window is in it while it has room (below n).
local function gcount(D, n, w, d)
  if redis.call('HINCRBY', D .. ':c', w, d) < n then
    redis.call('ZADD', D .. ':o', w, w)
  else
    redis.call('ZREM', D .. ':o', w)
  end
end
-- gopen returns the first window with room (its D:w member), or nil. A
-- member of D:o that is no window, or a full one, is dropped; a window
-- with room missing from D:o (evicted) is not found, and the next
-- reservation opens a window at the end: later than it could, never over
-- a window's count. A window whose count is lost (D:c evicted: a window
-- is opened with its count, in one script) is full.
local function gopen(D, n)
  while true do
    local o = redis.call('ZRANGE', D .. ':o', 0, 0)[1]
    if not o then return nil end
    if redis.call('ZSCORE', D .. ':w', o) and tonumber(redis.call('HGET', D .. ':c', o) or n) < n then return o end
    redis.call('ZREM', D .. ':o', o)
  end
end
-- gfill counts one more reservation in the first window with room, or
-- opens one: one window plus the round trip after the last, or when the
-- guard has room if the chain ran dry. Returns its start.
local function gfill(D, n, per, now)
  local o = gopen(D, n)
  if o then
    gcount(D, n, o, 1)
    return tonumber(o)
  end
  local W = D .. ':w'
  local last = redis.call('ZRANGE', W, -1, -1)[1]
  local st = redis.call('HMGET', D .. ':s', 'rtt', 'blk')
  local rtt, blk = tonumber(st[1]) or 0, tonumber(st[2]) or 0
  local start = math.max(now, blk)
  if last then
    start = math.max(start, tonumber(last) + per + rtt)
  else
    local w = gguard(D, n, per, now)
    if w > 0 then start = math.max(start, now + w) end
  end
  redis.call('ZADD', W, start, S(start))
  redis.call('HDEL', D .. ':c', S(start))
  gcount(D, n, S(start), 1)
  return start
end
-- glatest returns the latest waiting reservation of class c in the window
-- at s that can move (moved fewer than GMOVES times) and is not rid, as a
-- table {id, seq, c, mv}; nil if there is none, or if it is of the mover's
-- class and not later than rseq (same: c is the mover's class). It reads
-- at most GPAGE members: past the windows a-1 and a0 name the first one is
-- it. A member whose record is gone, or names another window, class or a
-- lease (its reservation ended or moved where the set was not kept:
-- evicted keys) is dropped, never moved: moving it would bring an ended
-- reservation back.
local function glatest(D, c, s, rid, rseq, same)
  local set = D .. GSETS[c]
  for _, m in ipairs(redis.call('ZREVRANGEBYSCORE', set, S(s), S(s), 'LIMIT', 0, GPAGE)) do
    local id, seq = string.sub(m, 14), tonumber(string.sub(m, 1, 12), 16)
    local rec = redis.call('HGET', D .. ':r', id)
    local start, rs, lease, rc, mv
    if rec then start, rs, lease, rc, mv = gparse(rec) end
    if not rec or start ~= s or rs ~= seq or lease ~= '' or rc ~= c then
      redis.call('ZREM', set, m)
    elseif id ~= rid and mv < GMOVES then
      if same and seq < rseq then return nil end
      return {id = id, seq = seq, c = c, mv = mv}
    end
  end
  return nil
end
-- gvictim returns the waiting reservation of the window at s that one of
-- class rc (id rid, seq rseq) takes the place of, as a table {id, seq,
-- c, mv}, or nil: one of a lower class (or, moving, of rc and later than
-- rseq) moved fewer than GMOVES times; the lowest class, the latest of
-- it (ratelimit's passed).
local function gvictim(D, s, rid, rseq, rc, moving)
  for c = -1, rc do
    if c == rc and not moving then break end
    local v = glatest(D, c, s, rid, rseq, c == rc)
    if v then return v end
  end
  return nil
end
-- gmove puts waiting reservation v in the window at s.
local function gmove(D, v, s)
  redis.call('HSET', D .. ':r', v.id, grec(s, v.seq, '', v.c, v.mv))
  gqadd(D, s, v.seq, v.id, v.c)
  gaged(D, v.c, v.mv, s)
end
-- gcascade moves v, whose place was taken in window wins[i-1], back: into
-- the first window from wins[i] with room, or into the first where it
-- passes someone (gvictim), who moves on in turn; or into a new window at
-- the end (ratelimit's cascade).
local function gcascade(D, n, per, now, v, i, wins)
  v.mv = v.mv + 1
  while i <= #wins do
    local s = tonumber(wins[i])
    if tonumber(redis.call('HGET', D .. ':c', wins[i]) or n) < n then -- a lost count is full (gopen)
      gcount(D, n, wins[i], 1)
      gmove(D, v, s)
      return
    end
    local u = gvictim(D, s, v.id, v.seq, v.c, true)
    if u then
      gmove(D, v, s)
      v = u
      v.mv = v.mv + 1
    end
    i = i + 1
  end
  gmove(D, v, gfill(D, n, per, now))
end
-- gplace counts a reservation of class c (id, seq, moves), in no window,
-- in the first window with room or, before that, in the first full one
-- where it passes a waiting one of a lower class (ratelimit's place), and
-- returns its start. It looks only at the windows that hold a waiting
-- one of a lower class (the sets give the next such window in one read),
-- among the last GSHIFT and past the floor.
local function gplace(D, n, per, now, id, seq, c, moves)
  local lower = false
  for k = -1, c - 1 do lower = lower or redis.call('ZCARD', D .. GSETS[k]) > 0 end
  if lower then
    local floor = tonumber(redis.call('HGET', D .. ':s', 'a-1') or '0')
    if c == 1 then floor = math.max(floor, tonumber(redis.call('HGET', D .. ':s', 'a0') or '0')) end
    local W = D .. ':w'
    local o = gopen(D, n)
    local open = o and tonumber(o) or math.huge -- gfill takes it and any later
    local nw = redis.call('ZCARD', W)
    local first = redis.call('ZRANGE', W, math.max(0, nw - GSHIFT), math.max(0, nw - GSHIFT))[1]
    -- windows after lo (scores are whole ms): past the floor, among the
    -- last GSHIFT (strays, whose windows are over, are before them all)
    local lo = math.max(floor, (tonumber(first) or math.huge) - 1)
    while lo < open do
      local s
      for k = -1, c - 1 do
        local m = redis.call('ZRANGEBYSCORE', D .. GSETS[k], '(' .. S(lo), '(' .. S(open), 'WITHSCORES', 'LIMIT', 0, 1)
        if m[2] then s = math.min(s or math.huge, tonumber(m[2])) end
      end
      if not s then break end
      local rank = redis.call('ZRANK', W, S(s))
      if rank then
        local v = gvictim(D, s, id, seq, c, false)
        if v then
          gaged(D, c, moves, s)
          gcascade(D, n, per, now, v, rank + 2, redis.call('ZRANGE', W, 0, -1))
          return s
        end
      end
      lo = s
    end
  end
  local s = gfill(D, n, per, now)
  gaged(D, c, moves, s)
  return s
end
-- greserve returns id's reservation (start, seq, lease, class, moves),
-- placing it of class c if it has none, or again if its window is over
-- (it keeps its seq, its place among the others, and its class).
local function greserve(D, n, per, ttl, id, now, c)
  gdrop(D, per, ttl, now)
  local R = D .. ':r'
  local rec = redis.call('HGET', R, id)
  local seq, moves = 0, 0
  local start, sq, lease, rc, mv
  if rec then start, sq, lease, rc, mv = gparse(rec) end
  if rec and not (start and sq and lease) then
    -- Unreadable (damaged): as if there were none. Its window's count,
    -- if it holds it, stays charged: later, never over.
    redis.call('HDEL', R, id)
    rec = nil
  end
  if rec then
    if lease ~= '' or now < start + per then return start, sq, lease, rc, mv end
    gqrem(D, sq, id)
    seq, c, moves = sq, rc, mv
  else
    seq = redis.call('HINCRBY', D .. ':s', 'seq', 1)
    c = math.max(-1, math.min(1, math.floor(tonumber(c) or 0)))
  end
  local start = gplace(D, n, per, now, id, seq, c, moves)
  redis.call('HSET', R, id, grec(start, seq, '', c, moves))
  gqadd(D, start, seq, id, c)
  return start, seq, '', c, moves
end
-- gready returns id's reservation in group D, reserved as greserve does
-- (a reservation taken by an attempt whose answer is not reported yet is
-- dropped: this attempt needs a place of its own), as the table gtake
-- reads, and how long until the request may go (0: now): its window's
-- start or when the guard has a slot, whichever is later.
local function gready(D, n, per, ttl, id, now, c)
  local start, seq, lease, rc, mv = greserve(D, n, per, ttl, id, now, c)
  if lease ~= '' then
    redis.call('HDEL', D .. ':r', id)
    start, seq, lease, rc, mv = greserve(D, n, per, ttl, id, now, c)
  end
  return {D, seq, start, per, rc, mv}, math.max(start - now, gguard(D, n, per, now))
end
-- gtake takes the slot of the reservation g (gready's) for id under lease:
-- out of line, its record names the lease, and the guard holds its slot
-- while it lives (ttl).
local function gtake(g, id, lease, now, ttl)
  local D, seq, start, per = g[1], g[2], g[3], g[4]
  redis.call('HSET', D .. ':r', id, grec(start, seq, lease, g[5], g[6]))
  gqrem(D, seq, id)
  redis.call('ZADD', D .. ':g', now + ttl, lease)
  redis.call('ZADD', D .. ':t', now + ttl, id)
  gkeep(D, per, now, ttl)
end
-- ganswer ends the take of id under lease: counted (the request was
-- sent), its slot is held one window after now and its reservation ends
-- (its window keeps counting it), and rtt (ms, 0: unknown) joins the
-- round trip the windows are spaced by; not counted (never sent, or
-- refused before any limit counted it), the slot is given back and the
-- reservation waits again in its place. A record that names another
-- lease (an attempt after this one) is left as it is.
local function ganswer(D, per, ttl, id, lease, now, counted, rtt)
  local rec = redis.call('HGET', D .. ':r', id)
  local start, seq, glease, c, mv = 0, 0, '', 0, 0
  if rec then start, seq, glease, c, mv = gparse(rec) end
  if glease == lease then redis.call('ZREM', D .. ':t', id) end
  if counted then
    redis.call('ZADD', D .. ':g', now + per, lease)
    if glease == lease then redis.call('HDEL', D .. ':r', id) end
    if rtt > 0 then
      local old = tonumber(redis.call('HGET', D .. ':s', 'rtt') or '0')
      redis.call('HSET', D .. ':s', 'rtt', math.max(rtt, old - math.floor(old / 8)))
    end
  else
    redis.call('ZREM', D .. ':g', lease)
    if glease == lease then
      redis.call('HSET', D .. ':r', id, grec(start, seq, '', c, mv))
      gqadd(D, start, seq, id, c)
      gaged(D, c, mv, start) -- a block may have made its window afresh, without it
    end
  end
end
-- gblock holds the group until untilT (a 429 met it) and schedules every
-- waiting reservation again from then, in their order: by window, then
-- class, then arrival (ratelimit's Block). A window from untilT on keeps
-- counting the reservations taken in it (its count less its waiting
-- ones; all of it if the count is lost); the others' windows are gone. A
-- block that ends no later than the current one changes nothing.
local function gblock(D, n, per, untilT)
  local blk = tonumber(redis.call('HGET', D .. ':s', 'blk') or '0')
  if untilT <= blk then return end
  redis.call('HSET', D .. ':s', 'blk', untilT)
  local waiting = {}
  for c, k in pairs(GSETS) do
    local flat = redis.call('ZRANGE', D .. k, 0, -1, 'WITHSCORES')
    for i = 1, #flat, 2 do
      local id = string.sub(flat[i], 14)
      local rec = redis.call('HGET', D .. ':r', id)
      if rec then
        local st, rs, lease, rc, mv = gparse(rec)
        local seq = tonumber(string.sub(flat[i], 1, 12), 16)
        if lease == '' and rc == c and rs == seq and st == tonumber(flat[i + 1]) then
          waiting[#waiting + 1] = {id = id, seq = seq, s = st, c = c, mv = mv}
        end
      end
    end
  end
  table.sort(waiting, function(a, b)
    if a.s ~= b.s then return a.s < b.s end
    if a.c ~= b.c then return a.c > b.c end
    return a.seq < b.seq
  end)
  local inline = {}
  for _, v in ipairs(waiting) do inline[v.s] = (inline[v.s] or 0) + 1 end
  local kept = {}
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', D .. ':w', untilT, '+inf')) do
    local taken = tonumber(redis.call('HGET', D .. ':c', w) or n) - (inline[tonumber(w)] or 0)
    if taken > 0 then kept[#kept + 1] = {w, taken} end
  end
  redis.call('DEL', D .. ':w', D .. ':c', D .. ':o', D .. ':b', D .. ':n', D .. ':i')
  redis.call('HDEL', D .. ':s', 'a-1', 'a0')
  for _, k in ipairs(kept) do
    redis.call('ZADD', D .. ':w', k[1], k[1])
    gcount(D, n, k[1], math.min(k[2], n))
  end
  for _, v in ipairs(waiting) do
    gmove(D, v, gfill(D, n, per, untilT))
  end
end
`

// groupPlaceLua reserves a request's place in each of its groups, or,
// for an estimate, tells the place it has (a group where it has none
// answers found 0 and reserves nothing).
//
// ARGV: 1 request id, 2 lease ttl ms, 3 estimate only (0/1), 4 number of
// groups, 5 the request's class (-1, 0, 1), then per group: key, count,
// window ms. Returns, per group, {start in ms from now (negative: the
// window is under way), position, found 0/1}. The position counts the
// waiting reservations in earlier windows, and in its own those of a
// higher class or of its class and earlier (ratelimit's slot).
var groupPlaceLua = groupLua + `
local P, id, ttl, estimate, ng = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1', tonumber(ARGV[4])
local class = tonumber(ARGV[5]) or 0
local now = clockNow()
local out = {}
for j = 0, ng - 1 do
  local D = gkey(P, ARGV[6 + 3 * j])
  local n, per = tonumber(ARGV[7 + 3 * j]), tonumber(ARGV[8 + 3 * j])
  if estimate then gdrop(D, per, ttl, now) end -- what it forgets is no reservation to tell
  if estimate and redis.call('HEXISTS', D .. ':r', id) == 0 then
    table.insert(out, 0); table.insert(out, 0); table.insert(out, 0)
  else
    local start, seq, lease, c = greserve(D, n, per, ttl, id, now, class)
    local pos = 0
    if lease == '' then
      -- those in earlier windows, of a higher class in its own, and of its
      -- class there before it (its rank among its class's)
      pos = gwaiting(D, '-inf', '(' .. S(start))
      for k = c + 1, 1 do pos = pos + redis.call('ZCOUNT', D .. GSETS[k], S(start), S(start)) end
      local own = D .. GSETS[c]
      local rank = redis.call('ZRANK', own, qm(seq, id))
      if rank then pos = pos + rank - redis.call('ZCOUNT', own, '-inf', '(' .. S(start)) end
    end
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
    if not (start and seq and lease) then
      redis.call('HDEL', D .. ':r', id) -- unreadable: its count stays charged
    elseif lease == '' then
      redis.call('HDEL', D .. ':r', id)
      gqrem(D, seq, id)
      -- A lost count (D:c evicted) stays unknown, so full (gopen): no
      -- decrement would make it again, without a TTL, below the truth.
      if redis.call('ZSCORE', D .. ':w', S(start)) and redis.call('HEXISTS', D .. ':c', S(start)) == 1 then
        gcount(D, math.huge, S(start), -1)
        -- D:o may be new (no window had room): it lives as long as D:w
        local ttl = redis.call('PTTL', D .. ':w')
        if ttl > 0 then redis.call('PEXPIRE', D .. ':o', ttl) end
      end
    end
  end
end
return 0
`

// groupStateLua reads groups' states without changing them: per
// group, the waiting reservations (those gdrop would keep) and the
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
  table.insert(out, gwaiting(D, '(' .. S(gstale(per, ttl, now)), '+inf'))
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
func (s *Store) ReserveGroups(ctx context.Context, now time.Time, id string, class int8, gs []ratelimit.SharedGroup) ([]ratelimit.Slot, error) {
	out, _, err := s.placeGroups(ctx, now, id, class, gs, false)
	return out, err
}

// EstimateGroups implements ratelimit.SharedGroups.
func (s *Store) EstimateGroups(ctx context.Context, now time.Time, id string, gs []ratelimit.SharedGroup) ([]ratelimit.Slot, []bool, error) {
	return s.placeGroups(ctx, now, id, 0, gs, true)
}

// placeGroups runs groupPlaceLua.
func (s *Store) placeGroups(parent context.Context, now time.Time, id string, class int8, gs []ratelimit.SharedGroup, estimate bool) ([]ratelimit.Slot, []bool, error) {
	if s.Mode() == Fallback {
		return nil, nil, errGroupsLocal
	}
	ctx, cancel := context.WithTimeout(parent, s.cfg.Timeout)
	defer cancel()
	args := groupArgs([]any{s.groupID(id), ms(s.cfg.LeaseTTL), b2i(estimate), len(gs), class}, gs, true)
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
