package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/sluicetest"
)

// bench is what every run shares: this program (to run again as the
// children), the load's size and the one Redis.
type bench struct {
	exe                   string
	processes, goroutines int
	redisURL              string
	rdb                   *redis.Client
}

// runResult is one run of one scenario.
type runResult struct {
	Scenario string
	Run      int // from 1
	Requests int // processes × goroutines
	// OK counts 2xx answers, Failed the rest; Errors are the first few
	// failures, by process.
	OK, Failed int
	Errors     []string
	// Span is from the run's first answer to its last; Pace the rate
	// achieved as a share of the binding limit's (see pace).
	Span time.Duration
	Pace float64
	// ScriptCalls are the scripts Redis ran meanwhile (every process's
	// reservations, reports and heartbeats); Reserved the processes'
	// Snapshot().Shared.Reserved summed.
	ScriptCalls, Reserved int64
	// User429 and Global429 are the simulator's 429s by scope,
	// Violations its list of what the processes could have avoided.
	User429, Global429 int
	Violations         []string
	// Finish is, per process, its last answer after the run's first.
	Finish []time.Duration
	// NoShared lists the processes whose snapshot had no shared state.
	NoShared []int
}

// pace is the rate of total requests answered over span (first to last
// answer), as a share of limit per window: n requests under l per window w
// need ceil(n/l) windows; the first answer comes at the start of the
// first, the last at the start of the last, so the rate achieved is
// n / (span + w), against l / w. As the root module's
// TestSharedLimitsAcrossProcesses computes it.
func pace(total int, span time.Duration, limit int, window time.Duration) float64 {
	return (float64(total) / (span + window).Seconds()) / (float64(limit) / window.Seconds())
}

// runTimeout bounds one run of sc with total requests: three times the
// ideal time at the binding limit, and a minute for starting and stopping.
func runTimeout(sc scenario, total int) time.Duration {
	limit, window := sc.binding()
	ideal := time.Duration(float64(total) / float64(limit) * float64(window))
	return 3*ideal + time.Minute
}

// run is run number run (from 1) of sc: a fresh simulator, a flushed
// Redis, a fresh token, and b.processes children sending at once.
func (b *bench) run(ctx context.Context, sc scenario, run int) (runResult, error) {
	total := b.processes * b.goroutines
	res := runResult{Scenario: sc.name, Run: run, Requests: total}
	if err := b.rdb.FlushAll(ctx).Err(); err != nil {
		return res, fmt.Errorf("FLUSHALL: %w", err)
	}
	srv, err := sluicetest.NewServer(sluicetest.Options{H2C: true, Rules: sc.rules})
	if err != nil {
		return res, fmt.Errorf("simulator: %w", err)
	}
	defer srv.Close()

	timeout := runTimeout(sc, total)
	runCtx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("the run did not end within %v", timeout))
	g := &group{events: make(chan childEvent, 2*b.processes)}
	defer g.stop(cancel)
	// Keys live under the token's hash: a token of its own per scenario
	// and run, on top of the flush.
	token := fmt.Sprintf("bench-shared-%s-%d-%s", sc.name, run, rand.Text()[:8])
	for p := range b.processes {
		job := childJob{Scenario: sc.name, Process: p, Goroutines: b.goroutines, Redis: b.redisURL,
			Base: srv.APIBase(), Token: token, Timeout: timeout}
		if err := g.start(runCtx, b.exe, job); err != nil {
			return res, err
		}
	}
	for ready := 0; ready < b.processes; {
		select {
		case ev := <-g.events:
			if ev.ready {
				ready++
				continue
			}
			g.exited++
			if ev.err == nil {
				ev.err = fmt.Errorf("process %d ended before it was ready", ev.p)
			}
			return res, g.failed(ev.err)
		case <-runCtx.Done():
			return res, fmt.Errorf("the processes did not get ready: %w", context.Cause(runCtx))
		}
	}

	before, err := scriptCalls(ctx, b.rdb)
	if err != nil {
		return res, err
	}
	for _, c := range g.children {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			return res, fmt.Errorf("process %d: telling it to go: %w", c.p, err)
		}
	}
	results := make([]*childResult, b.processes)
	for got := 0; got < b.processes; {
		select {
		case ev := <-g.events:
			if ev.ready {
				continue
			}
			g.exited++
			if ev.err != nil {
				return res, g.failed(ev.err)
			}
			results[ev.p] = ev.res
			got++
		case <-runCtx.Done():
			return res, fmt.Errorf("%w: %d of %d processes reported", context.Cause(runCtx), g.exited, b.processes)
		}
	}
	after, err := scriptCalls(ctx, b.rdb)
	if err != nil {
		return res, err
	}
	res.ScriptCalls = after - before

	var first, last int64
	for p, r := range results {
		res.OK += r.OK
		res.Failed += r.Failed
		for _, e := range r.Errors {
			res.Errors = append(res.Errors, fmt.Sprintf("process %d: %s", p, e))
		}
		res.Reserved += r.Shared.Reserved
		if !r.HasShared {
			res.NoShared = append(res.NoShared, p)
		}
		if r.First != 0 && (first == 0 || r.First < first) {
			first = r.First
		}
		last = max(last, r.Last)
	}
	if first == 0 {
		return res, errors.New("no process had an answer")
	}
	for _, r := range results {
		res.Finish = append(res.Finish, time.Duration(max(r.Last-first, 0)))
	}
	res.Span = time.Duration(last - first)
	limit, window := sc.binding()
	res.Pace = pace(total, res.Span, limit, window)
	st := srv.Stats()
	res.User429, res.Global429 = st.RateLimited["user"], st.RateLimited["global"]
	res.Violations = st.Violations()
	return res, nil
}

// scriptCalls is how many scripts Redis has run since it started: the
// calls of EVALSHA and EVAL (and their _RO forms) in INFO commandstats.
func scriptCalls(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO commandstats: %w", err)
	}
	return parseScriptCalls(info)
}

// scriptCommands are the commandstats entries of the script calls.
var scriptCommands = map[string]bool{"cmdstat_evalsha": true, "cmdstat_eval": true, "cmdstat_evalsha_ro": true, "cmdstat_eval_ro": true}

// parseScriptCalls sums the calls= of scriptCommands in the text of INFO
// commandstats ("cmdstat_evalsha:calls=12,usec=…" lines).
func parseScriptCalls(info string) (int64, error) {
	var n int64
	for line := range strings.Lines(info) {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !scriptCommands[name] {
			continue
		}
		found := false
		for field := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				c, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("INFO commandstats: %s: bad calls %q", name, v)
				}
				n += c
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("INFO commandstats: %s without calls=: %q", name, line)
		}
	}
	return n, nil
}

// infoField is the value of field in the text of a Redis INFO section
// ("redis_version:7.0.15" lines), "" if it is not there.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// group is the child processes of one run.
type group struct {
	children []*child
	events   chan childEvent // ready and exit events; room for two per child
	exited   int             // exit events received (the run's loops and stop count them)
}

// child is one child process.
type child struct {
	p      int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tailBuffer
}

// childEvent is a child that said @READY (ready), or that exited: with its
// result, or err if it failed (its exit status, stderr and stray output).
type childEvent struct {
	p     int
	ready bool
	res   *childResult
	err   error
}

// start runs a child on job, stopped when ctx ends.
func (g *group) start(ctx context.Context, exe string, job childJob) error {
	b, err := json.Marshal(job)
	if err != nil {
		return err
	}
	c := &child{p: job.Process, stderr: &tailBuffer{max: 8 << 10}}
	c.cmd = exec.CommandContext(ctx, exe)
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	c.cmd.SysProcAttr = childProcAttr()
	c.cmd.Stderr = c.stderr
	c.cmd.WaitDelay = 5 * time.Second
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return err
	}
	if err := c.cmd.Start(); err != nil {
		c.stdin.Close()
		return fmt.Errorf("starting process %d: %w", c.p, err)
	}
	g.children = append(g.children, c)
	go func() {
		var res *childResult
		var resErr error
		stray := &tailBuffer{max: 4 << 10}
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "@READY":
				g.events <- childEvent{p: c.p, ready: true}
			case strings.HasPrefix(line, "@R "):
				res = new(childResult)
				if err := json.Unmarshal([]byte(line[3:]), res); err != nil {
					resErr = fmt.Errorf("its result is not understood: %w", err)
				}
			default:
				fmt.Fprintln(stray, line)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		err := c.cmd.Wait()
		switch {
		case err != nil:
		case resErr != nil:
			err = resErr
		case res == nil:
			err = errors.New("it exited without a result")
		}
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				err = fmt.Errorf("%w (stopped: %v)", err, cause)
			}
			err = fmt.Errorf("process %d: %w%s%s", c.p, err, indent("stdout", stray.String()), indent("stderr", c.stderr.String()))
		}
		g.events <- childEvent{p: c.p, res: res, err: err}
	}()
	return nil
}

// failGrace is how long a run that lost a child waits for the others'
// failures, so that all are reported, before it stops them.
const failGrace = time.Second

// failed is err, the failure of one child, joined with those of the
// others that fail within failGrace (a cause they share shows in each).
func (g *group) failed(err error) error {
	errs := []error{err}
	grace := time.NewTimer(failGrace)
	defer grace.Stop()
	for g.exited < len(g.children) {
		select {
		case ev := <-g.events:
			if ev.ready {
				continue
			}
			g.exited++
			if ev.err != nil {
				errs = append(errs, ev.err)
			}
		case <-grace.C:
			return errors.Join(errs...)
		}
	}
	return errors.Join(errs...)
}

// stop ends the run's children: it closes their input (a child still
// sending cancels its load), kills those still running (cancel ends their
// context) and waits until every one has exited.
func (g *group) stop(cancel context.CancelFunc) {
	for _, c := range g.children {
		c.stdin.Close()
	}
	cancel()
	for g.exited < len(g.children) {
		if ev := <-g.events; !ev.ready {
			g.exited++
		}
	}
}

// indent is text under a heading of its own, each line indented, or ""
// for no text.
func indent(heading, text string) string {
	text = strings.TrimRight(text, "\n")
	if text == "" {
		return ""
	}
	return "\n  " + heading + ":\n    " + strings.ReplaceAll(text, "\n", "\n    ")
}

// tailBuffer keeps the last max bytes written to it, from any goroutine.
type tailBuffer struct {
	mu   sync.Mutex
	b    []byte
	max  int
	lost bool // bytes were dropped from the front
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
		t.lost = true
	}
	return len(p), nil
}

// String is what the buffer kept, after "…" if it dropped the start.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lost {
		return "…" + string(t.b)
	}
	return string(t.b)
}
