package actorhost

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain: once every test has released the host, none of protoactor's
// goroutines is left.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAcquireRelease: every holder gets the one actor system; it lives
// until the last Release, and the next Acquire makes a new one.
func TestAcquireRelease(t *testing.T) {
	a := Acquire()
	b := Acquire()
	require.Same(t, a, b, "one actor system for the process")
	assert.Equal(t, 2, host.users)

	Release()
	assert.False(t, a.IsStopped(), "still held")
	assert.Same(t, a, host.as)

	Release()
	assert.True(t, a.IsStopped(), "the last Release shuts it down")
	assert.Nil(t, host.as)
	assert.Zero(t, host.users)

	c := Acquire()
	defer Release()
	assert.NotSame(t, a, c, "made again with the next holder")
	assert.False(t, c.IsStopped())
}
