package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flagDefaults reads a command's flags and their defaults from its -h
// output (flag.PrintDefaults): name -> default as printed ("" when the
// flag's default is its zero value, which PrintDefaults leaves out, unless
// its usage names what the zero value stands for: (default "x": ...)).
func flagDefaults(t *testing.T, args ...string) map[string]string {
	t.Helper()
	var out strings.Builder
	require.NoError(t, run(t.Context(), append(args, "-h"), &out, &out))
	_, flags, ok := strings.Cut(out.String(), "\nFlags:\n")
	require.True(t, ok, "no Flags section in: %s", out.String())
	defaults := map[string]string{}
	name := regexp.MustCompile(`^  -(\S+)`)
	// What PrintDefaults appends: a quoted string or one unquoted token (a
	// usage text's own "(default ...)" prose is neither).
	def := regexp.MustCompile(`\(default ("(?:[^"\\]|\\.)*"|[^ ()"]+)\)$`)
	// A usage's own words for what an empty value means: (default "x": ...).
	prose := regexp.MustCompile(`\(default "([^"]*)":`)
	last := ""
	for _, line := range strings.Split(flags, "\n") {
		if m := name.FindStringSubmatch(line); m != nil {
			last = m[1]
			defaults[last] = ""
			continue
		}
		if m := prose.FindStringSubmatch(line); m != nil && last != "" && defaults[last] == "" {
			defaults[last] = m[1] // a zero value that means this, as its usage says
		}
		if m := def.FindStringSubmatch(line); m != nil && last != "" {
			v := m[1]
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
			defaults[last] = v
		}
	}
	require.NotEmpty(t, defaults)
	return defaults
}

// docFlagTable reads a Markdown table whose rows start with `-flag` cells:
// "| `-a`, `-b` | x, y | ... |" gives a -> x and b -> y.
func docFlagTable(t *testing.T, path, heading string) map[string]string {
	t.Helper()
	doc, err := os.ReadFile(path)
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), heading)
	require.True(t, ok, "%s has no %q", path, heading)
	rows := map[string]string{}
	row := regexp.MustCompile("^\\| *(`-[^|]+?) *\\|([^|]*)\\|")
	for _, line := range strings.Split(section, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			if len(rows) > 0 && !strings.HasPrefix(line, "|") {
				break // the table ended
			}
			continue
		}
		names := strings.Split(m[1], ", ")
		values := strings.Split(strings.TrimSpace(m[2]), ", ")
		for i, n := range names {
			v := ""
			if len(values) == len(names) {
				v = values[i]
			} else if len(values) == 1 {
				v = values[0]
			}
			rows[strings.TrimPrefix(strings.Trim(n, "`"), "-")] = v
		}
	}
	require.NotEmpty(t, rows, "%s: no flag table after %q", path, heading)
	return rows
}

// sameDefault reports whether a documented default (e.g. "`info`", "10m",
// "26214400 (25 MiB)", "false", empty) is the flag's.
func sameDefault(doc, flag string) bool {
	doc = strings.Trim(strings.TrimSpace(doc), "`")
	if i := strings.Index(doc, " ("); i > 0 {
		doc = doc[:i] // "26214400 (25 MiB)"
	}
	if doc == flag {
		return true
	}
	if flag == "" { // the zero value: PrintDefaults leaves it out
		return doc == "" || doc == "false" || doc == "0"
	}
	if d, err := time.ParseDuration(doc); err == nil {
		f, err := time.ParseDuration(flag)
		return err == nil && d == f
	}
	if d, err := strconv.ParseFloat(doc, 64); err == nil {
		f, err := strconv.ParseFloat(flag, 64)
		return err == nil && d == f
	}
	return false
}

// TestDocsProxyFlagTableCurrent: docs/proxy.md's table of flags names every
// flag of "sluice proxy", no other, each with its real default — a new
// flag or a changed default cannot leave the page behind.
func TestDocsProxyFlagTableCurrent(t *testing.T) {
	flags := flagDefaults(t, "proxy")
	table := docFlagTable(t, "../../docs/proxy.md", "### Flags and environment")
	for name, def := range flags {
		doc, ok := table[name]
		if !assert.True(t, ok, "docs/proxy.md: no row for -%s (default %q)", name, def) {
			continue
		}
		assert.True(t, sameDefault(doc, def), "docs/proxy.md: -%s's default is %q, the table says %q", name, def, doc)
	}
	for name := range table {
		_, ok := flags[name]
		assert.True(t, ok, "docs/proxy.md: a row for -%s, which sluice proxy does not have", name)
	}
}

func TestSameDefault(t *testing.T) {
	for _, tc := range []struct {
		doc, flag string
		want      bool
	}{
		{"`127.0.0.1:8080`", "127.0.0.1:8080", true},
		{"10m", "10m0s", true},
		{"1m", "1m0s", true},
		{"26214400 (25 MiB)", "26214400", true},
		{"false", "", true},
		{"", "", true},
		{"0", "", true},
		{"1024", "1024", true},
		{"1024", "2048", false},
		{"30s", "5s", false},
		{"", "x", false},
		{"`info`", "info", true},
	} {
		assert.Equal(t, tc.want, sameDefault(tc.doc, tc.flag), "%q vs %q", tc.doc, tc.flag)
	}
}
