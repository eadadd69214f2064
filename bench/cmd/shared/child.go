package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// A child is this program run again with childEnv set to its job, JSON
// (the token travels there, not on the command line, where ps shows it).
// It talks to the parent in lines. On stdout:
//
//	@READY       its limiter is up and Redis answers
//	@R <json>    at the end: its outcomes and Snapshot().Shared (childResult)
//
// On stdin, from the parent: "go" starts its load, every child's at once.
// The end of its input afterwards (the parent gave up, or died) cancels
// what is left of the load, so a child does not outlive its parent even
// where the kernel does not kill it (Pdeathsig is Linux's). Errors go to
// stderr, and the exit status is 1.
const childEnv = "SLUICE_BENCH_SHARED_CHILD"

// childJob is what a child is asked to do.
type childJob struct {
	Scenario   string        `json:"scenario"`
	Process    int           `json:"process"`    // its index, from 0
	Goroutines int           `json:"goroutines"` // each sends one request
	Redis      string        `json:"redis"`      // go-redis URL
	Base       string        `json:"base"`       // the simulator's API base
	Token      string        `json:"token"`
	Timeout    time.Duration `json:"timeout"` // for the whole load, from "go"
}

// childResult is what a child reports at the end.
type childResult struct {
	First, Last int64    // Unix ns of its first and last answer (0: none)
	OK, Failed  int      // 2xx answers; errors and other statuses
	Errors      []string // the first few failures
	// Shared is its limiter's Snapshot().Shared after the load, Reserved
	// the reservations Redis answered. HasShared is false if the
	// snapshot had none.
	Shared    redisstore.Stats
	HasShared bool
}

// maxChildErrors is how many failures a child reports in full.
const maxChildErrors = 5

// childMain runs a child and returns its exit status.
func childMain() int {
	if err := runChild(os.Getenv(childEnv), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "shared child:", err)
		return 1
	}
	return 0
}

// runChild is a child with the job in jobJSON: a limiter on the shared
// token and Redis, its goroutines sending the scenario's requests once the
// parent says go.
func runChild(jobJSON string, stdin io.Reader, stdout io.Writer) error {
	var job childJob
	if err := json.Unmarshal([]byte(jobJSON), &job); err != nil {
		return fmt.Errorf("bad job in %s: %w", childEnv, err)
	}
	sc, ok := scenarioNamed(job.Scenario)
	if !ok {
		return fmt.Errorf("unknown scenario %q", job.Scenario)
	}
	opt, err := redis.ParseURL(job.Redis)
	if err != nil {
		return fmt.Errorf("Redis URL: %w", err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	pingCtx, cancelPing := context.WithTimeout(context.Background(), 5*time.Second)
	err = rdb.Ping(pingCtx).Err()
	cancelPing()
	if err != nil {
		return fmt.Errorf("Redis does not answer: %w", err)
	}
	lim, err := sluice.New(sluice.Options{BaseURL: job.Base, H2C: true, Token: job.Token,
		GlobalLimit: sharedGlobal, IPGlobalLimit: sharedGlobal, Redis: rdb})
	if err != nil {
		return fmt.Errorf("sluice.New: %w", err)
	}
	closed := false
	defer func() {
		if !closed {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = lim.Close(ctx)
		}
	}()

	out := bufio.NewWriter(stdout)
	fmt.Fprintln(out, "@READY")
	if err := out.Flush(); err != nil {
		return fmt.Errorf("telling the parent: %w", err)
	}
	in := bufio.NewReader(stdin)
	if line, err := in.ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		return fmt.Errorf("no go from the parent (%q, %v)", line, err)
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), job.Timeout,
		fmt.Errorf("the load did not end within %v", job.Timeout))
	defer cancel()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go func() { // the parent closes our input when it gives up
		_, _ = io.Copy(io.Discard, in)
		stop(errors.New("the parent closed this child's input"))
	}()

	var (
		mu  sync.Mutex
		res childResult
		wg  sync.WaitGroup
	)
	for w := range job.Goroutines {
		wg.Go(func() {
			answered, err := sendOne(ctx, lim, sc.path(job.Process, w, job.Goroutines))
			now := time.Now().UnixNano()
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				res.OK++
			} else {
				res.Failed++
				if len(res.Errors) < maxChildErrors {
					res.Errors = append(res.Errors, err.Error())
				}
			}
			if answered { // whatever its status
				if res.First == 0 || now < res.First {
					res.First = now
				}
				res.Last = max(res.Last, now)
			}
		})
	}
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && res.Failed > 0 {
		res.Errors = append(res.Errors, "load ended: "+cause.Error())
	}

	snapCtx, cancelSnap := context.WithTimeout(context.Background(), 5*time.Second)
	snap, err := lim.Snapshot(snapCtx)
	cancelSnap()
	if err != nil {
		return fmt.Errorf("Snapshot: %w", err)
	}
	if snap.Shared != nil {
		res.Shared, res.HasShared = *snap.Shared, true
	}
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelClose()
	closed = true
	if err := lim.Close(closeCtx); err != nil {
		return fmt.Errorf("Close: %w", err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "@R "+string(b))
	return out.Flush()
}

// sendOne sends GET path through lim and reads the answer. answered is
// whether one came; err is nil only for a 2xx, and describes the failure
// otherwise (no answer, or its status).
func sendOne(ctx context.Context, lim *sluice.Limiter, path string) (answered bool, err error) {
	req, err := http.NewRequest(http.MethodGet, path, nil)
	if err != nil {
		return false, err
	}
	resp, err := lim.Do(ctx, req)
	if err != nil {
		return false, fmt.Errorf("GET %s: %w", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return true, fmt.Errorf("GET %s: answered %s", path, resp.Status)
	}
	return true, nil
}
