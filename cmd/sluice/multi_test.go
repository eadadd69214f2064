package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/redisproc"
)

// TestMain runs the test binary as the sluice command when "sluice demo
// -processes N", run in-process by a test, starts it again as one of its
// children (os.Executable is then this binary); else it runs the tests
// and checks that they leave no goroutine behind.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		main()
	}
	goleak.VerifyTestMain(m)
}

// needRedis skips t without redis-server, except under CI=true.
func needRedis(t *testing.T) {
	t.Helper()
	if redisproc.Binary() == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed, and CI=true requires it")
		}
		t.Skip("redis-server is not installed")
	}
}

// perProcess matches a process's line of the report: name, pid, requests,
// mode, reserved, fallback, outages, errors, processes seen, outcomes.
var perProcess = regexp.MustCompile(`(?m)^  (p\d+) +(\d+) +(\d+)  (\S+) +(\d+) +(\d+) +(\d+) +(\d+) +(\d+)  (.*)$`)

type processLine struct {
	name                                            string
	requests, reserved, fallback, outages, seen, ok int
	mode, outcomes                                  string
}

func processLines(t *testing.T, report string) []processLine {
	t.Helper()
	var out []processLine
	for _, m := range perProcess.FindAllStringSubmatch(report, -1) {
		n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
		pl := processLine{name: m[1], requests: n(3), mode: m[4], reserved: n(5), fallback: n(6), outages: n(7), seen: n(9), outcomes: m[10]}
		for _, part := range strings.Split(pl.outcomes, ", ") {
			if v, ok := strings.CutPrefix(part, "200 ×"); ok {
				pl.ok, _ = strconv.Atoi(v)
			}
		}
		out = append(out, pl)
	}
	return out
}

// TestDemoProcessesStayWithinEveryLimit runs "sluice demo -processes 3"
// on a private redis-server: three OS processes on one token, judged
// together by the simulator. Every request is answered 200, no limit is
// exceeded, and each process counted in Redis.
func TestDemoProcessesStayWithinEveryLimit(t *testing.T) {
	needRedis(t)
	for _, tc := range []struct {
		scenario string
		size     int
		kind     string
	}{
		// One channel, 5 per second: the bucket binds (about 11 s).
		{"saturated", 60, "hot channel"},
		// 100 channels: the global limit, 50 per second, binds (about 6 s).
		{"fanout", 300, "fan-out"},
		// One channel renamed: the hidden limit, 2 per 3 s on the demo's
		// clock, which every process declares as one process does (about
		// 6 s; with Discord's own 2 per 10 min they were refused).
		{"sublimit", 6, "renames"},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			t.Parallel()
			var out, errOut strings.Builder
			size := strconv.Itoa(tc.size)
			err := run(context.Background(), []string{"demo", "-processes", "3", "-scenario", tc.scenario, "-size", size, "-progress", "off"}, &out, &errOut)
			report := out.String()
			t.Log(report)
			require.NoError(t, err, "stderr: %s", errOut.String())
			assert.Empty(t, errOut.String())
			assert.Contains(t, report, `"`+tc.scenario+`", `+size+" requests from 3 processes on one token")
			assert.Contains(t, report, "Redis: a private redis-server on unix://")
			assert.Contains(t, report, "Done: "+size+" requests")
			assert.Regexp(t, `\n  `+tc.kind+` +200 ×`+size+`\n`, report, "every request answered 200")
			assert.Contains(t, report, "for "+size+" requests ended)", "the limiters' own count of outcomes")
			assert.Contains(t, report, "429s by scope: user 0, global 0")
			assert.Contains(t, report, "Avoidable 429s (the simulator's verdict): 0\n")
			assert.Contains(t, report, "The simulator's verdict: the 3 processes together stayed within every limit: 0 avoidable 429s")
			assert.Regexp(t, `of the ideal time`, report)
			lines := processLines(t, report)
			require.Len(t, lines, 3, "one line per process")
			total, most := 0, 0
			for i, pl := range lines {
				assert.Equal(t, "p"+strconv.Itoa(i+1), pl.name)
				assert.Equal(t, tc.size/3, pl.requests, "each process has its share")
				assert.Equal(t, pl.requests, pl.ok, "%s: every request of the process answered", pl.name)
				assert.Equal(t, "shared", pl.mode)
				assert.GreaterOrEqual(t, pl.reserved, pl.requests, "%s reserved each request in Redis", pl.name)
				// A Redis call slower than RedisTimeout counts as an
				// outage (on a busy machine, one in a few runs): the
				// limits hold either way (the verdict above). Without an
				// outage, nothing is granted on the fallback share.
				if pl.outages == 0 {
					assert.Zero(t, pl.fallback, "%s: granted on its fallback share without an outage", pl.name)
				} else {
					t.Logf("%s: %d Redis outages, %d requests granted on its fallback share", pl.name, pl.outages, pl.fallback)
				}
				// The count comes with each heartbeat (every second): a
				// process that beat first at its start and was done within
				// a second has seen only itself.
				assert.True(t, pl.seen >= 1 && pl.seen <= 3, "%s saw 1 to 3 processes in Redis: %d", pl.name, pl.seen)
				most = max(most, pl.seen)
				total += pl.ok
			}
			assert.Equal(t, 3, most, "the last process to start saw the 3 in Redis")
			assert.Equal(t, tc.size, total)
		})
	}
	// Redis killed a quarter into the load and restarted 5 s later: the
	// processes fall back to 1/3 of the bucket each, nothing is lost,
	// nothing goes over, and they return to shared limits.
	t.Run("kill-redis", func(t *testing.T) {
		t.Parallel()
		var out, errOut strings.Builder
		err := run(context.Background(), []string{"demo", "-processes", "3", "-scenario", "saturated", "-size", "60", "-kill-redis", "-progress", "off"}, &out, &errOut)
		report := out.String()
		t.Log(report)
		require.NoError(t, err, "stderr: %s", errOut.String())
		assert.Empty(t, errOut.String(), "go-redis's dial errors are counted, not printed")
		assert.Regexp(t, `\n  Redis killed after [0-9.]+m?s \(\d+/60 done\)\n`, report)
		assert.Regexp(t, `\nRedis killed after [0-9.]+m?s \(\d+/60 done\), restarted empty after`, report)
		assert.Regexp(t, `\n  hot channel +200 ×60\n`, report)
		assert.Contains(t, report, "The simulator's verdict: the 3 processes together stayed within every limit")
		lines := processLines(t, report)
		require.Len(t, lines, 3)
		fallback := 0
		for _, pl := range lines {
			assert.Equal(t, pl.requests, pl.ok, "%s: every request answered", pl.name)
			assert.GreaterOrEqual(t, pl.outages, 1, "%s noticed the outage", pl.name)
			assert.NotEqual(t, "fallback", pl.mode, "%s still counts alone after Redis came back", pl.name)
			fallback += pl.fallback
		}
		assert.Positive(t, fallback, "requests were granted alone while Redis was down")
	})
}

// TestDemoProcessesLiveView draws the multi-process live view: a row per
// process with its limiter's state and where it counts.
func TestDemoProcessesLiveView(t *testing.T) {
	needRedis(t)
	t.Parallel()
	var out, errOut strings.Builder
	err := run(context.Background(), []string{"demo", "-processes", "2", "-scenario", "fanout", "-size", "60", "-progress", "on"}, &out, &errOut)
	require.NoError(t, err, "stderr: %s", errOut.String())
	report := out.String()
	assert.Contains(t, report, "\x1b[2Kprocess        done  supervisor    pending  wire  redis mode reserved fallback outages\n")
	// The last frame: every request done, each process's state at its end.
	for _, p := range []string{"p1", "p2"} {
		// Fallback grants and outages: 0 unless a Redis call outlasted
		// RedisTimeout on a busy machine (TestDemoProcessesStayWithinEveryLimit
		// checks them).
		assert.Regexp(t, `\x1b\[2K`+p+` +30/30  exited +0 +0  shared +[1-9]\d* +\d+ +\d+\n`, report)
	}
	assert.Contains(t, report, "The simulator's verdict: the 2 processes together stayed within every limit")
}

func TestDemoProcessesFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"-processes", "0"}, "-processes must be between 1 and 64, got 0"},
		{[]string{"-processes", "65"}, "-processes must be between 1 and 64, got 65"},
		{[]string{"-processes", "-1"}, "-processes must be between 1 and 64, got -1"},
		{[]string{"-processes", "2", "-redis", "http://localhost:6379"}, "-redis http://localhost:6379: redis: invalid URL scheme: http"},
		{[]string{"-processes", "2", "-redis", "localhost:6379"}, "-redis localhost:6379:"},
		{[]string{"-processes", "2", "-redis", "redis://localhost:6379/notadb"}, "-redis redis://localhost:6379/notadb:"},
		{[]string{"-redis", "redis://localhost:6379"}, "-redis and -kill-redis need -processes 2 or more"},
		{[]string{"-kill-redis"}, "-redis and -kill-redis need -processes 2 or more"},
		{[]string{"-processes", "2", "-kill-redis", "-redis", "redis://localhost:6379"}, "-kill-redis kills the demo's private redis-server"},
		{[]string{"-processes", "4", "-size", "3"}, "-size must be at least -processes (4), got 3"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut strings.Builder
			err := run(context.Background(), append([]string{"demo"}, tc.args...), &out, &errOut)
			var ue usageError
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, "demo", ue.cmd)
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, out.String(), "a rejected demo must not start")
			assert.Empty(t, errOut.String(), "main prints the error, once")
		})
	}
	// A password in a URL is not repeated.
	err := run(context.Background(), []string{"demo", "-processes", "2", "-redis", "redis://user:s3cret@localhost:notaport"}, io.Discard, io.Discard)
	var ue usageError
	require.ErrorAs(t, err, &ue)
	assert.NotContains(t, err.Error(), "s3cret")
	// The child command is not for people.
	err = run(context.Background(), []string{childCommand}, io.Discard, io.Discard)
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), `is run by "sluice demo -processes N"`)
}

// Without redis-server and without -redis, the demo says what it needs and
// exits 2, before starting anything.
func TestDemoProcessesWithoutRedis(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var out, errOut strings.Builder
	err := run(context.Background(), []string{"demo", "-processes", "2"}, &out, &errOut)
	var ue usageError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), "-processes 2 needs Redis: pass -redis URL, or install redis-server")
	assert.Equal(t, 2, exitCode(err, io.Discard))
	assert.Empty(t, out.String())
}

// A -redis that does not answer is a failure (exit 2) said before the
// demo starts.
func TestDemoProcessesRedisUnreachable(t *testing.T) {
	t.Parallel()
	var out, errOut strings.Builder
	sock := filepath.Join(t.TempDir(), "none.sock")
	err := run(context.Background(), []string{"demo", "-processes", "2", "-redis", "unix://" + sock}, &out, &errOut)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Redis at unix://"+sock+" does not answer")
	assert.Equal(t, 2, exitCode(err, io.Discard))
	assert.Empty(t, out.String())
}

// startDemo runs the built binary with args and reads its output until a
// progress line shows requests done. It returns the command, what it
// printed so far, the rest of stdout and its stderr pipe.
func startDemo(t *testing.T, bin string, args ...string) (cmd *exec.Cmd, head string, stdout *bufio.Reader, stderr io.Reader) {
	t.Helper()
	cmd = exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	errPipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	r := bufio.NewReader(out)
	var b strings.Builder
	progress := regexp.MustCompile(`^  (\d+)/\d+ done after`)
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err, "output so far: %s", b.String())
		b.WriteString(line)
		if m := progress.FindStringSubmatch(line); m != nil && m[1] != "0" {
			return cmd, b.String(), r, errPipe
		}
	}
}

// waitEOF reads r to its end, which comes once every process holding its
// other end has exited: the demo and the children that share its stderr.
func waitEOF(t *testing.T, r io.Reader, what string) string {
	t.Helper()
	type res struct {
		b   []byte
		err error
	}
	c := make(chan res, 1)
	go func() { b, err := io.ReadAll(r); c <- res{b, err} }()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case x := <-c:
		require.NoError(t, x.err)
		return string(x.b)
	case <-timer.C:
		t.Fatalf("%s: still running 30 s later", what)
		return ""
	}
}

// pids reads the children's pids from the demo's header.
func pids(t *testing.T, head string) []int {
	t.Helper()
	m := regexp.MustCompile(`\nProcesses: pids ([0-9 ]+), `).FindStringSubmatch(head)
	require.NotNil(t, m, "no pids in %s", head)
	var out []int
	for _, f := range strings.Fields(m[1]) {
		p, _ := strconv.Atoi(f)
		out = append(out, p)
	}
	return out
}

// TestDemoProcessesInterrupted: SIGINT stops the children, which report
// what they did; the report counts it, and the demo exits 130 with no
// child left.
func TestDemoProcessesInterrupted(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGINT to send on Windows")
	}
	needRedis(t)
	t.Parallel()
	bin := buildSluice(t)
	// 600 requests to one channel at 5/s: two minutes if not stopped.
	cmd, head, stdout, stderr := startDemo(t, bin, "demo", "-processes", "2", "-scenario", "saturated", "-size", "600", "-progress", "off")
	require.Len(t, pids(t, head), 2)
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	rest, err := io.ReadAll(stdout)
	require.NoError(t, err)
	errText := waitEOF(t, stderr, "a child of the interrupted demo")
	err = cmd.Wait()
	out := head + string(rest)
	t.Log(out)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "stderr: %s", errText)
	assert.Equal(t, 130, exit.ExitCode())
	assert.Empty(t, errText)
	m := regexp.MustCompile(`\nInterrupted after [0-9.]+m?s: (\d+) of 600 requests completed, (\d+) cancelled\n`).FindStringSubmatch(out)
	require.NotNil(t, m, "no interruption line")
	completed, _ := strconv.Atoi(m[1])
	cancelled, _ := strconv.Atoi(m[2])
	assert.Equal(t, 600, completed+cancelled)
	assert.Positive(t, completed)
	assert.Positive(t, cancelled)
	assert.Contains(t, out, "No ratio to the ideal time: the run was interrupted")
	lines := processLines(t, out)
	require.Len(t, lines, 2, "both processes reported")
	for _, pl := range lines {
		assert.Contains(t, pl.outcomes, "cancelled ×")
	}
	assert.Contains(t, out, "The simulator's verdict: the 2 processes together stayed within every limit")
}

// TestDemoProcessesDieWithTheParent: the demo killed outright (SIGKILL,
// no chance to clean up) takes its children with it: they share its
// stderr, which ends only when they have all exited.
func TestDemoProcessesDieWithTheParent(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGKILL on Windows")
	}
	needRedis(t)
	t.Parallel()
	bin := buildSluice(t)
	cmd, head, stdout, stderr := startDemo(t, bin, "demo", "-processes", "2", "-scenario", "saturated", "-size", "600", "-progress", "off")
	if m := regexp.MustCompile(`private redis-server on unix://(\S+)/r\.sock,`).FindStringSubmatch(head); m != nil {
		t.Cleanup(func() { os.RemoveAll(m[1]) }) // the demo had no chance to
	}
	require.Len(t, pids(t, head), 2)
	require.NoError(t, cmd.Process.Kill())
	_, _ = io.Copy(io.Discard, stdout)
	waitEOF(t, stderr, "a child of the killed demo")
	var exit *exec.ExitError
	require.ErrorAs(t, cmd.Wait(), &exit)
	assert.Equal(t, -1, exit.ExitCode(), "killed by a signal")
}
