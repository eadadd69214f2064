// Package docblock rewrites the generated blocks of the docs: what lies
// between the lines <!-- BEGIN name --> and <!-- END name --> of a
// Markdown file. The docs tests of several packages (diagrams from the
// state machines, the message flow, the outcome table) keep their blocks
// equal to the code with it, and rewrite them with -update.
package docblock

import "strings"

// Replace returns doc, read from path, with what lies between the lines
// <!-- BEGIN name --> and <!-- END name --> replaced by body. Each marker
// must be in doc exactly once; otherwise the error names path and the
// marker.
func Replace(path, doc, name, body string) (string, error) {
	begin := "<!-- BEGIN " + name + " -->\n"
	end := "<!-- END " + name + " -->"
	i := strings.Index(doc, begin)
	if i < 0 || strings.Count(doc, begin) != 1 {
		return "", &MarkerError{Path: path, Marker: begin}
	}
	start := i + len(begin)
	j := strings.Index(doc[start:], end)
	if j < 0 || strings.Count(doc, end) != 1 {
		return "", &MarkerError{Path: path, Marker: end}
	}
	return doc[:start] + body + doc[start+j:], nil
}

// MarkerError reports a marker missing from a file, or there more than once.
type MarkerError struct {
	Path, Marker string
}

func (e *MarkerError) Error() string {
	return e.Path + " must contain the marker " + strings.TrimSpace(e.Marker) + " exactly once"
}
