package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
)

// startSimulate runs "sluice simulate" with args and returns the API base
// it printed, a function that stops it, and the rest of its output.
func startSimulate(t *testing.T, args ...string) (apiBase string, stop func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, append([]string{"simulate", "-addr", "127.0.0.1:0", "-stats-every", "0"}, args...), pw, io.Discard)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "API base:"); ok {
			apiBase = strings.TrimSpace(rest)
			break
		}
	}
	require.NotEmpty(t, apiBase)
	return apiBase, func() string {
		cancel()
		var b strings.Builder
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		require.NoError(t, <-errc)
		return b.String()
	}
}

func TestSimulateServesTLSWithTheWrittenCertificate(t *testing.T) {
	cert := filepath.Join(t.TempDir(), "cert.pem")
	base, stop := startSimulate(t, "-cert-out", cert)
	pem, err := os.ReadFile(cert)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", base+"/users/@me", nil)
	req.Header.Set("Authorization", "Bot test")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 2, resp.ProtoMajor)
	tr.CloseIdleConnections()
	out := stop()
	assert.Contains(t, out, "final: requests=1")
}

func TestSimulateH2CAndRules(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "r.json")
	require.NoError(t, os.WriteFile(rules, []byte(`{"rules":[{"name":"ping","method":"GET","route":"/ping","bucket":"p","limit":1,"window":"1h","auth":"optional"}]}`), 0o600))
	base, stop := startSimulate(t, "-h2c", "-rules", rules)
	tr := &http.Transport{}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for _, want := range []int{200, 429} {
		resp, err := c.Get(base + "/ping")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, want, resp.StatusCode)
	}
	tr.CloseIdleConnections()
	assert.Contains(t, stop(), "user=1")
}

func TestSimulateFlagsAndCommands(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(context.Background(), []string{"simulate", "-dump-rules"}, &out, io.Discard))
	assert.Contains(t, out.String(), "create_message")
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"version"}, &out, io.Discard))
	assert.True(t, strings.HasPrefix(out.String(), "sluice "+sluice.Version+"\n"), "the library's version first (TestVersionText has the rest): %q", out.String())
	assert.Error(t, run(context.Background(), []string{"nope"}, io.Discard, io.Discard))
	assert.Error(t, run(context.Background(), nil, io.Discard, io.Discard))
	assert.Error(t, run(context.Background(), []string{"simulate", "-scale", "0"}, io.Discard, io.Discard))
	assert.Error(t, run(context.Background(), []string{"simulate", "-error-rate", "2"}, io.Discard, io.Discard))
	assert.Error(t, run(context.Background(), []string{"simulate", "-rules", "/nonexistent.yaml"}, io.Discard, io.Discard))
	assert.Error(t, run(context.Background(), []string{"simulate", "extra"}, io.Discard, io.Discard))
}

func TestSimulateRejectsOutOfRangeValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"-global", "-1"}, "-global must be 0 or more, got -1"},
		{[]string{"-ip-global", "-1"}, "-ip-global must be 0 or more, got -1"},
		{[]string{"-scale", "0"}, "-scale must be between 0.001 and 1000, got 0"},
		{[]string{"-scale", "-2"}, "-scale must be between 0.001 and 1000, got -2"},
		{[]string{"-scale", "NaN"}, "-scale must be between 0.001 and 1000, got NaN"},
		{[]string{"-scale", "1e9"}, "-scale must be between 0.001 and 1000"},
		{[]string{"-latency", "-1ms"}, "-latency must be 0s or more, got -1ms"},
		{[]string{"-jitter", "-1ms"}, "-jitter must be 0s or more, got -1ms"},
		{[]string{"-forward-jitter", "-1ms"}, "-forward-jitter must be 0s or more, got -1ms"},
		{[]string{"-error-rate", "2"}, "-error-rate must be between 0 and 1, got 2"},
		{[]string{"-error-rate", "NaN"}, "-error-rate must be between 0 and 1, got NaN"},
		{[]string{"-drop-rate", "-0.1"}, "-drop-rate must be between 0 and 1, got -0.1"},
		{[]string{"-goaway-rate", "1.5"}, "-goaway-rate must be between 0 and 1, got 1.5"},
		{[]string{"-late-reset", "-1s"}, "-late-reset must be 0s or more, got -1s"},
		{[]string{"-for", "-1s"}, "-for must be 0s or more, got -1s"},
		{[]string{"-stats-every", "-1s"}, "-stats-every must be 0s or more, got -1s"},
		{[]string{"-dump-rules", "-global", "-1"}, "-global must be 0 or more"}, // checked before anything runs
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"extra", "-global", "-1"}, `unexpected argument "extra"`},
		{[]string{"-h2c", "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut strings.Builder
			err := run(context.Background(), append([]string{"simulate", "-addr", "127.0.0.1:0"}, tc.args...), &out, &errOut)
			var ue usageError
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, "simulate", ue.cmd)
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, out.String(), "a rejected simulator must not start")
			assert.Empty(t, errOut.String(), "main prints the error, once")
		})
	}
}

func TestHelpPrintsUsageToStdout(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-h"}, "Run \"sluice <command> -h\""},
		{[]string{"help"}, "Run \"sluice <command> -h\""},
		{[]string{"help", "demo"}, "Usage: sluice demo [flags]"},
		{[]string{"demo", "-h"}, "Usage: sluice demo [flags]"},
		{[]string{"demo", "-size", "5", "--help"}, "Usage: sluice demo [flags]"},
		{[]string{"simulate", "-help"}, "Usage: sluice simulate [flags]"},
		{[]string{"version", "-h"}, "Usage: sluice version"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut strings.Builder
			require.NoError(t, run(context.Background(), tc.args, &out, &errOut))
			assert.Contains(t, out.String(), tc.want)
			assert.Empty(t, errOut.String())
		})
	}
	var out strings.Builder
	require.NoError(t, run(context.Background(), []string{"demo", "-h"}, &out, io.Discard))
	assert.Contains(t, out.String(), "-size int")
	assert.Contains(t, out.String(), "number of requests, 1 to 100000")
}

func TestExitCode(t *testing.T) {
	var stderr strings.Builder
	assert.Equal(t, 0, exitCode(nil, &stderr))
	assert.Equal(t, 130, exitCode(interrupted{os.Interrupt}, &stderr))
	assert.Equal(t, 143, exitCode(interrupted{syscall.SIGTERM}, &stderr))
	assert.Equal(t, 130, exitCode(context.Canceled, &stderr))
	assert.Empty(t, stderr.String(), "an interrupted demo has said so in its report")
	assert.ErrorIs(t, interrupted{os.Interrupt}, context.Canceled)

	assert.Equal(t, 2, exitCode(usageErrorf("demo", "-size must be between 1 and 100000, got 0"), &stderr))
	assert.Equal(t, "sluice demo: -size must be between 1 and 100000, got 0\nRun \"sluice demo -h\" for usage.\n", stderr.String())
	stderr.Reset()
	assert.Equal(t, 2, exitCode(errors.New("listen: address in use"), &stderr))
	assert.Equal(t, "sluice: listen: address in use\n", stderr.String())
}

// buildSluice builds the command into a temporary directory and returns
// the binary's path.
func buildSluice(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// TestExitStatus runs the binary: explicit help exits 0 with the usage on
// stdout; unknown flags, arguments a command does not take and values out
// of range exit 2 with one clear message on stderr.
func TestExitStatus(t *testing.T) {
	bin := buildSluice(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // in stdout
		stderr string // in stderr
	}{
		{[]string{"-h"}, 0, "Usage:", ""},
		{[]string{"--help"}, 0, "Usage:", ""},
		{[]string{"help"}, 0, "Usage:", ""},
		{[]string{"help", "simulate"}, 0, "Usage: sluice simulate", ""},
		{[]string{"version"}, 0, "sluice " + sluice.Version, ""},
		{[]string{"--version"}, 0, "sluice " + sluice.Version, ""},
		{[]string{"--version", "x"}, 2, "", `unexpected argument "x"`},
		{[]string{"demo", "-h"}, 0, "Usage: sluice demo", ""},
		{[]string{"demo", "-help"}, 0, "Usage: sluice demo", ""},
		{[]string{"demo", "--help"}, 0, "Usage: sluice demo", ""},
		{[]string{"simulate", "-h"}, 0, "Usage: sluice simulate", ""},
		{[]string{"simulate", "-help"}, 0, "Usage: sluice simulate", ""},
		{[]string{"simulate", "--help"}, 0, "Usage: sluice simulate", ""},
		{nil, 2, "", "Usage:"},
		{[]string{"nope"}, 2, "", `sluice: unknown command "nope"`},
		{[]string{"help", "nope"}, 2, "", `"nope": not a command`},
		{[]string{"version", "extra"}, 2, "", `sluice version: unexpected argument "extra"`},
		{[]string{"demo", "-bogus"}, 2, "", "sluice demo: flag provided but not defined: -bogus\nRun \"sluice demo -h\" for usage.\n"},
		{[]string{"demo", "extra", "-size", "1"}, 2, "", `sluice demo: unexpected argument "extra": demo takes no arguments`},
		{[]string{"demo", "-size", "-1"}, 2, "", "sluice demo: -size must be between 1 and 100000, got -1"},
		{[]string{"demo", "-processes", "0"}, 2, "", "sluice demo: -processes must be between 1 and 64, got 0\nRun \"sluice demo -h\" for usage.\n"},
		{[]string{"demo", "-processes", "65"}, 2, "", "sluice demo: -processes must be between 1 and 64, got 65"},
		{[]string{"demo", "-processes", "2", "-redis", "http://localhost:6379"}, 2, "", "sluice demo: -redis http://localhost:6379: redis: invalid URL scheme: http"},
		{[]string{"demo", "-processes", "2", "-redis", "redis://:pw@localhost:6379/x"}, 2, "", "sluice demo: -redis redis://:xxxxx@localhost:6379/x: redis: invalid database number"},
		{[]string{"demo-child"}, 2, "", `sluice demo: demo-child is run by "sluice demo -processes N", not by hand`},
		{[]string{"simulate", "-bogus"}, 2, "", "sluice simulate: flag provided but not defined: -bogus"},
		{[]string{"simulate", "extra"}, 2, "", `sluice simulate: unexpected argument "extra"`},
		{[]string{"simulate", "-global", "-5"}, 2, "", "sluice simulate: -global must be 0 or more, got -5"},
		{[]string{"simulate", "-latency", "-1s"}, 2, "", "sluice simulate: -latency must be 0s or more, got -1s"},
		{[]string{"simulate", "-for", "-1s"}, 2, "", "sluice simulate: -for must be 0s or more, got -1s"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			var stdout, stderr strings.Builder
			cmd := exec.Command(bin, tc.args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.code, code, "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
			if tc.stdout == "" {
				assert.Empty(t, stdout.String())
			} else {
				assert.Contains(t, stdout.String(), tc.stdout)
			}
			if tc.stderr == "" {
				assert.Empty(t, stderr.String())
			} else {
				assert.Contains(t, stderr.String(), tc.stderr)
			}
		})
	}
}
