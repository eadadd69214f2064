package fsm_test

import (
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/internal/docblock"
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
		want, err = docblock.Replace(docsPath, want, d.name, "```mermaid\n"+d.diagram+"```\n")
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
