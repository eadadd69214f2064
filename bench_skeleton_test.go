package sluice_test

// The actor skeleton: the floor the design's shape sets on BenchmarkDo,
// measured beside Sluice and the bare client (docs/benchmarks.md, "The
// floor of the actor shape").
//
// impl=actor-skeleton sends the benchmark's requests through the same
// protoactor shape as Sluice's hot path and nothing else: a supervisor
// actor that looks up (or spawns) one child actor per channel, the child
// actor that starts the request on a goroutine, and the answer sent back
// to the child, which hands it to the waiting caller. Three actor messages
// per request, like Sluice (submit, enqueue, result), one bucket actor per
// channel with the same lock-free mailbox, and the bare client's
// http.Client on one HTTP/2 connection. No rate limit, no deadline, no
// retry, no trace: whatever Sluice costs above this is its own code, and
// what this costs above the bare client is the shape's.

import (
	"context"
	"log/slog"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/sluicehq/sluice/sluicetest"
)

// skelRequest is one caller's request; done gets its one outcome.
type skelRequest struct {
	ctx  context.Context
	path string
	done chan error
}

// skelResult is a finished request, sent back to the child actor.
type skelResult struct {
	req *skelRequest
	err error
}

// skelSupervisor routes each request to its channel's child actor,
// spawning it the first time.
type skelSupervisor struct {
	props    *actor.Props
	children map[string]*actor.PID
}

func (s *skelSupervisor) Receive(c actor.Context) {
	if m, ok := c.Message().(*skelRequest); ok {
		pid, ok := s.children[m.path]
		if !ok {
			pid = c.Spawn(s.props)
			s.children[m.path] = pid
		}
		c.Send(pid, m)
	}
}

// skelBucket sends each request on a goroutine and completes it when the
// result comes back.
type skelBucket struct {
	send func(ctx context.Context, path string) error
}

func (k *skelBucket) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *skelRequest:
		self, root := c.Self(), c.ActorSystem().Root
		go func() {
			root.Send(self, &skelResult{req: m, err: k.send(m.ctx, m.path)})
		}()
	case *skelResult:
		m.req.done <- m.err
	}
}

// skeletonTarget is impl=actor-skeleton over the bare client of srv.
func skeletonTarget(b *testing.B, srv *sluicetest.Server) benchDoer {
	send := bareDoer(srv) // the bare client underneath
	sys := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
	bucketProps := actor.PropsFromProducer(func() actor.Actor { return &skelBucket{send: send} },
		actor.WithMailbox(actor.UnboundedLockfree()))
	sup := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &skelSupervisor{props: bucketProps, children: map[string]*actor.PID{}}
	}))
	b.Cleanup(func() {
		_ = sys.Root.StopFuture(sup).Wait()
		sys.Shutdown()
	})
	return func(ctx context.Context, path string) error {
		req := &skelRequest{ctx: ctx, path: path, done: make(chan error, 1)}
		sys.Root.Send(sup, req)
		return <-req.done
	}
}

// BenchmarkSkeletonActorMemory: the heap one live child actor of the
// skeleton costs (protoactor's registry entry, context, mailbox and PID,
// the supervisor's map entry and child set, the channel's name), the
// part of BenchmarkBucketMemory's live figure that is the shape's. The
// children send nothing: each takes one request that ends at once.
func BenchmarkSkeletonActorMemory(b *testing.B) {
	n := 10_000
	if benchRaceEnabled() {
		n = 100
	}
	paths := benchPaths(n)
	var sum float64
	for range b.N {
		b.StopTimer()
		sys := actor.NewActorSystem(
			actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }))
		bucketProps := actor.PropsFromProducer(func() actor.Actor {
			return &skelBucket{send: func(context.Context, string) error { return nil }}
		}, actor.WithMailbox(actor.UnboundedLockfree()))
		sup := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &skelSupervisor{props: bucketProps, children: map[string]*actor.PID{}}
		}))
		do := func(path string) error {
			req := &skelRequest{ctx: context.Background(), path: path, done: make(chan error, 1)}
			sys.Root.Send(sup, req)
			return <-req.done
		}
		if err := do("/warm"); err != nil {
			b.Fatal(err)
		}
		_, before := benchHeap()
		b.StartTimer()
		for _, p := range paths {
			if err := do(p); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		_, after := benchHeap()
		sum += benchPerBucket(after, before, n)
		_ = sys.Root.StopFuture(sup).Wait()
		sys.Shutdown()
	}
	b.ReportMetric(sum/float64(b.N), "alloc-B/actor")
}
