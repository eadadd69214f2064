package actors

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// TraceEvent is the actors' form of sluice.TraceEvent, which documents
// every field; package sluice converts it (the two must stay identical).
type TraceEvent struct {
	Time                    time.Time
	Kind                    string
	Actor, ActorID          string
	Bucket                  string
	Message                 string
	To                      string
	Event                   string
	StateBefore, StateAfter string
	RequestID               uint64
	Route                   string
	Status                  int
	Took                    time.Duration
}

// tracer is implemented by the actors so the middleware can read the state
// they are in and the key they are known by.
type tracer interface {
	traceName() string
	// traceState and traceKey describe what msg concerns: the
	// supervisor's state, or the state and key of the bucket a request
	// is in.
	traceState(msg any) string
	traceKey(msg any) string
	// traceBuffer is the buffer of the actor handling msg (nil: a
	// message it sends or a transition).
	traceBuffer(msg any) *traceBuf
}

// traceBuf holds the events an actor causes while it handles a message
// (sends, transitions), so they are emitted after the receive event that
// caused them. Used only on the actor's goroutine.
type traceBuf struct {
	active bool
	events []TraceEvent
}

// emitFrom emits e, or holds it until the actor's current receive event.
func (s *System) emitFrom(t tracer, e TraceEvent) {
	if t != nil {
		if b := t.traceBuffer(nil); b.active {
			b.events = append(b.events, e)
			return
		}
	}
	s.emit(e)
}

// messageInfo is implemented by messages that concern one request.
type messageInfo interface{ traceCall() *Call }

func (m *submitMsg) traceCall() *Call  { return m.call }
func (m *enqueueMsg) traceCall() *Call { return m.call }
func (m *resultMsg) traceCall() *Call  { return m.call }
func (m *etaMsg) traceCall() *Call     { return m.call }

// flow describes one message type: its name in traces, who sends it to
// whom, and what it means. It is the single source for the trace's message
// names and for the message-flow diagram in docs/architecture.md.
type flow struct {
	proto    any
	name     string
	from, to string
	doc      string
}

// messageFlows lists every message the actors exchange, in the order a
// request meets them.
var messageFlows = []flow{
	{(*submitMsg)(nil), "submit", "caller", "supervisor", "a new request: routed to the actor of its major parameters (1 of 3 per request)"},
	{(*enqueueMsg)(nil), "enqueue", "supervisor", "bucket", "requests for the actor, counted (2 of 3)"},
	{(*resultMsg)(nil), "result", "worker", "bucket", "the answer, parsed and classified once, or the error (3 of 3)"},
	{(*wantMsg)(nil), "want", "bucket", "supervisor", "requests ready, admission held: queue me"},
	{(*soonMsg)(nil), "soon", "bucket", "supervisor", "my bucket reopens within the global period: keep my slots from those behind me"},
	{(*grantMsg)(nil), "grant", "supervisor", "bucket", "your turn: global slots reserved (or the ban probe)"},
	{(*freedMsg)(nil), "freed", "bucket", "supervisor", "a global slot settled or given back while others wait"},
	{(*globalHitMsg)(nil), "global_hit", "worker", "supervisor", "a global 429, from its headers (or another process's, from Redis)"},
	{(*sharedWakeMsg)(nil), "shared_wake", "redis", "supervisor", "an answer another process got, which requests here wait for; or Redis answers again"},
	{(*sharedWakeMsg)(nil), "shared_wake", "supervisor", "bucket", "forwarded to the actor of its major parameters (to every actor when Redis answers again)"},
	{(*banMsg)(nil), "ban", "bucket", "supervisor", "a Cloudflare ban"},
	{(*probeDoneMsg)(nil), "probe_done", "bucket", "supervisor", "the ban probe's answer"},
	{(*pioneeredMsg)(nil), "pioneered", "bucket", "bucket", "the first pioneer of a route you wait for is answered: its bucket may be known"},
	{(*idleMsg)(nil), "idle", "bucket", "supervisor", "nothing to do: may I stop?"},
	{(*drainMsg)(nil), "drain", "supervisor", "bucket", "Close: fail the queues"},
	{(*wakeMsg)(nil), "wake", "timer", "bucket", "a reset or retry timer"},
	{(*dialedMsg)(nil), "dialed", "dialer", "supervisor", "a connection, or why not"},
	{(*connDownMsg)(nil), "conn_down", "watcher", "supervisor", "the connection died"},
	{(*redialMsg)(nil), "redial", "timer", "supervisor", "the reconnect backoff ended"},
	{(*globalClearMsg)(nil), "global_clear", "timer", "supervisor", "a global pause ended"},
	{(*globalRetryMsg)(nil), "global_retry", "timer", "supervisor", "a global window slot frees"},
	{(*closeMsg)(nil), "close", "caller", "supervisor", "Close began"},
	{(*snapshotMsg)(nil), "snapshot", "caller", "supervisor", "Snapshot"},
	{(*bucketSnapshotMsg)(nil), "bucket_snapshot", "caller", "bucket", "Snapshot"},
	{(*etaMsg)(nil), "eta", "caller", "supervisor", "Future.ETA: where is this request?"},
	{(*etaMsg)(nil), "eta", "supervisor", "bucket", "forwarded to the actor of its major parameters, after its enqueue"},
}

var flowNames = func() map[reflect.Type]string {
	m := make(map[reflect.Type]string, len(messageFlows))
	for _, f := range messageFlows {
		m[reflect.TypeOf(f.proto)] = f.name
	}
	return m
}()

// messageName is the short name of a message type: "enqueue" for
// *enqueueMsg, "started" for protoactor's *actor.Started.
func messageName(m any) string {
	if n, ok := flowNames[reflect.TypeOf(m)]; ok {
		return n
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

// MessageFlowMermaid renders messageFlows as a Mermaid flowchart: who sends
// which message to whom. docs/architecture.md embeds it.
func MessageFlowMermaid() string {
	var b strings.Builder
	b.WriteString("flowchart LR\n")
	edges := map[[2]string][]string{}
	var order [][2]string
	for _, f := range messageFlows {
		k := [2]string{f.from, f.to}
		if _, ok := edges[k]; !ok {
			order = append(order, k)
		}
		edges[k] = append(edges[k], f.name)
	}
	for _, k := range order {
		fmt.Fprintf(&b, "    %s -- \"%s\" --> %s\n", k[0], strings.Join(edges[k], ", "), k[1])
	}
	return b.String()
}

// MessageTable renders messageFlows as a Markdown table.
func MessageTable() string {
	var b strings.Builder
	b.WriteString("| Message | From | To | Meaning |\n|---|---|---|---|\n")
	for _, f := range messageFlows {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.name, f.from, f.to, f.doc)
	}
	return b.String()
}

// tracing reports whether any trace sink is on.
func (s *System) tracing() bool {
	return s.cfg.Trace != nil || s.log.Enabled(context.Background(), slog.LevelDebug)
}

// emit hands e to the trace sinks: the callback and, at debug level, the
// logger.
func (s *System) emit(e TraceEvent) {
	if s.cfg.Trace != nil {
		s.cfg.Trace(e)
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		attrs := []slog.Attr{slog.String("kind", e.Kind), slog.String("actor", e.Actor), slog.String("id", e.ActorID)}
		add := func(k, v string) {
			if v != "" {
				attrs = append(attrs, slog.String(k, v))
			}
		}
		add("bucket", e.Bucket)
		add("message", e.Message)
		add("to", e.To)
		add("event", e.Event)
		add("from_state", e.StateBefore)
		add("to_state", e.StateAfter)
		add("route", e.Route)
		if e.RequestID != 0 {
			attrs = append(attrs, slog.Uint64("request", e.RequestID))
		}
		if e.Status != 0 {
			attrs = append(attrs, slog.Int("status", e.Status))
		}
		if e.Took != 0 {
			attrs = append(attrs, slog.Duration("took", e.Took))
		}
		s.log.LogAttrs(context.Background(), slog.LevelDebug, "sluice: trace", attrs...)
	}
}

// describe fills the request fields of e from a message.
func describe(e *TraceEvent, msg any) {
	e.Message = messageName(msg)
	if mi, ok := msg.(messageInfo); ok {
		if c := mi.traceCall(); c != nil {
			e.RequestID = c.ID
			e.Route = c.Route.String()
		}
	}
	if m, ok := msg.(*resultMsg); ok && m.resp != nil {
		e.Status = m.resp.StatusCode
	}
}

// receiveMiddleware is installed on every actor when tracing is on: one
// event per message received, with the actor's state before and after.
func (s *System) receiveMiddleware() []actor.ReceiverMiddleware {
	if !s.tracing() {
		return nil
	}
	return []actor.ReceiverMiddleware{func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			e := TraceEvent{Kind: "receive", ActorID: c.Self().GetId()}
			t, _ := c.Actor().(tracer)
			var buf *traceBuf
			if t != nil {
				e.Actor, e.StateBefore, e.Bucket = t.traceName(), t.traceState(env.Message), t.traceKey(env.Message)
				buf = t.traceBuffer(env.Message)
				buf.active = true
			}
			describe(&e, env.Message)
			began := time.Now()
			next(c, env)
			e.Took = time.Since(began)
			e.Time = s.now()
			if t != nil {
				e.StateAfter, e.Bucket = t.traceState(env.Message), t.traceKey(env.Message)
			}
			s.emit(e)
			if buf != nil {
				for i, held := range buf.events {
					s.emit(held)
					buf.events[i] = TraceEvent{}
				}
				buf.events, buf.active = buf.events[:0], false
			}
		}
	}}
}

// senderMiddleware is installed on every actor when tracing is on: one
// event per message an actor sends to another.
func (s *System) senderMiddleware() []actor.SenderMiddleware {
	if !s.tracing() {
		return nil
	}
	return []actor.SenderMiddleware{func(next actor.SenderFunc) actor.SenderFunc {
		return func(c actor.SenderContext, target *actor.PID, env *actor.MessageEnvelope) {
			e := TraceEvent{Kind: "send", Time: s.now(), ActorID: c.Self().GetId(), To: target.GetId()}
			t, _ := c.Actor().(tracer)
			if t != nil {
				e.Actor, e.StateBefore, e.Bucket = t.traceName(), t.traceState(env.Message), t.traceKey(env.Message)
			}
			describe(&e, env.Message)
			s.emitFrom(t, e)
			next(c, target, env)
		}
	}}
}

// transition emits a state machine transition of t's machine for the
// bucket key (empty for the supervisor).
func (s *System) transition(t tracer, pid *actor.PID, key, event, from, to string) {
	s.tel.Transition(t.traceName(), event, "")
	s.traceTransition(t, pid, key, event, from, to)
}

// windowTransition traces a transition of a global window's machine: the
// supervisor's, with key "window bot" or "window ip"; its metric names the
// machine "window".
func (s *System) windowTransition(t tracer, pid *actor.PID, w Window, event, from, to string) {
	s.tel.Transition("window", event, w.String())
	s.traceTransition(t, pid, "window "+w.String(), event, from, to)
}

func (s *System) traceTransition(t tracer, pid *actor.PID, key, event, from, to string) {
	if !s.tracing() {
		return
	}
	id := ""
	if pid != nil {
		id = pid.GetId()
	}
	s.emitFrom(t, TraceEvent{Kind: "transition", Time: s.now(), Actor: t.traceName(), ActorID: id, Bucket: key,
		Event: event, StateBefore: from, StateAfter: to})
}
