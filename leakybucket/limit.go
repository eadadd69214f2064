package leakybucket

import (
	"math"
	"strconv"
	"time"
)

// Bounds and defaults of a Limit.
const (
	// DefaultDripRate is the drip interval of a Limit whose DripRate is 0:
	// one second, as in the seed (SkRateLimiterService's dripRate defaults
	// to 1000 ms).
	DefaultDripRate = time.Second

	// DefaultName is the name of a Limit whose Name is empty.
	DefaultName = "default"

	// MaxSize bounds Limit.Size and Limit.DripSize.
	MaxSize = 1 << 30

	// MaxDrain bounds how long a full bucket may take to drain
	// (ceil(Size/DripSize) drips of DripRate). It keeps every computed
	// duration far from overflowing and every key's lifetime finite.
	MaxDrain = 366 * 24 * time.Hour

	// maxNameLen bounds Limit.Name.
	maxNameLen = 128
)

// Limit is a leaky bucket: it holds Size calls, and every DripRate it
// drips DripSize of them away. A call is admitted if the bucket holds fewer
// than Size calls, and then adds one; a call that finds the bucket full is
// blocked and adds nothing. An empty bucket therefore admits a burst of Size
// calls at once, then DripSize calls every DripRate (see the package
// documentation for the exact model and its bound).
//
// Limits are values: compare and copy them freely. The zero Limit is
// invalid (Size 0); the zero DripRate and DripSize take the seed's
// defaults.
type Limit struct {
	// Name identifies the limit: a key's bucket under this limit is
	// (key, Name), so two limits with one name share the buckets of a key.
	// It is the policy name in the draft RateLimit and RateLimit-Policy
	// fields and in the 429 problem's "violated-policies", so it must be
	// printable ASCII (0x20-0x7E), at most 128 bytes. Empty means
	// DefaultName ("default").
	Name string
	// Size is the bucket's capacity, at least 1 and at most MaxSize: how
	// many calls an empty bucket admits at once.
	Size int
	// DripRate is the interval between two drips (the seed's dripRate; a
	// duration, not a frequency). 0 means DefaultDripRate (1 s); negative is
	// invalid. It is rounded up to a whole microsecond, the resolution of
	// the Redis store, so that every store computes the same results.
	DripRate time.Duration
	// DripSize is how many calls each drip removes, at most MaxSize. 0 means
	// 1; negative is invalid.
	DripSize int
}

// params is a validated Limit in the units of the arithmetic.
type params struct {
	size     int64 // >= 1
	drip     int64 // >= 1
	interval int64 // ns, a positive multiple of 1000; ceil(size/drip)*interval <= MaxDrain
}

// Validate reports whether l can be used, as a *LimitError wrapping
// ErrInvalidLimit if it cannot.
func (l Limit) Validate() error {
	_, err := l.params()
	return err
}

// name returns l's effective name.
func (l Limit) name() string {
	if l.Name == "" {
		return DefaultName
	}
	return l.Name
}

// appendParams appends the params of each of the limits of one check to
// ps, or returns the first limit's error: an invalid limit, or two limits
// with one name (a key has one bucket per name).
func appendParams(ps []params, limits []Limit) ([]params, error) {
	for i, lim := range limits {
		p, err := lim.params()
		if err != nil {
			return ps, err
		}
		for _, prev := range limits[:i] {
			if prev.name() == lim.name() {
				return ps, &LimitError{Name: lim.Name, Reason: "two limits of one check share the name " + lim.name()}
			}
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func (l Limit) params() (params, error) {
	if len(l.Name) > maxNameLen {
		return params{}, &LimitError{Name: l.Name, Reason: "name longer than " + strconv.Itoa(maxNameLen) + " bytes"}
	}
	for i := 0; i < len(l.Name); i++ {
		if c := l.Name[i]; c < 0x20 || c > 0x7e {
			return params{}, &LimitError{Name: l.Name, Reason: "name has a byte outside printable ASCII at " + strconv.Itoa(i)}
		}
	}
	if l.Size < 1 || l.Size > MaxSize {
		return params{}, &LimitError{Name: l.Name, Reason: "size " + strconv.Itoa(l.Size) + " outside [1, " + strconv.Itoa(MaxSize) + "]"}
	}
	if l.DripSize < 0 || l.DripSize > MaxSize {
		return params{}, &LimitError{Name: l.Name, Reason: "drip size " + strconv.Itoa(l.DripSize) + " outside [0, " + strconv.Itoa(MaxSize) + "]"}
	}
	if l.DripRate < 0 || l.DripRate > MaxDrain {
		return params{}, &LimitError{Name: l.Name, Reason: "drip rate " + l.DripRate.String() + " outside [0, " + MaxDrain.String() + "]"}
	}
	p := params{size: int64(l.Size), drip: int64(max(l.DripSize, 1)), interval: int64(l.DripRate)}
	if p.interval == 0 {
		p.interval = int64(DefaultDripRate)
	}
	p.interval = (p.interval + 999) / 1000 * 1000
	if drips := ceilDiv(p.size, p.drip); drips > int64(MaxDrain)/p.interval {
		return params{}, &LimitError{Name: l.Name, Reason: "a full bucket takes longer than " + MaxDrain.String() + " to drain"}
	}
	return p, nil
}

// Share returns the limit one of n nodes enforces on its own so that the n
// together stay near l: the Size divided by n (rounded up, at least 1, the
// seed's "factor" arithmetic) and the DripRate multiplied by n, so that
// the n nodes together admit about Size at once and DripSize per DripRate.
// n <= 1 returns l unchanged. The result is not validated: a DripRate
// multiplied beyond MaxDrain makes an invalid limit.
func (l Limit) Share(n int) Limit {
	if n <= 1 {
		return l
	}
	s := l
	s.Size = max(ceilDivInt(l.Size, n), 1)
	rate := l.DripRate
	if rate == 0 {
		rate = DefaultDripRate
	}
	if rate > math.MaxInt64/time.Duration(n) {
		s.DripRate = math.MaxInt64
	} else {
		s.DripRate = rate * time.Duration(n)
	}
	return s
}

// String returns the limit in the form "name: size S, DripSize every
// DripRate".
func (l Limit) String() string {
	rate := l.DripRate
	if rate == 0 {
		rate = DefaultDripRate
	}
	return l.name() + ": size " + strconv.Itoa(l.Size) + ", " + strconv.Itoa(max(l.DripSize, 1)) + " every " + rate.String()
}

// Legacy is the seed's legacy limit: at most Max calls per Duration, with
// an optional MinInterval between calls. Translate turns it into the bucket
// the seed uses for it.
type Legacy struct {
	// Name becomes the Name of the translated Limit.
	Name string
	// Max is the most calls per Duration. With Duration, it makes the "max"
	// part of the limit; both zero means there is none.
	Max int
	// Duration is the window of Max.
	Duration time.Duration
	// MinInterval is the minimum interval between calls; 0 means none.
	MinInterval time.Duration
}

// Translate returns the bucket the seed (SkRateLimiterService) enforces for
// l. It computes in milliseconds, as the seed does, with JavaScript's
// Math.round (half up):
//
//   - With a max part (Max or Duration non-zero): Duration 0 disables the
//     limit (ok is false); a negative Duration or a Max below 1 is invalid.
//     Otherwise, in ms,
//     initial = max(MinInterval or round(Duration/Max), 1),
//     dripSize = max(round(Max / (Duration/initial)), 1),
//     dripRate = max(round(Duration / (Max/dripSize)), 1),
//     and the bucket is {Size: Max, DripRate: dripRate ms, DripSize:
//     dripSize}. MinInterval therefore sets the drip size (how many calls
//     each drip frees), not a spacing: the seed's "attempts to respect".
//   - With only MinInterval: a bucket of Size 1 dripping 1 every
//     max(round(MinInterval), 1) ms.
//   - With neither: no limit (ok is false).
//
// A negative MinInterval is invalid (the seed rejects it only without a max
// part). Since Go has no "absent", a zero field is absent: a Max with a zero
// Duration disables the limit, as the seed's duration 0 does.
func (l Legacy) Translate() (lim Limit, ok bool, err error) {
	if l.MinInterval < 0 {
		return Limit{}, false, &LimitError{Name: l.Name, Reason: "legacy minInterval " + l.MinInterval.String() + " is negative"}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if l.Max == 0 && l.Duration == 0 {
		if l.MinInterval == 0 {
			return Limit{}, false, nil
		}
		rate := max(math.Round(ms(l.MinInterval)), 1)
		return validated(Limit{Name: l.Name, Size: 1, DripRate: time.Duration(rate) * time.Millisecond, DripSize: 1})
	}
	if l.Duration == 0 {
		return Limit{}, false, nil
	}
	if l.Duration < 0 {
		return Limit{}, false, &LimitError{Name: l.Name, Reason: "legacy duration " + l.Duration.String() + " is negative"}
	}
	if l.Max < 1 {
		return Limit{}, false, &LimitError{Name: l.Name, Reason: "legacy max " + strconv.Itoa(l.Max) + " is less than 1"}
	}
	dur, mx := ms(l.Duration), float64(l.Max)
	initial := math.Round(dur / mx)
	if l.MinInterval != 0 {
		initial = ms(l.MinInterval)
	}
	initial = max(initial, 1)
	dripSize := max(math.Round(mx/(dur/initial)), 1)
	dripRate := max(math.Round(dur/(mx/dripSize)), 1)
	if dripSize > MaxSize || dripRate > float64(MaxDrain/time.Millisecond) {
		return Limit{}, false, &LimitError{Name: l.Name, Reason: "legacy limit translates to a drip outside the bounds"}
	}
	return validated(Limit{Name: l.Name, Size: l.Max, DripRate: time.Duration(dripRate) * time.Millisecond, DripSize: int(dripSize)})
}

func validated(lim Limit) (Limit, bool, error) {
	if err := lim.Validate(); err != nil {
		return Limit{}, false, err
	}
	return lim, true, nil
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// drips returns how many drips empty a bucket holding level calls:
// ceil(level/drip). It is on every check's path, so it avoids the 64-bit
// division where it can.
func (p params) drips(level int64) int64 {
	switch {
	case p.drip == 1:
		return level
	case level < 1<<31 && p.drip < 1<<31:
		return int64(uint32(level+p.drip-1) / uint32(p.drip))
	}
	return ceilDiv(level, p.drip)
}

func ceilDivInt(a, b int) int { return (a + b - 1) / b }
