package workers

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// job is a job as the tests see it: a struct by value, like the actors'.
// ran, when set, receives the id of the goroutine that ran it; hold, when
// set, keeps that goroutine until it is closed; boom panics with itself.
type job struct {
	ran  chan uint64
	hold chan struct{}
	boom any
}

func run(j job) {
	if j.ran != nil {
		j.ran <- goid()
	}
	if j.hold != nil {
		<-j.hold
	}
	if j.boom != nil {
		panic(j.boom)
	}
}

// goid is the id of the calling goroutine, from its stack's first line
// ("goroutine 7 [running]:"): which worker ran a job.
func goid() uint64 {
	var buf [64]byte
	line := buf[:runtime.Stack(buf[:], false)]
	line = bytes.TrimPrefix(line, []byte("goroutine "))
	id, err := strconv.ParseUint(string(line[:bytes.IndexByte(line, ' ')]), 10, 64)
	if err != nil {
		panic(err)
	}
	return id
}

func noPanic(t *testing.T) func(any) {
	return func(r any) { t.Errorf("unexpected panic: %v", r) }
}

// A job handed over while a worker waits for one runs on that worker; one
// handed over while every worker is busy starts another.
func TestGoReusesIdleWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		done := make(chan struct{})
		p := New(run, noPanic(t), time.Minute, done)
		ran := make(chan uint64, 1)

		require.True(t, p.Go(job{ran: ran}))
		first := <-ran
		synctest.Wait() // the worker waits for more work
		require.True(t, p.Go(job{ran: ran}))
		assert.Equal(t, first, <-ran, "the idle worker took the second job")

		synctest.Wait()
		hold := make(chan struct{})
		require.True(t, p.Go(job{ran: ran, hold: hold}))
		busy := <-ran
		assert.Equal(t, first, busy, "the idle worker took the third job")
		require.True(t, p.Go(job{ran: ran}))
		assert.NotEqual(t, busy, <-ran, "a job that finds every worker busy starts another")
		close(hold)

		close(done)
		p.Stop()
		p.Wait()
	})
}

// Lend hands a job to a worker that waits for one and starts none: with
// no worker, or every worker busy, or after Stop, it returns false and the
// job does not run.
func TestLendOnlyToAnIdleWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		done := make(chan struct{})
		p := New(run, noPanic(t), time.Minute, done)
		ran := make(chan uint64, 2)

		assert.False(t, p.Lend(job{ran: ran}), "no worker yet")
		require.True(t, p.Go(job{ran: ran}))
		first := <-ran
		synctest.Wait() // the worker waits for more work
		hold := make(chan struct{})
		require.True(t, p.Lend(job{ran: ran, hold: hold}))
		assert.Equal(t, first, <-ran, "the idle worker took the lent job")
		assert.False(t, p.Lend(job{ran: ran}), "its one worker is busy")
		close(hold)
		synctest.Wait()

		p.Stop()
		assert.False(t, p.Lend(job{ran: ran}), "stopped with a worker idle")
		close(done)
		p.Wait()
		assert.Empty(t, ran, "no refused job ran")
	})
}

// After Stop, Go returns false and runs nothing, whether a worker waits
// for work or none is left.
func TestGoAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		done := make(chan struct{})
		var runs atomic.Int32
		p := New(func(job) { runs.Add(1) }, noPanic(t), time.Minute, done)
		require.True(t, p.Go(job{}))
		synctest.Wait() // the worker waits for more work

		p.Stop()
		assert.False(t, p.Go(job{}), "stopped with a worker idle")
		synctest.Wait()
		assert.Equal(t, int32(1), runs.Load())

		close(done)
		p.Wait()
		assert.False(t, p.Go(job{}), "stopped with no worker left")
		assert.Equal(t, int32(1), runs.Load())
	})
	// Stopped before it ever ran anything: Wait has nothing to wait for.
	p := New(run, noPanic(t), time.Minute, make(chan struct{}))
	p.Stop()
	assert.False(t, p.Go(job{ran: make(chan uint64)}))
	p.Wait()
}

// A job's panic goes to the recover hook, not the process, and its worker
// goes on with the next job.
func TestPanicRecovered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		done := make(chan struct{})
		var got []any
		p := New(run, func(r any) { got = append(got, r) }, time.Minute, done)
		ran := make(chan uint64, 1)

		require.True(t, p.Go(job{ran: ran, boom: "boom"}))
		first := <-ran
		synctest.Wait()
		assert.Equal(t, []any{"boom"}, got)
		require.True(t, p.Go(job{ran: ran}))
		assert.Equal(t, first, <-ran, "the worker survived the panic")

		close(done)
		p.Stop()
		p.Wait()
	})
}

// A worker exits once it has waited the idle timeout for work (time is
// the bubble's clock: Wait returns when the timer fires), or at once when
// done is closed.
func TestIdleExit(t *testing.T) {
	const idle = 10 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		p := New(run, noPanic(t), idle, make(chan struct{}))
		start := time.Now()
		require.True(t, p.Go(job{}))
		p.Wait() // not stopped: the worker leaves on its own
		assert.Equal(t, idle, time.Since(start))

		// Its successor starts afresh, and waits its own idle timeout
		// from its last job.
		ran := make(chan uint64, 1)
		require.True(t, p.Go(job{ran: ran}))
		<-ran
		synctest.Wait()
		require.True(t, p.Go(job{}))
		start = time.Now()
		p.Wait()
		assert.Equal(t, idle, time.Since(start))
	})
	synctest.Test(t, func(t *testing.T) {
		done := make(chan struct{})
		p := New(run, noPanic(t), idle, done)
		start := time.Now()
		require.True(t, p.Go(job{}))
		synctest.Wait()
		close(done)
		p.Wait()
		assert.Zero(t, time.Since(start), "done ends an idle worker at once")
	})
}

// A busy worker finishes its job when done is closed, then exits; Wait
// waits for it.
func TestWaitWaitsForBusyWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		done := make(chan struct{})
		p := New(run, noPanic(t), time.Minute, done)
		hold := make(chan struct{})
		require.True(t, p.Go(job{hold: hold}))
		close(done)
		p.Stop()
		waited := make(chan struct{})
		go func() { p.Wait(); close(waited) }()
		synctest.Wait()
		select {
		case <-waited:
			t.Fatal("Wait returned while a job ran")
		default:
		}
		close(hold)
		<-waited
	})
}

// Go racing with Stop, as dispatches race with Close: every job Go
// accepted has run by the time Wait returns, and none runs after.
func TestStopRacesGo(t *testing.T) {
	done := make(chan struct{})
	var ran atomic.Int64
	hundred := make(chan struct{})
	p := New(func(job) {
		if ran.Add(1) == 100 {
			close(hundred)
		}
	}, noPanic(t), time.Minute, done)
	var accepted atomic.Int64
	var callers sync.WaitGroup
	started := make(chan struct{})
	for range 4 {
		callers.Go(func() {
			<-started
			// Bounded: a Go that never refuses after Stop fails the test
			// below, not by hanging until go test's timeout.
			for i := 0; i < 100_000 && p.Go(job{}); i++ {
				accepted.Add(1)
			}
		})
	}
	close(started)
	<-hundred // Stop comes while the callers still hand over jobs
	close(done)
	p.Stop()
	p.Wait()
	atWait := ran.Load()
	callers.Wait()
	assert.Less(t, accepted.Load(), int64(400_000), "Go refused nothing after Stop")
	assert.Equal(t, accepted.Load(), atWait)
	assert.Equal(t, atWait, ran.Load())
}
