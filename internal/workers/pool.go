// Package workers runs jobs on goroutines that are kept for the next job
// (Pool). A limiter hands every request's attempt to a goroutine of its
// own, besides its dials and connection watchers: starting one per
// request costs a goroutine start and a fresh stack, which grows again on
// the HTTP/2 and TLS write path each time. A Pool hands a job to an idle
// worker when one waits, else starts one; a worker waits up to its idle
// timeout for the next job, then exits, so an idle limiter keeps none.
//
// A job is a value of the Pool's type J, sent through the channel as it
// is: a struct of arguments travels without an allocation, where a
// closure over them (or an interface holding them) cost one a request.
// What a job does is the Pool's run func, made once.
//
// Its caller is package actors: System.workers, a Pool of its job struct
// (an attempt's arguments, or a func for dials, connection watchers and
// direct requests, and the mailbox runs the actors' dispatcher lends it).
// The bucket actors and the supervisor call Go; Close
// calls Stop, then Wait, once the requests on the wire were cancelled
// (the done channel, System.hardCtx).
//
// Lend is Go for short jobs a goroutine of their own serves as well (the
// actors' mailbox runs): it hands the job to a worker that waits for one
// and never starts a worker.
//
// Invariants:
//   - Go and Lend after Stop return false and start nothing: Stop sets
//     the flag under the write lock Go reads it under (the read lock), so
//     a Go that began before Stop has added its worker by the time Stop
//     returns, and none adds one after; Lend reads the flag alone, as it
//     adds no worker (a job it lends just as Stop runs goes to a worker
//     Wait waits for);
//   - Wait returns once every worker has exited, and after Stop none
//     starts again: no goroutine of the Pool outlives a Wait that follows
//     Stop (Close waits for every goroutine it started);
//   - a worker exits when it is idle for the idle timeout, or at once when
//     done is closed and it has finished its job; after Stop, Wait lasts
//     until done closes or the idle timeout passes;
//   - a panic in a job is recovered on its worker, handed to the recover
//     hook, and the worker goes on: no job's panic reaches the process;
//   - the hand-off is unbuffered: a job goes to a worker that waits for
//     one, or to a new worker, never into a queue.
package workers

import (
	"sync"
	"sync/atomic"
	"time"
)

// DefaultIdle is how long a worker goroutine waits for more work before
// it exits. Reusing workers spares a goroutine start per request and keeps
// their stacks grown for the HTTP/2 and TLS write path.
const DefaultIdle = 30 * time.Second

// Pool runs jobs of type J on worker goroutines, reusing an idle one.
// Make it with New; it is safe for concurrent use.
type Pool[J any] struct {
	run       func(J)         // what a job does
	recovered func(r any)     // told of a job's panic, on its worker
	idle      time.Duration   // a worker idle this long exits
	done      <-chan struct{} // closed: every worker exits after its job

	workers sync.WaitGroup // the worker goroutines
	mu      sync.RWMutex   // orders workers.Add against Stop: Go reads under it, Stop writes
	ch      chan J         // idle workers receive work here (unbuffered)
	stopped atomic.Bool    // set by Stop, under mu's write lock: Go and Lend start or lend nothing more
}

// New returns a Pool whose workers run each job with run, tell recovered
// of a panic in run (the worker goes on), exit after idle without work,
// and exit as soon as done is closed and their job has returned.
func New[J any](run func(J), recovered func(r any), idle time.Duration, done <-chan struct{}) *Pool[J] {
	return &Pool[J]{run: run, recovered: recovered, idle: idle, done: done, ch: make(chan J)}
}

// Go runs j on a worker goroutine that Wait waits for: an idle one if
// there is one, else a new one. It returns false once Stop was called,
// and then starts nothing.
func (p *Pool[J]) Go(j J) bool {
	p.mu.RLock() // dispatches from every actor hand off at once; Stop alone writes
	defer p.mu.RUnlock()
	if p.stopped.Load() {
		return false
	}
	select {
	case p.ch <- j: // an idle worker took it
		return true
	default:
	}
	p.workers.Add(1)
	go p.worker(j)
	return true
}

// Lend runs j on an idle worker if one waits for work, and reports
// whether one took it; it never starts a worker, and returns false once
// Stop was called. For short jobs that a goroutine of their own serves as
// well (an actor's mailbox run): a worker's stack is grown already, but a
// burst of such jobs must not leave the pool a worker per job for its idle
// timeout. It takes no lock (it runs at every mailbox's wake-up): it
// starts no worker, and a worker it lends j to is one Wait waits for.
func (p *Pool[J]) Lend(j J) bool {
	if p.stopped.Load() {
		return false
	}
	select {
	case p.ch <- j:
		return true
	default:
		return false
	}
}

// Stop makes every later Go return false without starting anything. The
// workers finish their jobs and exit on their own (idle, or done).
func (p *Pool[J]) Stop() {
	p.mu.Lock()
	p.stopped.Store(true)
	p.mu.Unlock()
}

// Wait blocks until every worker goroutine has exited. After Stop, none
// starts again, so none outlives it.
func (p *Pool[J]) Wait() { p.workers.Wait() }

// worker runs j, then whatever work comes while it is idle for less than
// the idle timeout, until done.
func (p *Pool[J]) worker(j J) {
	defer p.workers.Done()
	idle := time.NewTimer(p.idle)
	defer idle.Stop()
	for {
		p.runGuarded(j)
		idle.Reset(p.idle)
		select {
		case j = <-p.ch:
		case <-idle.C:
			return
		case <-p.done:
			return
		}
	}
}

// runGuarded runs j and stops a panic there from reaching the process:
// each job recovers what concerns its own call or connection (in package
// actors: System.work, supervisor.dial); this is the last line, which
// tells the recover hook (the System logs).
func (p *Pool[J]) runGuarded(j J) {
	defer func() {
		if r := recover(); r != nil {
			p.recovered(r)
		}
	}()
	p.run(j)
}
