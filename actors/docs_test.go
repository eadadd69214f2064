package actors

import (
	"flag"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/docblock"
)

var update = flag.Bool("update", false, "rewrite the generated blocks of docs/architecture.md")

// TestDocsMessageFlowCurrent keeps the message-flow diagram and table in
// docs/architecture.md equal to messageFlows.
func TestDocsMessageFlowCurrent(t *testing.T) {
	const path = "../docs/architecture.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	want := map[string]string{
		"message-flow":  "```mermaid\n" + MessageFlowMermaid() + "```\n",
		"message-table": MessageTable(),
	}
	for name, body := range want {
		got, err := docblock.Replace(path, doc, name, body)
		if err != nil {
			t.Fatal(err)
		}
		if got != doc {
			if !*update {
				t.Errorf("%s: the %s block is out of date; run go test ./actors -run TestDocsMessageFlowCurrent -update", path, name)
				continue
			}
			doc = got
		}
	}
	if *update {
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEveryMessageIsInTheFlow makes sure no message type is traced as
// "other".
func TestEveryMessageIsInTheFlow(t *testing.T) {
	for _, f := range messageFlows {
		if messageName(f.Proto) != f.Name {
			t.Errorf("%T is named %q, want %q", f.Proto, messageName(f.Proto), f.Name)
		}
	}
}
