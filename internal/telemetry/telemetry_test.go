package telemetry

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/routes"
)

// point is one data point of a collected metric: its attributes, written
// "key=value,..." in key order, and its value (a histogram's: its sum,
// with its count in n).
type point struct {
	attrs string
	value float64
	n     uint64
}

// collect reads every metric the reader has seen, by name.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string][]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string][]point{}
	label := func(s attribute.Set) string {
		var kv []string
		for it := s.Iter(); it.Next(); {
			a := it.Attribute()
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		return strings.Join(kv, ",")
	}
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, instrumentation, sm.Scope.Name)
		for _, m := range sm.Metrics {
			var ps []point
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					ps = append(ps, point{attrs: label(p.Attributes), value: float64(p.Value)})
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					ps = append(ps, point{attrs: label(p.Attributes), value: float64(p.Value)})
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					ps = append(ps, point{attrs: label(p.Attributes), value: p.Value})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					ps = append(ps, point{attrs: label(p.Attributes), value: p.Sum, n: p.Count})
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
			sort.Slice(ps, func(i, j int) bool { return ps[i].attrs < ps[j].attrs })
			out[m.Name] = ps
		}
	}
	return out
}

func meterProvider(t *testing.T) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, reader
}

func route(t *testing.T) routes.Route {
	r, err := routes.Parse("POST", "/channels/123/messages")
	require.NoError(t, err)
	return r
}

// Without providers there is no Telemetry, and a nil one (or one with no
// meter, or no span) does nothing and allocates nothing.
func TestNilTelemetryCostsNothing(t *testing.T) {
	tel, err := New(nil, nil, func() Gauges { t.Fatal("gauges read without a MeterProvider"); return Gauges{} })
	require.NoError(t, err)
	require.Nil(t, tel)

	r := route(t)
	ctx := context.Background()
	resp := &http.Response{StatusCode: 200, Status: "200 OK"}
	o := Outcome{Resp: resp, Bucket: time.Second, Sends: 1, Priority: "normal", Window: "bot"}
	kv := attribute.String("sluice.bucket", "b")
	// With a tracer only: the metrics half is off.
	spansOnly, err := New(sdktrace.NewTracerProvider(), nil, nil)
	require.NoError(t, err)
	require.NotNil(t, spansOnly)
	for _, tel := range []*Telemetry{nil, spansOnly} {
		allocs := testing.AllocsPerRun(100, func() {
			tel.Response(429, "user")
			tel.Transition("bucket", "send", "")
			Event(nil, "sent")
			EventWith(nil, "queued", kv)
			tel.Finish(nil, o)
		})
		assert.Zero(t, allocs)
		tel.Close()
	}
	allocs := testing.AllocsPerRun(100, func() {
		gotCtx, span := (*Telemetry)(nil).Start(ctx, &r, "bot", 7)
		if gotCtx != ctx || span != nil {
			t.Fatal("a nil Telemetry started a span")
		}
	})
	assert.Zero(t, allocs)
}

// The cache makes each attribute combination's option once; a lookup that
// finds it allocates nothing.
func TestAttrCacheOneOptionPerCombination(t *testing.T) {
	var c attrCache
	made := 0
	kv := func() []attribute.KeyValue { made++; return []attribute.KeyValue{attribute.Int("n", made)} }
	k1 := attrKey{kind: attrResponse, a: "user", status: 429}
	k2 := attrKey{kind: attrResponse, a: "global", status: 429}
	k3 := attrKey{kind: attrTransition, a: "user", status: 429} // same fields, other measurement
	o1 := c.get(k1, kv)
	assert.Equal(t, o1, c.get(k1, kv))
	assert.Equal(t, 1, made)
	c.get(k2, kv)
	c.get(k3, kv)
	c.get(k2, kv)
	assert.Equal(t, 3, made)
	assert.Len(t, c.m, 3)
	assert.Zero(t, testing.AllocsPerRun(100, func() { c.get(k1, kv) }))
	assert.Equal(t, 3, made)

	// Through the measurements: repeated combinations add no option.
	tel, err := New(nil, noop.NewMeterProvider(), func() Gauges { return Gauges{} })
	require.NoError(t, err)
	defer tel.Close()
	o := Outcome{Resp: &http.Response{StatusCode: 200}, Priority: "bulk", Window: "ip"}
	for range 3 {
		tel.Response(200, "")
		tel.Response(429, "user")
		tel.Transition("window", "pause", "bot")
		tel.Finish(nil, o)
	}
	// 2 responses, 1 transition, 1 outcome, 3 waits (one per kind).
	assert.Len(t, tel.attrs.m, 7)
	// On a warm cache, a measurement (with the no-op provider, which
	// records nothing) allocates at most the variadic option list of the
	// instrument's call, one per measurement: never an attribute set.
	assert.LessOrEqual(t, testing.AllocsPerRun(100, func() { tel.Response(429, "user") }), 1.0)
	assert.LessOrEqual(t, testing.AllocsPerRun(100, func() { tel.Transition("window", "pause", "bot") }), 1.0)
	assert.LessOrEqual(t, testing.AllocsPerRun(100, func() { tel.Finish(nil, o) }), 4.0)
	assert.Len(t, tel.attrs.m, 7)
}

// Finish counts the outcome by status (or "error") and window, records the
// three waits by kind, window and priority, and ends the span with them;
// no label carries anything unbounded (route, bucket, id).
func TestFinishRecordsWaitsAndOutcome(t *testing.T) {
	mp, reader := meterProvider(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tel, err := New(tp, mp, func() Gauges { return Gauges{} })
	require.NoError(t, err)
	defer tel.Close()

	r := route(t)
	ctx, span := tel.Start(context.Background(), &r, "bot", 42)
	require.NotNil(t, span)
	assert.True(t, span.SpanContext().IsValid())
	assert.Equal(t, span.SpanContext(), trace.SpanContextFromContext(ctx))
	EventWith(span, "queued", attribute.String("sluice.bucket", "channel_id=123"))
	Event(span, "sent")
	tel.Response(429, "user")
	tel.Response(200, "")
	tel.Finish(span, Outcome{Resp: &http.Response{StatusCode: 429, Status: "429 Too Many Requests"},
		Bucket: 2 * time.Second, Global: 500 * time.Millisecond, Network: 250 * time.Millisecond,
		Sends: 2, Priority: "interactive", Window: "bot"})

	_, errSpan := tel.Start(context.Background(), &r, "ip", 43)
	tel.Finish(errSpan, Outcome{Err: errors.New("boom"), Network: time.Second, Sends: 1, Priority: "bulk", Window: "ip"})
	tel.Finish(nil, Outcome{Resp: &http.Response{StatusCode: 200}, Bucket: time.Second, Priority: "interactive", Window: "bot"})

	m := collect(t, reader)
	assert.Equal(t, []point{
		{attrs: "sluice.outcome=200,sluice.window=bot", value: 1},
		{attrs: "sluice.outcome=429,sluice.window=bot", value: 1},
		{attrs: "sluice.outcome=error,sluice.window=ip", value: 1},
	}, m["sluice.requests"])
	assert.Equal(t, []point{
		{attrs: "sluice.priority=bulk,sluice.wait.kind=bucket,sluice.window=ip", value: 0, n: 1},
		{attrs: "sluice.priority=bulk,sluice.wait.kind=global,sluice.window=ip", value: 0, n: 1},
		{attrs: "sluice.priority=bulk,sluice.wait.kind=network,sluice.window=ip", value: 1, n: 1},
		{attrs: "sluice.priority=interactive,sluice.wait.kind=bucket,sluice.window=bot", value: 3, n: 2},
		{attrs: "sluice.priority=interactive,sluice.wait.kind=global,sluice.window=bot", value: 0.5, n: 2},
		{attrs: "sluice.priority=interactive,sluice.wait.kind=network,sluice.window=bot", value: 0.25, n: 2},
	}, m["sluice.wait"])
	assert.Equal(t, []point{
		{attrs: "http.response.status_code=200", value: 1},
		{attrs: "http.response.status_code=429,sluice.rate_limit.scope=user", value: 1},
	}, m["sluice.responses"])
	for name, ps := range m {
		for _, p := range ps {
			for _, kv := range strings.Split(p.attrs, ",") {
				if kv == "" {
					continue
				}
				key, _, _ := strings.Cut(kv, "=")
				assert.Contains(t, []string{"sluice.outcome", "sluice.window", "sluice.wait.kind", "sluice.priority",
					"http.response.status_code", "sluice.rate_limit.scope"}, key, "%s: unbounded label %s", name, kv)
			}
		}
	}

	ended := rec.Ended()
	require.Len(t, ended, 2)
	s := ended[0]
	assert.Equal(t, "sluice POST "+r.Label(), s.Name())
	attrs := map[attribute.Key]attribute.Value{}
	for _, a := range s.Attributes() {
		attrs[a.Key] = a.Value
	}
	assert.Equal(t, "POST", attrs["http.request.method"].AsString())
	assert.Equal(t, r.Label(), attrs["url.template"].AsString())
	assert.Equal(t, r.Major, attrs["sluice.major"].AsString())
	assert.Equal(t, "bot", attrs["sluice.window"].AsString())
	assert.Equal(t, int64(42), attrs["sluice.request_id"].AsInt64())
	assert.Equal(t, 2.0, attrs["sluice.wait.bucket"].AsFloat64())
	assert.Equal(t, 0.5, attrs["sluice.wait.global"].AsFloat64())
	assert.Equal(t, 0.25, attrs["sluice.wait.network"].AsFloat64())
	assert.Equal(t, int64(2), attrs["sluice.sends"].AsInt64())
	assert.Equal(t, "interactive", attrs["sluice.priority"].AsString())
	assert.Equal(t, int64(429), attrs["http.response.status_code"].AsInt64())
	assert.Equal(t, codes.Error, s.Status().Code)
	assert.Equal(t, "429 Too Many Requests", s.Status().Description)
	var events []string
	for _, e := range s.Events() {
		events = append(events, e.Name)
	}
	assert.Equal(t, []string{"queued", "sent", "done"}, events)
	assert.Equal(t, "channel_id=123", s.Events()[0].Attributes[0].Value.AsString())

	e := ended[1]
	assert.Equal(t, codes.Error, e.Status().Code)
	assert.Equal(t, "boom", e.Status().Description)
	require.NotEmpty(t, e.Events())
	assert.Equal(t, "exception", e.Events()[0].Name)
}

// The gauges report what the callback reads, at each collection, until
// Close; a negative InvalidLeft reports no budget.
func TestGaugesCallback(t *testing.T) {
	mp, reader := meterProvider(t)
	reads := 0
	g := Gauges{Pending: 5, Running: 2, Buckets: 3, State: 2, InvalidLeft: 9,
		Windows: []WindowGauge{{Name: "bot", Used: 4, Paused: 1500 * time.Millisecond}, {Name: "ip", Used: 1}}}
	tel, err := New(nil, mp, func() Gauges { reads++; return g })
	require.NoError(t, err)

	m := collect(t, reader)
	assert.Equal(t, 1, reads)
	assert.Equal(t, []point{{value: 5}}, m["sluice.requests.pending"])
	assert.Equal(t, []point{{value: 2}}, m["sluice.requests.running"])
	assert.Equal(t, []point{{value: 3}}, m["sluice.buckets.live"])
	assert.Equal(t, []point{{value: 2}}, m["sluice.connection.state"])
	assert.Equal(t, []point{{value: 9}}, m["sluice.invalid_requests.budget"])
	assert.Equal(t, []point{{attrs: "sluice.window=bot", value: 4}, {attrs: "sluice.window=ip", value: 1}}, m["sluice.global.used"])
	assert.Equal(t, []point{{attrs: "sluice.window=bot", value: 1.5}, {attrs: "sluice.window=ip", value: 0}}, m["sluice.global.paused"])

	g.InvalidLeft, g.Pending = -1, 6
	m = collect(t, reader)
	assert.Equal(t, 2, reads)
	assert.Equal(t, []point{{value: 6}}, m["sluice.requests.pending"])
	assert.Empty(t, m["sluice.invalid_requests.budget"])

	tel.Close()
	collect(t, reader)
	assert.Equal(t, 2, reads, "read after Close")
}
