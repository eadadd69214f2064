package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// "sluice proxy -limits FILE" and "-no-default-limits": declared limits
// from a YAML or JSON file.

const roleTemplate = "/guilds/{guild_id}/members/{user_id}/roles/{role_id}"

// writeLimits writes a limits file named name into a new directory and
// returns its path.
func writeLimits(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestReadLimitsFileYAML(t *testing.T) {
	path := writeLimits(t, "limits.yaml", `# declared limits
no_default_limits: true
limits:
  - name: member_roles
    routes:
      - PUT `+roleTemplate+`
      - DELETE `+roleTemplate+`
    per: guild_id
    count: 3
    window: 500ms
    source: the simulator of this test
  - name: channel_renames
    routes: ["PATCH /channels/{channel_id}"]
    fields: [name, topic]
    per: channel_id
    count: 2
    window: 10m
  - name: dms
    routes: ["POST /channels/{channel_id}/messages"]
    count: 100
    window: 1m
`)
	limits, noDefaults, err := readLimitsFile(path)
	require.NoError(t, err)
	assert.True(t, noDefaults)
	assert.Equal(t, []sluice.Limit{
		{
			Name: "member_roles", Routes: []string{"PUT " + roleTemplate, "DELETE " + roleTemplate},
			Per: "guild_id", Count: 3, Window: 500 * time.Millisecond, Source: "the simulator of this test",
		},
		{
			Name: "channel_renames", Routes: []string{"PATCH /channels/{channel_id}"}, Fields: []string{"name", "topic"},
			Per: "channel_id", Count: 2, Window: 10 * time.Minute,
		},
		{Name: "dms", Routes: []string{"POST /channels/{channel_id}/messages"}, Count: 100, Window: time.Minute},
	}, limits)
	require.NoError(t, checkLimits(limits, noDefaults), "sluice accepts them")
}

func TestReadLimitsFileJSON(t *testing.T) {
	path := writeLimits(t, "limits.JSON", "{\n\t\"limits\": [\n\t\t{\"name\": \"member_roles\", \"routes\": [\"PUT "+roleTemplate+"\"],\n\t\t \"per\": \"guild_id\", \"count\": 5, \"window\": \"2s\"}\n\t]\n}\n")
	limits, noDefaults, err := readLimitsFile(path)
	require.NoError(t, err)
	assert.False(t, noDefaults, "no_default_limits left out")
	assert.Equal(t, []sluice.Limit{{Name: "member_roles", Routes: []string{"PUT " + roleTemplate}, Per: "guild_id", Count: 5, Window: 2 * time.Second}}, limits)

	// Only a file with no limits: it may just turn the defaults off.
	limits, noDefaults, err = readLimitsFile(writeLimits(t, "off.yml", "no_default_limits: true\n"))
	require.NoError(t, err)
	assert.True(t, noDefaults)
	assert.Empty(t, limits)
}

// TestReadLimitsFileErrors: each error names the file, the entry (index
// and name) and the field at fault.
func TestReadLimitsFileErrors(t *testing.T) {
	const good = `  - name: member_roles
    routes: ["PUT ` + roleTemplate + `"]
    per: guild_id
    count: 3
    window: 1s
`
	for _, tc := range []struct {
		name, file, content string
		want                []string
	}{
		{"unknown field", "l.yaml", "limits:\n" + good + "  - name: renames\n    routes: [\"PATCH /channels/{channel_id}\"]\n    count: 2\n    window: 10m\n    colour: red\n",
			[]string{`limits[1] ("renames"): unknown field "colour" (known fields: name, routes, fields, per, count, window, source) (line 11)`}},
		{"unknown field in JSON", "l.json", `{"limits": [{"name": "x", "routes": ["PUT ` + roleTemplate + `"], "count": 1, "window": "1s", "Per": "guild_id"}]}`,
			[]string{`limits[0] ("x"): unknown field "Per"`}},
		{"unknown top-level field", "l.yaml", "limit:\n" + good,
			[]string{`unknown field "limit" at the top (known fields: limits, no_default_limits) (line 1)`}},
		{"bad duration", "l.yml", "limits:\n" + strings.Replace(good, "window: 1s", "window: 10 s", 1),
			[]string{`limits[0] ("member_roles"): window "10 s" is not a Go duration such as "10s" or "10m"`}},
		{"bare number window", "l.yml", "limits:\n" + strings.Replace(good, "window: 1s", "window: 10", 1),
			[]string{`limits[0] ("member_roles"): window "10" is not a Go duration`}},
		{"negative window", "l.yml", "limits:\n" + strings.Replace(good, "window: 1s", "window: -1s", 1),
			[]string{`limits[0] ("member_roles"): window must be more than 0s, got -1s`}},
		{"count not a number", "l.yaml", "limits:\n" + strings.Replace(good, "count: 3", "count: ten", 1),
			[]string{`limits[0] ("member_roles"): count: want a whole number, got "ten" (line 5)`}},
		{"count zero", "l.yaml", "limits:\n" + strings.Replace(good, "count: 3", "count: 0", 1),
			[]string{`limits[0] ("member_roles"): count must be 1 or more, got 0`}},
		{"count missing", "l.yaml", "limits:\n" + strings.Replace(good, "    count: 3\n", "", 1),
			[]string{`limits[0] ("member_roles"): count is missing`}},
		{"routes not a list", "l.yaml", "limits:\n" + good + "  - name: r\n    routes: {PUT: x}\n    count: 1\n    window: 1s\n",
			[]string{`limits[1] ("r"): routes: want a list of "METHOD /template" strings, got a mapping (line 8)`}},
		{"routes missing", "l.yaml", "limits:\n  - name: r\n    count: 1\n    window: 1s\n",
			[]string{`limits[0] ("r"): routes is missing`}},
		{"name missing", "l.yaml", "limits:\n" + good + "  - routes: [\"PUT " + roleTemplate + "\"]\n    count: 1\n    window: 1s\n",
			[]string{`limits[1]: name is missing`}},
		{"bad per", "l.yaml", "limits:\n" + strings.Replace(good, "per: guild_id", "per: user_id", 1),
			[]string{`limits[0] ("member_roles"): per "user_id": want guild_id, channel_id, webhook_id`}},
		{"no_default_limits not a bool", "l.yaml", "no_default_limits: sometimes\n",
			[]string{`no_default_limits: want true or false, got "sometimes" (line 1)`}},
		{"limits not a list", "l.yaml", "limits: none\n",
			[]string{`limits: want a list of limits, got "none" (line 1)`}},
		{"entry not a mapping", "l.yaml", "limits:\n  - member_roles\n",
			[]string{`limits[0]: want a mapping of name, routes, count, window, ..., got "member_roles" (line 2)`}},
		{"not a mapping", "l.yaml", "- name: x\n",
			[]string{`want a mapping with a "limits:" list at the top (line 1)`}},
		{"syntax error", "l.yaml", "limits:\n  - name: [x\n",
			[]string{"yaml: line"}},
		{"empty", "l.yaml", "",
			[]string{`empty; want a mapping with a "limits:" list`}},
		{"two documents", "l.yaml", "limits: []\n---\nlimits: []\n",
			[]string{"more than one YAML document"}},
		{"wrong extension", "l.toml", "limits = []\n",
			[]string{"want a .yaml, .yml or .json file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeLimits(t, tc.file, tc.content)
			_, _, err := readLimitsFile(path)
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), path+": "), "names the file: %v", err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NotContains(t, err.Error(), "main.", "no Go type names: %v", err)
		})
	}
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "nothing.yaml")
		_, _, err := readLimitsFile(path)
		require.Error(t, err)
		assert.ErrorIs(t, err, os.ErrNotExist)
		assert.Contains(t, err.Error(), path)
	})
}

// TestProxyLimitsFlags: the file and -no-default-limits, from flags or
// their SLUICE_ variables, reach the limiter template.
func TestProxyLimitsFlags(t *testing.T) {
	env := func(kv map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := kv[k]; return v, ok }
	}
	assert.Equal(t, "SLUICE_LIMITS", proxyEnvName("limits"))
	assert.Equal(t, "SLUICE_NO_DEFAULT_LIMITS", proxyEnvName("no-default-limits"))
	file := writeLimits(t, "l.yaml", "limits:\n  - {name: member_roles, routes: [\"PUT "+roleTemplate+"\"], per: guild_id, count: 3, window: 1s}\n")
	want := []sluice.Limit{{Name: "member_roles", Routes: []string{"PUT " + roleTemplate}, Per: "guild_id", Count: 3, Window: time.Second}}

	f, done, err := parseProxyFlags(nil, env(map[string]string{"SLUICE_LIMITS": file, "SLUICE_NO_DEFAULT_LIMITS": "true"}), io.Discard)
	require.NoError(t, err)
	require.False(t, done)
	assert.Equal(t, want, f.limits)
	assert.True(t, f.noDefaultLimits)
	assert.Equal(t, map[string]string{"limits": "SLUICE_LIMITS", "no-default-limits": "SLUICE_NO_DEFAULT_LIMITS"}, f.from)
	opts := f.limiterOptions(nil)
	assert.Equal(t, want, opts.Limits)
	assert.True(t, opts.NoDefaultLimits)

	f, _, err = parseProxyFlags([]string{"-limits", file}, env(map[string]string{"SLUICE_LIMITS": "/ignored.yaml"}), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, want, f.limits)
	assert.False(t, f.noDefaultLimits, "the defaults stay unless told")

	f, _, err = parseProxyFlags([]string{"-no-default-limits"}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.Empty(t, f.limits)
	assert.True(t, f.limiterOptions(nil).NoDefaultLimits)

	// The file's no_default_limits does what the flag does.
	f, _, err = parseProxyFlags([]string{"-limits", writeLimits(t, "off.json", `{"no_default_limits": true}`)}, env(nil), io.Discard)
	require.NoError(t, err)
	assert.True(t, f.noDefaultLimits)

	// A limit sluice refuses is a usage error of the flag that gave it.
	bad := writeLimits(t, "bad.yaml", "limits:\n  - {name: roles, routes: [\"PUT "+roleTemplate+"\"], per: channel_id, count: 3, window: 1s}\n")
	_, done, err = parseProxyFlags(nil, env(map[string]string{"SLUICE_LIMITS": bad}), io.Discard)
	assert.True(t, done)
	var ue usageError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, "proxy", ue.cmd)
	assert.Contains(t, err.Error(), "SLUICE_LIMITS "+bad+`: limit "roles": Per "channel_id" is not a major parameter`)
}

// TestProxyLimitsBadValuesExit2: a bad -limits file is a usage error at
// start: exit status 2, one message on stderr, nothing served, whether
// the file itself is bad or sluice refuses one of its limits.
func TestProxyLimitsBadValuesExit2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		return path
	}
	badWindow := write("window.yaml", "limits:\n  - {name: roles, routes: [\"PUT "+roleTemplate+"\"], per: guild_id, count: 3, window: soon}\n")
	badPer := write("per.yaml", "limits:\n  - {name: roles, routes: [\"PUT "+roleTemplate+"\"], per: channel_id, count: 3, window: 1s}\n")
	badRoute := write("route.json", `{"limits": [{"name": "roles", "routes": ["PUT /guilds/{guild_id}/roles/{id}"], "count": 3, "window": "1s"}]}`)
	disagree := write("disagree.yaml", "limits:\n  - {name: r, routes: [\"PUT "+roleTemplate+"\"], count: 3, window: 1s}\n  - {name: r, routes: [\"DELETE "+roleTemplate+"\"], count: 4, window: 1s}\n")
	tooLong := write("long.yaml", "limits:\n  - {name: r, routes: [\"PUT "+roleTemplate+"\"], count: 3, window: 2h}\n")
	unknown := write("unknown.yml", "limits:\n  - {name: r, routes: [\"PUT "+roleTemplate+"\"], count: 3, window: 1s, colour: red}\n")
	noRedis := "unix://" + filepath.Join(dir, "none.sock")
	for _, tc := range []struct {
		env  []string
		args []string
		want string // in stderr
	}{
		{nil, []string{"-limits", badWindow}, "sluice proxy: -limits: " + badWindow + `: limits[0] ("roles"): window "soon" is not a Go duration such as "10s" or "10m"` + "\nRun \"sluice proxy -h\" for usage.\n"},
		{[]string{"SLUICE_LIMITS=" + badPer}, nil, "sluice proxy: SLUICE_LIMITS " + badPer + `: limit "roles": Per "channel_id" is not a major parameter of "` + roleTemplate + `"`},
		{nil, []string{"-limits", badRoute}, "-limits " + badRoute + `: limit "roles": route "PUT /guilds/{guild_id}/roles/{id}": Sluice names this route "/guilds/{guild_id}/roles/{role_id}"`},
		{nil, []string{"-limits", disagree}, `-limits ` + disagree + `: limit "r": limits with one Name must agree on Count, Window and Per`},
		{nil, []string{"-limits", tooLong}, `-limits ` + tooLong + `: limit "r": Window must be in`},
		{nil, []string{"-limits", unknown}, `-limits: ` + unknown + `: limits[0] ("r"): unknown field "colour"`},
		{[]string{"SLUICE_LIMITS=" + filepath.Join(dir, "none.yaml")}, nil, "SLUICE_LIMITS: open " + filepath.Join(dir, "none.yaml") + ": no such file or directory"},
		{[]string{"SLUICE_NO_DEFAULT_LIMITS=maybe"}, nil, `invalid value "maybe" for SLUICE_NO_DEFAULT_LIMITS`},
		// Checked before Redis is called.
		{nil, []string{"-redis", noRedis, "-listen", "127.0.0.1:0", "-limits", badPer}, `-limits ` + badPer + `: limit "roles": Per "channel_id"`},
	} {
		t.Run(strings.Join(append(append([]string{}, tc.env...), tc.args...), " "), func(t *testing.T) {
			t.Parallel()
			stderr := runRejectedProxy(t, tc.env, tc.args...)
			assert.Contains(t, stderr, tc.want)
			assert.Equal(t, 2, strings.Count(stderr, "\n"), "one message: %s", stderr)
		})
	}
}

// TestProxyHelpListsLimitFlags: the usage names both flags and the file's
// format's description.
func TestProxyHelpListsLimitFlags(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(context.Background(), []string{"proxy", "-h"}, &out, io.Discard))
	for _, f := range []string{"limits", "no-default-limits"} {
		assert.Regexp(t, `\n  -`+f+`[ \n]`, out.String())
	}
	assert.Contains(t, out.String(), "docs/declared-limits.md")
}

// TestProxyDeclaredLimitsEndToEnd: a simulator hides a limit of 3 role
// updates per 500 ms per guild, answered only by a shared 429. Through
// the proxy, 10 concurrent role adds to one guild: with the limit declared
// in a -limits file (as member_roles, replacing the default of 10 per
// 10 s), the API answers no 429 and every request 2xx; without it (and
// without the defaults), the API answers 429.
func TestProxyDeclaredLimitsEndToEnd(t *testing.T) {
	const n, count, window = 10, 3, 500 * time.Millisecond
	declared := writeLimits(t, "limits.yaml", fmt.Sprintf(`limits:
  - name: member_roles
    routes: ["PUT %[1]s", "DELETE %[1]s"]
    per: guild_id
    count: %[2]d
    window: %[3]s
    source: the simulator's hidden limit
`, roleTemplate, count, window))
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"declared", []string{"-limits", declared}},
		{"undeclared", []string{"-no-default-limits"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hidden := []sluicetest.Sublimit{{Name: "member_roles", Per: "guild_id", Limit: count, Window: sluicetest.Duration(window)}}
			srv, _ := newUpstream(t, sluicetest.Options{H2C: true, Rules: sluicetest.RuleSet{Rules: []sluicetest.Rule{
				{Name: "add_role", Method: "PUT", Route: roleTemplate, Bucket: "roles", Limit: 20, Window: sluicetest.Duration(time.Second), Sublimits: hidden},
			}}})
			base := startProxyInProcess(t, append([]string{"-listen", "127.0.0.1:0", "-upstream", srv.APIBase(), "-grace", "5s"}, tc.args...)...)
			reqs := make([]*http.Request, n)
			for i := range reqs {
				req, err := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/api/v10/guilds/1/members/%d/roles/9", base, 100+i), nil)
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bot t")
				reqs[i] = req
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var ended atomic.Int64
			start := time.Now()
			answers, wait := sendAll(ctx, reqs, &ended)
			wait()
			took := time.Since(start)
			statuses := map[int]int{}
			for i, a := range answers {
				require.NoError(t, a.err, "request %d", i)
				statuses[a.status]++
			}
			st := srv.Stats()
			t.Logf("%d role adds in %s: answers %v; the API answered %v, shared 429s %d", n, took.Round(time.Millisecond), statuses, st.ByStatus, st.RateLimited["shared"])
			if tc.name == "declared" {
				assert.Zero(t, st.RateLimited["shared"], "the declared limit needs no 429")
				assert.Zero(t, st.ByStatus[http.StatusTooManyRequests])
				assert.Equal(t, map[int]int{http.StatusNoContent: n}, statuses, "every request answered 2xx")
				assert.Equal(t, n, st.Requests, "each sent once")
				srv.AssertNoViolations(t)
			} else {
				assert.Positive(t, st.RateLimited["shared"], "without the declaration the hidden limit bites")
			}
		})
	}
}

// startProxyInProcess runs "sluice proxy args..." in this process and
// returns the address it listens on once it has printed it; at the end of
// the test it is stopped as by SIGTERM and must return nil.
func startProxyInProcess(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, append([]string{"proxy"}, args...), pw, io.Discard)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() {
		cancel(nil)
		t.Fatalf("sluice proxy printed nothing: %v", <-errc)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	t.Cleanup(func() {
		cancel(interrupted{syscall.SIGTERM})
		assert.NoError(t, <-errc)
	})
	m := regexp.MustCompile(`^sluice proxy listening on (http://\S+) → `).FindStringSubmatch(sc.Text())
	require.NotNil(t, m, sc.Text())
	return m[1]
}
