package leakybucket

import "github.com/redis/go-redis/v9"

// redisScript is the model (step) in Lua, for every bucket of one call at
// once. Times are integer microseconds since the Unix epoch: below 2^53, so
// Lua's doubles hold them, and their quotients floor exactly.
//
//	KEYS[i]  the bucket of limit i
//	ARGV[1]  "" to read the clock with TIME; otherwise the time (a test seam)
//	ARGV[2]  the least TTL of a key, ms (0 but for a test's fake clock)
//	ARGV[3]  the call's cost, n >= 0 (for "s", the level to set)
//	ARGV[4]  the mode: "c" check (drip, check, charge if every bucket
//	         admits), "p" peek (drip and describe; write nothing), "s" set
//	         (every bucket to level n from now; n = 0 deletes the keys)
//	ARGV[3i+2], ARGV[3i+3], ARGV[3i+4]  size, drip interval (µs), drip size of limit i
//
// It returns {now, admitted (0 or 1), level_1, anchor_1, ..., level_n,
// anchor_n}: each bucket's level and last drip after the check (after a
// peek, as found; after a set, as set, admitted 1). A key holds
// "level:anchor" and expires when its bucket has drained; only an admitted
// check and a set write. The key's value is written with %d: Lua's
// default format keeps 14 digits, too few for a time in microseconds (a
// TTL in ms, below MaxDrain's 3.2e10, is written exactly by the default
// format).
var redisScript = redis.NewScript(redisScriptSrc)

const redisScriptSrc = `
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local minttl = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local mode = ARGV[4]
local n = #KEYS
local levels, anchors = {}, {}
local admit = 1
if mode == 's' then
  for i = 1, n do
    local interval, drip = tonumber(ARGV[3*i+3]), tonumber(ARGV[3*i+4])
    levels[i], anchors[i] = cost, now
    if cost == 0 then
      redis.call('DEL', KEYS[i])
    else
      local ttl = math.ceil(math.ceil(cost / drip) * interval / 1000)
      if ttl < minttl then ttl = minttl end
      if ttl < 1 then ttl = 1 end
      redis.call('SET', KEYS[i], string.format('%d:%d', cost, now), 'PX', ttl)
    end
  end
  cost = 0
end
for i = 1, n do
  if mode == 's' then break end
  local size, interval, drip = tonumber(ARGV[3*i+2]), tonumber(ARGV[3*i+3]), tonumber(ARGV[3*i+4])
  local level, anchor = 0, now
  local v = redis.call('GET', KEYS[i])
  if v then
    local l, a = string.match(v, '^(%d+):(%-?%d+)$')
    if not l then
      return redis.error_reply('leakybucket: key ' .. KEYS[i] .. ' does not hold a bucket')
    end
    level, anchor = tonumber(l), tonumber(a)
    if level > 0 and now - anchor >= interval then
      local k = math.floor((now - anchor) / interval)
      if k >= math.ceil(level / drip) then
        level = 0
      else
        level = level - k * drip
        anchor = anchor + k * interval
      end
    end
  end
  if level <= 0 then
    level, anchor = 0, now
  end
  if level + cost > size then
    admit = 0
  end
  levels[i], anchors[i] = level, anchor
end
if mode == 'c' and admit == 1 and cost > 0 then
  for i = 1, n do
    local interval, drip = tonumber(ARGV[3*i+3]), tonumber(ARGV[3*i+4])
    levels[i] = levels[i] + cost
    local ttl = math.ceil((anchors[i] + math.ceil(levels[i] / drip) * interval - now) / 1000)
    if ttl < minttl then ttl = minttl end
    if ttl < 1 then ttl = 1 end
    redis.call('SET', KEYS[i], string.format('%d:%d', levels[i], anchors[i]), 'PX', ttl)
  end
end
local out = {now, admit}
for i = 1, n do
  out[2*i+1] = levels[i]
  out[2*i+2] = anchors[i]
end
return out
`
