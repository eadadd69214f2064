// Package tracing is the machinery of the limiter's message trace: the
// event (Event, which package sluice converts to its public TraceEvent),
// the sink that hands events to the callback and, at debug level, to the
// logger (Sink), the protoactor middlewares that make one event per
// message an actor receives or sends, the events of state machine
// transitions, and the rendering of a message-flow table (Flows) as the
// trace's message names, a Mermaid flowchart and a Markdown table.
//
// It knows neither the actors nor their messages. Package actors
// implements Tracer on its actors (their name, the state and key a message
// concerns, their Buffer), passes a Describe function that fills an
// event's message fields from one of its messages, and lists its messages
// in a Flows.
//
// Invariants:
//   - With neither a callback nor a logger at debug level, the trace costs
//     nothing: Sink.On is false, no middleware is installed, and
//     Sink.Transition returns at once.
//   - Each actor's events read as cause, then effects: what an actor sends
//     and the transitions of its machines while it handles a message are
//     held in its Buffer and emitted right after the receive event of that
//     message (Sink.EmitFrom, Sink.ReceiveMiddleware).
//   - An event never carries a token: Describe gives the route redacted.
package tracing

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Event is the actors' form of sluice.TraceEvent, which documents every
// field; package sluice converts it (the two must stay identical).
type Event struct {
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

// Tracer is implemented by the actors so the middleware can read the state
// they are in and the key they are known by.
type Tracer interface {
	TraceName() string
	// TraceState and TraceKey describe what msg concerns: the
	// supervisor's state, or the state and key of the bucket a request
	// is in.
	TraceState(msg any) string
	TraceKey(msg any) string
	// TraceBuffer is the buffer of the actor handling msg (nil: a
	// message it sends or a transition).
	TraceBuffer(msg any) *Buffer
}

// Buffer holds the events an actor causes while it handles a message
// (sends, transitions), so they are emitted after the receive event that
// caused them. Used only on the actor's goroutine; the zero Buffer is
// ready.
type Buffer struct {
	active bool // set by the receive middleware while the actor handles a message
	events []Event
}

// Sink hands events to the trace's sinks. Its fields are set once, before
// any middleware is made, and not changed after: safe for concurrent use
// from every actor.
type Sink struct {
	// Callback receives every event (nil: none).
	Callback func(Event)
	// Log receives every event at debug level, as a "sluice: trace"
	// record. It must not be nil (slog.DiscardHandler: none).
	Log *slog.Logger
	// Clock stamps the events (the limiter's clock). Required once the
	// sink is on (On).
	Clock func() time.Time
	// Describe returns e with its message fields (Message, RequestID,
	// Route, Status) filled from a message received or sent. It takes and
	// returns the event by value: through a pointer, the event would
	// escape to the heap at every traced message. Required once the sink
	// is on.
	Describe func(e Event, msg any) Event
}

// On reports whether any trace sink is on.
func (s *Sink) On() bool {
	return s.Callback != nil || s.Log.Enabled(context.Background(), slog.LevelDebug)
}

// EmitFrom emits e, or holds it until the actor's current receive event.
func (s *Sink) EmitFrom(t Tracer, e Event) {
	if t != nil {
		if b := t.TraceBuffer(nil); b.active {
			b.events = append(b.events, e)
			return
		}
	}
	s.Emit(e)
}

// Emit hands e to the trace sinks: the callback and, at debug level, the
// logger.
func (s *Sink) Emit(e Event) {
	if s.Callback != nil {
		s.Callback(e)
	}
	if s.Log.Enabled(context.Background(), slog.LevelDebug) {
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
		s.Log.LogAttrs(context.Background(), slog.LevelDebug, "sluice: trace", attrs...)
	}
}

// ReceiveMiddleware is installed on every actor when tracing is on: one
// event per message received, with the actor's state before and after
// (nil when no sink is on).
func (s *Sink) ReceiveMiddleware() []actor.ReceiverMiddleware {
	if !s.On() {
		return nil
	}
	return []actor.ReceiverMiddleware{func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			e := Event{Kind: "receive", ActorID: c.Self().GetId()}
			t, _ := c.Actor().(Tracer)
			var buf *Buffer
			if t != nil {
				e.Actor, e.StateBefore, e.Bucket = t.TraceName(), t.TraceState(env.Message), t.TraceKey(env.Message)
				buf = t.TraceBuffer(env.Message)
				buf.active = true
			}
			e = s.Describe(e, env.Message)
			began := time.Now()
			next(c, env)
			e.Took = time.Since(began)
			e.Time = s.Clock()
			if t != nil {
				e.StateAfter, e.Bucket = t.TraceState(env.Message), t.TraceKey(env.Message)
			}
			s.Emit(e)
			if buf != nil {
				for i, held := range buf.events {
					s.Emit(held)
					buf.events[i] = Event{}
				}
				buf.events, buf.active = buf.events[:0], false
			}
		}
	}}
}

// SenderMiddleware is installed on every actor when tracing is on: one
// event per message an actor sends to another (nil when no sink is on).
func (s *Sink) SenderMiddleware() []actor.SenderMiddleware {
	if !s.On() {
		return nil
	}
	return []actor.SenderMiddleware{func(next actor.SenderFunc) actor.SenderFunc {
		return func(c actor.SenderContext, target *actor.PID, env *actor.MessageEnvelope) {
			e := Event{Kind: "send", Time: s.Clock(), ActorID: c.Self().GetId(), To: target.GetId()}
			t, _ := c.Actor().(Tracer)
			if t != nil {
				e.Actor, e.StateBefore, e.Bucket = t.TraceName(), t.TraceState(env.Message), t.TraceKey(env.Message)
			}
			e = s.Describe(e, env.Message)
			s.EmitFrom(t, e)
			next(c, target, env)
		}
	}}
}

// Transition emits a state machine transition of t's machine for the
// bucket key (empty for the supervisor), held until t's current receive
// event if it is handling a message.
func (s *Sink) Transition(t Tracer, pid *actor.PID, key, event, from, to string) {
	if !s.On() {
		return
	}
	id := ""
	if pid != nil {
		id = pid.GetId()
	}
	s.EmitFrom(t, Event{Kind: "transition", Time: s.Clock(), Actor: t.TraceName(), ActorID: id, Bucket: key,
		Event: event, StateBefore: from, StateAfter: to})
}
