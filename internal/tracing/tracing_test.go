package tracing

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeActor is a Tracer whose state its handler changes.
type fakeActor struct {
	state string
	buf   Buffer
}

func (a *fakeActor) Receive(actor.Context)   {}
func (a *fakeActor) TraceName() string       { return "bucket" }
func (a *fakeActor) TraceState(any) string   { return a.state }
func (a *fakeActor) TraceKey(msg any) string { return "key:" + msg.(string) }
func (a *fakeActor) TraceBuffer(any) *Buffer { return &a.buf }
func (a *fakeActor) pid() *actor.PID         { return actor.NewPID("local", "$7") }
func (a *fakeActor) other() *actor.PID       { return actor.NewPID("local", "$1") }

// plainActor is an actor that does not implement Tracer.
type plainActor struct{}

func (plainActor) Receive(actor.Context) {}

// fakeContext is what the middlewares read of protoactor's contexts: the
// actor and its pid (every other method panics).
type fakeContext struct {
	actor.ReceiverContext
	self *actor.PID
	a    actor.Actor
}

func (c fakeContext) Self() *actor.PID   { return c.self }
func (c fakeContext) Actor() actor.Actor { return c.a }

type fakeSender struct {
	actor.SenderContext
	self *actor.PID
	a    actor.Actor
}

func (c fakeSender) Self() *actor.PID   { return c.self }
func (c fakeSender) Actor() actor.Actor { return c.a }

// recording is a sink with the callback on, whose events it keeps.
func recording() (*Sink, *[]Event) {
	var got []Event
	return &Sink{
		Callback: func(e Event) { got = append(got, e) },
		Log:      slog.New(slog.DiscardHandler),
		Clock:    func() time.Time { return t0 },
		Describe: func(e Event, msg any) Event { e.Message = msg.(string); return e },
	}, &got
}

func TestReceiveHoldsWhatTheHandlerCausesUntilItsEvent(t *testing.T) {
	s, got := recording()
	a := &fakeActor{state: "open"}
	pid := a.pid()
	send := s.SenderMiddleware()[0](func(actor.SenderContext, *actor.PID, *actor.MessageEnvelope) {})
	var during int
	recv := s.ReceiveMiddleware()[0](func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
		send(fakeSender{self: pid, a: a}, a.other(), &actor.MessageEnvelope{Message: "want"})
		s.Transition(a, pid, "k", "drained", "open", "exhausted")
		a.state = "exhausted"
		during = len(*got)
	})
	recv(fakeContext{self: pid, a: a}, &actor.MessageEnvelope{Message: "result"})

	assert.Zero(t, during, "nothing is emitted while the actor handles its message")
	require.Len(t, *got, 3)
	r := (*got)[0]
	assert.Equal(t, "receive", r.Kind)
	assert.Equal(t, "bucket", r.Actor)
	assert.Equal(t, "$7", r.ActorID)
	assert.Equal(t, "result", r.Message)
	assert.Equal(t, "open", r.StateBefore)
	assert.Equal(t, "exhausted", r.StateAfter, "the state after is read when the handler returned")
	assert.Equal(t, "key:result", r.Bucket)
	assert.Equal(t, t0, r.Time)
	assert.GreaterOrEqual(t, r.Took, time.Duration(0))
	assert.Equal(t, Event{Kind: "send", Time: t0, Actor: "bucket", ActorID: "$7", To: "$1", Message: "want",
		StateBefore: "open", Bucket: "key:want"}, (*got)[1])
	assert.Equal(t, Event{Kind: "transition", Time: t0, Actor: "bucket", ActorID: "$7", Bucket: "k",
		Event: "drained", StateBefore: "open", StateAfter: "exhausted"}, (*got)[2])

	// The buffer is emptied and inactive again: what the actor causes
	// outside a receive goes out at once, and the next receive holds
	// nothing from the last one.
	assert.False(t, a.buf.active)
	assert.Empty(t, a.buf.events)
	s.Transition(a, nil, "k", "reset", "exhausted", "open")
	require.Len(t, *got, 4)
	assert.Equal(t, "", (*got)[3].ActorID, "a transition without a pid has no actor id")
	recv(fakeContext{self: pid, a: a}, &actor.MessageEnvelope{Message: "wake"})
	require.Len(t, *got, 7)
	assert.Equal(t, []string{"receive", "send", "transition"}, []string{(*got)[4].Kind, (*got)[5].Kind, (*got)[6].Kind})
	assert.Equal(t, "wake", (*got)[4].Message)
}

func TestReceiveOfAnActorThatIsNotATracer(t *testing.T) {
	s, got := recording()
	recv := s.ReceiveMiddleware()[0](func(actor.ReceiverContext, *actor.MessageEnvelope) {})
	recv(fakeContext{self: actor.NewPID("local", "$9"), a: plainActor{}}, &actor.MessageEnvelope{Message: "started"})
	require.Len(t, *got, 1)
	e := (*got)[0]
	e.Took = 0
	assert.Equal(t, Event{Kind: "receive", Time: t0, ActorID: "$9", Message: "started"}, e)

	send := s.SenderMiddleware()[0](func(actor.SenderContext, *actor.PID, *actor.MessageEnvelope) {})
	send(fakeSender{self: actor.NewPID("local", "$9"), a: plainActor{}}, actor.NewPID("local", "$2"), &actor.MessageEnvelope{Message: "x"})
	require.Len(t, *got, 2)
	assert.Equal(t, Event{Kind: "send", Time: t0, ActorID: "$9", To: "$2", Message: "x"}, (*got)[1])
}

func TestSendPassesTheMessageOn(t *testing.T) {
	s, _ := recording()
	var to *actor.PID
	var msg any
	send := s.SenderMiddleware()[0](func(_ actor.SenderContext, target *actor.PID, env *actor.MessageEnvelope) {
		to, msg = target, env.Message
	})
	a := &fakeActor{}
	target := a.other()
	send(fakeSender{self: a.pid(), a: a}, target, &actor.MessageEnvelope{Message: "grant"})
	assert.Same(t, target, to)
	assert.Equal(t, "grant", msg)
}

func TestOffCostsNothing(t *testing.T) {
	s := &Sink{Log: slog.New(slog.NewTextHandler(&strings.Builder{}, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Clock: func() time.Time { panic("read the clock while off") }}
	assert.False(t, s.On())
	assert.Nil(t, s.ReceiveMiddleware())
	assert.Nil(t, s.SenderMiddleware())
	s.Transition(&fakeActor{}, nil, "k", "e", "a", "b") // returns before the clock

	s.Log = slog.New(slog.NewTextHandler(&strings.Builder{}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	assert.True(t, s.On(), "a logger at debug level turns the trace on")
	s.Log = slog.New(slog.DiscardHandler)
	s.Callback = func(Event) {}
	assert.True(t, s.On(), "a callback turns the trace on")
}

// records keeps the records a logger handles.
type records struct{ got []slog.Record }

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.got = append(h.got, r)
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

func attrs(r slog.Record) string {
	var b []string
	r.Attrs(func(a slog.Attr) bool {
		b = append(b, a.Key+"="+a.Value.Kind().String()+":"+a.Value.String())
		return true
	})
	return strings.Join(b, " ")
}

func TestLogRecordsEveryFieldSet(t *testing.T) {
	h := &records{}
	s := &Sink{Log: slog.New(h), Clock: func() time.Time { return t0 }}
	s.Emit(Event{Kind: "receive", Time: t0, Actor: "bucket", ActorID: "$3", Bucket: "3cd1:1", Message: "result",
		To: "$1", Event: "drained", StateBefore: "open", StateAfter: "exhausted", RequestID: 5,
		Route: "POST /channels/1/messages", Status: 200, Took: 1500 * time.Microsecond})
	s.Emit(Event{Kind: "transition", Actor: "supervisor"})
	require.Len(t, h.got, 2)
	for _, r := range h.got {
		assert.Equal(t, "sluice: trace", r.Message)
		assert.Equal(t, slog.LevelDebug, r.Level)
	}
	assert.Equal(t, "kind=String:receive actor=String:bucket id=String:$3 bucket=String:3cd1:1 message=String:result "+
		"to=String:$1 event=String:drained from_state=String:open to_state=String:exhausted "+
		"route=String:POST /channels/1/messages request=Uint64:5 status=Int64:200 took=Duration:1.5ms", attrs(h.got[0]))
	assert.Equal(t, "kind=String:transition actor=String:supervisor id=String:", attrs(h.got[1]),
		"kind, actor and id always; the other fields only when set")
}

func TestEmitReachesBothSinks(t *testing.T) {
	h := &records{}
	var got []Event
	s := &Sink{Callback: func(e Event) { got = append(got, e) }, Log: slog.New(h)}
	e := Event{Kind: "send", Actor: "supervisor", ActorID: "$1", Message: "grant", To: "$4"}
	s.Emit(e)
	assert.Equal(t, []Event{e}, got)
	assert.Len(t, h.got, 1)
}
