package actors

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// instrumentation is the name spans and instruments are registered under.
const instrumentation = "github.com/sluicehq/sluice"

// telemetry holds the OpenTelemetry tracer and instruments. A nil
// *telemetry (neither provider configured) costs nothing: every method
// returns at once.
type telemetry struct {
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

// newTelemetry builds the instruments; nil providers turn that half off.
func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider, s *System) (*telemetry, error) {
	if tp == nil && mp == nil {
		return nil, nil
	}
	t := &telemetry{}
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
		o.ObserveInt64(pending, s.pending.Load())
		o.ObserveInt64(running, s.running.Load())
		o.ObserveInt64(buckets, s.buckets.Load())
		o.ObserveInt64(state, s.supState.Load())
		now := s.now()
		if s.cfg.Invalid != nil {
			o.ObserveInt64(budget, int64(s.cfg.Invalid.Left(now)))
		}
		for w, g := range s.windows {
			attrs := metric.WithAttributes(attribute.String("sluice.window", Window(w).String()))
			o.ObserveInt64(globalUsed, int64(g.used(now)), attrs)
			o.ObserveFloat64(globalPaused, g.limiter.Blocked(now).Seconds(), attrs)
		}
		return nil
	}, pending, running, buckets, state, globalUsed, globalPaused, budget)
	return t, err
}

func (t *telemetry) close() {
	if t != nil && t.reg != nil {
		_ = t.reg.Unregister()
	}
}

// start opens the request's span as a child of the caller's context and
// returns the context the request carries from then on.
func (t *telemetry) start(c *Call) {
	if t == nil || t.tracer == nil {
		return
	}
	ctx, span := t.tracer.Start(c.Ctx, "sluice "+c.Route.Method+" "+c.Route.Label(),
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("http.request.method", c.Route.Method),
			attribute.String("url.template", c.Route.Label()),
			attribute.String("sluice.major", c.Route.Major),
			attribute.String("sluice.window", c.window.String()),
			attribute.Int64("sluice.request_id", int64(c.ID)),
		))
	c.Ctx, c.span = ctx, span
}

// event adds a step to the request's span.
func (t *telemetry) event(c *Call, name string) {
	if c.span != nil {
		c.span.AddEvent(name)
	}
}

// eventWith adds a step with one attribute to the request's span. The
// attribute is taken by value, so a call without a span allocates
// nothing (a variadic list would be built on the heap for every request).
func (t *telemetry) eventWith(c *Call, name string, kv attribute.KeyValue) {
	if c.span != nil {
		c.span.AddEvent(name, trace.WithAttributes(kv))
	}
}

// response counts one answer.
func (t *telemetry) response(status int, scope string) {
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

// transition counts one state machine transition; window names a global
// window's machine ("" for the others).
func (t *telemetry) transition(machine, event, window string) {
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

// finish ends the request's span and records where its time went. It runs
// once, when the call gets its outcome.
func (t *telemetry) finish(c *Call) {
	if t == nil {
		return
	}
	resp, err := c.Result()
	bucketWait, globalWait, network := c.waits()
	if t.meter != nil {
		status := -1 // error
		if err == nil && resp != nil {
			status = resp.StatusCode
		}
		w := c.window.String()
		t.outcomes.Add(context.Background(), 1, t.attrs.get(attrKey{kind: attrOutcome, a: w, status: status}, func() []attribute.KeyValue {
			outcome := "error"
			if status >= 0 {
				outcome = itoa(uint64(status))
			}
			return []attribute.KeyValue{attribute.String("sluice.outcome", outcome), attribute.String("sluice.window", w)}
		}))
		for _, kd := range [...]struct {
			kind string
			d    time.Duration
		}{{"bucket", bucketWait}, {"global", globalWait}, {"network", network}} {
			p := c.Class.String() // one of three: the label stays bounded
			t.waits.Record(context.Background(), kd.d.Seconds(), t.attrs.get(attrKey{kind: attrWait, a: kd.kind, b: w, c: p}, func() []attribute.KeyValue {
				return []attribute.KeyValue{attribute.String("sluice.wait.kind", kd.kind), attribute.String("sluice.window", w), attribute.String("sluice.priority", p)}
			}))
		}
	}
	if c.span == nil {
		return
	}
	c.span.SetAttributes(
		attribute.Float64("sluice.wait.bucket", bucketWait.Seconds()),
		attribute.Float64("sluice.wait.global", globalWait.Seconds()),
		attribute.Float64("sluice.wait.network", network.Seconds()),
		attribute.Int64("sluice.sends", c.sends.Load()),
		attribute.String("sluice.priority", c.Class.String()),
	)
	if err != nil {
		c.span.RecordError(err)
		c.span.SetStatus(codes.Error, err.Error())
	} else if resp != nil {
		c.span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
		if resp.StatusCode >= 400 {
			c.span.SetStatus(codes.Error, resp.Status)
		}
	}
	c.span.AddEvent("done")
	c.span.End()
}

// inject writes the request's trace context into its headers when the
// application configured a propagator (otel.SetTextMapPropagator); the
// default propagator writes nothing.
func inject(ctx context.Context, h propagation.HeaderCarrier) {
	otel.GetTextMapPropagator().Inject(ctx, h)
}
