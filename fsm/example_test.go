package fsm_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/fsm"
)

// The supervisor actor fires one event per message it handles; the hook
// traces every transition, including the self-loop of a second global 429.
func ExampleSupervisor() {
	ctx := context.Background()
	sup := fsm.NewSupervisor(func(e fsm.SupervisorEvent, from, to fsm.SupervisorState) {
		fmt.Printf("%s: %s -> %s\n", e, from, to)
	})

	for _, e := range []fsm.SupervisorEvent{fsm.Dial, fsm.Up, fsm.GlobalHit, fsm.GlobalHit, fsm.GlobalClear} {
		if err := sup.Fire(ctx, e); err != nil {
			fmt.Println(err)
		}
	}

	// Up is not allowed while connected: the state is unchanged.
	err := sup.Fire(ctx, fsm.Up)
	fmt.Println(err)
	fmt.Println(errors.Is(err, fsm.ErrInvalidEvent), sup.Current())

	// Output:
	// dial: disconnected -> connecting
	// up: connecting -> connected
	// global_hit: connected -> global_limit
	// global_hit: global_limit -> global_limit
	// global_clear: global_limit -> connected
	// fsm: event "up" inappropriate in state "connected" of supervisor machine
	// true connected
}

// A bucket's life: the pioneer discovers the limits, the window drains, a
// 429 pauses it, the pause ends, and the bucket goes idle. A stale reset
// timer arriving later is recognized with Can and ignored.
func ExampleBucket() {
	ctx := context.Background()
	b := fsm.NewBucket(func(e fsm.BucketEvent, from, to fsm.BucketState) {
		fmt.Printf("%s: %s -> %s\n", e, from, to)
	})

	for _, e := range []fsm.BucketEvent{fsm.Discovered, fsm.Drained, fsm.RateLimited, fsm.RateLimited, fsm.Reset, fsm.Quiet} {
		if err := b.Fire(ctx, e); err != nil {
			fmt.Println(err)
		}
	}

	if !b.Can(fsm.Reset) {
		fmt.Println("stale reset timer ignored in state", b.Current())
	}

	// Output:
	// discovered: initial -> open
	// drained: open -> exhausted
	// rate_limited: exhausted -> limited
	// rate_limited: limited -> limited
	// reset: limited -> open
	// quiet: open -> idle
	// stale reset timer ignored in state idle
}

func ExampleSupervisorMermaid() {
	fmt.Print(fsm.SupervisorMermaid())
	// Output:
	// stateDiagram-v2
	//     [*] --> disconnected
	//     disconnected --> connecting: dial
	//     connecting --> connected: up
	//     connecting --> disconnected: dial_failed
	//     connecting --> disconnected: down
	//     connected --> global_limit: global_hit
	//     connected --> disconnected: down
	//     global_limit --> global_limit: global_hit
	//     global_limit --> connected: global_clear
	//     global_limit --> disconnected: down
}
