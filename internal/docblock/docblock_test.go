package docblock

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReplace(t *testing.T) {
	const docsPath = "docs/x.md"
	doc := "a\n<!-- BEGIN x -->\nold\n<!-- END x -->\nb\n"
	got, err := Replace(docsPath, doc, "x", "new\n")
	require.NoError(t, err)
	require.Equal(t, "a\n<!-- BEGIN x -->\nnew\n<!-- END x -->\nb\n", got)

	_, err = Replace(docsPath, doc, "y", "new\n")
	require.EqualError(t, err, docsPath+" must contain the marker <!-- BEGIN y --> exactly once")
	_, err = Replace(docsPath, "<!-- BEGIN x -->\n", "x", "new\n")
	require.EqualError(t, err, docsPath+" must contain the marker <!-- END x --> exactly once")
}
