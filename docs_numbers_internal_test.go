package sluice

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/actors"
	"github.com/sluicehq/sluice/transport"
)

// TestDocsDefaultsCurrent: every "Default N" an Options field's comment
// states is the constant the limiter applies (config.go), so a changed
// default cannot leave the documentation behind; a new claim must be
// added here. A default of 0 is the zero value, which needs no constant.
func TestDocsDefaultsCurrent(t *testing.T) {
	applied := map[string]float64{
		"GlobalLimit":          DefaultGlobalLimit,
		"GlobalWindow":         DefaultGlobalWindow.Seconds(),
		"IPGlobalLimit":        defaultIPGlobalLimit,
		"MaxRetries":           defaultMaxRetries,
		"MaxErrorRetries":      defaultMaxErrorRetries,
		"MaxQueue":             defaultMaxQueue,
		"MaxPending":           defaultMaxPending,
		"InvalidRequestLimit":  defaultInvalidLimit,
		"InvalidRequestWindow": defaultInvalidWindow.Seconds(),
		"InvalidRequestWarn":   defaultInvalidWarn,
		"BanBackoff":           defaultBanBackoff.Seconds(),
		"MaxResponseBytes":     defaultMaxResponseBytes,
		"MaxBufferedBytes":     4, // "4 × MaxResponseBytes", as config applies it
		"Timeout":              defaultTimeout.Seconds(),
		"AttemptTimeout":       defaultAttemptTimeout.Seconds(),
		"UnauthorizedProbe":    defaultUnauthorizedProbe.Seconds(),
		"Connections":          actors.DefaultConnections,
		"DialTimeout":          transport.DefaultDialTimeout.Seconds(),
	}
	f, err := parser.ParseFile(token.NewFileSet(), "options.go", nil, parser.ParseComments)
	require.NoError(t, err)
	// "Default 50", "Default 10,000", "Default 1 s", "Default 5\n minutes",
	// "Default 64 MiB": durations in seconds, sizes in bytes.
	claim := regexp.MustCompile(`Default:? ([0-9][0-9,]*(?:\.[0-9]+)?)(?:\s(ms|s|min|minutes?|MiB)\b)?`)
	unit := map[string]float64{"": 1, "ms": 1e-3, "s": 1, "min": 60, "minute": 60, "minutes": 60, "MiB": 1 << 20}
	seen := 0
	ast.Inspect(f, func(n ast.Node) bool {
		fl, ok := n.(*ast.Field)
		if !ok || fl.Doc == nil || len(fl.Names) == 0 {
			return true
		}
		name := fl.Names[0].Name
		m := claim.FindStringSubmatch(fl.Doc.Text())
		if m == nil {
			return true
		}
		v, err := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
		require.NoError(t, err, name)
		if v == 0 {
			return true
		}
		seen++
		want, ok := applied[name]
		if !assert.True(t, ok, "Options.%s says its default is %s %s: add the constant it is to this test", name, m[1], m[2]) {
			return true
		}
		assert.Equal(t, want, v*unit[m[2]], "Options.%s: its comment says %s %s", name, m[1], m[2])
		return true
	})
	assert.Equal(t, len(applied), seen, "every default of this table is stated in options.go")
}

// TestDocsPoolSizeCurrent: the pages that give the connection pool's size
// give the one the limiter uses.
func TestDocsPoolSizeCurrent(t *testing.T) {
	for _, c := range []struct{ file, pattern string }{
		{"doc.go", `up to Options\.Connections, (\d+) by default`},
		{"docs/architecture.md", "`Options\\.Connections`, (\\d+) by default"},
		{"README.md", `the pool grows to (\d+) connections`},
		{"options.go", `Default (\d+);\s+// at most`},
	} {
		text, err := os.ReadFile(c.file)
		require.NoError(t, err)
		m := regexp.MustCompile(c.pattern).FindSubmatch(text)
		if assert.NotNil(t, m, "%s no longer says %q: update this test", c.file, c.pattern) {
			assert.Equal(t, strconv.Itoa(actors.DefaultConnections), string(m[1]), c.file)
		}
	}
	text, err := os.ReadFile("options.go")
	require.NoError(t, err)
	m := regexp.MustCompile(`at most (\d+)\.\n\s+Connections int`).FindSubmatch(text)
	if assert.NotNil(t, m) {
		assert.Equal(t, strconv.Itoa(maxConnections), string(m[1]))
	}
}
