package leakybucket

import (
	"errors"
	"strconv"
	"time"
)

// Sentinel errors. Test for them with errors.Is: the errors returned wrap
// them with details.
var (
	// ErrInvalidLimit is returned (wrapped in a *LimitError) when a Limit or
	// a Legacy limit cannot be used: a Size below 1, a negative drip rate or
	// size, a bucket that would take longer than MaxDrain to drain, a name
	// that cannot be sent in a header, or two limits of one check sharing a
	// name. It is a programming or configuration error, never "over the
	// limit": being over the limit is Result.Blocked, not an error.
	ErrInvalidLimit = errors.New("leakybucket: invalid limit")

	// ErrInvalidCost is returned (wrapped in a *CostError) for a call whose
	// cost is below 0 or above the Size of one of its limits: such a call
	// could never be admitted, so it is refused as an error rather than
	// blocked for ever. Nothing is charged.
	ErrInvalidCost = errors.New("leakybucket: invalid cost")

	// ErrInvalidLevel is returned by Set (Memory.Set, Memory.SetAt,
	// Redis.Set) for a level below 0 or above the Size of one of its
	// limits: a bucket never holds more than its Size. Nothing is set.
	ErrInvalidLevel = errors.New("leakybucket: invalid level")

	// ErrUnavailable is returned (wrapped in an *UnavailableError) when the
	// Redis store could not decide a check: Redis is unreachable, too slow
	// (RedisOptions.Timeout), or answered with an error. The results
	// returned with it are the decision of RedisOptions.OnUnavailable.
	ErrUnavailable = errors.New("leakybucket: store unavailable")
)

// LimitError describes an invalid limit. It wraps ErrInvalidLimit.
type LimitError struct {
	// Name is the limit's Name (possibly empty).
	Name string
	// Reason says what is wrong with it.
	Reason string
}

// Error returns "leakybucket: invalid limit <name>: <reason>".
func (e *LimitError) Error() string {
	return "leakybucket: invalid limit " + strconv.Quote(e.Name) + ": " + e.Reason
}

// Unwrap returns ErrInvalidLimit.
func (e *LimitError) Unwrap() error { return ErrInvalidLimit }

// CostError describes a cost no bucket of the call could ever admit (or a
// negative one). It wraps ErrInvalidCost.
type CostError struct {
	// Cost is the cost asked for.
	Cost int
	// Limit is the limit whose Size it exceeds.
	Limit Limit
}

// Error returns "leakybucket: invalid cost <n> for limit <name> of size <S>".
func (e *CostError) Error() string {
	return "leakybucket: invalid cost " + strconv.Itoa(e.Cost) + " for limit " + strconv.Quote(e.Limit.name()) + " of size " + strconv.Itoa(e.Limit.Size)
}

// Unwrap returns ErrInvalidCost.
func (e *CostError) Unwrap() error { return ErrInvalidCost }

// checkLevel returns an error wrapping ErrInvalidLevel unless 0 <= level
// <= the size of p (lim's params).
func checkLevel(lim Limit, p params, level int) error {
	if level < 0 || int64(level) > p.size {
		return &levelError{level: level, lim: lim}
	}
	return nil
}

// levelParams appends the params of limits to dst, as Set needs them:
// an error for an invalid limit, or a level one of them cannot hold.
func levelParams(dst []params, limits []Limit, level int) ([]params, error) {
	ps, err := appendParams(dst, limits)
	if err != nil {
		return ps, err
	}
	for i, p := range ps {
		if err := checkLevel(limits[i], p, level); err != nil {
			return ps, err
		}
	}
	return ps, nil
}

// levelError is a level no bucket of lim can hold. It wraps
// ErrInvalidLevel.
type levelError struct {
	level int
	lim   Limit
}

func (e *levelError) Error() string {
	return "leakybucket: invalid level " + strconv.Itoa(e.level) + " for limit " + strconv.Quote(e.lim.name()) + " of size " + strconv.Itoa(e.lim.Size)
}

func (e *levelError) Unwrap() error { return ErrInvalidLevel }

// adminError reports that Redis could not run a Peek, Reset or Set. It
// wraps ErrUnavailable and the cause; no policy decides these.
type adminError struct {
	op  string
	err error
}

func (e *adminError) Error() string {
	return "leakybucket: Redis." + e.op + ": store unavailable: " + e.err.Error()
}

func (e *adminError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// Policy is what the Redis store decides when Redis cannot: see
// RedisOptions.OnUnavailable.
type Policy int

const (
	// FailClosed blocks every check while Redis is unavailable: each
	// Result is Blocked with Remaining 0 and RetryAfter and ClearAfter set
	// to RedisOptions.RetryAfter. No client gets through unchecked; every
	// client is refused during an outage. It is the default.
	FailClosed Policy = iota
	// FailOpen admits every check while Redis is unavailable, as if each
	// bucket were empty: nothing is limited during an outage.
	FailOpen
	// FailLocal decides each check with a local in-memory store
	// (RedisOptions.Fallback) while Redis is unavailable, with each limit
	// shared out by RedisOptions.FallbackShare: each node limits on its own,
	// so N nodes admit up to N times one share.
	FailLocal
)

// String returns the policy's name: "FailClosed", "FailOpen" or "FailLocal".
func (p Policy) String() string {
	switch p {
	case FailClosed:
		return "FailClosed"
	case FailOpen:
		return "FailOpen"
	case FailLocal:
		return "FailLocal"
	}
	return "Policy(" + strconv.Itoa(int(p)) + ")"
}

// UnavailableError reports that Redis could not decide a check. It wraps
// ErrUnavailable and the cause. The results returned along with it are the
// decision Policy took instead; use them.
type UnavailableError struct {
	// Policy is the policy that decided the check.
	Policy Policy
	// Err is the cause: a network error, a timeout (context.DeadlineExceeded,
	// or a socket's timeout, a net.Error whose Timeout is true) or an error
	// reply from Redis.
	Err error
	// RetryAfter is, for FailClosed, how long clients are told to wait
	// (RedisOptions.RetryAfter); 0 for the other policies.
	RetryAfter time.Duration
}

// Error returns "leakybucket: store unavailable (<policy>): <cause>".
func (e *UnavailableError) Error() string {
	return "leakybucket: store unavailable (" + e.Policy.String() + "): " + e.Err.Error()
}

// Unwrap returns ErrUnavailable and the cause.
func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }
