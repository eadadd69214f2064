package leakybucket

import (
	"context"
	"time"
)

// Peek appends to dst one Result per limit describing key's bucket under
// it, on Redis's clock, as a check of cost 1 would find it, and charges
// nothing (see Memory.PeekAt for the fields): one script run that reads
// TIME and the buckets and writes nothing, so it is a read of every bucket
// of the call at one instant, between two checks of any node. It is
// bounded by RedisOptions.Timeout like a check. If Redis cannot answer, it
// returns an error wrapping ErrUnavailable and the cause, and no results:
// OnUnavailable decides checks, not looks. A cancelled context returns the
// context's error. An invalid limit never reaches Redis.
func (r *Redis) Peek(ctx context.Context, key string, limits []Limit, dst []Result) ([]Result, error) {
	var stack [maxStackLimits]params
	ps, err := appendParams(stack[:0], limits)
	if err != nil || len(limits) == 0 {
		return dst, err
	}
	reply, err := r.run(ctx, modePeek, key, 0, limits, ps)
	if err != nil {
		return dst, r.adminErr(ctx, "Peek", err)
	}
	return appendPeeks(dst, limits, ps, reply), nil
}

// Reset empties key's bucket under each of limits (only their names
// matter, but they must be valid): one script run deletes their keys, so
// every check of any node comes before it or finds all those buckets
// empty. Buckets of key under other names are untouched: pass every limit
// the key is checked with to lift all of them. It is bounded by
// RedisOptions.Timeout; the errors are Peek's. A Reset cut by the Timeout
// may still have run.
func (r *Redis) Reset(ctx context.Context, key string, limits []Limit) error {
	_, err := r.set(ctx, "Reset", key, 0, limits, nil)
	return err
}

// Set sets key's bucket under each of limits to hold level units from
// Redis's TIME on, whatever it held (see Memory.SetAt): one script run, so
// every check of any node comes before it or sees every bucket set. Each
// key then expires when its bucket will have drained (level 0 deletes it).
// It appends one Result per limit describing the bucket just after, as
// Peek would. A level below 0 or above a limit's Size is ErrInvalidLevel
// and never reaches Redis; the other errors are Peek's. A Set cut by the
// Timeout may still have run.
func (r *Redis) Set(ctx context.Context, key string, level int, limits []Limit, dst []Result) ([]Result, error) {
	return r.set(ctx, "Set", key, level, limits, dst)
}

func (r *Redis) set(ctx context.Context, op, key string, level int, limits []Limit, dst []Result) ([]Result, error) {
	var stack [maxStackLimits]params
	ps, err := levelParams(stack[:0], limits, level)
	if err != nil {
		return dst, err
	}
	if len(limits) == 0 {
		return dst, nil
	}
	reply, err := r.run(ctx, modeSet, key, level, limits, ps)
	if err != nil {
		return dst, r.adminErr(ctx, op, err)
	}
	return appendPeeks(dst, limits, ps, reply), nil
}

// adminErr is the error of a Peek, Reset or Set that failed with cause.
func (r *Redis) adminErr(ctx context.Context, op string, cause error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return &adminError{op: op, err: cause}
}

// appendPeeks appends the results of a peek or set script run.
func appendPeeks(dst []Result, limits []Limit, ps []params, reply []int64) []Result {
	nowUS := reply[0]
	at := time.UnixMicro(nowUS)
	for i, lim := range limits {
		level, anchorUS := reply[2+2*i], reply[3+2*i]
		dst = append(dst, peekResult(lim, ps[i], at, level, (nowUS-anchorUS)*1000))
	}
	return dst
}
