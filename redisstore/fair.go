package redisstore

import (
	"strconv"
	"time"
)

// Turns across processes on one bucket.
//
// Without them a window's slots go to whichever process's reservations
// reach Redis first after it opens, and the process that wins once tends to
// win again (its own answers tell it the window's end first): four
// processes with 100 requests each on one bucket of 50 per 500 ms finished
// after 1.0, 2.5, 3.6 and 3.6 s in one run of the test load.
//
// The rule: once a process has been refused by a full bucket, the
// processes that use it take turns. Every process using the bucket while
// someone waits has an entry in P:q:<bucket> (a hash: process id ->
// "c|t|a|w"): c, the slots it took since it joined (a process that joins
// starts level with the one that took fewest); t, when it took its last
// (0: none yet); a, when it is due back (the end of the wait it was told);
// w, 1 while it waits (refused since its last slot). A process may take a
// slot only when more slots are free than the waiting processes are owed
// before its turn, round robin: fewest taken first, then the one whose
// last slot is oldest. So, while processes wait on one bucket, the slots
// each took since they began waiting differ by at most one; and a process
// that took a slot and asks no more (it has nothing left to send) is owed
// nothing.
//
// A process that is not back fairGrace after it was due (it has nothing
// more to send, it stalled, it fell back to its local share) leaves the
// line, and its turn goes to the others: a missing process holds a slot
// back at most fairGrace. A process refused only for its turn is told to
// come back when the ones ahead are due (at most fairPoll later, while one
// is overdue).
const (
	fairGrace = 250 * time.Millisecond
	fairPoll  = 50 * time.Millisecond
)

// fairLua has the functions of the turns, for reserveLua.
var fairLua = `
local fairGrace, fairPoll = ` + strconv.FormatInt(fairGrace.Milliseconds(), 10) + `, ` + strconv.FormatInt(fairPoll.Milliseconds(), 10) + `

-- fairRead returns the live entries of Q (process -> {c, t, a}), removing
-- the ones past their due time + grace.
local function fairRead(Q, now)
  local all = redis.call('HGETALL', Q)
  local e = {}
  for i = 1, #all, 2 do
    local c, t, a, w = string.match(all[i + 1], '^(%d+)|(%d+)|(%d+)|([01])$')
    c, t, a = tonumber(c), tonumber(t), tonumber(a)
    if c and a + fairGrace > now then
      e[all[i]] = {c, t, a, w == '1'}
    else
      redis.call('HDEL', Q, all[i])
    end
  end
  return e
end

-- fairMine returns proc's entry, a new one (level with the fewest) if it
-- has none.
local function fairMine(e, proc, now)
  local m = e[proc]
  if m then return m end
  local least
  for _, y in pairs(e) do
    if not least or y[1] < least then least = y[1] end
  end
  m = {least or 0, 0, now, false}
  e[proc] = m
  return m
end

-- fairAhead returns how many slots go to other processes waiting before
-- proc's next one, and how long to wait for them: until the latest of them
-- is due, or, when they are overdue, at most fairPoll (until the first of
-- them leaves the line).
local function fairAhead(e, proc, now)
  local m = e[proc]
  local ahead, due, gone = 0, 0, nil
  for p, y in pairs(e) do
    if p ~= proc and y[4] then
      local before = 0
      if y[2] < m[2] or (y[2] == m[2] and p < proc) then before = 1 end
      local n = m[1] + before - y[1]
      if n > 0 then
        ahead = ahead + n
        due = math.max(due, y[3])
        local g = y[3] + fairGrace
        if not gone or g < gone then gone = g end
      end
    end
  end
  if ahead == 0 then
    return 0, 1
  end
  local wait = due + 5 - now
  if wait <= 0 then
    wait = math.min(fairPoll, gone - now)
  end
  return ahead, math.max(1, wait)
end

-- fairWrite stores the entries of Q, which lives as long as the last.
local function fairWrite(Q, e, now)
  local args, last = {}, now
  for p, y in pairs(e) do
    args[#args + 1] = p
    local w = '0'
    if y[4] then w = '1' end
    args[#args + 1] = y[1] .. '|' .. y[2] .. '|' .. y[3] .. '|' .. w
    last = math.max(last, y[3])
  end
  if #args > 0 then
    redis.call('HSET', Q, unpack(args))
    redis.call('PEXPIRE', Q, last - now + fairGrace)
  end
end
`
