package redisstore

import (
	"strconv"
	"time"
)

// The scripts run atomically in Redis, each in one round trip, with Redis's
// own clock (TIME) as the only clock: processes exchange durations, never
// their local times, so their clocks need not agree.
//
// Keys, all below the namespace P = "{sluice:<hash of the token>}" (the
// braces are a Cluster hash tag: one bot's keys sit on one shard), every one
// with an expiry:
//
//	P:b:<bucket>  hash   l limit, u used in the current window, r its end
//	                     (ms), p paused until (ms), w longest Reset-After
//	                     seen (ms), v 1 while the window's end is a guess no
//	                     answer confirmed, s when the window began (ms:
//	                     requests reserved earlier may belong to an older
//	                     one), x the X-RateLimit-Reset of the window (Unix
//	                     ms, the server's clock), z 1 once a shared or
//	                     sublimit 429 was met (one at a time), n 1 while a process waits for an answer on
//	                     this bucket, fl the latest end told by answers
//	                     that may be of another window since it began (r
//	                     never drops below it), lo the earliest end the
//	                     server may give it (ms, 0: unknown), h until when a bucket Redis held
//	                     nothing of, in a Redis that evicts, is held full
//	                     before its first request (evicting.go)
//	P:q:<bucket>  hash   the turns of the processes waiting on it (fair.go)
//	P:f:<bucket>  zset   reservations in flight: lease -> expiry (ms); at
//	                     +inf "~" and "~w<window ms>" (lossLua, reserveLua)
//	P:g           zset   global slots: lease -> held until (ms); "~" at +inf
//	P:gen         hash   the state's generation (lossLua)
//	P:seen, P:ex  zsets  processes' last heartbeat, and when one silent
//	                     came back (lossLua)
//	P:m:<major>   zset   the first pioneer in flight of a template no process
//	                     has seen answered, per major parameters
//	P:k:<major>   set    the known buckets (by hash) of the major parameters,
//	                     where such a pioneer may land
//	P:a           hash   "METHOD /template" -> X-RateLimit-Bucket hash
//	P:w           hash   "METHOD /template" -> the longest window its
//	                     buckets' first answers told (ms): the hold of a
//	                     bucket Redis holds nothing of (evicting.go)
//	P:i:<minute>  string invalid answers (401, 403, non-shared 429) that minute
//	P:x:<lease>   string a reservation given back before it ran (tombstone)
//	P:procs       zset   live processes: id -> heartbeat expiry (ms)
//	P:pmax        string the most processes seen alive at once recently
//	P:d:<group>:* a declared group's schedule and guard (groups.go)
//	P:wake        pub/sub channel: "w|<major>" (an answer a process waits
//	                     for came), "g|<ms>" (a global 429: pause for ms)
//
// <bucket> is routes.BucketKey(hash, major) ("bucket <hash> <major>") once
// the route's hash is known, else the route's key (a pioneer's bucket).
// Scripts build keys below KEYS[1] (the namespace) themselves: with the
// hash tag they all live on KEYS[1]'s slot, as Redis Cluster requires.

// reserveLua takes one request's slots, all or nothing.
//
// ARGV: 1 lease, 2 route key, 3 template, 4 major, 5 global slot wanted (0/1), 6 global
// limit, 7 global period ms, 8 lease ttl ms, 9 caller's known limit (0:
// unknown), 10 caller's remaining not counting its own requests in flight, 11 caller's window end, ms from now (0:
// none), 12 caller's longest Reset-After ms, 13 reopening margin ms, 14
// invalid-request limit (0: none), 15 its window in minutes, 16 how long a
// bucket is kept after its window ms, 17 the hash the caller knows for
// the template ("" if none), 18 the caller sends one at a time here (0/1),
// 19 the request's id in its declared groups, 20 the number of groups,
// 21 the caller's deadline on Redis's clock (Unix ms, 0: none), 22 the
// generation the caller knows ("" if none), 23 how long ago the caller's
// view of the bucket's window ended, ms (0: under way, or unknown), 24
// how long a process may go unheard before its share is kept out, ms,
// 25 Redis evicts keys lately (0/1: absence is loss, see evicting.go),
// 26 the request's class in its declared groups (-1, 0, 1), 27 the most
// processes the caller has seen sharing the token (capacity, in lossLua),
// then from 28 per group: key, count, window ms (groups.go).
//
// A reservation that runs after its caller's deadline, or whose lease was
// given back already (the tombstone P:x:<lease>, see reportLua), takes
// nothing: its caller gave up on it (Redis was frozen or slow, the call
// queued), and it would hold its slots until the lease expired.
//
// Returns {granted 0/1, wait ms, scope, hash, notify-or-pioneer 0/1, bucket
// key used, generation, lost 0/1}. When granted, the 5th is 1 for a
// pioneer; when refused, 1 if the wait ends with another process's answer
// (published on P:wake). The 8th is 1 when this call found state lost
// (see lossLua).
var reserveLua = groupLua + lossLua + fairLua + `
local P = KEYS[1]
local lease, key, tpl, major = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local wantG = ARGV[5] == '1'
local gN, gPer, ttl = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local lLimit, lRem, lReset, lWin = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local margin, invLimit, invMin, keep = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15]), tonumber(ARGV[16])
local known = ARGV[17]
local now = clockNow()
local deadline = tonumber(ARGV[21])
if (deadline > 0 and now > deadline) or redis.call('EXISTS', P .. ':x:' .. lease) == 1 then
  return {0, 1, 'bucket', '', 0, key, '', 0}
end
local endedAgo, stale, evicting = tonumber(ARGV[23]), tonumber(ARGV[24]), ARGV[25] == '1'
local gen, lostAt, lostNow, blocked = generation(P, ARGV[22], now, keep, lease, evicting)
local procs = tonumber(ARGV[27]) or 0
local function capacityOf(n, hold)
  return capacity(P, n, hold, now, stale, lostAt, keep, evicting, procs, string.match(lease, '^[^:]*'))
end

local function body()

if invLimit > 0 then
  local minute = math.floor(now / 60000)
  local n = 0
  for m = minute - invMin + 1, minute do
    n = n + tonumber(redis.call('GET', P .. ':i:' .. m) or '0')
  end
  if n >= invLimit then
    return {0, 60000 - now % 60000, 'budget', '', 0, key}
  end
end

local G = P .. ':g'
if wantG then
  if blocked > now then
    return {0, blocked - now, 'global', '', 0, key}
  end
  if lostAt > 0 and now < lostAt + gPer then
    -- The log of the last period was lost: what was sent in it is
    -- unknown, so the window is full until it has passed.
    return {0, lostAt + gPer - now, 'global', '', 0, key}
  end
  redis.call('ZREMRANGEBYSCORE', G, '-inf', now)
  -- (its member '~', at +inf, keeps the log while it lives: see lossLua)
  if redis.call('ZCOUNT', G, '-inf', '(+inf') >= capacityOf(gN, gPer) then
    local first = redis.call('ZRANGE', G, 0, 0, 'WITHSCORES')
    return {0, math.max(1, math.min(tonumber(first[2]) - now, gPer)), 'global', '', 0, key}
  end
end

-- The bucket: by its hash when any process learned it, else by the route
-- (a pioneer's bucket).
local RF = P .. ':f:' .. key
local hash = redis.call('HGET', P .. ':a', tpl) or ''
if hash == '' and known ~= '' then
  hash = known
  redis.call('HSET', P .. ':a', tpl, hash)
  redis.call('PEXPIRE', P .. ':a', 86400000)
end
if hash ~= '' then
  key = 'bucket ' .. hash .. ' ' .. major
end
local B, F = P .. ':b:' .. key, P .. ':f:' .. key
redis.call('ZREMRANGEBYSCORE', F, '-inf', now)
local inflight = redis.call('ZCOUNT', F, '-inf', '(+inf')
local r = redis.call('HMGET', B, 'l', 'u', 'r', 'p', 'w', 'v', 's', 'z', 'fe', 'h')
local limit, used, reset = tonumber(r[1]) or 0, tonumber(r[2]) or 0, tonumber(r[3]) or 0
local pause, win, prov = tonumber(r[4]) or 0, tonumber(r[5]) or 0, tonumber(r[6]) or 0
local start, serial = tonumber(r[7]) or 0, r[8] == '1' or ARGV[18] == '1'
if limit > 0 and (tonumber(r[9]) or 0) > now and redis.call('EXISTS', F) == 0 then
  -- The bucket's in-flight set is gone before its expiry (evicted): how
  -- many of its requests are in flight, and in which window Discord counts
  -- them, is unknown. Unknown is full: for one window from now.
  used, reset, prov, start = limit, math.max(reset, now + math.max(win, 50) + margin), 0, now
  redis.call('HSET', B, 'fe', 0)
  redis.call('HDEL', B, 'lo')
  lostNow = 1
end

if limit == 0 and hash ~= '' and redis.call('EXISTS', B) == 0 and redis.call('EXISTS', F) == 1 then
  -- A known bucket (its hash was learned) whose record is gone while its
  -- in-flight set lives, which it never does past the record: the record
  -- was evicted, maybe with the window full. Unknown is full: for one
  -- window from now (the longest the set or the caller knows; 1 s if
  -- neither does), and then one request until an answer tells the limit
  -- (unless the caller knows it).
  local w = lWin
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', F, '+inf', '+inf')) do
    local v = tonumber(string.sub(m, 3))
    if string.sub(m, 1, 2) == '~w' and v and v > w then w = v end
  end
  if w <= 0 then w = 1000 end
  limit, win, prov, start = math.max(lLimit, 1), w, 0, now
  used, reset = limit, now + w + margin
  redis.call('HSET', B, 'l', limit, 'u', used, 'r', reset, 'w', win, 'v', prov, 's', start)
  redis.call('PEXPIRE', B, reset - now + keep)
  lostNow = 1
end

if pause > now then
  return {0, pause - now, 'bucket', hash, 0, key}
end

local function waitAnswer()
  -- the wait ends with an answer: mark the bucket so the answer's report
  -- publishes a wake-up. A wake-up can be lost (the mark evicted, the
  -- subscriber reconnecting), so the caller asks again within a second at
  -- the latest (sooner if the earliest lease expires sooner).
  redis.call('HSET', B, 'n', 1)
  redis.call('PEXPIRE', B, math.max(reset - now, ttl) + keep)
  local first = redis.call('ZRANGE', F, 0, 0, 'WITHSCORES')
  local w = 1000
  if first[2] and string.sub(first[1], 1, 1) ~= '~' then w = math.max(1, math.min(w, tonumber(first[2]) - now)) end
  return {0, w, 'bucket', hash, 1, key}
end

if limit == 0 and lLimit > 0 then
  -- The store has no record of a bucket the caller knows: seed it.
  limit, win = lLimit, lWin
  local should = lReset > 0 or (endedAgo > 0 and endedAgo < keep - 10000) or (lostAt > 0 and now < lostAt + math.max(lWin, 50) + margin)
  if should or evicting then
    -- The record should be here (a window the caller knows is under way
    -- or ended less than its keep ago, or the state was lost within a
    -- window): it was evicted or wiped. Or Redis evicts, and the others
    -- may have used the bucket since the caller did. What the other
    -- processes counted in it is unknown, and unknown is full: for one
    -- window from now.
    reset, used, prov, start = now + math.max(lWin, 50) + margin, lLimit, 0, now
    if should then
      lostNow = 1
    end
  elseif lReset > 0 then
    reset, used, prov, start = now + lReset, math.max(inflight, lLimit - lRem), 0, now
  end
  if string.sub(key, 1, 7) == 'bucket ' then
    redis.call('SADD', P .. ':k:' .. major, key)
    redis.call('PEXPIRE', P .. ':k:' .. major, math.max(reset - now, ttl) + keep)
  end
end

-- A template no process has seen answered: its pioneer may land in any
-- bucket of the major parameters, so it goes alone (one per major across
-- processes) and, while it is in flight, every known bucket of the major
-- keeps a slot for it.
local M = P .. ':m:' .. major
redis.call('ZREMRANGEBYSCORE', M, '-inf', now)
local holds = redis.call('ZCARD', M)
local pioneer = 0
-- the turns of the processes on the bucket (fairLua), when they take them
local proc, fair, fairQ = string.match(lease, '^[^:]*'), nil, nil
if limit == 0 then
  if hash == '' and holds > 0 then
    return waitAnswer()
  end
  -- One pioneer per bucket, also while another one, reserved before its
  -- hash was known, is in flight under the route's key.
  local routeInflight = 0
  if RF ~= F then
    redis.call('ZREMRANGEBYSCORE', RF, '-inf', now)
    routeInflight = redis.call('ZCOUNT', RF, '-inf', '(+inf')
  end
  if inflight + routeInflight > 0 then
    return waitAnswer()
  end
  local rfe = tonumber(r[9]) or 0
  if RF ~= F then
    rfe = math.max(rfe, tonumber(redis.call('HGET', P .. ':b:' .. ARGV[2], 'fe') or '0'))
  end
  if rfe > now and redis.call('EXISTS', F) + redis.call('EXISTS', RF) == 0 then
    -- A pioneer's in-flight set is gone before its expiry (evicted): one
    -- may be in flight still. Ask again, until its answer or its expiry.
    lostNow = 1
    return waitAnswer()
  end
  if evicting then
    -- Redis evicts, and holds nothing of this bucket: it may be new, or
    -- evicted whole (its record and in-flight set in one batch) with its
    -- window full. Unknown is full: for one window (the caller's, else
    -- the longest the route's buckets told, else 1 s) before the pioneer.
    local h = tonumber(r[10]) or 0
    if h == 0 then
      local w = lWin
      if w <= 0 then
        w = tonumber(redis.call('HGET', P .. ':w', tpl) or '0') or 0
      end
      if w <= 0 then
        w = 1000
      end
      h = now + w + margin
      redis.call('HSET', B, 'h', h)
      redis.call('PEXPIRE', B, h - now + keep)
    end
    if h > now then
      return {0, h - now, 'bucket', hash, 0, key}
    end
  end
  if hash == '' then
    -- It may land in any known bucket of the major: each must have a slot
    -- free (its hold keeps that slot while it is in flight), and none may
    -- be paused by a 429.
    local K = P .. ':k:' .. major
    for _, kb in ipairs(redis.call('SMEMBERS', K)) do
      local s = redis.call('HMGET', P .. ':b:' .. kb, 'l', 'u', 'r', 'p')
      local kl, ku, kr, kp = tonumber(s[1]) or 0, tonumber(s[2]) or 0, tonumber(s[3]) or 0, tonumber(s[4]) or 0
      if kl == 0 and kp <= now then
        redis.call('SREM', K, kb) -- expired
      elseif kp > now then
        return {0, kp - now, 'bucket', hash, 0, key}
      elseif now < kr and ku >= kl then
        return {0, math.max(1, kr - now), 'bucket', hash, 0, key}
      end
    end
  end
  pioneer = 1
else
  if now >= reset then
    if prov == 1 and inflight > 0 then
      -- The last window's end was a guess no answer confirmed: it may be
      -- too short. Wait for an answer rather than refill twice.
      return waitAnswer()
    end
    -- A new window; requests still in flight may be counted in it. Its
    -- end is a guess until an answer tells it (reportLua's floor and
    -- earliest end are the last window's).
    used, reset, prov, start = inflight, now + math.max(win, 50) + margin, 1, now
    redis.call('HDEL', B, 'fl', 'lo')
  end
  if serial and inflight > 0 then
    -- A limit no header shows (a hidden sublimit, or one met already):
    -- one request at a time across every process.
    return waitAnswer()
  end
  local cap = capacityOf(limit, math.max(win, 50) + margin)
  local function keepWindow()
    redis.call('HSET', B, 'l', limit, 'u', used, 'r', reset, 'w', win, 'v', prov, 's', start)
    redis.call('PEXPIRE', B, reset - now + keep)
  end
  local Q = P .. ':q:' .. key
  if used + holds >= cap then
    keepWindow()
    if used < cap then
      return waitAnswer() -- the slot held for the major's pioneer
    end
    -- Full: the process waits its turn (fairLua) in the next window.
    local e = fairRead(Q, now)
    local m = fairMine(e, proc, now)
    m[3], m[4] = math.max(m[3], reset), true
    fairWrite(Q, e, now)
    return {0, math.max(1, reset - now), 'bucket', hash, 0, key}
  end
  if redis.call('EXISTS', Q) == 1 then
    -- Processes wait on this bucket: slots go by turns.
    fair = fairRead(Q, now)
    local m = fairMine(fair, proc, now)
    local ahead, w = fairAhead(fair, proc, now)
    if ahead >= cap - used - holds then
      keepWindow()
      m[3], m[4] = math.max(m[3], now + w), true
      fairWrite(Q, fair, now)
      return {0, w, 'bucket', hash, 0, key}
    end
    fairQ = Q
  end
  used = used + 1
end

-- The declared groups: the request goes inside the window it reserved in
-- each (reserved now if it has none, or again if that window is over),
-- with a slot of each guard free.
local gid, ng = ARGV[19] or '', tonumber(ARGV[20] or '0')
local groups = {}
local gclassArg = tonumber(ARGV[26]) or 0
for j = 0, ng - 1 do
  local D = gkey(P, ARGV[28 + 3 * j])
  local gn, gper = tonumber(ARGV[29 + 3 * j]), tonumber(ARGV[30 + 3 * j])
  local g, gw = gready(D, gn, gper, ttl, gid, now, gclassArg)
  groups[#groups + 1] = g
  if gw > 0 then
    -- every group reserved in so far keeps its keys (a reservation made
    -- here would otherwise be in keys that never expire)
    for _, g in ipairs(groups) do gkeep(g[1], g[4], now, ttl) end
    return {0, gw, 'declared', hash, 0, key}
  end
end

-- (the member '~', at +inf, keeps the set until it expires: gone before,
-- it was evicted; the bucket's 'fe' says until when it must exist)
redis.call('ZADD', F, now + ttl, lease, '+inf', '~')
if limit > 0 and win > 0 then
  -- the bucket's window, kept with the set: if the record is evicted, the
  -- set tells how long to hold the bucket full
  redis.call('ZADD', F, '+inf', '~w' .. win)
end
redis.call('PEXPIRE', F, ttl)
if pioneer == 1 and hash == '' then
  redis.call('ZADD', M, now + ttl, lease)
  redis.call('PEXPIRE', M, ttl)
end
if limit > 0 then
  redis.call('HSET', B, 'l', limit, 'u', used, 'r', reset, 'w', win, 'v', prov, 's', start, 'fe', now + ttl)
else
  redis.call('HSET', B, 'fe', now + ttl) -- a pioneer's: its set must be there while it is in flight
end
redis.call('PEXPIRE', B, math.max(reset - now, ttl) + keep)
if wantG then
  redis.call('ZADD', G, now + ttl + gPer, lease, '+inf', '~')
  redis.call('PEXPIRE', G, ttl + gPer)
  logLives(P, now + ttl + gPer)
end
if fairQ then
  local m = fair[proc]
  m[1], m[2], m[3], m[4] = m[1] + 1, now, now, false
  fairWrite(fairQ, fair, now)
end
for _, g in ipairs(groups) do gtake(g, gid, lease, now, ttl) end
return {1, 0, '', hash, pioneer, key}
end

local res = body()
res[7], res[8] = gen, lostNow
return res
`

// clockSlack (ms) is added to every end a report sets from an answer: the
// global slot's (one period after it) and the bucket window's. Redis's
// clock, read to the ms and rounded down, runs on the wall clock, and the
// API times its windows on its own: without it a window could end in Redis
// a fraction of a ms before it ends where requests are counted, and, with
// the processes at the limit, the first request of the next went in one
// too early (a global 429 in about one run in ten of 2,000 requests at
// 200/s, 2026-11-27; 200 arrivals within 999.97 ms were seen).
var slackLua = "local clockSlack = " + strconv.FormatInt(clockSlack.Milliseconds(), 10) + "\n"

// clockSlack: see slackLua.
const clockSlack = 2 * time.Millisecond

// reportLua corrects the shared state from an answer and releases the
// reservation.
//
// ARGV: 1 lease, 2 bucket key (from the reservation), 3 the outcome's
// charge (0 none: a request never sent, or refused by a global 429 or a
// ban, is not counted; 1 unknown; 2 arrived: the server cannot count it
// any more, see ratelimit.ChargeArrived), 4 HTTP
// status (0: none), 5 full rate-limit headers (0/1), 6 limit, 7 remaining,
// 8 the answer's window end in ms from now (the caller's estimate, any
// margin included; the 429 pause comes from 13), 9 X-RateLimit-Bucket ("" if none), 10 template, 11
// major, 12 the outcome's pause (ratelimit.Pause: none, bucket, serial,
// global, ban, auth), 13 its wait
// ms, 14 counts as invalid (0/1), 15 held a global slot (0/1), 16 global
// period ms, 17 round trip ms, 18 how long a bucket is kept after its
// window ms, 19 invalid-request window in minutes, 20 lease ttl ms (as
// reserved: a lease's score less it is its reservation time), 21
// X-RateLimit-Reset in Unix ms (0: none), which tells windows
// apart, 22 the request's id in its declared groups, 23 the number of
// groups, 24 1 to give back a reservation that may or may not have run
// (its call failed or timed out), 25 then the request's route key, 26 1
// if the reservation was its bucket's pioneer, 27 the bucket's window as
// the caller knew it ms (0: unknown), then per group: key, count, window
// ms.
//
// Giving a reservation back is a report of a request never sent, whose
// bucket key is found as the reservation found it (by the template's
// learned hash, else the route key), and which leaves the tombstone
// P:x:<lease> (for a lease TTL): a reservation with that lease still
// queued in Redis takes nothing when it runs.
//
// Returns {the number of processes woken, 1 if the bucket has more room
// for a reservation now than before (a slot given back, a newer window,
// an earlier end), else 0}.
var reportLua = groupLua + slackLua + `
local P = KEYS[1]
local lease, key = ARGV[1], ARGV[2]
local counted, arrived, status, full = ARGV[3] ~= '0', ARGV[3] == '2', tonumber(ARGV[4]), ARGV[5] == '1'
local L, rem, ra = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local hash, tpl, major = ARGV[9], ARGV[10], ARGV[11]
local pauseKind, wait, invalid, global = ARGV[12], tonumber(ARGV[13]), ARGV[14] == '1', ARGV[15] == '1'
local gPer, rtt, keep, invMin = tonumber(ARGV[16]), tonumber(ARGV[17]), tonumber(ARGV[18]), tonumber(ARGV[19])
local ttl, dr = tonumber(ARGV[20]), tonumber(ARGV[21])
local now = clockNow()
local woken = 0
if ARGV[24] == '1' then
  redis.call('SET', P .. ':x:' .. lease, 1, 'PX', ttl)
  local learned = redis.call('HGET', P .. ':a', tpl)
  if learned and learned ~= '' then
    -- reserved under the bucket's key; a pioneer, under its route's
    redis.call('ZREM', P .. ':f:' .. ARGV[25], lease)
    key = 'bucket ' .. learned .. ' ' .. major
  end
end
local function wake(b)
  if redis.call('HGET', b, 'n') then
    redis.call('HDEL', b, 'n')
    woken = woken + redis.call('PUBLISH', P .. ':wake', 'w|' .. major)
  end
end

local B, F = P .. ':b:' .. key, P .. ':f:' .. key
-- when the request was reserved (its lease expires ttl after): 0 if the
-- lease expired already
local reservedAt = 0
local score = redis.call('ZSCORE', F, lease)
if score then
  reservedAt = tonumber(score) - ttl
end
local removed = redis.call('ZREM', F, lease)
if removed == 1 and not redis.call('HGET', B, 'l') then
  -- a pioneer answered (or never sent): its set need not be there any
  -- more, and once nothing is in flight it must not be (a set without its
  -- record means the record was evicted: see reserveLua)
  redis.call('HDEL', B, 'fe')
  if redis.call('ZCOUNT', F, '-inf', '(+inf') == 0 then
    redis.call('DEL', F)
  end
end
if redis.call('ZREM', P .. ':m:' .. major, lease) == 1 then
  -- The major's first pioneer is answered: its actors may go on.
  woken = woken + redis.call('PUBLISH', P .. ':wake', 'w|' .. major)
end
if global then
  if counted then
    -- Counted for a period from its answer. A log that lost it while it
    -- was in flight (wiped, or evicted and found so: the marker's "g" is
    -- past) gets it back, so the window held full after a loss ends with
    -- the requests that arrived during it still counted.
    local G = P .. ':g'
    if redis.call('EXISTS', G) == 1 or tonumber(redis.call('HGET', P .. ':gen', 'g') or '0') <= now then
      redis.call('ZADD', G, now + gPer + clockSlack, lease)
      if redis.call('PTTL', G) < gPer then
        redis.call('PEXPIRE', G, gPer) -- (made again here: it lives as long as its last)
      end
    end
  else
    redis.call('ZREM', P .. ':g', lease)
  end
end

-- The declared groups: a counted request holds its guard slot one window
-- after its answer, and its reservation ends; one not counted (never sent,
-- or refused by a global 429 or a ban) gives the slot back and keeps its
-- place.
local gid, ng = ARGV[22] or '', tonumber(ARGV[23] or '0')
for j = 0, ng - 1 do
  local D = gkey(P, ARGV[28 + 3 * j])
  local gn, gper = tonumber(ARGV[29 + 3 * j]), tonumber(ARGV[30 + 3 * j])
  ganswer(D, gper, ttl, gid, lease, now, counted, rtt)
  if counted and pauseKind == 'serial' then
    gblock(D, gn, gper, now + wait)
  end
  gkeep(D, gper, now, ttl)
end

if invalid then
  local k = P .. ':i:' .. math.floor(now / 60000)
  redis.call('INCR', k)
  redis.call('PEXPIRE', k, (invMin + 1) * 60000)
end
if pauseKind == 'global' then
  local blockEnd = now + wait
  if blockEnd > tonumber(redis.call('HGET', P .. ':gen', 'b') or '0') then
    -- (in the marker: lost with it, and a lost marker holds the window)
    redis.call('HSET', P .. ':gen', 'b', blockEnd)
    redis.call('PEXPIRE', P .. ':gen', 6 * keep)
    redis.call('PUBLISH', P .. ':wake', 'g|' .. wait)
  end
end

if not counted then
  -- Never on the wire, or refused before any bucket counted it (a
  -- global 429, a ban): give the slot back within its window.
  local opened = 0
  if removed == 1 then
    local r = redis.call('HMGET', B, 'l', 'u', 'r')
    local limit, used, reset = tonumber(r[1]) or 0, tonumber(r[2]) or 0, tonumber(r[3]) or 0
    if limit > 0 and now < reset and used > 0 then
      redis.call('HSET', B, 'u', used - 1)
      opened = 1
    end
  end
  wake(B)
  return {woken, opened}
end

local target = key
if hash ~= '' then
  if tpl ~= '' then
    redis.call('HSET', P .. ':a', tpl, hash)
    redis.call('PEXPIRE', P .. ':a', 86400000)
  end
  local real = 'bucket ' .. hash .. ' ' .. major
  if real ~= key then
    -- Reserved under its route's key (a pioneer): what it taught belongs
    -- to the real bucket; who waits on the route key resolves the alias.
    wake(B)
    target = real
  end
end

local TB, TF = P .. ':b:' .. target, P .. ':f:' .. target
redis.call('ZREMRANGEBYSCORE', TF, '-inf', now)
local inflight = redis.call('ZCOUNT', TF, '-inf', '(+inf')
local r = redis.call('HMGET', TB, 'l', 'u', 'r', 'p', 'w', 'v', 's', 'x', 'fl', 'lo')
local limit, used, reset = tonumber(r[1]) or 0, tonumber(r[2]) or 0, tonumber(r[3]) or 0
local pause, win, prov = tonumber(r[4]) or 0, tonumber(r[5]) or 0, tonumber(r[6]) or 0
local start, x = tonumber(r[7]) or 0, tonumber(r[8]) or 0
local floor, lo = tonumber(r[9]) or 0, tonumber(r[10]) or 0
-- the room the bucket had for a reservation now: more after the answer
-- lifts what the process remembered of a refusal (coalesce.go)
local function room(l, u, e)
  if l == 0 or now >= e then return 1e9 end
  return l - u
end
local roomBefore, resetBefore = room(limit, used, reset), reset
-- A pioneer reserved under its route's key was not counted here.
local extra = 0
if target ~= key then
  extra = 1
end

-- The window rules are ratelimit.Bucket's (Observe), table by table the
-- same (internal/conformance.Windows): reset is the window's end, never
-- below floor (the later ends told by answers that may be of another
-- window, since it began); lo is the earliest the server may end it (an
-- answer's end less its round trip), 0 while no answer told it.
local function adopt(e)
  -- an answer of the current window tells its end
  reset, lo = math.max(e, floor), math.max(0, e - rtt - clockSlack)
end
local function push(e)
  floor = math.max(floor, e)
  reset = math.max(reset, e)
end
local function startWindow(e)
  floor = 0
  adopt(e)
end
if full then
  local e = now + ra + clockSlack
  -- Which window counted the request: by X-RateLimit-Reset when both
  -- the answer and the window have one (a report delayed on its way must
  -- not undo the count), else by timing, as ratelimit.Bucket does: an
  -- end later than the window's by more than the answer's round trip
  -- plus 50 ms.
  local same = dr > 0 and x > 0 and math.abs(dr - x) <= 5
  local newer = (dr > 0 and x > 0 and dr > x + 5) or ((dr == 0 or x == 0) and e > reset + rtt + 50)
  local older = dr > 0 and x > 0 and dr < x - 5
  if limit == 0 and ARGV[26] ~= '1' and target == key then
    -- Not a pioneer, yet no record: it was evicted since the reservation.
    -- Which window this answer was counted in, and what the others sent
    -- in the current one, is unknown: full for a window from now.
    limit, used, prov, start, x = L, L, 0, now, dr
    floor, lo = 0, 0
    reset = math.max(e, now + math.max(tonumber(ARGV[27]) or 0, ra, 50))
  elseif limit == 0 then
    -- The pioneer's answer: the bucket becomes known, and its window is
    -- the route's as far as a bucket Redis holds nothing of goes (P:w).
    limit, used, prov, start, x = L, math.max(L - rem, inflight + 1), 0, reservedAt, dr
    startWindow(e)
    if tpl ~= '' and status ~= 429 and ra > (tonumber(redis.call('HGET', P .. ':w', tpl) or '0') or 0) then
      redis.call('HSET', P .. ':w', tpl, ra)
      redis.call('PEXPIRE', P .. ':w', 86400000)
    end
  elseif reservedAt < start then
    -- Reserved before the current window began: it may have been
    -- counted in an older window or in this one; it can only make this
    -- one end later.
    push(e)
  elseif prov == 1 then
    -- The first answer of a window opened on a guess confirms its end,
    -- and tells its limit.
    limit, used, prov, x = L, math.max(used + extra, L - rem), 0, dr
    adopt(e)
  elseif newer then
    -- A newer window than the one counted here: its requests are left
    -- but for the ones in flight, which may count in it.
    limit, used, start, x = L, math.max(L - rem, inflight + 1), reservedAt, dr
    startWindow(e)
  elseif older then
    -- An older window's answer: nothing to learn for this one.
  else
    -- The current window: what remains can only drop, and its end moves
    -- earlier only by an answer of the same X-RateLimit-Reset.
    limit, used = math.min(limit, L), math.max(used + extra, L - rem)
    if same then
      if e < reset then
        adopt(e)
      end
    else
      push(e)
      if x == 0 then
        x = dr
      end
    end
  end
  if status ~= 429 and ra > win then
    win = ra
  end
elseif limit > 0 and not (arrived and prov == 0 and lo > now + rtt + 50) then
  -- No headers (a lost answer, a 5xx): it was probably counted, in a
  -- window that ends within a period from now. (Unless the server cannot
  -- count it any more, and the current window's earliest end is more than
  -- a round trip away: then it counted it in this window, if at all.)
  push(now + math.max(win, 50) + 50)
end
if pauseKind == 'bucket' or pauseKind == 'serial' then
  pause = math.max(pause, now + wait)
end
if pauseKind == 'serial' then
  -- A limit no header shows: every process goes one at a time here now.
  redis.call('HSET', TB, 'z', 1)
end
if limit > 0 or pause > now then
  redis.call('HSET', TB, 'l', limit, 'u', used, 'r', reset, 'p', pause, 'w', win, 'v', prov, 's', start, 'x', x,
    'fl', floor, 'lo', lo)
  redis.call('PEXPIRE', TB, math.max(reset, pause, now) - now + keep)
  if string.sub(target, 1, 7) == 'bucket ' then
    -- A known bucket of the major: a new template's pioneer may land in it.
    local K = P .. ':k:' .. major
    redis.call('SADD', K, target)
    redis.call('PEXPIRE', K, math.max(reset, pause, now) - now + keep)
  end
end
wake(TB)
local opened = 0
if room(limit, used, reset) > roomBefore or reset < resetBefore then
  opened = 1
end
return {woken, opened}
`

// heartbeatLua records a live process and returns how many share the
// token (the most seen alive at once within the last ARGV[3] ms), Redis's
// clock (Unix ms), the generation and whether this call found state lost.
// A process whose grants counted only on its fallback share may still
// count at Discord (ARGV[5] = 2) goes into P:ex, dated ARGV[6] ms from now:
// the others keep its share out of their global window until a period
// after that date, and out of a bucket until a window after it (lossLua);
// with 0, none may any more and it leaves P:ex.
// With ARGV[5] = 1 the process leaves: its records are removed (Close),
// but for its P:ex entry when ARGV[6] is not empty.
//
// It also returns the processes P:seen records (at most maxPeers, the
// latest first: id, last heartbeat), which the caller keeps to write back
// after a loss: with ARGV[8] = k > 0, the k pairs from ARGV[9] (id, last
// heartbeat, Redis ms) that the caller saw before the state was lost go
// back into P:seen where missing, and P:gen's "r" records when (lossLua:
// who was silent is known again).
//
// ARGV: 1 process id, 2 how long the record lives ms, 3 how long the
// largest count (and a silent process) is remembered ms, 4 the generation
// the caller knows, 5 0, or 1 leaving, or 2 on its fallback share, 6 with
// 2 (or 1), how long from now the P:ex entry is dated, ms ("": none), 7
// Redis evicts keys lately (0/1, see evicting.go), 8 how many processes
// are written back, then their pairs.
var heartbeatLua = lossLua + `
local P = KEYS[1]
local now = clockNow()
local id, keep = ARGV[1], tonumber(ARGV[3])
local k, S, X = P .. ':procs', P .. ':seen', P .. ':ex'
local ahead = tonumber(ARGV[6] or '')
if ARGV[5] == '1' then
  redis.call('ZREM', k, id)
  redis.call('ZREM', S, id)
  if ahead then
    redis.call('ZADD', X, now + ahead, id)
    redis.call('PEXPIRE', X, keep)
  else
    redis.call('ZREM', X, id)
  end
  return {0, now, '', 0}
end
local gen, lostAt, lostNow = generation(P, ARGV[4], now, keep, 'hb:' .. id .. ':' .. now, ARGV[7] == '1')
local back = math.min(tonumber(ARGV[8] or '0') or 0, ` + strconv.Itoa(maxPeers) + `)
if back > 0 and lostAt > 0 then
  for j = 0, back - 1 do
    local pid, last = ARGV[9 + 2 * j], tonumber(ARGV[10 + 2 * j])
    if pid and pid ~= id and last and last > now - keep and last <= now then
      redis.call('ZADD', S, 'NX', last, pid)
    end
  end
  redis.call('HSET', P .. ':gen', 'r', now)
end
if ARGV[5] == '2' then
  redis.call('ZADD', X, now + (ahead or 0), id)
  redis.call('PEXPIRE', X, keep)
else
  redis.call('ZREM', X, id)
end
redis.call('ZADD', S, now, id)
redis.call('PEXPIRE', S, keep)
redis.call('ZREMRANGEBYSCORE', S, '-inf', now - keep)
redis.call('ZREMRANGEBYSCORE', X, '-inf', now - keep)
redis.call('ZREMRANGEBYSCORE', k, '-inf', now)
redis.call('ZADD', k, now + tonumber(ARGV[2]), id)
redis.call('PEXPIRE', k, tonumber(ARGV[2]))
-- the most processes seen at once recently: a process that has just
-- started, or that beat before the others, still counts them all
local n = redis.call('ZCARD', k)
local mk = P .. ':pmax'
local m = tonumber(redis.call('GET', mk) or '0')
if n >= m then
  redis.call('SET', mk, n, 'PX', keep)
  m = n
end
-- a silent process still counts (its share may be in use), whatever
-- became of the count's key
return {math.max(m, redis.call('ZCARD', S)), now, gen, lostNow, redis.call('ZREVRANGE', S, 0, ` + strconv.Itoa(maxPeers) + ` - 1, 'WITHSCORES')}
`

// maxPeers bounds the processes a heartbeat returns and writes back after
// a loss (heartbeatLua), and maxPeerID a process id read back (a store's
// own is 16 hex digits): what Redis returns is not trusted to be either.
const (
	maxPeers  = 256
	maxPeerID = 64
)

// lossLua is what every script that reads shared state starts with: how
// lost state is told from state never written, and the capacity left when
// some processes may count on their fallback share.
//
// P:gen (a hash, kept while any process beats, see DefaultKeep) names the
// generation of the state: "id", made by the script that found no marker; "b", the global window
// is blocked until (a global 429, Redis ms);
// "l", when state was last found lost (Redis ms); "g", until when the
// global log P:g must exist, as last written (its member "~", at +inf,
// keeps it from vanishing when its last lease is swept: only its expiry,
// which "g" tells, or a loss removes it); "r", when processes last wrote
// back P:seen after a loss (heartbeatLua). A caller passes the
// generation it knows: when the marker is gone or names another one, the
// state was wiped (FLUSHALL, a restart without persistence, a failover to
// an empty replica) or evicted; so is a global log missing before "g".
// Either marks the loss ("l"): the global window counts as full for a
// period, and a bucket a caller knows but Redis no longer has counts as
// full for one window. A marker missing for a caller that knew none is a
// new namespace, unless Redis evicts (evicting): then it may have been
// evicted with the global log, and counts as lost.
//
// P:seen (zset: process -> its last heartbeat, Redis ms) and P:ex (zset:
// process -> when it was heard from again after a silence) tell which
// processes may be counting on their fallback share now, or did within a
// window: unheard for longer than the silence allowed, or back within it.
// Their shares are kept out of what Redis hands to the others, so a
// process cut off from Redis and the processes still on it never add up
// to more than a limit. Who was silent is itself state Redis can lose.
// The processes write back the P:seen records they last read (each its
// own list, with the last heartbeats: see heartbeatLua), and the silent
// ones are kept out again. Until one has (P:gen's "r" before the loss,
// within the keep of P:seen), or while Redis evicts and P:seen is gone,
// every process counted (the most the caller has seen, or P:pmax) that
// has no record in P:seen, the caller but excepted, may be on its
// fallback share and is kept out too.
const lossLua = `
local function logLives(P, untilMs)
  redis.call('HSET', P .. ':gen', 'g', untilMs)
end
local function generation(P, known, now, keep, newID, evicting)
  local M = P .. ':gen'
  local r = redis.call('HMGET', M, 'id', 'l', 'g', 'b')
  local id, lost, glog, block = r[1], tonumber(r[2]) or 0, tonumber(r[3]) or 0, tonumber(r[4]) or 0
  local lostNow = 0
  if not id then
    id = newID
    if known ~= '' or evicting then
      lost, lostNow = now, 1
    end
    redis.call('HSET', M, 'id', id, 'l', lost)
  elseif known ~= '' and known ~= id and lost == 0 then
    -- made by a process that knew no generation: the loss is found now
    lost, lostNow = now, 1
    redis.call('HSET', M, 'l', lost)
  end
  if glog > now and redis.call('EXISTS', P .. ':g') == 0 then
    lost, lostNow = now, 1
    redis.call('HSET', M, 'l', lost, 'g', 0)
  end
  redis.call('PEXPIRE', M, 6 * keep)
  return id, lost, lostNow, block
end
local function capacity(P, limit, hold, now, stale, lostAt, keep, evicting, procs, caller)
  local S = P .. ':seen'
  local seen = redis.call('ZCARD', S)
  local n = math.max(tonumber(redis.call('GET', P .. ':pmax') or '0'), seen, procs, 1)
  local quiet = 0
  if seen > 0 then
    quiet = redis.call('ZCOUNT', S, '-inf', now - stale) + redis.call('ZCOUNT', P .. ':ex', now - hold, '+inf')
  end
  if (evicting and seen == 0) or (lostAt > 0 and now < lostAt + keep and tonumber(redis.call('HGET', P .. ':gen', 'r') or '0') < lostAt) then
    -- the processes counted with no record: unheard since it was lost
    local unheard = n - seen
    if caller ~= '' and not redis.call('ZSCORE', S, caller) then
      unheard = unheard - 1
    end
    quiet = quiet + math.max(0, unheard)
  end
  if quiet == 0 then
    return limit
  end
  return math.max(1, limit - quiet * math.max(1, math.floor(limit / n)))
end
`
