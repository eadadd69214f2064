package harness

import (
	"os"
	"path/filepath"
	"strings"
)

// EndMarker closes the generated block of a document (WriteGenerated).
const EndMarker = "<!-- END GENERATED -->"

// WriteGenerated writes block, which starts with begin and ends with
// EndMarker, into the document at path: in place of the generated block
// it already holds (the hand-written text around it stays), or as a new
// document of head and block when the file is missing or has no such
// block.
func WriteGenerated(path, begin, head, block string) error {
	old, err := os.ReadFile(path)
	var doc string
	switch {
	case err == nil && strings.Contains(string(old), begin) && strings.Contains(string(old), EndMarker):
		s := string(old)
		i := strings.Index(s, begin)
		j := strings.Index(s, EndMarker) + len(EndMarker)
		doc = s[:i] + block + s[j:]
	case err == nil || os.IsNotExist(err):
		doc = head + block + "\n"
	default:
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}
