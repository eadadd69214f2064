package sluice_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

// Several processes of one bot share its limits through Redis: each runs
// this with the same token and the same Redis, and together they never send
// more than Discord allows (docs/scale-out.md). The example needs a Redis,
// so it is compiled but not run.
func ExampleOptions_redis() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	lim, err := sluice.New(sluice.Options{
		Token: os.Getenv("DISCORD_TOKEN"),
		Redis: rdb,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())

	req, _ := http.NewRequest("GET", "/channels/123/messages", nil)
	resp, err := lim.Do(context.Background(), req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()

	// Where the limits are counted now: "shared", or "fallback" while
	// Redis is unreachable (each process then uses its share).
	snap, _ := lim.Snapshot(context.Background())
	log.Println(snap.Shared.Mode, snap.Shared.Processes)
}
