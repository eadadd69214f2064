package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"debug/elf"
	"debug/pe"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/proxy"
)

// The operator kit under deploy/ must agree with this binary: every flag
// and SLUICE_* variable it names exists, the probes ask the endpoints and
// ports that answer them, the shutdown times fit inside the supervisor's
// patience, and the compose file's proxies reach its simulator. The files
// are read as their tools read them (YAML, the unit and environment file
// line by line, the Containerfile's instructions), and every command line
// they give the proxy is parsed by parseProxyFlags itself, defaults and
// environment included.

// deployDir is deploy/ seen from this package's directory, where go test
// runs.
const deployDir = "../../deploy"

// deployPath is a file under deploy/.
func deployPath(parts ...string) string {
	return filepath.Join(append([]string{deployDir}, parts...)...)
}

// proxyFlagNames is the set of the proxy's flags.
func proxyFlagNames() map[string]bool {
	names := map[string]bool{}
	proxyFlagSet(&proxyFlags{}).VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}

// proxyEnvNames is the set of variables the proxy reads: one per flag,
// and SLUICE_TOKEN.
func proxyEnvNames() map[string]bool {
	names := map[string]bool{proxyTokenEnv: true}
	for f := range proxyFlagNames() {
		names[proxyEnvName(f)] = true
	}
	return names
}

// simulateFlagNames is the set of the simulator's flags, as its usage
// lists them (simulate.go defines them inside the command).
func simulateFlagNames(t *testing.T) map[string]bool {
	t.Helper()
	var out strings.Builder
	require.NoError(t, run(context.Background(), []string{"simulate", "-h"}, &out, io.Discard))
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(out.String(), -1) {
		names[m[1]] = true
	}
	require.Contains(t, names, "addr", "the simulator's usage lists its flags:\n%s", out.String())
	return names
}

// resolveProxy parses a proxy command line (args[0] is "proxy") with env
// as its whole environment, as the process would: an unknown flag or
// variable, or a value the proxy refuses, fails t naming where it is.
func resolveProxy(t *testing.T, where string, args []string, env map[string]string) *proxyFlags {
	t.Helper()
	require.NotEmpty(t, args, "%s: no command line", where)
	require.Equal(t, "proxy", args[0], "%s: the command line %q runs no proxy", where, args)
	known := proxyEnvNames()
	for k := range env {
		if strings.HasPrefix(k, proxyEnvPrefix) {
			assert.True(t, known[k], "%s: %s is no variable of sluice proxy (one per flag: SLUICE_ + its name, - as _; and SLUICE_TOKEN)", where, k)
		}
	}
	f, done, err := parseProxyFlags(args[1:], func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
	require.NoError(t, err, "%s: sluice %s", where, strings.Join(args, " "))
	require.False(t, done, "%s: the command line only asks for help", where)
	return f
}

// checkSimulate checks a simulator command line (args[0] is "simulate")
// by parsing it followed by -h: an unknown flag, a value of the wrong type
// or a stray argument is an error before the usage is printed.
func checkSimulate(t *testing.T, where string, args []string) {
	t.Helper()
	require.NotEmpty(t, args, "%s: no command line", where)
	require.Equal(t, "simulate", args[0], where)
	err := run(context.Background(), append(slices.Clone(args), "-h"), io.Discard, io.Discard)
	require.NoError(t, err, "%s: sluice %s", where, strings.Join(args, " "))
}

// flagValue is the value of -name in args (a command line of separate
// words, -name value or -name=value), and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		a = "-" + strings.TrimLeft(a, "-")
		if a == "-"+name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "-"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// portOf is the port of a host:port address.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err, addr)
	n, err := strconv.Atoi(port)
	require.NoError(t, err, addr)
	return n
}

// servedPorts maps the port of each listener that answers HealthPath and
// ReadyPath to whether it is -listen (TLS with -tls-cert) rather than
// -metrics-listen (always plain HTTP): proxyCommand serves both paths on
// both.
func servedPorts(t *testing.T, f *proxyFlags) map[int]bool {
	t.Helper()
	ports := map[int]bool{portOf(t, f.listen): true}
	if f.metricsListen != "" {
		ports[portOf(t, f.metricsListen)] = false
	}
	return ports
}

// ---- The whole of deploy/: names ----

// sluiceCommandLine matches a sluice command line written in a file: the
// binary, or an image named sluice, then the subcommand and its words.
var sluiceCommandLine = regexp.MustCompile(`(?:^|[\s/"'=])sluice(?::[\w.-]+)?\s+(proxy|simulate)\b(.*)$`)

// TestDeployNamesExistingFlagsAndVariables reads every file under deploy/
// (and docs/proxy.md, which points at them), comments included: every
// SLUICE_* variable named is one the proxy reads, and every flag on a
// written sluice proxy or sluice simulate command line is one of that
// command's.
func TestDeployNamesExistingFlagsAndVariables(t *testing.T) {
	envNames := proxyEnvNames()
	flagsOf := map[string]map[string]bool{"proxy": proxyFlagNames(), "simulate": simulateFlagNames(t)}
	variable := regexp.MustCompile(`\bSLUICE_[A-Z0-9_]*[A-Z0-9]\b`)
	files := []string{"../../docs/proxy.md"}
	require.NoError(t, filepath.WalkDir(deployDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, path)
		}
		return err
	}))
	var lines, commands int
	for _, path := range files {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			lines++
			where := fmt.Sprintf("%s:%d", path, i+1)
			for _, v := range variable.FindAllString(line, -1) {
				assert.True(t, envNames[v], "%s: %s is no variable of sluice proxy", where, v)
			}
			m := sluiceCommandLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			commands++
			for _, word := range strings.Fields(m[2]) {
				if strings.ContainsAny(word[:1], "|&;#`)") || strings.HasPrefix(word, "$(") {
					break // the end of the command
				}
				name, ok := strings.CutPrefix(strings.Trim(word, `"',[]`), "-")
				if !ok || name == "" || name[0] >= '0' && name[0] <= '9' {
					continue // a value
				}
				name, _, _ = strings.Cut(strings.TrimPrefix(name, "-"), "=")
				if name == "h" || name == "help" {
					continue
				}
				assert.True(t, flagsOf[m[1]][name], "%s: -%s is no flag of sluice %s: %s", where, name, m[1], strings.TrimSpace(line))
			}
		}
	}
	t.Logf("%d files, %d lines, %d sluice command lines", len(files), lines, commands)
	assert.Greater(t, commands, 5, "the command lines were found")
}

// ---- Containerfile ----

// containerfile is what the image recipe says about the final image.
type containerfile struct {
	from       []string // every stage's base image, in order
	user       string   // the final stage's USER
	entrypoint []string
	cmd        []string
	expose     []int
	copies     []string // the final stage's COPY instructions' words
	goBuild    string   // the RUN line that runs go build
	buildArgs  map[string]string
	final      []string // the final stage's instructions
}

// readContainerfile parses deploy/container/Containerfile.
func readContainerfile(t *testing.T) containerfile {
	t.Helper()
	b, err := os.ReadFile(deployPath("container", "Containerfile"))
	require.NoError(t, err)
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	c := containerfile{buildArgs: map[string]string{}}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		instr, rest = strings.ToUpper(instr), strings.TrimSpace(rest)
		if instr == "FROM" {
			image := strings.Fields(rest)[0]
			for k, v := range c.buildArgs {
				image = strings.ReplaceAll(image, "${"+k+"}", v)
			}
			c.from = append(c.from, image)
			c.final = nil
			c.copies = nil
			continue
		}
		c.final = append(c.final, instr)
		exec := func() []string {
			var words []string
			require.NoError(t, json.Unmarshal([]byte(rest), &words), "%s must be in exec form (JSON): there is no shell", instr)
			return words
		}
		switch instr {
		case "ARG":
			k, v, _ := strings.Cut(rest, "=")
			c.buildArgs[k] = v
		case "USER":
			c.user = rest
		case "ENTRYPOINT":
			c.entrypoint = exec()
		case "CMD":
			c.cmd = exec()
		case "EXPOSE":
			for _, p := range strings.Fields(rest) {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				require.NoError(t, err, "EXPOSE %s", rest)
				c.expose = append(c.expose, n)
			}
		case "COPY":
			c.copies = append(c.copies, rest)
		case "RUN":
			if strings.Contains(rest, "go build") {
				c.goBuild = rest
			}
		}
	}
	return c
}

// uid is the numeric user of USER uid[:gid].
func (c containerfile) uid(t *testing.T) int64 {
	t.Helper()
	u, _, _ := strings.Cut(c.user, ":")
	n, err := strconv.ParseInt(u, 10, 64)
	require.NoError(t, err, "USER %q: numeric, so that runAsNonRoot can check it without a passwd file", c.user)
	return n
}

// TestDeployContainerfile: a static binary on scratch or distroless,
// no shell asked for, a non-root numeric user, ENTRYPOINT /sluice copied
// in with the CA certificates, and a CMD the proxy accepts whose listen
// port is the one exposed; built by the Go of go.mod.
func TestDeployContainerfile(t *testing.T) {
	c := readContainerfile(t)
	require.GreaterOrEqual(t, len(c.from), 2, "multi-stage: %v", c.from)
	final := c.from[len(c.from)-1]
	assert.True(t, final == "scratch" || strings.HasPrefix(final, "gcr.io/distroless/static"), "final stage FROM %s: scratch or distroless static", final)
	assert.NotContains(t, c.final, "RUN", "the final stage runs nothing: it has no shell")
	assert.NotContains(t, c.final, "HEALTHCHECK", "no shell, no curl: probe over HTTP from outside")
	assert.Positive(t, c.uid(t), "USER is not root")
	assert.Equal(t, []string{"/sluice"}, c.entrypoint)
	assert.True(t, slices.ContainsFunc(c.copies, func(s string) bool { return strings.HasSuffix(s, " /sluice") }), "the binary is copied to /sluice: %v", c.copies)
	assert.True(t, slices.ContainsFunc(c.copies, func(s string) bool { return strings.Contains(s, "ca-certificates") }), "CA certificates for https://discord.com: %v", c.copies)

	f := resolveProxy(t, "Containerfile CMD", c.cmd, nil)
	assert.Equal(t, []int{portOf(t, f.listen)}, c.expose, "EXPOSE is the CMD's -listen port")
	host, _, _ := net.SplitHostPort(f.listen)
	assert.Empty(t, host, "-listen %s: in a container, every interface (loopback is unreachable from outside)", f.listen)

	// Built by the Go go.mod asks for (golang:1.26 for go 1.26.x).
	mod, err := os.ReadFile("../../go.mod")
	require.NoError(t, err)
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	require.NotNil(t, goLine)
	assert.Contains(t, c.from[0], "golang:"+string(goLine[1]), "the build stage's Go is go.mod's")

	// The flags of deploy/release-binaries: one way to build a release.
	script, err := os.ReadFile(deployPath("release-binaries"))
	require.NoError(t, err)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w"`, "./cmd/sluice"} {
		assert.Contains(t, c.goBuild, want, "the Containerfile's go build")
		assert.Contains(t, string(script), want, "release-binaries' go build")
	}
	assert.Contains(t, c.goBuild, "-buildvcs=true", "the commit is recorded whatever GOFLAGS says")
}

// shellWords splits a simple shell command line: words separated by
// spaces, double or single quotes grouping; nothing else is interpreted.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	quote, started := byte(0), false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case quote != 0 && ch == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(ch)
		case ch == '"' || ch == '\'':
			quote, started = ch, true
		case ch == ' ' || ch == '\t':
			if started {
				words = append(words, cur.String())
				cur.Reset()
				started = false
			}
		default:
			cur.WriteByte(ch)
			started = true
		}
	}
	if started {
		words = append(words, cur.String())
	}
	return words
}

// TestDeployContainerfileBuildCommand runs the Containerfile's go build
// line here, as its build stage would (only the output path changed): CI
// cannot build the image (no container engine), so it builds what the
// image would hold. The binary is static and names its version.
func TestDeployContainerfileBuildCommand(t *testing.T) {
	buildTest(t)
	// Not parallel: the two build tests share the build cache, one after the other.
	c := readContainerfile(t)
	words := shellWords(c.goBuild)
	var env []string
	for len(words) > 0 && strings.Contains(words[0], "=") {
		env, words = append(env, words[0]), words[1:]
	}
	require.GreaterOrEqual(t, len(words), 3, c.goBuild)
	require.Equal(t, []string{"go", "build"}, words[:2], c.goBuild)
	bin := filepath.Join(t.TempDir(), "sluice")
	i := slices.Index(words, "-o")
	require.Positive(t, i, "go build -o: %s", c.goBuild)
	words[i+1] = bin
	cmd := exec.Command(words[0], words[1:]...)
	cmd.Dir = "../.." // the build context's root
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "error obtaining VCS status") {
		t.Skipf("the toolchain cannot read this checkout's VCS status: %s", out)
	}
	require.NoError(t, err, "%s: %s", c.goBuild, out)
	version, err := exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	assert.Contains(t, string(version), "sluice "+sluice.Version+"\nmodule github.com/sluicehq/sluice ")
	if _, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		assert.Regexp(t, `\ncommit [0-9a-f]{40}`, string(version), "-buildvcs=true records the commit")
	}
	if runtime.GOOS == "linux" {
		assertStatic(t, bin)
	}
}

// buildTestsEnv turns on the tests that build the command as a release
// would (minutes of compiling on a cold cache: a cross-compiled standard
// library). .ci/run runs them in a step of their own, after the suite, so
// that their compiling does not slow the suite's other tests.
const buildTestsEnv = "SLUICE_BUILD_TESTS"

// buildTest skips t unless SLUICE_BUILD_TESTS=1 (and not under -short).
func buildTest(t *testing.T) {
	t.Helper()
	if testing.Short() || os.Getenv(buildTestsEnv) != "1" {
		t.Skipf("builds the command as a release would: set %s=1 (.ci/run does)", buildTestsEnv)
	}
}

// assertStatic checks that an ELF binary needs no dynamic loader or
// shared library: it runs on scratch.
func assertStatic(t *testing.T, path string) {
	t.Helper()
	ef, err := elf.Open(path)
	require.NoError(t, err)
	defer ef.Close()
	for _, p := range ef.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "%s asks for a dynamic loader", path)
	}
	libs, _ := ef.ImportedLibraries()
	assert.Empty(t, libs, "%s needs shared libraries", path)
}

// ---- compose ----

type composeFile struct {
	Services map[string]composeService
}

type composeService struct {
	Image           string
	Build           *struct{ Context, Dockerfile string }
	Command         []string
	Environment     map[string]string
	Ports           []string
	DependsOn       map[string]struct{ Condition string } `yaml:"depends_on"`
	StopGracePeriod string                                `yaml:"stop_grace_period"`
	Healthcheck     *struct{ Test []string }
}

// composeInterpolate resolves ${VAR}, ${VAR:-default} and ${VAR-default}
// as compose does with VAR unset.
func composeInterpolate(s string) string {
	return regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}`).ReplaceAllString(s, "$1")
}

// TestDeployCompose: the simulator listens where the proxies can reach
// it, every proxy's upstream is the simulator service's address and port
// (cleartext HTTP/2, as the simulator serves with -h2c), the proxies share
// the Redis service, wait for it to be healthy (they ping it at start),
// publish only ports they serve, and are given longer to stop than drain
// delay and grace.
func TestDeployCompose(t *testing.T) {
	path := deployPath("compose", "compose.yaml")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var cf composeFile
	require.NoError(t, yaml.Unmarshal(b, &cf), path)

	var sim string
	var proxies, redises []string
	for name, svc := range cf.Services {
		switch {
		case len(svc.Command) > 0 && svc.Command[0] == "simulate":
			require.Empty(t, sim, "one simulator")
			sim = name
		case len(svc.Command) > 0 && svc.Command[0] == "proxy":
			proxies = append(proxies, name)
		case strings.Contains(svc.Image, "redis"):
			redises = append(redises, name)
		}
		if svc.Build != nil {
			dir := filepath.Join(filepath.Dir(path), svc.Build.Context)
			assert.FileExists(t, filepath.Join(dir, svc.Build.Dockerfile), "%s: build", name)
			assert.FileExists(t, filepath.Join(dir, "go.mod"), "%s: the build context is the repository", name)
		}
	}
	slices.Sort(proxies)
	require.NotEmpty(t, sim, "a simulator service (command: simulate ...)")
	require.GreaterOrEqual(t, len(proxies), 2, "two proxies or more")
	require.Len(t, redises, 1, "one Redis")

	simulator := cf.Services[sim]
	checkSimulate(t, path+": "+sim, simulator.Command)
	addr, ok := flagValue(simulator.Command, "addr")
	require.True(t, ok, "%s: -addr (its default is loopback, out of the proxies' reach)", sim)
	host, simPort, err := net.SplitHostPort(addr)
	require.NoError(t, err, addr)
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		t.Errorf("%s: -addr %s is loopback: the proxies cannot reach it", sim, addr)
	}
	h2c := slices.Contains(simulator.Command, "-h2c") || slices.Contains(simulator.Command, "-h2c=true")
	redis := cf.Services[redises[0]]
	require.NotNil(t, redis.Healthcheck, "%s: a healthcheck, which the proxies wait for", redises[0])

	var image string
	for _, name := range proxies {
		svc := cf.Services[name]
		where := path + ": " + name
		env := map[string]string{}
		for k, v := range svc.Environment {
			env[k] = composeInterpolate(v)
		}
		f := resolveProxy(t, where, svc.Command, env)
		u, err := url.Parse(f.upstream)
		require.NoError(t, err)
		assert.Equal(t, sim, u.Hostname(), "%s: the upstream is the simulator service", where)
		assert.Equal(t, simPort, u.Port(), "%s: the upstream's port is the simulator's -addr port", where)
		assert.Equal(t, "/api/v10", u.Path, "%s: the simulator's API base", where)
		if h2c {
			assert.Equal(t, "http", u.Scheme, "%s: the simulator serves cleartext (-h2c)", where)
		} else {
			assert.Equal(t, "https", u.Scheme, "%s: the simulator serves TLS", where)
		}
		require.NotEmpty(t, f.redisURL, "%s: the replicas share their limits through Redis", where)
		ru, err := url.Parse(f.redisURL)
		require.NoError(t, err)
		assert.Equal(t, redises[0], ru.Hostname(), "%s: -redis is the Redis service", where)
		assert.Equal(t, "service_healthy", svc.DependsOn[redises[0]].Condition, "%s: starts once Redis answers", where)
		assert.Contains(t, svc.DependsOn, sim, where)

		served := servedPorts(t, f)
		for _, p := range svc.Ports {
			parts := strings.Split(strings.TrimSuffix(p, "/tcp"), ":")
			n, err := strconv.Atoi(parts[len(parts)-1])
			require.NoError(t, err, p)
			assert.Contains(t, served, n, "%s: publishes %s, a port it does not listen on", where, p)
			if len(parts) == 3 {
				assert.Equal(t, "127.0.0.1", parts[0], "%s: published on loopback only (SLUICE_TOKEN)", where)
			}
		}
		stop, err := time.ParseDuration(svc.StopGracePeriod)
		require.NoError(t, err, "%s: stop_grace_period (compose's default, 10 s, is too short for the grace)", where)
		assert.Greater(t, stop, f.drainDelay+f.grace, "%s: stop_grace_period covers -drain-delay + -grace", where)
		if image == "" {
			image = svc.Image
		}
		assert.Equal(t, image, svc.Image, "%s: one image", where)
	}
	assert.Equal(t, image, simulator.Image, "the simulator runs from the proxies' image")
}

// ---- systemd ----

// unitFile is the directives of a unit file, by section, each with every
// value it was given.
type unitFile map[string]map[string][]string

func readUnit(t *testing.T, path string) unitFile {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "%s:%d: not a directive: %s", path, n, line)
			require.NotEmpty(t, section, "%s:%d: outside a section", path, n)
			u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return u
}

// readEnvFile reads a systemd environment file: KEY=VALUE lines, comments.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	env := map[string]string{}
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "%s:%d: not KEY=VALUE: %s", path, n+1, line)
		env[k] = strings.Trim(v, `"'`)
	}
	return env
}

// systemdDuration parses a systemd time span: a number of seconds or Go-like
// units (ms, s, min, h).
func systemdDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Second
	}
	d, err := time.ParseDuration(strings.ReplaceAll(strings.ReplaceAll(s, "min", "m"), " ", ""))
	require.NoError(t, err, "time span %q", s)
	return d
}

// TestDeploySystemdUnit: ExecStart runs a proxy that accepts the unit's
// and the example environment file's settings; SIGTERM stops it and
// TimeoutStopSec waits longer than drain delay and grace; the hardening
// directives are there.
func TestDeploySystemdUnit(t *testing.T) {
	path := deployPath("systemd", "sluice-proxy.service")
	u := readUnit(t, path)
	svc := u["Service"]
	require.NotNil(t, svc, "[Service]")
	single := func(k string) string {
		t.Helper()
		require.Len(t, svc[k], 1, "%s: one %s=", path, k)
		return svc[k][0]
	}

	envFile := strings.TrimPrefix(single("EnvironmentFile"), "-")
	assert.Equal(t, "/etc/sluice/proxy.env", envFile)
	env := readEnvFile(t, deployPath("systemd", filepath.Base(envFile)+".example"))
	for _, e := range svc["Environment"] {
		for _, kv := range shellWords(e) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	exe := strings.Fields(single("ExecStart"))
	require.NotEmpty(t, exe)
	assert.True(t, filepath.IsAbs(exe[0]) && filepath.Base(exe[0]) == "sluice", "ExecStart=%s", single("ExecStart"))
	f := resolveProxy(t, path+" with proxy.env.example", exe[1:], env)
	assert.Contains(t, env, proxyTokenEnv, "the example names SLUICE_TOKEN, which only the environment gives")
	for _, a := range exe[1:] {
		assert.NotContains(t, a, "token", "no token on the command line: ps shows it")
	}

	assert.Equal(t, "SIGTERM", single("KillSignal"), "the proxy shuts down gracefully on SIGTERM")
	stop := systemdDuration(t, single("TimeoutStopSec"))
	assert.Greater(t, stop, f.drainDelay+f.grace, "TimeoutStopSec=%s covers -drain-delay %s + -grace %s", single("TimeoutStopSec"), f.drainDelay, f.grace)
	for k, want := range map[string]string{
		"Restart": "on-failure", "DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
		"ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "MemoryDenyWriteExecute": "yes",
		"LockPersonality": "yes", "RestrictNamespaces": "yes",
	} {
		assert.Equal(t, []string{want}, svc[k], "%s=", k)
	}
	assert.Contains(t, svc["SystemCallFilter"], "@system-service")
	if lim, ok := svc["LimitNOFILE"]; ok {
		n, err := strconv.Atoi(lim[0])
		require.NoError(t, err)
		assert.Greater(t, n, f.maxConns, "LimitNOFILE leaves room for -max-conns")
	}
}

// ---- Kubernetes ----

type k8sMeta struct {
	Name        string
	Labels      map[string]string
	Annotations map[string]string
}

type k8sHeader struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string
	Metadata   k8sMeta
}

type k8sSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type k8sDeployment struct {
	Spec struct {
		Replicas int
		Selector k8sSelector
		Template struct {
			Metadata k8sMeta
			Spec     struct {
				TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
				SecurityContext               struct {
					RunAsNonRoot *bool  `yaml:"runAsNonRoot"`
					RunAsUser    *int64 `yaml:"runAsUser"`
				} `yaml:"securityContext"`
				Containers []k8sContainer
			}
		}
	}
}

type k8sContainer struct {
	Name, Image   string
	Command, Args []string
	Env           []struct {
		Name, Value string
		ValueFrom   *struct {
			SecretKeyRef     *struct{ Name, Key string } `yaml:"secretKeyRef"`
			ResourceFieldRef *struct{ Resource string }  `yaml:"resourceFieldRef"`
		} `yaml:"valueFrom"`
	}
	Ports []struct {
		Name          string
		ContainerPort int `yaml:"containerPort"`
	}
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	Resources      struct{ Requests, Limits map[string]string }
	// SecurityContext of the container.
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
		Capabilities             struct{ Drop []string }
	} `yaml:"securityContext"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path, Port, Scheme string
	} `yaml:"httpGet"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

type k8sService struct {
	Spec struct {
		Selector map[string]string
		Ports    []struct {
			Name       string
			Port       int
			TargetPort string `yaml:"targetPort"`
		}
	}
}

type k8sPDB struct {
	Spec struct {
		MinAvailable   *int `yaml:"minAvailable"`
		MaxUnavailable *int `yaml:"maxUnavailable"`
		Selector       k8sSelector
	}
}

type k8sSecret struct {
	StringData map[string]string `yaml:"stringData"`
}

// readK8s decodes every document of the files the kustomization lists,
// by kind and name.
func readK8s(t *testing.T) map[string]map[string]*yaml.Node {
	t.Helper()
	dir := deployPath("kubernetes")
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	var k struct{ Resources []string }
	require.NoError(t, yaml.Unmarshal(b, &k))
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" {
			assert.Contains(t, k.Resources, base, "kustomization.yaml lists every manifest")
		}
	}
	objs := map[string]map[string]*yaml.Node{}
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join(dir, r))
		require.NoError(t, err, "kustomization.yaml lists %s", r)
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc yaml.Node
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, r)
			var h k8sHeader
			require.NoError(t, doc.Decode(&h), r)
			require.NotEmpty(t, h.Kind, "%s: a document without kind", r)
			if objs[h.Kind] == nil {
				objs[h.Kind] = map[string]*yaml.Node{}
			}
			objs[h.Kind][h.Metadata.Name] = &doc
		}
	}
	return objs
}

// one decodes the only object of a kind.
func one[T any](t *testing.T, objs map[string]map[string]*yaml.Node, kind string) (name string, v T) {
	t.Helper()
	require.Len(t, objs[kind], 1, "one %s", kind)
	for n, node := range objs[kind] {
		require.NoError(t, node.Decode(&v), "%s %s", kind, n)
		name = n
	}
	return name, v
}

// selects reports whether a selector's labels are all among labels.
func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestDeployKubernetes: the Deployment's proxy (its arguments over the
// image's CMD, its variables, the Secret's values) is one the binary
// accepts; two replicas or more share Redis; the probes ask /readyz and
// /healthz on ports that serve them; the drain delay outlasts the
// readiness probe's period × failureThreshold and the termination grace
// period outlasts drain delay and grace; the token comes from the Secret;
// the container cannot gain privileges; the Service and the budget select
// the pods.
func TestDeployKubernetes(t *testing.T) {
	objs := readK8s(t)
	cf := readContainerfile(t)
	depName, dep := one[k8sDeployment](t, objs, "Deployment")
	_, svc := one[k8sService](t, objs, "Service")
	_, pdb := one[k8sPDB](t, objs, "PodDisruptionBudget")
	secretName, secret := one[k8sSecret](t, objs, "Secret")

	spec := dep.Spec.Template.Spec
	labels := dep.Spec.Template.Metadata.Labels
	assert.GreaterOrEqual(t, dep.Spec.Replicas, 2, "replicas")
	assert.True(t, selects(dep.Spec.Selector.MatchLabels, labels), "the Deployment selects its pods")
	require.Len(t, spec.Containers, 1)
	c := spec.Containers[0]
	where := "Deployment " + depName + " container " + c.Name

	// The command line the container runs: the image's ENTRYPOINT and CMD
	// unless the manifest replaces them.
	args := cf.cmd
	if c.Args != nil {
		args = c.Args
	}
	if c.Command != nil {
		assert.Equal(t, cf.entrypoint, c.Command, "%s: command is the image's binary", where)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			assert.NotEqual(t, proxyTokenEnv, e.Name, "%s: %s from a Secret, not written in the manifest", where, e.Name)
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			assert.Equal(t, secretName, ref.Name, "%s: %s names the Secret", where, e.Name)
			v, ok := secret.StringData[ref.Key]
			assert.True(t, ok, "%s: %s: the Secret has no key %q", where, e.Name, ref.Key)
			env[e.Name] = v
		case e.ValueFrom.ResourceFieldRef != nil:
			assert.False(t, strings.HasPrefix(e.Name, proxyEnvPrefix), "%s: %s from a resource field", where, e.Name)
		default:
			t.Errorf("%s: %s: a valueFrom this test cannot resolve", where, e.Name)
		}
	}
	f := resolveProxy(t, where, args, env)
	assert.NotEmpty(t, f.redisURL, "%s: the replicas share their limits through Redis (SLUICE_REDIS)", where)
	assert.Contains(t, env, proxyTokenEnv, "%s: SLUICE_TOKEN from the Secret", where)
	host, _, _ := net.SplitHostPort(f.listen)
	assert.Empty(t, host, "%s: -listen %s: every interface, so the Service reaches it", where, f.listen)

	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	served := servedPorts(t, f)
	for p := range served {
		assert.Contains(t, slices.Collect(maps.Values(ports)), p, "%s: a containerPort for every listener", where)
	}
	portNumber := func(p string) int {
		if n, err := strconv.Atoi(p); err == nil {
			return n
		}
		n, ok := ports[p]
		assert.True(t, ok, "%s: no container port named %q", where, p)
		return n
	}
	for _, probe := range []struct {
		name  string
		p     *k8sProbe
		path  string
		ready bool
	}{{"readinessProbe", c.ReadinessProbe, proxy.ReadyPath, true}, {"livenessProbe", c.LivenessProbe, proxy.HealthPath, false}} {
		require.NotNil(t, probe.p, "%s: %s", where, probe.name)
		require.NotNil(t, probe.p.HTTPGet, "%s: %s: httpGet", where, probe.name)
		assert.Equal(t, probe.path, probe.p.HTTPGet.Path, "%s: %s path", where, probe.name)
		port := portNumber(probe.p.HTTPGet.Port)
		isListen, ok := served[port]
		assert.True(t, ok, "%s: %s on port %d, where nothing serves %s", where, probe.name, port, probe.path)
		scheme := "HTTP"
		if isListen && f.tlsCert != "" {
			scheme = "HTTPS"
		}
		assert.Equal(t, scheme, cmp.Or(strings.ToUpper(probe.p.HTTPGet.Scheme), "HTTP"), "%s: %s scheme", where, probe.name)
		if probe.ready {
			period, failures := cmp.Or(probe.p.PeriodSeconds, 10), cmp.Or(probe.p.FailureThreshold, 3)
			unready := time.Duration(period*failures) * time.Second
			assert.GreaterOrEqual(t, f.drainDelay, unready, "%s: -drain-delay %s covers the readiness probe's %d s × %d to see the 503", where, f.drainDelay, period, failures)
		}
	}
	grace := 30 // Kubernetes' default
	if spec.TerminationGracePeriodSeconds != nil {
		grace = *spec.TerminationGracePeriodSeconds
	}
	assert.Greater(t, time.Duration(grace)*time.Second, f.drainDelay+f.grace, "%s: terminationGracePeriodSeconds %d covers -drain-delay %s + -grace %s", where, grace, f.drainDelay, f.grace)

	if a, ok := dep.Spec.Template.Metadata.Annotations["prometheus.io/port"]; ok {
		metrics := f.listen
		if f.metricsListen != "" {
			metrics = f.metricsListen
		}
		assert.Equal(t, strconv.Itoa(portOf(t, metrics)), a, "%s: prometheus.io/port is where /metrics is", where)
	}

	sc := c.SecurityContext
	nonRoot := spec.SecurityContext.RunAsNonRoot
	if sc.RunAsNonRoot != nil {
		nonRoot = sc.RunAsNonRoot
	}
	assert.True(t, nonRoot != nil && *nonRoot, "%s: runAsNonRoot", where)
	assert.True(t, sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "%s: readOnlyRootFilesystem", where)
	assert.True(t, sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "%s: allowPrivilegeEscalation: false", where)
	assert.Equal(t, []string{"ALL"}, sc.Capabilities.Drop, "%s: drops every capability", where)
	if u := spec.SecurityContext.RunAsUser; u != nil {
		assert.Equal(t, cf.uid(t), *u, "%s: runAsUser is the image's USER", where)
	}
	assert.NotEmpty(t, c.Resources.Requests, "%s: resources.requests", where)
	assert.NotEmpty(t, c.Resources.Limits["memory"], "%s: a memory limit", where)

	assert.True(t, selects(svc.Spec.Selector, labels), "the Service selects the pods")
	require.NotEmpty(t, svc.Spec.Ports)
	for _, p := range svc.Spec.Ports {
		target := cmp.Or(p.TargetPort, strconv.Itoa(p.Port))
		assert.Equal(t, portOf(t, f.listen), portNumber(target), "Service port %s: targets the clients' listener", p.Name)
	}
	assert.True(t, selects(pdb.Spec.Selector.MatchLabels, labels), "the PodDisruptionBudget selects the pods")
	require.NotNil(t, pdb.Spec.MinAvailable, "PodDisruptionBudget minAvailable")
	assert.Equal(t, 1, *pdb.Spec.MinAvailable)
	assert.Less(t, *pdb.Spec.MinAvailable, dep.Spec.Replicas, "the budget lets a drain evict a replica")
}

// ---- release binaries ----

// TestDeployReleaseBinaries runs deploy/release-binaries for two targets
// into a temporary directory: one binary each, named
// sluice_<version>_<os>_<arch>[.exe], for that platform, listed with its
// SHA-256 in SHA256SUMS; the one for this machine runs and names its
// version and commit. A target Go does not know is refused.
func TestDeployReleaseBinaries(t *testing.T) {
	buildTest(t)
	// Not parallel: the two build tests share the build cache, one after the other.
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script, err := filepath.Abs(deployPath("release-binaries"))
	require.NoError(t, err)
	st, err := os.Stat(script)
	require.NoError(t, err)
	assert.NotZero(t, st.Mode()&0o111, "release-binaries is executable")

	bad := exec.Command(bash, script, "-o", t.TempDir(), "linux/amd64", "plan9/pdp11")
	out, err := bad.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Equal(t, 2, exit.ExitCode())
	assert.Contains(t, string(out), "plan9/pdp11 is not a GOOS/GOARCH pair")

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, script, "-o", dir, "linux/amd64", "windows/arm64")
	started := time.Now()
	out, err = cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "error obtaining VCS status") {
		t.Skipf("the toolchain cannot read this checkout's VCS status: %s", out)
	}
	require.NoError(t, err, "%s", out)
	t.Logf("built in %s", time.Since(started).Round(100*time.Millisecond))

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	names := map[string]string{} // os_arch → file
	version := ""
	named := regexp.MustCompile(`^sluice_(v[0-9A-Za-z._+-]+)_(linux_amd64|windows_arm64\.exe)$`)
	for _, e := range entries {
		if e.Name() == "SHA256SUMS" {
			continue
		}
		m := named.FindStringSubmatch(e.Name())
		require.NotNil(t, m, "unexpected file %s", e.Name())
		if version == "" {
			version = m[1]
		}
		assert.Equal(t, version, m[1], "one version")
		names[m[2]] = e.Name()
	}
	require.Len(t, names, 2, "%v", names)
	assert.True(t, strings.HasPrefix(version, "v"), version)

	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	require.NoError(t, err)
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		require.True(t, ok, "SHA256SUMS line %q: sha256sum's format", line)
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err, "SHA256SUMS lists %s", name)
		require.NotEmpty(t, b, name)
		got := sha256.Sum256(b)
		assert.Equal(t, hex.EncodeToString(got[:]), sum, name)
		listed[name] = true
	}
	assert.Len(t, listed, 2, "SHA256SUMS lists both binaries:\n%s", sums)

	linux := filepath.Join(dir, names["linux_amd64"])
	ef, err := elf.Open(linux)
	require.NoError(t, err)
	assert.Equal(t, elf.EM_X86_64, ef.Machine)
	ef.Close()
	assertStatic(t, linux)
	pf, err := pe.Open(filepath.Join(dir, names["windows_arm64.exe"]))
	require.NoError(t, err)
	assert.Equal(t, uint16(pe.IMAGE_FILE_MACHINE_ARM64), pf.Machine)
	pf.Close()

	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return
	}
	got, err := exec.Command(linux, "--version").Output()
	require.NoError(t, err)
	assert.Contains(t, string(got), "sluice "+sluice.Version+"\nmodule github.com/sluicehq/sluice ")
	if _, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		assert.Regexp(t, `\ncommit [0-9a-f]{40}`, string(got), "stamped by -buildvcs")
	}
}
