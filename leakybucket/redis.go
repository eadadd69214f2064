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
	// OnUnavailable. 0 means DefaultTimeout (100 ms); negative means no
	// bound but the context's, and whatever go-redis honours of it.
	//
	// It holds whatever Redis does (refuses connections, hangs, or goes
	// silent on connections already open) and whatever the client's own
	// ReadTimeout (5 s by default), without a goroutine or a timer of the
	// store's own per check: a *redis.Client is used through its
	// WithTimeout(Timeout) clone, which shares its connections and puts
	// Timeout on every socket read and write (a new connection's handshake
	// included), while a context deadline of Timeout bounds the waits for
	// a connection, a dial and a retry's backoff. A client with
	// ContextTimeoutEnabled already bounds its sockets by the context's
	// deadline and is used as it is, hooks and all: the clone runs none of
	// the client's hooks (go-redis's WithTimeout does not copy them), so
	// set ContextTimeoutEnabled on a client whose hooks (tracing, metrics)
	// must see the store's calls. A *redis.ClusterClient or *redis.Ring
	// without ContextTimeoutEnabled, or a Scripter of another kind, may
	// not bound a handshake's read by the context: each of its checks runs
	// on a goroutine of its own, and the check stops waiting at the
	// deadline.
	//
	// A connection whose read passed Timeout is closed by go-redis and
	// redialled by the next check that needs one, so under overload (answers
	// later than Timeout because Redis, or this process, is saturated)
	// checks are refused rather than slowed down: see docs/leaky-bucket.md,
	// "Under overload". A larger Timeout trades the failure time for
	// patience.
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
// and holds no connection of its own (close the client to release them).
// A check runs on its caller's goroutine (but see RedisOptions.Timeout
// for clients other than a *redis.Client).
type Redis struct {
	call       caller
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
	r.call = newCaller(client, r.timeout)
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
// limit, on Redis's clock. See Redis for the errors. It is CheckN with a
// cost of 1.
func (r *Redis) CheckAll(ctx context.Context, key string, limits []Limit, dst []Result) ([]Result, error) {
	return r.CheckN(ctx, key, 1, limits, dst)
}

// CheckN checks one call of cost n against every limit at once, in one
// script run on Redis's clock: admitted only if every bucket holds at most
// its Size - n, and only then charged n in each (see Memory.CheckNAt). A
// cost below 0 or above a limit's Size is ErrInvalidCost and never
// reaches Redis; the other errors are CheckAll's.
func (r *Redis) CheckN(ctx context.Context, key string, n int, limits []Limit, dst []Result) ([]Result, error) {
	var stack [maxStackLimits]params
	ps, err := appendParams(stack[:0], limits)
	if err != nil {
		return dst, err
	}
	for i, p := range ps {
		if err := checkCost(limits[i], p, n); err != nil {
			return dst, err
		}
	}
	if len(limits) == 0 {
		return dst, nil
	}
	reply, err := r.run(ctx, modeCheck, key, n, limits, ps)
	if err != nil {
		if ctx.Err() != nil {
			return dst, ctx.Err()
		}
		return r.unavailable(ctx, key, n, limits, ps, dst, err)
	}

	nowUS, admitted := reply[0], reply[1] == 1
	at := time.UnixMicro(nowUS)
	for i, lim := range limits {
		level, anchorUS := reply[2+2*i], reply[3+2*i]
		var elapsed int64
		if level > 0 {
			elapsed = (nowUS - anchorUS) * 1000
		}
		dst = append(dst, result(lim, ps[i], at, level, elapsed, int64(n), !admitted && level+int64(n) > ps[i].size))
	}
	return dst, nil
}

// The script's modes (ARGV[4]), boxed once: a string converted to an
// interface on each call would allocate.
var (
	modeCheck any = "c"
	modePeek  any = "p"
	modeSet   any = "s"
)

// run runs the script in mode (modeCheck, modePeek, modeSet) for key with
// cost (or level) n under limits, whose params are ps, and checks the
// length of its reply.
func (r *Redis) run(ctx context.Context, mode any, key string, n int, limits []Limit, ps []params) ([]int64, error) {
	sc := newScriptCall(redisScript, redisScriptSrc, len(limits), 4+4*len(limits))
	for _, lim := range limits {
		sc.args = append(sc.args, r.prefix+"{"+key+"}:"+lim.name())
	}
	now := ""
	if r.now != nil {
		now = strconv.FormatInt(r.now().UnixMicro(), 10)
	}
	sc.args = append(sc.args, now, r.minTTL.Milliseconds(), n, mode)
	for _, p := range ps {
		sc.args = append(sc.args, p.size, p.interval/1000, p.drip)
	}
	reply, err := r.call.run(ctx, sc)
	if err == nil && len(reply) != 2+2*len(limits) {
		err = errors.New("leakybucket: script replied " + strconv.Itoa(len(reply)) + " integers, want " + strconv.Itoa(2+2*len(limits)))
	}
	return reply, err
}

// unavailable decides a check Redis could not, by the policy.
func (r *Redis) unavailable(ctx context.Context, key string, n int, limits []Limit, ps []params, dst []Result, cause error) ([]Result, error) {
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
		out, err := r.fallback.CheckN(ctx, key, min(n, minSize(shared)), shared, dst)
		if err != nil {
			return dst, err
		}
		return out, uerr
	case FailOpen:
		now := time.Now()
		for i, lim := range limits {
			level, elapsed, _ := step(ps[i], 0, 0, int64(n), true)
			dst = append(dst, result(lim, ps[i], now, level, elapsed, int64(n), false))
		}
		return dst, uerr
	}
	now := time.Now()
	for _, lim := range limits {
		dst = append(dst, Result{
			Limit: lim, Cost: n, At: now, Blocked: true, Level: lim.Size,
			RetryAfter: r.retryAfter, ClearAfter: r.retryAfter, NextDrip: r.retryAfter,
		})
	}
	return dst, uerr
}

// minSize returns the least Size of limits.
func minSize(limits []Limit) int {
	m := MaxSize
	for _, lim := range limits {
		m = min(m, lim.Size)
	}
	return m
}
