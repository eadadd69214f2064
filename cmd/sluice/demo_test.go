package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDemoMixedReportsNoAvoidable429s(t *testing.T) {
	var out, errOut strings.Builder
	err := run(context.Background(), []string{"demo", "-size", "120", "-progress", "off"}, &out, &errOut)
	require.NoError(t, err, out.String())
	report := out.String()
	t.Log(report)
	assert.Contains(t, report, "Done: 120 requests")
	assert.Contains(t, report, "Avoidable 429s (the simulator's verdict): 0")
	assert.Contains(t, report, "Ideal for this load, from the rules:")
	assert.Contains(t, report, "Where the time went")
	for _, kind := range []string{"fan-out", "hot channel", "reactions", "new route", "shared hash", "interactions", "renames"} {
		assert.Contains(t, report, kind)
	}
}

// The priorities scenario: bulk work and interactions sent over the run,
// each class's time from send to answer in the report, and the live view
// counting the waiting requests by priority.
func TestDemoPrioritiesReportsEachClass(t *testing.T) {
	var out, errOut strings.Builder
	err := run(context.Background(), []string{"demo", "-scenario", "priorities", "-size", "150", "-progress", "on"}, &out, &errOut)
	require.NoError(t, err, out.String())
	report := out.String()
	assert.Contains(t, report, "Done: 150 requests")
	assert.Contains(t, report, "Avoidable 429s (the simulator's verdict): 0")
	assert.Regexp(t, `bulk +200 ×135`, report)
	assert.Regexp(t, `From send to answer, by kind \(p50 / p99 / max\):\n  bulk +[0-9.]+m?s / `, report)
	assert.Regexp(t, `\n  interactive +[0-9.]+m?s / [0-9.]+m?s / `, report)
	assert.Regexp(t, `\n  interactive\* +[0-9.]+m?s / `, report)
	assert.Regexp(t, `waiting \((interactive \d+, )?bulk \d+\)`, report, "the live view counts by priority")
}

func TestDemoTraceAndLiveView(t *testing.T) {
	var out, errOut strings.Builder
	err := run(context.Background(), []string{"demo", "-scenario", "saturated", "-size", "12", "-trace", "-progress", "on"}, &out, &errOut)
	require.NoError(t, err)
	trace := errOut.String()
	assert.Contains(t, trace, "bucket     receive    enqueue")
	assert.Contains(t, trace, "transition discovered")
	assert.NotContains(t, trace, "demo-token")
	assert.Contains(t, out.String(), "supervisor connected")
	assert.Contains(t, out.String(), "live buckets")
	// Requests wait for the saturated bucket: the live view tells when
	// the last one goes.
	assert.Contains(t, out.String(), "last ETA")
	assert.Regexp(t, `waiting, the last submitted goes in \+[0-9.]+m?s \(bucket, place \d+ in its bucket\)`, out.String())
}

func TestDemoFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"-scenario", "nope"}, `unknown -scenario "nope"`},
		{[]string{"-size", "0"}, "-size must be between 1 and 100000, got 0"},
		{[]string{"-size", "-5"}, "-size must be between 1 and 100000, got -5"},
		{[]string{"-size", "100001"}, "-size must be between 1 and 100000, got 100001"},
		{[]string{"-progress", "sometimes"}, "-progress must be auto, on or off"},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
		// Go's flag stops at the first argument that is not a flag: the
		// demo must not run with "-size 1" silently ignored.
		{[]string{"extra", "-size", "1"}, `unexpected argument "extra"`},
		{[]string{"-size", "1", "extra"}, `unexpected argument "extra"`},
		{[]string{"--", "extra"}, `unexpected argument "extra"`},
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
}

// TestDemoInterruptedReportsWhatCompletedAndExits130 runs the binary, sends
// it SIGINT once it has started, and checks that the report says the run
// was interrupted, counts what completed, draws no ratio to the ideal time,
// and that the process exits 130.
func TestDemoInterruptedReportsWhatCompletedAndExits130(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no SIGINT to send on Windows")
	}
	bin := buildSluice(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// 1000 requests to one channel at 5/s: over three minutes if not stopped.
	cmd := exec.CommandContext(ctx, bin, "demo", "-scenario", "saturated", "-size", "1000", "-progress", "off")
	cmd.WaitDelay = 10 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	// Interrupt once the demo has started and printed a progress line with
	// requests done ("  5/1000 done after 2s").
	r := bufio.NewReader(stdout)
	var head strings.Builder
	progress := regexp.MustCompile(`^  (\d+)/1000 done after`)
	doneBefore := 0
	for doneBefore == 0 {
		line, err := r.ReadString('\n')
		require.NoError(t, err, "output so far: %s", head.String())
		if head.Len() == 0 {
			require.Contains(t, line, `Sluice demo: "saturated", 1000 requests`)
		}
		head.WriteString(line)
		if m := progress.FindStringSubmatch(line); m != nil {
			doneBefore, _ = strconv.Atoi(m[1])
		}
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	err = cmd.Wait()
	out := head.String() + string(rest)
	t.Log(out)

	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "stderr: %s", stderr.String())
	assert.Equal(t, 130, exit.ExitCode())
	assert.Empty(t, stderr.String())
	m := regexp.MustCompile(`\nInterrupted after [0-9.]+m?s: (\d+) of 1000 requests completed, (\d+) cancelled\n`).FindStringSubmatch(out)
	require.NotNil(t, m, "no interruption line")
	completed, _ := strconv.Atoi(m[1])
	cancelled, _ := strconv.Atoi(m[2])
	assert.Equal(t, 1000, completed+cancelled)
	assert.GreaterOrEqual(t, completed, doneBefore)
	assert.Positive(t, completed)
	assert.Positive(t, cancelled)
	assert.Contains(t, out, "hot channel   200 ×")
	assert.Contains(t, out, "cancelled ×")
	assert.Contains(t, out, "No ratio to the ideal time: the run was interrupted")
	assert.NotContains(t, out, "of the ideal time")
	assert.NotContains(t, out, "Done:")
}
