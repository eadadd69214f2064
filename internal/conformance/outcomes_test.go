package conformance

import (
	"flag"
	"os"
	"testing"

	"github.com/sluicehq/sluice/internal/docblock"
	"github.com/sluicehq/sluice/ratelimit"
)

var update = flag.Bool("update", false, "rewrite the outcome and window tables in docs/architecture.md")

// TestDocsOutcomeTableCurrent keeps the outcome table in
// docs/architecture.md equal to Outcomes.
func TestDocsOutcomeTableCurrent(t *testing.T) {
	docTableCurrent(t, "outcome-table", OutcomeTable())
}

// TestDocsWindowTableCurrent keeps the window table in
// docs/architecture.md equal to Windows.
func TestDocsWindowTableCurrent(t *testing.T) {
	docTableCurrent(t, "window-table", WindowTable())
}

// docTableCurrent keeps the block name of docs/architecture.md equal to
// table.
func docTableCurrent(t *testing.T, name, table string) {
	t.Helper()
	const path = "../../docs/architecture.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	want, err := docblock.Replace(path, doc, name, table)
	if err != nil {
		t.Fatal(err)
	}
	if want == doc {
		return
	}
	if !*update {
		t.Fatalf("%s: the %s is out of date; run go test ./internal/conformance -update", path, name)
	}
	if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestOutcomesCoverTheTable checks the table reaches every charge, pause
// and fate, and names each row once.
func TestOutcomesCoverTheTable(t *testing.T) {
	charges, pauses, nexts, names := map[ratelimit.Charge]bool{}, map[ratelimit.Pause]bool{}, map[ratelimit.Next]bool{}, map[string]bool{}
	for _, c := range Outcomes {
		if names[c.Name] {
			t.Errorf("row %q twice", c.Name)
		}
		names[c.Name] = true
		charges[c.Want.Charge], pauses[c.Want.Pause], nexts[c.Want.Next] = true, true, true
	}
	for _, c := range []ratelimit.Charge{ratelimit.ChargeUnknown, ratelimit.ChargeNone, ratelimit.ChargeArrived} {
		if !charges[c] {
			t.Errorf("no row charges %v", c)
		}
	}
	for p := ratelimit.PauseNone; p <= ratelimit.PauseAuth; p++ {
		if !pauses[p] {
			t.Errorf("no row pauses %v", p)
		}
	}
	for n := ratelimit.Deliver; n <= ratelimit.Fail; n++ {
		if !nexts[n] {
			t.Errorf("no row ends in %v", n)
		}
	}
}
