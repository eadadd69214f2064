// Package telemetry counts and traces what the limiter's actors report,
// with OpenTelemetry: a span per request (Start, Event, EventWith, Finish,
// and Inject, which carries its trace context on the wire), counters of
// answers, outcomes and state machine transitions, a histogram of where a
// request's time went, and observable gauges of the system's load (read
// through the Gauges callback at each collection).
//
// It decides nothing: package actors calls it at the points where a
// request is submitted, queued, sent, answered and ended, and where a
// state machine moves, and it records what it is handed. It knows neither
// the actors' system nor their calls: a request's end comes as an
// Outcome, the load as Gauges.
//
// Invariants:
//   - A nil *Telemetry (neither provider configured) costs nothing: every
//     method returns at once; Event and EventWith on a nil span likewise.
//     A request's path allocates nothing here when a provider is off.
//   - Every attribute is bounded: statuses, rate-limit scopes, machines and
//     their events, outcomes, the two global windows, the three priority
//     classes. No route, bucket key or id is a metric label (they are on
//     the span only), so each attribute combination's measurement option
//     is made once and kept (attrCache), and a measurement looks it up
//     without allocating.
//   - A Telemetry is immutable once built, apart from its cache (under its
//     lock): safe for concurrent use from every actor and caller.
package telemetry

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/routes"
)

// instrumentation is the name spans and instruments are registered under.
const instrumentation = "github.com/sluicehq/sluice"

// Telemetry holds the OpenTelemetry tracer and instruments. A nil
// *Telemetry (neither provider configured) costs nothing: every method
// returns at once.
type Telemetry struct {
	tracer trace.Tracer // nil: no spans

	meter       metric.Meter // nil: no metrics
	responses   metric.Int64Counter
	outcomes    metric.Int64Counter
	waits       metric.Float64Histogram
	transitions metric.Int64Counter
	reg         metric.Registration
	attrs       attrCache
}

// attrKey is one combination of a measurement's attributes.
type attrKey struct {
	kind    uint8 // which measurement
	a, b, c string
	status  int
}

// attrCache keeps the measurement option of each attribute combination:
// there are few (statuses, scopes, machines, events, outcomes, windows),
// and building the set on every measurement cost about 10 µs a request
// (bench: proxybench). Keyed by a comparable struct, a lookup allocates
// nothing.
type attrCache struct {
	mu sync.RWMutex
	m  map[attrKey]metric.MeasurementOption
}

// get returns the option of k, made from kv the first time.
func (c *attrCache) get(k attrKey, kv func() []attribute.KeyValue) metric.MeasurementOption {
	c.mu.RLock()
	o, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return o
	}
	o = metric.WithAttributeSet(attribute.NewSet(kv()...))
	c.mu.Lock()
	if c.m == nil {
		c.m = map[attrKey]metric.MeasurementOption{}
	}
	c.m[k] = o
	c.mu.Unlock()
	return o
}

// Kinds of attrKey.
const (
	attrResponse uint8 = iota
	attrTransition
	attrOutcome
	attrWait
)

// Gauges is one reading of the system's load, what the observable gauges
// report; the Gauges callback given to New takes it at each collection
// (not on a request's path), at one instant for all its figures.
type Gauges struct {
	// Pending is the requests submitted and not yet answered: queued,
	// waiting or on the wire.
	Pending int64
	// Running is the requests on the wire.
	Running int64
	// Buckets is the live bucket actors.
	Buckets int64
	// State is the supervisor's state (fsm.SupervisorState): 0
	// disconnected, 1 connecting, 2 connected, 3 global_limit.
	State int64
	// InvalidLeft is the invalid answers the budget will still accept;
	// negative: there is no invalid-request budget (nothing is observed).
	InvalidLeft int64
	// Windows is each global window's reading.
	Windows []WindowGauge
}

// WindowGauge is one global window's reading in Gauges.
type WindowGauge struct {
	// Name is the window's label: "bot" (requests with the token) or "ip"
	// (requests without).
	Name string
	// Used is the window's slots held now (requests in flight and
	// answered within its window).
	Used int64
	// Paused is the time left of a global 429's pause (0: open).
	Paused time.Duration
}

// New builds the instruments; nil providers turn that half off (both nil:
// a nil *Telemetry). gauges is called at each metric collection, from the
// SDK's goroutine, until Close; it must be safe for that.
func New(tp trace.TracerProvider, mp metric.MeterProvider, gauges func() Gauges) (*Telemetry, error) {
	if tp == nil && mp == nil {
		return nil, nil
	}
	t := &Telemetry{}
	if tp != nil {
		t.tracer = tp.Tracer(instrumentation)
	}
	if mp == nil {
		return t, nil
	}
	m := mp.Meter(instrumentation)
	t.meter = m
	var err error
	if t.responses, err = m.Int64Counter("sluice.responses",
		metric.WithDescription("Responses received, by HTTP status and, for 429s, rate-limit scope (user, global, shared, sublimit, ban).")); err != nil {
		return nil, err
	}
	if t.outcomes, err = m.Int64Counter("sluice.requests",
		metric.WithDescription("Requests ended, by outcome (the final HTTP status, or the error kind) and global window (bot: sent with the token; ip: without).")); err != nil {
		return nil, err
	}
	if t.waits, err = m.Float64Histogram("sluice.wait", metric.WithUnit("s"),
		metric.WithDescription("Time a request spent waiting for its bucket, for the global limit (and the connection), and on the network.")); err != nil {
		return nil, err
	}
	if t.transitions, err = m.Int64Counter("sluice.transitions",
		metric.WithDescription("State machine transitions, by machine and event.")); err != nil {
		return nil, err
	}
	pending, err := m.Int64ObservableGauge("sluice.requests.pending",
		metric.WithDescription("Requests submitted and not yet answered: queued, waiting or on the wire."))
	if err != nil {
		return nil, err
	}
	running, err := m.Int64ObservableGauge("sluice.requests.running", metric.WithDescription("Requests on the wire."))
	if err != nil {
		return nil, err
	}
	buckets, err := m.Int64ObservableGauge("sluice.buckets.live", metric.WithDescription("Live bucket actors."))
	if err != nil {
		return nil, err
	}
	state, err := m.Int64ObservableGauge("sluice.connection.state",
		metric.WithDescription("The supervisor's state: 0 disconnected, 1 connecting, 2 connected, 3 global_limit (the global limit is paused)."))
	if err != nil {
		return nil, err
	}
	globalUsed, err := m.Int64ObservableGauge("sluice.global.used",
		metric.WithDescription("Slots of a global limit held now (requests in flight and answered within its window), by window: bot (requests with the token) or ip (requests without)."))
	if err != nil {
		return nil, err
	}
	globalPaused, err := m.Float64ObservableGauge("sluice.global.paused", metric.WithUnit("s"),
		metric.WithDescription("Time left of a global 429's pause, by window: bot or ip (0: open)."))
	if err != nil {
		return nil, err
	}
	budget, err := m.Int64ObservableGauge("sluice.invalid_requests.budget",
		metric.WithDescription("Invalid answers (401, 403, non-shared 429) the limiter will still accept before it refuses requests."))
	if err != nil {
		return nil, err
	}
	t.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		g := gauges()
		o.ObserveInt64(pending, g.Pending)
		o.ObserveInt64(running, g.Running)
		o.ObserveInt64(buckets, g.Buckets)
		o.ObserveInt64(state, g.State)
		if g.InvalidLeft >= 0 {
			o.ObserveInt64(budget, g.InvalidLeft)
		}
		for _, w := range g.Windows {
			attrs := metric.WithAttributes(attribute.String("sluice.window", w.Name))
			o.ObserveInt64(globalUsed, w.Used, attrs)
			o.ObserveFloat64(globalPaused, w.Paused.Seconds(), attrs)
		}
		return nil
	}, pending, running, buckets, state, globalUsed, globalPaused, budget)
	return t, err
}

// Close unregisters the gauges' callback: after it, gauges is not called
// again. The counters and spans keep working.
func (t *Telemetry) Close() {
	if t != nil && t.reg != nil {
		_ = t.reg.Unregister()
	}
}

// Start opens a request's span as a child of the caller's context ctx and
// returns the context the request carries from then on, and the span
// (nil, with ctx unchanged, without a TracerProvider). window is the
// global window the request counts on ("bot" or "ip"), id its request id.
func (t *Telemetry) Start(ctx context.Context, r *routes.Route, window string, id uint64) (context.Context, trace.Span) {
	if t == nil || t.tracer == nil {
		return ctx, nil
	}
	return t.tracer.Start(ctx, "sluice "+r.Method+" "+r.Label(),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("http.request.method", r.Method),
			attribute.String("url.template", r.Label()),
			attribute.String("sluice.major", r.Major),
			attribute.String("sluice.window", window),
			attribute.Int64("sluice.request_id", int64(id)),
		))
}

// Event adds a step to a request's span (nil: none, nothing done).
func Event(span trace.Span, name string) {
	if span != nil {
		span.AddEvent(name)
	}
}

// EventWith adds a step with one attribute to a request's span. The
// attribute is taken by value, so a call without a span allocates
// nothing (a variadic list would be built on the heap for every request).
func EventWith(span trace.Span, name string, kv attribute.KeyValue) {
	if span != nil {
		span.AddEvent(name, trace.WithAttributes(kv))
	}
}

// Response counts one answer: its HTTP status and, for a 429, its
// rate-limit scope ("" otherwise).
func (t *Telemetry) Response(status int, scope string) {
	if t == nil || t.meter == nil {
		return
	}
	opt := t.attrs.get(attrKey{kind: attrResponse, a: scope, status: status}, func() []attribute.KeyValue {
		attrs := []attribute.KeyValue{attribute.Int("http.response.status_code", status)}
		if scope != "" {
			attrs = append(attrs, attribute.String("sluice.rate_limit.scope", scope))
		}
		return attrs
	})
	t.responses.Add(context.Background(), 1, opt)
}

// Transition counts one state machine transition; window names a global
// window's machine ("" for the others).
func (t *Telemetry) Transition(machine, event, window string) {
	if t == nil || t.meter == nil {
		return
	}
	opt := t.attrs.get(attrKey{kind: attrTransition, a: machine, b: event, c: window}, func() []attribute.KeyValue {
		attrs := []attribute.KeyValue{attribute.String("sluice.machine", machine), attribute.String("sluice.event", event)}
		if window != "" {
			attrs = append(attrs, attribute.String("sluice.window", window))
		}
		return attrs
	})
	t.transitions.Add(context.Background(), 1, opt)
}

// Outcome is what Finish records of a request's end. Passed by value: it
// holds no reference to the request.
type Outcome struct {
	// Resp and Err are the request's outcome: an answer, or an error.
	Resp *http.Response
	Err  error
	// Bucket, Global and Network are where its time went, over all its
	// attempts: waiting for its bucket, for the global limit (and the
	// connection), and on the wire.
	Bucket, Global, Network time.Duration
	// Sends is the attempts put on the wire.
	Sends int64
	// Priority is the name of its priority class: one of three, so the
	// label stays bounded.
	Priority string
	// Window is the global window it counted on: "bot" or "ip".
	Window string
}

// Finish ends a request's span (nil: none) and records where its time
// went. It runs once per request, when the request gets its outcome.
func (t *Telemetry) Finish(span trace.Span, o Outcome) {
	if t == nil {
		return
	}
	resp, err := o.Resp, o.Err
	if t.meter != nil {
		status := -1 // error
		if err == nil && resp != nil {
			status = resp.StatusCode
		}
		w := o.Window
		t.outcomes.Add(context.Background(), 1, t.attrs.get(attrKey{kind: attrOutcome, a: w, status: status}, func() []attribute.KeyValue {
			outcome := "error"
			if status >= 0 {
				outcome = strconv.Itoa(status)
			}
			return []attribute.KeyValue{attribute.String("sluice.outcome", outcome), attribute.String("sluice.window", w)}
		}))
		for _, kd := range [...]struct {
			kind string
			d    time.Duration
		}{{"bucket", o.Bucket}, {"global", o.Global}, {"network", o.Network}} {
			p := o.Priority // one of three: the label stays bounded
			t.waits.Record(context.Background(), kd.d.Seconds(), t.attrs.get(attrKey{kind: attrWait, a: kd.kind, b: w, c: p}, func() []attribute.KeyValue {
				return []attribute.KeyValue{attribute.String("sluice.wait.kind", kd.kind), attribute.String("sluice.window", w), attribute.String("sluice.priority", p)}
			}))
		}
	}
	if span == nil {
		return
	}
	span.SetAttributes(
		attribute.Float64("sluice.wait.bucket", o.Bucket.Seconds()),
		attribute.Float64("sluice.wait.global", o.Global.Seconds()),
		attribute.Float64("sluice.wait.network", o.Network.Seconds()),
		attribute.Int64("sluice.sends", o.Sends),
		attribute.String("sluice.priority", o.Priority),
	)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else if resp != nil {
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
		if resp.StatusCode >= 400 {
			span.SetStatus(codes.Error, resp.Status)
		}
	}
	span.AddEvent("done")
	span.End()
}

// Inject writes the trace context of ctx into h when the application
// configured a propagator (otel.SetTextMapPropagator); the default
// propagator writes nothing. A request without a span need not call it.
func Inject(ctx context.Context, h http.Header) {
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
}
