package tracing

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
)

// Flow describes one message type: its name in traces, who sends it to
// whom, and what it means. A Flows list is the single source for the
// trace's message names and for the message-flow diagram in
// docs/architecture.md.
type Flow struct {
	// Proto is a nil pointer of the message's type: (*submitMsg)(nil).
	Proto any
	// Name is the message's name in the trace ("submit").
	Name string
	// From and To are the sender and the receiver ("caller",
	// "supervisor"); a message sent along several edges has a Flow per
	// edge.
	From, To string
	// Doc is what the message means, for the table.
	Doc string
}

// Flows lists messages in the order a request meets them (package actors'
// messageFlows).
type Flows []Flow

// Names maps a message type to its name in the trace.
type Names map[reflect.Type]string

// Names returns the name of each message type of fs, made once (package
// actors keeps it in a variable).
func (fs Flows) Names() Names {
	m := make(Names, len(fs))
	for _, f := range fs {
		m[reflect.TypeOf(f.Proto)] = f.Name
	}
	return m
}

// Of is the short name of a message type: "enqueue" for *enqueueMsg,
// "started" for protoactor's *actor.Started, "other" for a type it does
// not know.
func (n Names) Of(m any) string {
	if name, ok := n[reflect.TypeOf(m)]; ok {
		return name
	}
	switch m.(type) {
	case *actor.Started:
		return "started"
	case *actor.Stopping:
		return "stopping"
	case *actor.Stopped:
		return "stopped"
	case *actor.Restarting:
		return "restarting"
	case *actor.Terminated:
		return "terminated"
	case *actor.PoisonPill:
		return "poison"
	}
	return "other"
}

// Mermaid renders fs as a Mermaid flowchart: who sends which message to
// whom, one edge per sender and receiver, in the order each pair first
// appears. docs/architecture.md embeds it.
func (fs Flows) Mermaid() string {
	var b strings.Builder
	b.WriteString("flowchart LR\n")
	edges := map[[2]string][]string{}
	var order [][2]string
	for _, f := range fs {
		k := [2]string{f.From, f.To}
		if _, ok := edges[k]; !ok {
			order = append(order, k)
		}
		edges[k] = append(edges[k], f.Name)
	}
	for _, k := range order {
		fmt.Fprintf(&b, "    %s -- \"%s\" --> %s\n", k[0], strings.Join(edges[k], ", "), k[1])
	}
	return b.String()
}

// Table renders fs as a Markdown table.
func (fs Flows) Table() string {
	var b strings.Builder
	b.WriteString("| Message | From | To | Meaning |\n|---|---|---|---|\n")
	for _, f := range fs {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.Name, f.From, f.To, f.Doc)
	}
	return b.String()
}
