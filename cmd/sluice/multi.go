package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisproc"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// "sluice demo -processes N": N OS processes (this program run again, see
// child.go), each a sluice.Limiter with Options.Redis, all on one token
// against the one simulator, which this process runs and whose strict
// accounting sees every request of every process.

const (
	maxProcesses = 64
	// readyTimeout bounds how long the children may take to start.
	readyTimeout = 30 * time.Second
	// stopGrace is how long stopped children have to report before they
	// are killed.
	stopGrace = 10 * time.Second
	// redisOutage is how long -kill-redis keeps Redis down: longer than
	// the fallback's hold at the switch (two heartbeats + a call's timeout
	// + a global period, 3.25 s), so that the processes send on their
	// shares before Redis answers again.
	redisOutage = 5 * time.Second
	// liveRows caps the processes the live view shows.
	liveRows = 16
)

// checkMultiFlags checks -processes, -redis and -kill-redis, and finds
// redis-server when the demo must start its own. Nothing has started yet.
func checkMultiFlags(cfg *demoConfig) error {
	if err := between("demo", "processes", cfg.processes, 1, maxProcesses); err != nil {
		return err
	}
	if cfg.redisURL != "" {
		if _, err := redis.ParseURL(cfg.redisURL); err != nil {
			msg := err.Error() // go-redis quotes the URL, password and all
			if pw := urlPassword(cfg.redisURL); pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
			return usageErrorf("demo", "-redis %s: %s (want redis://host:port/db or unix:///path)", redactURL(cfg.redisURL), msg)
		}
	}
	switch {
	case cfg.processes == 1 && (cfg.redisURL != "" || cfg.killRedis):
		return usageErrorf("demo", "-redis and -kill-redis need -processes 2 or more")
	case cfg.processes == 1:
		return nil
	case cfg.killRedis && cfg.redisURL != "":
		return usageErrorf("demo", "-kill-redis kills the demo's private redis-server: it cannot be used with -redis")
	case cfg.size < cfg.processes:
		return usageErrorf("demo", "-size must be at least -processes (%d), got %d", cfg.processes, cfg.size)
	}
	if cfg.redisURL == "" {
		if cfg.redisBin = redisproc.Binary(); cfg.redisBin == "" {
			return usageErrorf("demo", "-processes %d needs Redis: pass -redis URL, or install redis-server (e.g. apt-get install redis-server) and the demo starts a private one", cfg.processes)
		}
	}
	return nil
}

// redactURL hides a URL's password, also in a URL net/url cannot parse.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	if pw := urlPassword(s); pw != "" {
		return strings.ReplaceAll(s, pw, "xxxxx")
	}
	return s
}

// urlPassword is the password in scheme://user:password@host…, or "".
func urlPassword(s string) string {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return ""
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	_, pw, _ := strings.Cut(rest[:at], ":")
	return pw
}

// syncWriter serializes writes: the children's stderr copiers share it.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// child is the parent's view of one demo process.
type child struct {
	name     string // "p1", …
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	requests int
	ready    bool
	done     int // requests ended, from its @P lines
	status   childStatus
	res      *childResult
	exited   bool
	err      error // how it ended, if not well
}

type eventKind int

const (
	evReady eventKind = iota
	evProgress
	evStatus
	evResult
	evExit
)

// event is a line from a child, or its exit.
type event struct {
	c      *child
	kind   eventKind
	status childStatus
	res    childResult
	err    error // evExit: Wait's error; evResult: a result not understood
}

// group runs the children and funnels what they say into events.
type group struct {
	children []*child
	events   chan event
	exits    int
	kill     context.CancelFunc // kills every child still running
}

// handle applies ev to its child.
func (g *group) handle(ev event) {
	c := ev.c
	switch ev.kind {
	case evReady:
		c.ready = true
	case evProgress:
		c.done++
	case evStatus:
		c.status = ev.status
	case evResult:
		if ev.err != nil {
			c.err = ev.err
		} else {
			c.res = &ev.res
		}
		c.stdin.Close() // it has reported: let it exit
	case evExit:
		c.exited = true
		g.exits++
		if ev.err != nil && c.err == nil {
			c.err = ev.err
		}
		if c.res == nil && c.err == nil {
			c.err = errors.New("ended without a result")
		}
	}
}

// stop closes every child's input: they cancel what is left and report.
func (g *group) stop() {
	for _, c := range g.children {
		c.stdin.Close()
	}
}

// shutdown stops the children, gives them stopGrace to end, kills those
// still running and waits until every one has exited and its reader
// goroutine has ended.
func (g *group) shutdown() {
	g.stop()
	grace := time.NewTimer(stopGrace)
	defer grace.Stop()
	for g.exits < len(g.children) {
		select {
		case ev := <-g.events:
			g.handle(ev)
		case <-grace.C:
			g.kill()
		}
	}
	g.kill()
}

// start runs child i of n.
func (g *group) start(killCtx context.Context, exe string, args, env []string, stderr io.Writer, i, requests int) error {
	c := &child{name: "p" + strconv.Itoa(i+1), requests: requests}
	c.cmd = exec.CommandContext(killCtx, exe, args...)
	c.cmd.Env = env
	c.cmd.SysProcAttr = childProcAttr()
	c.cmd.Stderr = stderr
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
		return fmt.Errorf("starting process %s: %w", c.name, err)
	}
	g.children = append(g.children, c)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			ev := event{c: c}
			switch {
			case line == "@P":
				ev.kind = evProgress
			case line == "@READY":
				ev.kind = evReady
			case strings.HasPrefix(line, "@S "):
				ev.kind = evStatus
				if json.Unmarshal([]byte(line[3:]), &ev.status) != nil {
					continue
				}
			case strings.HasPrefix(line, "@R "):
				ev.kind = evResult
				if err := json.Unmarshal([]byte(line[3:]), &ev.res); err != nil {
					ev.err = fmt.Errorf("its result is not understood: %w", err)
				}
			default:
				continue // not ours
			}
			g.events <- ev
		}
		_, _ = io.Copy(io.Discard, stdout)
		g.events <- event{c: c, kind: evExit, err: c.cmd.Wait()}
	}()
	return nil
}

// runMultiDemo runs the demo with cfg.processes processes on one token.
func runMultiDemo(ctx context.Context, cfg demoConfig) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot run this program again: %w", err)
	}
	// Redis: the user's, or a private one.
	var priv *redisproc.Server
	redisURL, redisDesc := cfg.redisURL, ""
	if redisURL == "" {
		if priv, err = redisproc.Start(ctx, cfg.redisBin); err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return err
		}
		defer priv.Close()
		redisURL = priv.URL
		redisDesc = "a private redis-server on " + priv.URL + ", stopped at the end"
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return err
	}
	redis.SetLogger(quietRedis{}) // a failed ping is an error of its own
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	pingCtx, cancelPing := context.WithTimeout(ctx, 5*time.Second)
	err = rdb.Ping(pingCtx).Err()
	cancelPing()
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("Redis at %s does not answer: %w", redactURL(redisURL), err)
	}
	// A fresh token, so a fresh key namespace: nothing another user of
	// this Redis has is read or written.
	token := "demo-" + rand.Text()
	ns := redisstore.Namespace(token)
	if cfg.redisURL != "" {
		redisDesc = redactURL(cfg.redisURL) + ", keys under " + ns + " (removed at the end)"
		defer deleteKeys(rdb, ns) // after the children are gone: deferred first
	}

	rules := demoRules()
	faults := faultsFor(cfg.scenario)
	srv, err := sluicetest.NewServer(sluicetest.Options{Rules: rules, Faults: faults, TimelineLimit: -1})
	if err != nil {
		return err
	}
	defer srv.Close()
	jobs := scenarios[cfg.scenario](cfg.size)
	n := cfg.processes

	killCtx, kill := context.WithCancel(context.Background())
	defer kill()
	var stderr io.Writer = cfg.errOut
	if _, ok := cfg.errOut.(*os.File); !ok { // copied by os/exec, one goroutine a child
		stderr = &syncWriter{w: cfg.errOut}
	}
	env := append(os.Environ(), childEnv+"=1", childTokenEnv+"="+token, childCertEnv+"="+string(srv.CertificatePEM()))
	g := &group{events: make(chan event, 4*n), kill: kill}
	defer g.shutdown()
	for i := range n {
		args := []string{childCommand, "-api", srv.APIBase(), "-redis", redisURL, "-scenario", cfg.scenario,
			"-size", strconv.Itoa(cfg.size), "-processes", strconv.Itoa(n), "-index", strconv.Itoa(i)}
		if cfg.trace {
			args = append(args, "-trace")
		}
		if err := g.start(killCtx, exe, args, env, stderr, i, (len(jobs)-i+n-1)/n); err != nil {
			return err
		}
	}
	pids := make([]string, n)
	for i, c := range g.children {
		pids[i] = strconv.Itoa(c.cmd.Process.Pid)
	}

	fmt.Fprintf(cfg.out, "Sluice demo: %q, %d requests from %d processes on one token against the simulator at %s\n", cfg.scenario, len(jobs), n, srv.URL)
	fmt.Fprintf(cfg.out, "Rules: Discord's, windows ×0.2 (messages 5/s per channel, reactions 1 per 50 ms), renames 2 per 3 s (hidden), global %d/s\n", rules.GlobalLimit)
	fmt.Fprintf(cfg.out, "Processes: pids %s, each a sluice.Limiter with Options.Redis; request i of the load goes to process i mod %d\n", strings.Join(pids, " "), n)
	fmt.Fprintf(cfg.out, "Redis: %s; fallback share 1/%d of every limit if it goes\n", redisDesc, n)
	if cfg.killRedis {
		fmt.Fprintf(cfg.out, "Redis will be killed a quarter into the load and restarted %s later: each process then counts 1/%d of every limit alone\n", redisOutage, n)
	}
	if cfg.progress {
		fmt.Fprintln(cfg.out, "(the live view shows each process's limiter, from the state it reports four times a second)")
	}
	fmt.Fprintln(cfg.out)

	// All ready, then all go.
	readyTimer := time.NewTimer(readyTimeout)
	defer readyTimer.Stop()
	for ready := 0; ready < n; {
		select {
		case ev := <-g.events:
			g.handle(ev)
			if ev.kind == evReady {
				ready++
			}
			if ev.kind == evExit {
				return fmt.Errorf("process %s (pid %d) ended before it was ready: %v", ev.c.name, ev.c.cmd.Process.Pid, ev.c.err)
			}
		case <-ctx.Done():
			fmt.Fprintln(cfg.out, "Interrupted before the load started")
			return context.Cause(ctx)
		case <-readyTimer.C:
			return fmt.Errorf("the processes were not ready within %s", readyTimeout)
		}
	}
	for _, c := range g.children {
		_, _ = io.WriteString(c.stdin, "go\n")
	}
	started := time.Now()
	lastAnswer := started

	var (
		done                  int
		interruptedAt         time.Time
		killedAt, restartedAt time.Duration
		killedDone            int
		restartErr            error
		restart, grace        <-chan time.Time
		dropped, failed       bool
		lines                 int
		lastPlain             = started
		stopping              = ctx.Done()
	)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for g.exits < n {
		select {
		case ev := <-g.events:
			g.handle(ev)
			switch ev.kind {
			case evProgress:
				done++
				lastAnswer = time.Now()
				if cfg.killRedis && killedAt == 0 && done >= max(1, len(jobs)/4) {
					priv.Kill()
					killedAt, killedDone = time.Since(started), done
					restart = time.After(redisOutage)
					if !cfg.progress {
						fmt.Fprintf(cfg.out, "  Redis killed after %s (%d/%d done)\n", killedAt.Round(10*time.Millisecond), done, len(jobs))
					}
				}
			case evExit:
				if ev.c.err != nil && !failed && stopping != nil {
					failed = true // one process failed: stop the others
					g.stop()
					grace = time.After(stopGrace)
				}
			}
		case <-restart:
			restart = nil
			if restartErr = priv.Restart(ctx); restartErr == nil {
				restartedAt = time.Since(started)
				if !cfg.progress {
					fmt.Fprintf(cfg.out, "  Redis restarted after %s (empty)\n", restartedAt.Round(10*time.Millisecond))
				}
			}
		case <-stopping:
			stopping = nil
			restart = nil // Redis stays down if it is: the demo is ending
			interruptedAt = time.Now()
			g.stop()
			grace = time.After(stopGrace)
		case <-grace:
			grace = nil
			g.kill()
		case <-tick.C:
			if cfg.scenario == "mixed" && !dropped && time.Since(started) > 5*time.Second {
				dropped = true
				srv.DropConnections() // the connections die mid-run
			}
			if cfg.progress {
				lines = drawMulti(cfg.out, g.children, done, len(jobs), started, killedAt, restartedAt, lines)
			} else if time.Since(lastPlain) >= 2*time.Second {
				lastPlain = time.Now()
				fmt.Fprintf(cfg.out, "  %d/%d done after %s\n", done, len(jobs), time.Since(started).Round(100*time.Millisecond))
			}
		}
	}
	if cfg.progress {
		drawMulti(cfg.out, g.children, done, len(jobs), started, killedAt, restartedAt, lines)
	}
	elapsed := lastAnswer.Sub(started)

	// Everything the processes reported, as if one had done it all.
	t := &tally{byKind: map[string]map[string]int{}, started: started}
	var m demoMetrics
	var problems []string
	lost := false
	for i, c := range g.children {
		if c.err != nil {
			problems = append(problems, fmt.Sprintf("process %s (pid %d): %v", c.name, c.cmd.Process.Pid, c.err))
		}
		if c.res == nil { // its requests have no known outcome
			lost = true
			for k, j := range jobs {
				if k%n == i {
					addOutcome(t, j.kind, "unknown (process "+c.name+" failed)", 1)
				}
			}
			continue
		}
		for kind, outcomes := range c.res.ByKind {
			for o, k := range outcomes {
				addOutcome(t, kind, o, k)
			}
		}
		t.cancelled.Add(int64(c.res.Cancelled))
		m.add(c.res.Metrics)
	}
	// Interrupted: some requests were cancelled, or lost with a process
	// that did not stop in time. (Every request ended before a late
	// signal is a finished run.)
	interrupted := !interruptedAt.IsZero() && (t.cancelled.Load() > 0 || lost)
	if interrupted {
		elapsed = interruptedAt.Sub(started)
	}
	st := srv.Stats()
	report(cfg.out, jobs, t, st, rules, faults.ExternalGlobal, m, elapsed, interrupted)
	processReport(cfg.out, g.children)
	if cfg.killRedis {
		switch {
		case killedAt == 0:
			fmt.Fprintln(cfg.out, "Redis was not killed: the load ended first")
		case restartErr != nil:
			fmt.Fprintf(cfg.out, "Redis killed after %s (%d/%d done); its restart failed: %v\n", killedAt.Round(10*time.Millisecond), killedDone, len(jobs), restartErr)
		case restartedAt == 0:
			why := "the load ended before its restart"
			if !interruptedAt.IsZero() {
				why = "not restarted: the demo was interrupted"
			}
			fmt.Fprintf(cfg.out, "Redis killed after %s (%d/%d done); %s\n", killedAt.Round(10*time.Millisecond), killedDone, len(jobs), why)
		default:
			fmt.Fprintf(cfg.out, "Redis killed after %s (%d/%d done), restarted empty after %s: the processes counted alone meanwhile (1/%d of each limit, evenly spaced)\n",
				killedAt.Round(10*time.Millisecond), killedDone, len(jobs), restartedAt.Round(10*time.Millisecond), n)
		}
		fmt.Fprintf(cfg.out, "  (a bucket whose limit is below %d still gets one request per window from each process then: it can see 429s; see docs/scale-out.md)\n", n)
	}
	verdict(cfg.out, st, n)
	for _, p := range problems {
		fmt.Fprintln(cfg.out, "Failed:", p)
	}

	switch v := st.Violations(); {
	case interrupted:
		return context.Cause(ctx)
	case len(problems) > 0:
		return fmt.Errorf("%d of %d processes failed: %s", len(problems), n, strings.Join(problems, "; "))
	case len(v) > 0:
		return fmt.Errorf("the simulator saw avoidable 429s: %s", strings.Join(v, "; "))
	}
	return nil
}

func addOutcome(t *tally, kind, outcome string, k int) {
	if t.byKind[kind] == nil {
		t.byKind[kind] = map[string]int{}
	}
	t.byKind[kind][outcome] += k
	t.done.Add(int64(k))
}

// processReport prints each process's share and its Snapshot().Shared at
// the end.
func processReport(w io.Writer, children []*child) {
	fmt.Fprintln(w, "\nPer process, with its limiter's Snapshot().Shared at the end: where it counts (mode), reservation calls Redis answered")
	fmt.Fprintln(w, "(granted or refused), requests granted alone while Redis was out (fallback), outages, failed Redis calls, processes seen:")
	fmt.Fprintf(w, "  %-7s %8s %8s  %-10s %8s %8s %7s %6s %4s  %s\n", "process", "pid", "requests", "mode", "reserved", "fallback", "outages", "errors", "seen", "outcomes")
	for _, c := range children {
		outcomes := "no result"
		mode, reserved, fallback, outages, errs, seen := "?", "-", "-", "-", "-", "-"
		if c.res != nil {
			count := map[string]int{}
			for _, byOutcome := range c.res.ByKind {
				for o, k := range byOutcome {
					count[o] += k
				}
			}
			var parts []string
			for o, k := range count {
				parts = append(parts, fmt.Sprintf("%s ×%d", o, k))
			}
			sort.Strings(parts)
			outcomes = strings.Join(parts, ", ")
			if s := c.res.Shared; s != nil {
				mode = s.Mode
				reserved, fallback = strconv.FormatInt(s.Reserved, 10), strconv.FormatInt(s.FallbackReserved, 10)
				outages, errs, seen = strconv.FormatInt(s.Outages, 10), strconv.FormatInt(s.Errors, 10), strconv.Itoa(s.Processes)
			}
		}
		fmt.Fprintf(w, "  %-7s %8d %8d  %-10s %8s %8s %7s %6s %4s  %s\n", c.name, c.cmd.Process.Pid, c.requests, mode, reserved, fallback, outages, errs, seen, outcomes)
	}
}

// verdict says whether the processes together stayed within every limit,
// as the simulator, which saw all their requests, counted.
func verdict(w io.Writer, st sluicetest.Stats, n int) {
	fullest := ""
	best := -1.0
	for _, b := range st.Buckets {
		if b.Limit > 0 {
			if r := float64(b.MaxAdmitted) / float64(b.Limit); r > best {
				best = r
				fullest = fmt.Sprintf("the fullest bucket window admitted %d of %d (%s %s)", b.MaxAdmitted, b.Limit, strings.Join(b.Rules, "+"), b.Major)
			}
		}
	}
	global := fmt.Sprintf("at most %d of %d in any %s of the global limit", st.MaxGlobalWindow, st.GlobalLimit, st.GlobalWindow)
	if v := st.Violations(); len(v) > 0 {
		fmt.Fprintf(w, "\nThe simulator's verdict: the %d processes together went over a limit: %s\n", n, strings.Join(v, "; "))
		return
	}
	fmt.Fprintf(w, "\nThe simulator's verdict: the %d processes together stayed within every limit: 0 avoidable 429s; %s; %s\n", n, fullest, global)
}

// drawMulti redraws the live view of a multi-process demo: a progress bar
// and a row per process from the state it last reported. It returns the
// number of lines drawn.
func drawMulti(w io.Writer, children []*child, done, total int, started time.Time, killedAt, restartedAt time.Duration, prev int) int {
	var b strings.Builder
	if prev > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", prev)
	}
	const width = 40
	filled := width * done / max(total, 1)
	redis := ""
	switch {
	case killedAt > 0 && restartedAt == 0:
		redis = fmt.Sprintf("  Redis killed at %s", killedAt.Round(100*time.Millisecond))
	case restartedAt > 0:
		redis = fmt.Sprintf("  Redis killed at %s, restarted at %s", killedAt.Round(100*time.Millisecond), restartedAt.Round(100*time.Millisecond))
	}
	fmt.Fprintf(&b, "\x1b[2K[%s%s] %d/%d  %s%s\n", strings.Repeat("█", filled), strings.Repeat("·", width-filled), done, total,
		time.Since(started).Round(100*time.Millisecond), redis)
	fmt.Fprintf(&b, "\x1b[2K%-7s %11s  %-13s %7s %5s  %-10s %8s %8s %7s\n", "process", "done", "supervisor", "pending", "wire", "redis mode", "reserved", "fallback", "outages")
	lines := 2
	for i, c := range children {
		if i == liveRows {
			fmt.Fprintf(&b, "\x1b[2K… and %d more processes\n", len(children)-liveRows)
			lines++
			break
		}
		s := c.status
		state := s.State
		switch {
		case c.exited:
			state = "exited"
		case state == "":
			state = "starting"
		}
		fmt.Fprintf(&b, "\x1b[2K%-7s %11s  %-13s %7d %5d  %-10s %8d %8d %7d\n", c.name, fmt.Sprintf("%d/%d", c.done, c.requests), state,
			s.Pending, s.Running, s.Mode, s.Reserved, s.Fallback, s.Outages)
		lines++
	}
	for ; lines < prev; lines++ {
		b.WriteString("\x1b[2K\n")
	}
	io.WriteString(w, b.String())
	return lines
}

// deleteKeys removes the demo's keys from a Redis the user named: those
// under its fresh namespace, nothing else. They would expire anyway.
func deleteKeys(rdb *redis.Client, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, ns+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 && iter.Err() == nil {
		rdb.Unlink(ctx, keys...)
	}
}
