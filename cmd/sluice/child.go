package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice"
)

// A child of "sluice demo -processes N" is this program run again as
// "sluice demo-child" (a command main does not list), with the environment
// variable childEnv set to 1, the demo's token in childTokenEnv (not on the
// command line, where ps shows it) and the simulator's certificate, PEM,
// in childCertEnv.
//
// It talks to the parent in lines. On stdout:
//
//	@READY          its limiter is up and Redis answers
//	@P              one of its requests ended
//	@S <json>       at the start, every 250 ms and at the end: its limiter's state (childStatus)
//	@R <json>       at the end: its outcomes, metrics and Snapshot().Shared (childResult)
//
// On stdin, from the parent: "go" starts its load, all children's at once;
// end of input (the parent closed it, or died) cancels what is left, and,
// after @R, lets it exit. So a child never outlives its parent.
const (
	childCommand  = "demo-child"
	childEnv      = "SLUICE_DEMO_CHILD"
	childTokenEnv = "SLUICE_DEMO_TOKEN"
	childCertEnv  = "SLUICE_DEMO_CERT"
	// statusEvery is how often a child reports its limiter's state.
	statusEvery = 250 * time.Millisecond
)

// childStatus is a child's limiter state, for the live view.
type childStatus struct {
	State    string `json:"state"`
	Pending  int    `json:"pending"`
	Running  int    `json:"running"`
	Mode     string `json:"mode"`
	Reserved int64  `json:"reserved"`
	Fallback int64  `json:"fallback"`
	Outages  int64  `json:"outages"`
}

// childShared is a child's Snapshot().Shared at the end, its Mode as text.
type childShared struct {
	Mode             string `json:"mode"`
	Processes        int    `json:"processes"`
	Reserved         int64  `json:"reserved"`
	FallbackReserved int64  `json:"fallback_reserved"`
	Outages          int64  `json:"outages"`
	Errors           int64  `json:"errors"`
}

// childResult is what a child reports at the end.
type childResult struct {
	Requests  int                       `json:"requests"`
	ByKind    map[string]map[string]int `json:"by_kind"`
	Cancelled int                       `json:"cancelled"`
	Metrics   demoMetrics               `json:"metrics"`
	Shared    *childShared              `json:"shared"`
}

// errStopped ends a child's requests when its parent stops it: a
// context.Canceled, as an interrupted demo's requests end.
var errStopped = fmt.Errorf("stopped by the parent: %w", context.Canceled)

// lineWriter writes whole lines, from any goroutine, each flushed at once.
type lineWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (l *lineWriter) line(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.WriteString(s)
	l.w.WriteByte('\n')
	l.w.Flush()
}

func (l *lineWriter) json(prefix string, v any) {
	b, _ := json.Marshal(v)
	l.line(prefix + string(b))
}

// demoChild is one process of a multi-process demo: a limiter on the
// shared token and Redis, driving its share of the scenario's load (the
// requests whose index is -index modulo -processes).
func demoChild(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if os.Getenv(childEnv) != "1" {
		return usageErrorf("demo", "%s is run by \"sluice demo -processes N\", not by hand", childCommand)
	}
	fs := flag.NewFlagSet(childCommand, flag.ContinueOnError)
	api := fs.String("api", "", "the simulator's API base")
	redisURL := fs.String("redis", "", "the Redis URL")
	scenario := fs.String("scenario", "", "the load")
	size := fs.Int("size", 0, "requests of the whole load")
	processes := fs.Int("processes", 0, "processes sharing the load")
	index := fs.Int("index", 0, "this process's index, from 0")
	trace := fs.Bool("trace", false, "print the trace to stderr")
	if done, err := parseFlags(fs, args, "Usage: sluice demo-child [flags] (run by sluice demo)\n", stdout); done {
		return err
	}
	load, ok := scenarios[*scenario]
	switch {
	case !ok:
		return usageErrorf(childCommand, "unknown -scenario %q", *scenario)
	case *processes < 2 || *processes > maxProcesses || *index < 0 || *index >= *processes || *size < *processes:
		return usageErrorf(childCommand, "-index %d of -processes %d with -size %d", *index, *processes, *size)
	}
	opt, err := redis.ParseURL(*redisURL)
	if err != nil {
		return usageErrorf(childCommand, "-redis: %v", err)
	}
	// go-redis would print every failed dial while Redis is down; the
	// limiter counts them (Snapshot().Shared.Errors) and the report shows
	// them.
	redis.SetLogger(quietRedis{})
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	pingCtx, cancelPing := context.WithTimeout(ctx, 5*time.Second)
	err = rdb.Ping(pingCtx).Err()
	cancelPing()
	if err != nil {
		return fmt.Errorf("Redis does not answer: %w", err)
	}
	var tlsConfig *tls.Config
	if pem := os.Getenv(childCertEnv); pem != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(pem)) {
			return errors.New("the simulator's certificate is not valid PEM")
		}
		tlsConfig = &tls.Config{RootCAs: pool, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	opts := sluice.Options{
		BaseURL: *api, Token: os.Getenv(childTokenEnv), TLSConfig: tlsConfig, MeterProvider: mp,
		Redis: rdb,
		// The declared limits on the demo's clock, as in one process:
		// without them the children declared Discord's own (renames 2 per
		// 10 min, role updates 10 per 10 s) against a simulator five
		// times faster, and took 3x the ideal waiting on them.
		Limits: demoLimits(),
		// The share is set: the processes start too close together to
		// have counted each other in Redis before an outage.
		RedisFallbackShare: 1 / float64(*processes),
	}
	if *trace {
		opts.Trace = printTrace(stderr, fmt.Sprintf("p%d ", *index+1))
	}
	lim, err := sluice.New(opts)
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			lim.Close(context.Background())
		}
	}()
	var jobs []job
	for i, j := range load(*size) {
		if i%*processes == *index {
			jobs = append(jobs, j)
		}
	}

	out := &lineWriter{w: bufio.NewWriter(stdout)}
	out.line("@READY")
	in := bufio.NewReader(stdin)
	if line, err := in.ReadString('\n'); err != nil || strings.TrimSpace(line) != "go" {
		return nil // the parent gave up before the start
	}
	loadCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	inputEnded := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, in)
		stop(errStopped)
		close(inputEnded)
	}()

	t := &tally{byKind: map[string]map[string]int{}, started: time.Now()}
	var wg sync.WaitGroup
	sendJobs(loadCtx, lim, jobs, t, &wg, func() { out.line("@P") })
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	sendStatus := func(timeout time.Duration) {
		if st, ok := status(lim, timeout); ok {
			out.json("@S ", st)
		}
	}
	sendStatus(statusEvery)
	tick := time.NewTicker(statusEvery)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-finished:
			running = false
		case <-tick.C:
			sendStatus(statusEvery)
		}
	}
	sendStatus(2 * time.Second) // the last frame of the live view
	res := childResult{Requests: len(jobs), ByKind: t.byKind, Cancelled: int(t.cancelled.Load())}
	snapCtx, cancelSnap := context.WithTimeout(context.Background(), 2*time.Second)
	if snap, err := lim.Snapshot(snapCtx); err == nil && snap.Shared != nil {
		s := snap.Shared
		res.Shared = &childShared{Mode: s.Mode.String(), Processes: s.Processes, Reserved: s.Reserved,
			FallbackReserved: s.FallbackReserved, Outages: s.Outages, Errors: s.Errors}
	}
	cancelSnap()
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 10*time.Second)
	err = lim.Close(closeCtx)
	cancelClose()
	closed = true
	if err != nil {
		fmt.Fprintf(stderr, "p%d: closing the limiter: %v\n", *index+1, err)
	}
	res.Metrics = readMetrics(reader)
	out.json("@R ", res)
	<-inputEnded // the parent has the result: it closes our input
	return nil
}

// status is the limiter's state now, for the parent's live view; not ok
// if the limiter did not answer within timeout.
func status(lim *sluice.Limiter, timeout time.Duration) (st childStatus, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	snap, err := lim.Snapshot(ctx)
	if err != nil {
		return st, false
	}
	st.State, st.Pending, st.Running = snap.State, snap.Pending, snap.Running
	if s := snap.Shared; s != nil {
		st.Mode, st.Reserved, st.Fallback, st.Outages = s.Mode.String(), s.Reserved, s.FallbackReserved, s.Outages
	}
	return st, true
}

// quietRedis discards go-redis's own log lines.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
