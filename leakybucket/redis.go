package leakybucket

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults of RedisOptions.
const (
	// DefaultPrefix is the key prefix of a Redis store whose Prefix is "".
	DefaultPrefix = "leakybucket:"
	// DefaultTimeout bounds each check of a Redis store whose Timeout is 0.
	DefaultTimeout = 100 * time.Millisecond
	// DefaultUnavailableRetryAfter is the RetryAfter of the results of
	// FailClosed when RedisOptions.RetryAfter is 0.
	DefaultUnavailableRetryAfter = time.Second
)

// RedisOptions configures a Redis store. The zero value is valid: keys under
// "leakybucket:", 100 ms per check, and FailClosed with a 1 s RetryAfter.
type RedisOptions struct {
	// Prefix starts every key. "" means DefaultPrefix ("leakybucket:"). It
	// must not contain '{': the key's hash tag follows it.
	Prefix string
	// Timeout bounds each check: past it the check is decided by
	// OnUnavailable, even if the client is still waiting (for a new
	// connection's handshake, go-redis waits its ReadTimeout, not the
	// context's deadline). 0 means DefaultTimeout (100 ms); negative means
	// no bound but the context's, and whatever go-redis honours of it.
	Timeout time.Duration
	// OnUnavailable decides checks while Redis cannot: FailClosed (the
	// zero value), FailOpen or FailLocal.
	OnUnavailable Policy
	// RetryAfter is the RetryAfter (and ClearAfter) of the blocked results
	// of FailClosed. 0 or negative means DefaultUnavailableRetryAfter (1 s).
	RetryAfter time.Duration
	// Fallback is the local store of FailLocal. nil means a new Memory of
	// its own (a zero Memory, with time.Now as its clock).
	Fallback *Memory
	// FallbackShare divides each limit for the Fallback with Limit.Share:
	// set it to the number of nodes sharing the Redis so that during an
	// outage they admit together about what one Redis bucket would. 0 and 1
	// mean the full limit on each node.
	FallbackShare int
}

// Redis is a Store on Redis, shared by every process that uses the same
// Redis and Prefix. Each check is one EVALSHA of one Lua script (one round
// trip; the first check after Redis loses its script cache sends it again
// with EVAL), which reads Redis's clock (TIME), drips, checks and charges
// every bucket of the call atomically. Redis runs scripts one at a time, so
// checks from any number of nodes are serialized on one clock: together
// they admit exactly what one Bucket fed the same calls would, never more.
//
// Each bucket is one string key, "<Prefix>{<key>}:<limit name>", holding
// "<level>:<last drip, µs since the Unix epoch>", which expires (PX) when
// the bucket has drained: an idle key disappears exactly when it would
// hold nothing. A blocked check writes nothing. The hash tag {<key>} keeps
// all the limits of a key in one Redis Cluster slot (a key that is empty or
// starts with '}' has no tag, so Cluster refuses several limits for it).
//
// When Redis cannot decide a check (unreachable, slower than Timeout, or an
// error reply), CheckAll returns an *UnavailableError wrapping
// ErrUnavailable, together with the results of OnUnavailable: use them. A
// check cut by Timeout may still have been charged by Redis, which only
// makes a bucket stricter. A cancelled caller context returns the
// context's error and no results.
//
// A Redis is safe for concurrent use. It runs nothing in the background
// and holds no connection of its own (close the client to release them);
// each check's call to Redis runs on a goroutine that ends with that call
// (see RedisOptions.Timeout).
type Redis struct {
	client     redis.Scripter
	prefix     string
	timeout    time.Duration
	policy     Policy
	retryAfter time.Duration
	fallback   *Memory
	share      int

	// Test seams: now replaces Redis's TIME and minTTL raises every key's
	// TTL, so that a fake clock can drive the script without Redis's own
	// clock expiring keys under it.
	now    func() time.Time
	minTTL time.Duration
}

// NewRedis returns a Store on client: a *redis.Client, *redis.ClusterClient
// or *redis.Ring (Redis 5 or later, for TIME in scripts). It only fails for
// a Prefix containing '{' or an unknown Policy; it does not contact Redis.
func NewRedis(client redis.Scripter, opts RedisOptions) (*Redis, error) {
	if client == nil {
		return nil, errors.New("leakybucket: NewRedis: nil client")
	}
	if strings.ContainsRune(opts.Prefix, '{') {
		return nil, errors.New("leakybucket: NewRedis: Prefix " + strconv.Quote(opts.Prefix) + " contains '{'")
	}
	if opts.OnUnavailable < FailClosed || opts.OnUnavailable > FailLocal {
		return nil, errors.New("leakybucket: NewRedis: unknown policy " + opts.OnUnavailable.String())
	}
	r := &Redis{
		client:     client,
		prefix:     opts.Prefix,
		timeout:    opts.Timeout,
		policy:     opts.OnUnavailable,
		retryAfter: opts.RetryAfter,
		fallback:   opts.Fallback,
		share:      opts.FallbackShare,
	}
	if r.prefix == "" {
		r.prefix = DefaultPrefix
	}
	if r.timeout == 0 {
		r.timeout = DefaultTimeout
	}
	if r.retryAfter <= 0 {
		r.retryAfter = DefaultUnavailableRetryAfter
	}
	if r.policy == FailLocal && r.fallback == nil {
		r.fallback = new(Memory)
	}
	return r, nil
}

// Check checks one call of key against lim; see CheckAll.
func (r *Redis) Check(ctx context.Context, key string, lim Limit) (Result, error) {
	var buf [1]Result
	res, err := r.CheckAll(ctx, key, []Limit{lim}, buf[:0])
	if len(res) == 0 {
		return Result{}, err
	}
	return res[0], err
}

// CheckAll implements Store: one script run decides the call against every
// limit, on Redis's clock. See Redis for the errors.
func (r *Redis) CheckAll(ctx context.Context, key string, limits []Limit, dst []Result) ([]Result, error) {
	ps, err := appendParams(make([]params, 0, len(limits)), limits)
	if err != nil {
		return dst, err
	}
	keys := make([]string, len(limits))
	args := make([]any, 2, 2+3*len(limits))
	for i, lim := range limits {
		keys[i] = r.prefix + "{" + key + "}:" + lim.name()
		args = append(args, ps[i].size, ps[i].interval/1000, ps[i].drip)
	}
	args[0], args[1] = "", r.minTTL.Milliseconds()
	if r.now != nil {
		args[0] = r.now().UnixMicro()
	}
	if len(limits) == 0 {
		return dst, nil
	}

	reply, err := r.run(ctx, keys, args)
	if err == nil && len(reply) != 2+2*len(limits) {
		err = errors.New("leakybucket: script replied " + strconv.Itoa(len(reply)) + " integers, want " + strconv.Itoa(2+2*len(limits)))
	}
	if err != nil {
		if ctx.Err() != nil {
			return dst, ctx.Err()
		}
		return r.unavailable(ctx, key, limits, ps, dst, err)
	}

	nowUS, admitted := reply[0], reply[1] == 1
	now := time.UnixMicro(nowUS)
	for i, lim := range limits {
		level, anchorUS := reply[2+2*i], reply[3+2*i]
		var elapsed int64
		if level > 0 {
			elapsed = (nowUS - anchorUS) * 1000
		}
		dst = append(dst, result(lim, ps[i], now, level, elapsed, !admitted && level >= ps[i].size))
	}
	return dst, nil
}

// run runs the script, within r.timeout. go-redis does not bound every
// wait by the context (a new connection's handshake waits for the client's
// ReadTimeout, 5 s by default, whatever the deadline), so the call runs on
// a goroutine of its own and run stops waiting at the deadline: the
// goroutine ends when go-redis gives up, or when the client is closed.
func (r *Redis) run(ctx context.Context, keys []string, args []any) ([]int64, error) {
	if r.timeout < 0 {
		return redisScript.Run(ctx, r.client, keys, args...).Int64Slice()
	}
	rctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	type answer struct {
		reply []int64
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		reply, err := redisScript.Run(rctx, r.client, keys, args...).Int64Slice()
		done <- answer{reply, err}
	}()
	select {
	case a := <-done:
		return a.reply, a.err
	case <-rctx.Done():
		return nil, rctx.Err()
	}
}

// unavailable decides a check Redis could not, by the policy.
func (r *Redis) unavailable(ctx context.Context, key string, limits []Limit, ps []params, dst []Result, cause error) ([]Result, error) {
	uerr := &UnavailableError{Policy: r.policy, Err: cause}
	if r.policy == FailClosed {
		uerr.RetryAfter = r.retryAfter
	}
	switch r.policy {
	case FailLocal:
		shared := make([]Limit, len(limits))
		for i, lim := range limits {
			shared[i] = lim.Share(r.share)
			if shared[i].Validate() != nil {
				shared[i] = lim // a share too slow to express: the full limit
			}
		}
		out, err := r.fallback.CheckAll(ctx, key, shared, dst)
		if err != nil {
			return dst, err
		}
		return out, uerr
	case FailOpen:
		now := time.Now()
		for i, lim := range limits {
			level, elapsed, _ := step(ps[i], 0, 0, true)
			dst = append(dst, result(lim, ps[i], now, level, elapsed, false))
		}
		return dst, uerr
	}
	now := time.Now()
	for _, lim := range limits {
		dst = append(dst, Result{
			Limit: lim, At: now, Blocked: true, Level: lim.Size,
			RetryAfter: r.retryAfter, ClearAfter: r.retryAfter, NextDrip: r.retryAfter,
		})
	}
	return dst, uerr
}

// redisScript is the model (step) in Lua, for every bucket of one call at
// once. Times are integer microseconds since the Unix epoch: below 2^53, so
// Lua's doubles hold them, and their quotients floor exactly.
//
//	KEYS[i]  the bucket of limit i
//	ARGV[1]  "" to read the clock with TIME; otherwise the time (a test seam)
//	ARGV[2]  the least TTL of a key, ms (0 but for a test's fake clock)
//	ARGV[3i], ARGV[3i+1], ARGV[3i+2]  size, drip interval (µs), drip size of limit i
//
// It returns {now, admitted (0 or 1), level_1, anchor_1, ..., level_n,
// anchor_n}: each bucket's level and last drip after the check. A key holds
// "level:anchor" and expires when its bucket has drained; only an admitted
// call writes. Numbers are written with %d: Lua's default format keeps 14
// digits, too few for a time in microseconds.
var redisScript = redis.NewScript(`
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local minttl = tonumber(ARGV[2])
local n = #KEYS
local levels, anchors = {}, {}
local admit = 1
for i = 1, n do
  local size, interval, drip = tonumber(ARGV[3*i]), tonumber(ARGV[3*i+1]), tonumber(ARGV[3*i+2])
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
  if level >= size then
    admit = 0
  end
  levels[i], anchors[i] = level, anchor
end
if admit == 1 then
  for i = 1, n do
    local interval, drip = tonumber(ARGV[3*i+1]), tonumber(ARGV[3*i+2])
    levels[i] = levels[i] + 1
    local clear = anchors[i] + math.ceil(levels[i] / drip) * interval - now
    local ttl = math.max(math.ceil(clear / 1000), minttl, 1)
    redis.call('SET', KEYS[i], string.format('%d:%d', levels[i], anchors[i]), 'PX', string.format('%d', ttl))
  end
end
local out = {now, admit}
for i = 1, n do
  out[2*i+1] = levels[i]
  out[2*i+2] = anchors[i]
end
return out
`)
