package globalwin_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/internal/globalwin"
	"github.com/sluicehq/sluice/ratelimit"
)

var t0 = time.Unix(1_700_000_000, 0)

// The fast path takes the window's first slots and keeps the line's share
// (1-FastShare of the limit) free; the line, through Reserve, takes the
// rest.
func TestReserveFastKeepsTheLinesShare(t *testing.T) {
	const n = 10
	l := ratelimit.NewSlidingWindow(n, time.Second)
	w := globalwin.New(l, nil)
	fast := 0
	for w.ReserveFast(t0) {
		fast++
		require.LessOrEqual(t, fast, n)
	}
	assert.Equal(t, int(n*admission.FastShare), fast, "the fast path stops at its share")
	assert.Equal(t, fast, w.Count(t0))
	assert.Equal(t, n-fast, w.FreeAt(t0, t0), "the rest stays free for the line")

	for range n - fast {
		ok, _ := w.Reserve(t0)
		require.True(t, ok, "the line takes what the fast path left")
	}
	ok, wait := w.Reserve(t0)
	assert.False(t, ok, "full")
	assert.Positive(t, wait)
	assert.False(t, w.ReserveFast(t0))

	// A period after the answers, the fast path has its share again.
	for range n {
		l.Settle(t0)
	}
	later := t0.Add(time.Second)
	assert.Equal(t, 0, w.Count(later))
	assert.True(t, w.ReserveFast(later))
}

// A blocked window refuses the fast path too.
func TestReserveFastBlocked(t *testing.T) {
	l := ratelimit.NewSlidingWindow(10, time.Second)
	w := globalwin.New(l, nil)
	l.Block(t0.Add(time.Second))
	assert.False(t, w.ReserveFast(t0))
	assert.True(t, w.ReserveFast(t0.Add(time.Second)))
}

// plain is a GlobalLimiter that can neither keep slots, count them, tell
// its limit, nor tell its slots free later.
type plain struct {
	reserved int
	full     bool
}

func (p *plain) Reserve(time.Time) (bool, time.Duration) {
	if p.full {
		return false, time.Second
	}
	p.reserved++
	return true, 0
}
func (p *plain) Settle(time.Time)                {}
func (p *plain) Cancel(time.Time)                {}
func (p *plain) Block(time.Time)                 {}
func (p *plain) Blocked(time.Time) time.Duration { return 0 }
func (p *plain) Wait(time.Time) time.Duration    { return 0 }

// A limiter that cannot keep slots free is reserved from freely, and tells
// nothing it cannot.
func TestPlainLimiter(t *testing.T) {
	p := &plain{}
	w := globalwin.New(p, nil)
	for range 100 {
		require.True(t, w.ReserveFast(t0), "no share kept: reserved freely")
	}
	assert.Equal(t, 100, p.reserved)
	p.full = true
	assert.False(t, w.ReserveFast(t0), "the limiter's refusal stands")

	_, _, ok := w.Limit()
	assert.False(t, ok)
	assert.Equal(t, 0, w.Count(t0))
	assert.Equal(t, -1, w.FreeAt(t0, t0.Add(time.Second)))
}

func TestLimit(t *testing.T) {
	w := globalwin.New(ratelimit.NewSlidingWindow(50, time.Second), nil)
	n, per, ok := w.Limit()
	assert.True(t, ok)
	assert.Equal(t, 50, n)
	assert.Equal(t, time.Second, per)
}

// New keeps the limiter and the shared store as given, and the counters
// start at zero.
func TestNew(t *testing.T) {
	l := ratelimit.NewSlidingWindow(4, time.Second)
	w := globalwin.New(l, nil)
	assert.Same(t, l, w.Limiter)
	assert.Nil(t, w.Shared)
	assert.Zero(t, w.Waiting.Load())
	assert.Zero(t, w.Granted.Load())

	w.Granted.Add(3)
	w.Granted.Add(-1)
	w.Waiting.Store(2)
	assert.Equal(t, int32(2), w.Granted.Load())
	assert.Equal(t, int32(2), w.Waiting.Load())
	assert.Equal(t, 0, w.Count(t0), "the counters are not the limiter's")
}

// Admit: nothing during a global 429's pause, not even a granted slot;
// then a granted slot (counted off Granted, none reserved again); then the
// fast path, only while the actor is not in line and nobody waits.
func TestAdmit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		blocked bool
		full    bool // the fast path's share is spent
		grants  int
		inLine  bool
		waiting int32
		kept    int32
		ok      bool
		spent   bool
	}{
		{name: "the fast path", ok: true},
		{name: "the fast path's share spent", full: true},
		{name: "a global pause", blocked: true},
		{name: "a global pause holds granted slots too", blocked: true, grants: 1},
		{name: "a granted slot", grants: 2, ok: true, spent: true},
		{name: "a granted slot while in line", grants: 1, inLine: true, ok: true, spent: true},
		{name: "a granted slot while others wait", grants: 1, waiting: 1, ok: true, spent: true},
		{name: "a granted slot with the fast path's share spent", grants: 1, full: true, ok: true, spent: true},
		{name: "in line: no fast path", inLine: true},
		{name: "others wait: no fast path", waiting: 1},
		{name: "a keep stands: no fast path", kept: 1},
		{name: "a granted slot while a keep stands", grants: 1, kept: 1, ok: true, spent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := ratelimit.NewSlidingWindow(10, time.Second)
			w := globalwin.New(l, nil)
			if tc.full {
				for w.ReserveFast(t0) {
				}
			}
			for range tc.grants { // as the supervisor grants them
				ok, _ := w.Reserve(t0)
				require.True(t, ok)
			}
			if tc.blocked { // a global 429 since
				l.Block(t0.Add(time.Second))
			}
			w.Granted.Store(int32(tc.grants))
			w.Waiting.Store(tc.waiting)
			w.Kept.Store(tc.kept)
			count := w.Count(t0)

			ok, spent := w.Admit(t0, tc.grants, tc.inLine)
			assert.Equal(t, tc.ok, ok, "ok")
			assert.Equal(t, tc.spent, spent, "spent")
			granted, reserved := tc.grants, 0
			if spent {
				granted--
			} else if ok {
				reserved = 1 // from the fast path
			}
			assert.Equal(t, int32(granted), w.Granted.Load(), "Granted")
			assert.Equal(t, count+reserved, w.Count(t0), "the slots held")
		})
	}
}
