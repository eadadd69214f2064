package connpool

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/transport"
)

// The pool's policy is bookkeeping: its tests use connections that were
// never dialled (only their identity counts) and times they choose.
var poolT0 = time.Unix(1_000_000, 0)

// The first connection is dialled whenever no dial is in flight and no
// backoff runs; one more only while the open ones are crowded, under the
// cap, and no connection failed since.
func TestStateDial(t *testing.T) {
	var p State
	assert.True(t, p.Dial(true, 0, 16), "the first connection, with nothing waiting (at start)")
	assert.False(t, p.Dial(true, 0, 16), "one dial at a time")
	p.Dialed()
	a := new(transport.Conn)
	p.Add(a, poolT0)
	assert.Equal(t, 1, p.Len())

	assert.False(t, p.Dial(false, CallsPerConn, 16), "CallsPerConn requests per connection: not crowded")
	assert.True(t, p.Dial(false, CallsPerConn+1, 16), "one more than CallsPerConn: crowded")
	assert.False(t, p.Dial(false, 100, 16), "a dial is in flight")
	p.Dialed()
	b := new(transport.Conn)
	p.Add(b, poolT0)
	assert.False(t, p.Dial(false, 2*CallsPerConn, 16), "two connections: crowded beyond 2*CallsPerConn")
	assert.False(t, p.Dial(false, 100, 2), "at the cap")
	assert.True(t, p.Dial(false, 2*CallsPerConn+1, 3), "under the cap and crowded")
	p.Dialed() // a dial that fails...
	assert.Equal(t, 0, p.Failed(errors.New("refused"), true))
	assert.False(t, p.Dial(false, 100, 16), "...starts a backoff: nothing is dialled")
	assert.False(t, p.Dial(true, 100, 16), "not even the first connection")
	p.BackoffEnded()
	assert.False(t, p.Dial(false, 100, 16), "a connection failed since: the pool does not grow")
	assert.True(t, p.Dial(true, 0, 16), "the first connection is dialled after a failure")
	p.Dialed()

	// A connection that served dies: the failures start over, and the
	// pool grows again.
	up, ok := p.Remove(a)
	require.True(t, ok)
	failed, _ := p.Died(Death{UpAt: up, Answered: 3, Accepted: true}, poolT0.Add(time.Minute), poolT0.Add(time.Minute))
	assert.False(t, failed)
	assert.True(t, p.Dial(false, CallsPerConn+1, 16))

	assert.False(t, p.Demand(0), "no request waits")
	assert.True(t, p.Demand(1))
}

// A connection that dies young without an answer while no connection
// answers counts as a failed one; it refused if the server never accepted
// it or it ended in a GOAWAY. One that answered, or that dies while others
// answer, or that lived YoungLife, is an ordinary fault.
func TestStateDied(t *testing.T) {
	now := poolT0.Add(time.Hour)
	quiet := now.Add(-YoungLife) // no answer for YoungLife: silent
	young := now.Add(-YoungLife + time.Nanosecond)
	reset := errors.New("transport: connection read failed: reset")
	for _, tc := range []struct {
		name            string
		d               Death
		lastAnswer      time.Time
		failed, refused bool
	}{
		{"young, never accepted", Death{UpAt: young, Err: reset}, quiet, true, true},
		{"young, accepted, reset", Death{UpAt: young, Accepted: true, Err: reset}, quiet, true, false},
		{"young, accepted, GOAWAY", Death{UpAt: young, Accepted: true, Err: &transport.GoAwayError{Code: 0}}, quiet, true, true},
		{"young, accepted, wrapped GOAWAY", Death{UpAt: young, Accepted: true, Err: fmt.Errorf("x: %w", transport.ErrGoAway)}, quiet, true, true},
		{"young, never accepted, no error", Death{UpAt: young}, time.Time{}, true, true},
		{"young, answered", Death{UpAt: young, Answered: 1, Err: reset}, quiet, false, false},
		{"young, while another answers", Death{UpAt: young, Err: reset}, young, false, false},
		{"lived YoungLife", Death{UpAt: quiet, Err: reset}, quiet, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p State
			p.Failed(reset, true)
			p.Failed(reset, true)
			failed, refused := p.Died(tc.d, now, tc.lastAnswer)
			assert.Equal(t, tc.failed, failed, "failed")
			assert.Equal(t, tc.refused, refused, "refused")
			// An ordinary fault starts the failures over; a failed one
			// leaves them to Failed.
			want := 2
			if !failed {
				want = 0
			}
			assert.Equal(t, want, p.Failed(reset, true), "the next failure's backoff attempt")
		})
	}
}

// Refused failures in a row reach MaxDialFailures and fail what waits
// while no connection is up and the backoff runs; a failure that did not
// refuse (an accepted connection that died young) and an ordinary fault
// start the count over; the backoff's attempt grows with every failure.
func TestStateFailedAndUnavailable(t *testing.T) {
	var p State
	errs := make([]error, 8)
	for i := range errs {
		errs[i] = fmt.Errorf("dial %d failed", i)
	}
	for i := range MaxDialFailures - 1 {
		assert.Equal(t, i, p.Failed(errs[i], true), "attempt")
		_, _, ok := p.Unavailable()
		assert.False(t, ok, "%d refused: what waits still waits", i+1)
	}
	assert.Equal(t, MaxDialFailures-1, p.Failed(errs[2], true))
	n, last, ok := p.Unavailable()
	assert.True(t, ok, "MaxDialFailures refused in a row")
	assert.Equal(t, MaxDialFailures, n)
	assert.Same(t, errs[2], last, "the last failure's error")

	p.BackoffEnded()
	_, _, ok = p.Unavailable()
	assert.False(t, ok, "the next try is not a backoff away: what waits waits for it")
	assert.Equal(t, 3, p.Failed(errs[3], true))
	n, last, ok = p.Unavailable()
	assert.True(t, ok, "every further refusal fails what waits again")
	assert.Equal(t, 4, n)
	assert.Same(t, errs[3], last)

	assert.Equal(t, 4, p.Failed(errs[4], false), "an accepted connection that died young grows the backoff")
	_, _, ok = p.Unavailable()
	assert.False(t, ok, "...but shows the API reachable: the refusals start over")
	for i := 5; i < 8; i++ {
		assert.Equal(t, i, p.Failed(errs[i], true))
	}
	n, _, ok = p.Unavailable()
	assert.True(t, ok)
	assert.Equal(t, MaxDialFailures, n, "the refusals in a row, not every failure")

	// A connection up: nothing fails, whatever the count.
	c := new(transport.Conn)
	p.Add(c, poolT0)
	_, _, ok = p.Unavailable()
	assert.False(t, ok, "a connection is up")
	up, _ := p.Remove(c)
	_, _, ok = p.Unavailable()
	assert.True(t, ok)

	// It served: an ordinary fault, and the count starts over.
	failed, _ := p.Died(Death{UpAt: up, Answered: 1, Accepted: true}, poolT0.Add(time.Minute), poolT0)
	require.False(t, failed)
	_, _, ok = p.Unavailable()
	assert.False(t, ok)
	assert.Equal(t, 0, p.Failed(errs[0], true), "the backoff starts over")
}

// The list of connections: Add, Remove (once), Conns (a copy), Clear.
func TestStateConns(t *testing.T) {
	var p State
	got := p.Conns()
	assert.NotNil(t, got, "empty, not nil")
	assert.Empty(t, got)
	a, b, c := new(transport.Conn), new(transport.Conn), new(transport.Conn)
	p.Add(a, poolT0)
	p.Add(b, poolT0.Add(time.Second))
	p.Add(c, poolT0.Add(2*time.Second))
	got = p.Conns()
	assert.Equal(t, []*transport.Conn{a, b, c}, got)
	up, ok := p.Remove(b)
	assert.True(t, ok)
	assert.Equal(t, poolT0.Add(time.Second), up, "when it came up")
	_, ok = p.Remove(b)
	assert.False(t, ok, "already gone")
	assert.Equal(t, []*transport.Conn{a, b, c}, got, "a copy the caller keeps")
	assert.Equal(t, []*transport.Conn{a, c}, p.Conns())
	assert.Equal(t, 2, p.Len())
	assert.Equal(t, []*transport.Conn{a, c}, p.Clear())
	assert.Zero(t, p.Len())
	assert.Empty(t, p.Conns())
}
