package tracing

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
)

type (
	pingMsg struct{}
	pongMsg struct{}
	stopMsg struct{}
)

var testFlows = Flows{
	{Proto: (*pingMsg)(nil), Name: "ping", From: "caller", To: "server", Doc: "are you there?"},
	{Proto: (*pongMsg)(nil), Name: "pong", From: "server", To: "caller", Doc: "yes"},
	{Proto: (*stopMsg)(nil), Name: "stop", From: "caller", To: "server", Doc: "Close began"},
	{Proto: (*pingMsg)(nil), Name: "ping", From: "server", To: "peer", Doc: "forwarded"},
}

func TestMermaidGroupsEachEdgeInOrder(t *testing.T) {
	assert.Equal(t, `flowchart LR
    caller -- "ping, stop" --> server
    server -- "pong" --> caller
    server -- "ping" --> peer
`, testFlows.Mermaid())
	assert.Equal(t, "flowchart LR\n", Flows(nil).Mermaid())
}

func TestTableHasARowPerFlow(t *testing.T) {
	assert.Equal(t, "| Message | From | To | Meaning |\n|---|---|---|---|\n"+
		"| `ping` | caller | server | are you there? |\n"+
		"| `pong` | server | caller | yes |\n"+
		"| `stop` | caller | server | Close began |\n"+
		"| `ping` | server | peer | forwarded |\n", testFlows.Table())
}

func TestNamesByType(t *testing.T) {
	n := testFlows.Names()
	assert.Len(t, n, 3, "one name per type, however many edges it has")
	assert.Equal(t, "ping", n.Of(&pingMsg{}))
	assert.Equal(t, "pong", n.Of(&pongMsg{}))
	assert.Equal(t, "other", n.Of(pingMsg{}), "a value is not its pointer")
	assert.Equal(t, "other", n.Of(42))
	assert.Equal(t, "other", n.Of(nil))
	for m, want := range map[any]string{
		&actor.Started{}:    "started",
		&actor.Stopping{}:   "stopping",
		&actor.Stopped{}:    "stopped",
		&actor.Restarting{}: "restarting",
		&actor.Terminated{}: "terminated",
		&actor.PoisonPill{}: "poison",
	} {
		assert.Equal(t, want, n.Of(m), "%T", m)
	}
	assert.Equal(t, "started", Names(nil).Of(&actor.Started{}), "protoactor's own messages need no flow")
}
