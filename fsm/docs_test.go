package fsm_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/fsm"
)

var update = flag.Bool("update", false, "rewrite the diagrams in ../docs/state-machines.md")

const docsPath = "../docs/state-machines.md"

// TestDocsDiagramsCurrent checks that the Mermaid diagrams embedded in the
// docs match the transition tables. With -update it rewrites them.
func TestDocsDiagramsCurrent(t *testing.T) {
	raw, err := os.ReadFile(docsPath)
	require.NoError(t, err)
	doc := string(raw)

	want := doc
	for _, d := range []struct{ name, diagram string }{
		{"supervisor", fsm.SupervisorMermaid()},
		{"bucket", fsm.BucketMermaid()},
		{"window", fsm.WindowMermaid()},
	} {
		want, err = replaceBlock(want, d.name, "```mermaid\n"+d.diagram+"```\n")
		require.NoError(t, err)
	}

	if *update {
		if want != doc {
			require.NoError(t, os.WriteFile(docsPath, []byte(want), 0o644))
		}
		return
	}
	require.Equal(t, want, doc,
		"docs/state-machines.md is out of date with the fsm transition tables; "+
			"run `go test ./fsm -run TestDocsDiagramsCurrent -update`")
}

// replaceBlock replaces what lies between the lines <!-- BEGIN name --> and
// <!-- END name --> with body.
func replaceBlock(doc, name, body string) (string, error) {
	begin := "<!-- BEGIN " + name + " -->\n"
	end := "<!-- END " + name + " -->"
	i := strings.Index(doc, begin)
	if i < 0 || strings.Count(doc, begin) != 1 {
		return "", &markerError{begin}
	}
	start := i + len(begin)
	j := strings.Index(doc[start:], end)
	if j < 0 || strings.Count(doc, end) != 1 {
		return "", &markerError{end}
	}
	return doc[:start] + body + doc[start+j:], nil
}

type markerError struct{ marker string }

func (e *markerError) Error() string {
	return docsPath + " must contain the marker " + strings.TrimSpace(e.marker) + " exactly once"
}

func TestReplaceBlock(t *testing.T) {
	doc := "a\n<!-- BEGIN x -->\nold\n<!-- END x -->\nb\n"
	got, err := replaceBlock(doc, "x", "new\n")
	require.NoError(t, err)
	require.Equal(t, "a\n<!-- BEGIN x -->\nnew\n<!-- END x -->\nb\n", got)

	_, err = replaceBlock(doc, "y", "new\n")
	require.EqualError(t, err, docsPath+" must contain the marker <!-- BEGIN y --> exactly once")
	_, err = replaceBlock("<!-- BEGIN x -->\n", "x", "new\n")
	require.EqualError(t, err, docsPath+" must contain the marker <!-- END x --> exactly once")
}
