package redistest_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartKillRestart(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("a killed server still answers")
	}
	s.Restart(t)
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("restarted server: %v", err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after a restart the server should be empty and reachable: n=%d err=%v", n, err)
	}
}
