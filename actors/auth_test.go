package actors

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/routes"
)

// The probe's turn is released exactly once, whichever comes first: the
// call's outcome or its claim of the turn. A call whose context ended as
// it was submitted has its outcome before admission makes it the probe;
// it used to keep the turn for good, and every later request sent with
// the token failed with ErrUnauthorized.
func TestAuthProbeTurnIsReleasedOnce(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	call := func(id uint64) *Call {
		req, _ := http.NewRequest("GET", "/channels/1", nil)
		route, err := routes.Parse("GET", "/channels/1")
		require.NoError(t, err)
		return NewCall(id, context.Background(), req, route, false, now)
	}
	var a authLatch
	a.rejected(now.Add(-time.Minute), time.Second)

	ended := call(1)
	ended.Complete(nil, context.Canceled) // its outcome first: nothing to release yet
	a.release(ended)
	assert.False(t, a.refuses(ended, now, true), "it may take the turn")
	assert.False(t, a.probing.Load(), "and gives it back at once: it has its outcome")

	probe := call(2)
	assert.False(t, a.refuses(probe, now, true), "the next call goes as the probe")
	assert.True(t, a.refuses(call(3), now, true), "one probe at a time")
	probe.Complete(nil, context.Canceled)
	a.release(probe) // its outcome's bookkeeping (System.finished)
	a.release(probe) // once only
	assert.False(t, a.probing.Load())
	assert.False(t, a.refuses(call(4), now, true), "the turn is free again")
	assert.True(t, a.probing.Load())
}
