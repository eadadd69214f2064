package redisstore

import "github.com/redis/go-redis/v9"

// scriptSet is the store's scripts, each compiled with one clock: Redis's
// own (liveScripts), or, in this package's tests, a clock the test sets
// (a fake clock is the one part no real Redis can give).
type scriptSet struct {
	reserve, report, heartbeat           *redis.Script
	groupPlace, groupRelease, groupState *redis.Script
}

// redisClockLua defines clockNow, the scripts' only clock: Redis's TIME in
// Unix ms, rounded down.
const redisClockLua = `local function clockNow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// compileScripts returns the scripts with clock (a chunk that defines
// clockNow) in front of each.
func compileScripts(clock string) *scriptSet {
	return &scriptSet{
		reserve:      redis.NewScript(clock + reserveLua),
		report:       redis.NewScript(clock + reportLua),
		heartbeat:    redis.NewScript(clock + heartbeatLua),
		groupPlace:   redis.NewScript(clock + groupPlaceLua),
		groupRelease: redis.NewScript(clock + groupReleaseLua),
		groupState:   redis.NewScript(clock + groupStateLua),
	}
}

// liveScripts run on Redis's clock.
var liveScripts = compileScripts(redisClockLua)
