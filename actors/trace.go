package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/sluicehq/sluice/internal/tracing"
)

// The message trace's machinery (the event, the actors' buffers, the sinks,
// the middlewares, the flow table's rendering) is internal/tracing; here is
// what knows the actors' own types: their messages' names and what a
// message says of its request. The actors implement tracing.Tracer
// (supervisor.go, bucket.go, spawn.go) and System.sink emits.

// TraceEvent is tracing.Event, the actors' form of sluice.TraceEvent, which
// documents every field; package sluice converts it (the two must stay
// identical).
type TraceEvent = tracing.Event

// messageInfo is implemented by messages that concern one request.
type messageInfo interface{ traceCall() *Call }

func (m *submitMsg) traceCall() *Call  { return m.call }
func (m *enqueueMsg) traceCall() *Call { return m.call }
func (m *resultMsg) traceCall() *Call  { return m.call }
func (m *etaMsg) traceCall() *Call     { return m.call }

// messageFlows lists every message the actors exchange, in the order a
// request meets them: the single source for the trace's message names and
// for the message-flow diagram in docs/architecture.md.
var messageFlows = tracing.Flows{
	{Proto: (*submitMsg)(nil), Name: "submit", From: "caller", To: "supervisor", Doc: "a new request: routed to the actor of its major parameters (1 of 3 per request)"},
	{Proto: (*enqueueMsg)(nil), Name: "enqueue", From: "supervisor", To: "bucket", Doc: "requests for the actor, counted (2 of 3)"},
	{Proto: (*resultMsg)(nil), Name: "result", From: "worker", To: "bucket", Doc: "the answer, parsed and classified once, or the error (3 of 3)"},
	{Proto: (*wantMsg)(nil), Name: "want", From: "bucket", To: "supervisor", Doc: "requests ready, admission held: queue me"},
	{Proto: (*soonMsg)(nil), Name: "soon", From: "bucket", To: "supervisor", Doc: "my bucket reopens within the global period: keep my slots from those behind me"},
	{Proto: (*grantMsg)(nil), Name: "grant", From: "supervisor", To: "bucket", Doc: "your turn: global slots reserved (or the ban probe)"},
	{Proto: (*freedMsg)(nil), Name: "freed", From: "bucket", To: "supervisor", Doc: "a global slot settled or given back while others wait"},
	{Proto: (*globalHitMsg)(nil), Name: "global_hit", From: "worker", To: "supervisor", Doc: "a global 429, from its headers (or another process's, from Redis)"},
	{Proto: (*sharedWakeMsg)(nil), Name: "shared_wake", From: "redis", To: "supervisor", Doc: "an answer another process got, which requests here wait for; or Redis answers again"},
	{Proto: (*sharedWakeMsg)(nil), Name: "shared_wake", From: "supervisor", To: "bucket", Doc: "forwarded to the actor of its major parameters (to every actor when Redis answers again)"},
	{Proto: (*banMsg)(nil), Name: "ban", From: "bucket", To: "supervisor", Doc: "a Cloudflare ban"},
	{Proto: (*probeDoneMsg)(nil), Name: "probe_done", From: "bucket", To: "supervisor", Doc: "the ban probe's answer"},
	{Proto: (*pioneeredMsg)(nil), Name: "pioneered", From: "bucket", To: "bucket", Doc: "the first pioneer of a route you wait for is answered: its bucket may be known"},
	{Proto: (*idleMsg)(nil), Name: "idle", From: "bucket", To: "supervisor", Doc: "nothing to do: may I stop?"},
	{Proto: (*drainMsg)(nil), Name: "drain", From: "supervisor", To: "bucket", Doc: "Close: fail the queues"},
	{Proto: (*wakeMsg)(nil), Name: "wake", From: "timer", To: "bucket", Doc: "a reset or retry timer"},
	{Proto: (*dialedMsg)(nil), Name: "dialed", From: "dialer", To: "supervisor", Doc: "a connection, or why not"},
	{Proto: (*connDownMsg)(nil), Name: "conn_down", From: "watcher", To: "supervisor", Doc: "the connection died"},
	{Proto: (*redialMsg)(nil), Name: "redial", From: "timer", To: "supervisor", Doc: "the reconnect backoff ended"},
	{Proto: (*globalClearMsg)(nil), Name: "global_clear", From: "timer", To: "supervisor", Doc: "a global pause ended"},
	{Proto: (*globalRetryMsg)(nil), Name: "global_retry", From: "timer", To: "supervisor", Doc: "a global window slot frees"},
	{Proto: (*closeMsg)(nil), Name: "close", From: "caller", To: "supervisor", Doc: "Close began"},
	{Proto: (*snapshotMsg)(nil), Name: "snapshot", From: "caller", To: "supervisor", Doc: "Snapshot"},
	{Proto: (*bucketSnapshotMsg)(nil), Name: "bucket_snapshot", From: "caller", To: "bucket", Doc: "Snapshot"},
	{Proto: (*etaMsg)(nil), Name: "eta", From: "caller", To: "supervisor", Doc: "Future.ETA: where is this request?"},
	{Proto: (*etaMsg)(nil), Name: "eta", From: "supervisor", To: "bucket", Doc: "forwarded to the actor of its major parameters, after its enqueue"},
}

// messageNames names messageFlows' message types in the trace.
var messageNames = messageFlows.Names()

// messageName is the short name of a message type: "enqueue" for
// *enqueueMsg, "started" for protoactor's *actor.Started.
func messageName(m any) string { return messageNames.Of(m) }

// MessageFlowMermaid renders messageFlows as a Mermaid flowchart: who sends
// which message to whom. docs/architecture.md embeds it.
func MessageFlowMermaid() string { return messageFlows.Mermaid() }

// MessageTable renders messageFlows as a Markdown table.
func MessageTable() string { return messageFlows.Table() }

// describe fills the request fields of e from a message: the sink's
// tracing.Sink.Describe.
func describe(e tracing.Event, msg any) tracing.Event {
	e.Message = messageName(msg)
	if mi, ok := msg.(messageInfo); ok {
		if c := mi.traceCall(); c != nil {
			e.RequestID = c.ID
			e.Route = c.Route.String()
		}
	}
	if m, ok := msg.(*resultMsg); ok && m.Resp != nil {
		e.Status = m.Resp.StatusCode
	}
	return e
}

// transition emits a state machine transition of t's machine for the
// bucket key (empty for the supervisor).
func (s *System) transition(t tracing.Tracer, pid *actor.PID, key, event, from, to string) {
	s.tel.Transition(t.TraceName(), event, "")
	s.sink.Transition(t, pid, key, event, from, to)
}

// windowTransition traces a transition of a global window's machine: the
// supervisor's, with key "window bot" or "window ip"; its metric names the
// machine "window".
func (s *System) windowTransition(t tracing.Tracer, pid *actor.PID, w Window, event, from, to string) {
	s.tel.Transition("window", event, w.String())
	s.sink.Transition(t, pid, "window "+w.String(), event, from, to)
}
