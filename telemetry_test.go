package sluice_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// metricNames collects the metrics a reader has seen, with their sums or
// last values for the simple ones.
func metricNames(t testing.TB, reader *sdkmetric.ManualReader) map[string]int64 {
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name] = p.Value
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] = int64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name] += int64(p.Count)
				}
			}
		}
	}
	return out
}

func TestSpansAndMetrics(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	rs := rules(1, 200*time.Millisecond, [2]string{"GET", "/channels/{channel_id}"})
	h := newHarness(t, sluicetest.Options{Rules: rs}, sluice.Options{TracerProvider: tp, MeterProvider: mp})
	parent, span := tp.Tracer("test").Start(context.Background(), "handler")
	for _, p := range []sluice.Priority{sluice.PriorityNormal, sluice.PriorityInteractive} {
		_, err := h.lim.Do(sluice.WithPriority(parent, p), req("GET", "/channels/1", ""))
		require.NoError(t, err)
	}
	span.End()

	var got []sdktrace.ReadOnlySpan
	for _, s := range spans.GetSpans().Snapshots() {
		if strings.HasPrefix(s.Name(), "sluice ") {
			got = append(got, s)
		}
	}
	require.Len(t, got, 2)
	second := got[1]
	assert.Equal(t, "sluice GET /channels/{channel_id}", second.Name())
	assert.Equal(t, span.SpanContext().TraceID(), second.Parent().TraceID(), "a child of the caller's span")
	var events []string
	for _, e := range second.Events() {
		events = append(events, e.Name)
	}
	assert.Equal(t, []string{"queued", "dispatched", "sent", "headers", "done"}, events)
	attrs := map[string]any{}
	for _, a := range second.Attributes() {
		attrs[string(a.Key)] = a.Value.AsInterface()
	}
	assert.Equal(t, int64(200), attrs["http.response.status_code"])
	assert.Greater(t, attrs["sluice.wait.bucket"].(float64), 0.1, "the second request waited for the bucket's window")
	assert.Equal(t, int64(1), attrs["sluice.sends"])
	assert.Equal(t, "interactive", attrs["sluice.priority"])

	m := metricNames(t, reader)
	assert.Equal(t, int64(2), m["sluice.responses"])
	assert.Equal(t, int64(2), m["sluice.requests"])
	assert.Equal(t, int64(6), m["sluice.wait"], "three kinds per request")
	assert.Equal(t, int64(2), m["sluice.connection.state"], "connected")
	assert.Equal(t, int64(9000), m["sluice.invalid_requests.budget"])
	assert.Greater(t, m["sluice.transitions"], int64(2))
	_, ok := m["sluice.buckets.live"]
	assert.True(t, ok)
	assert.ElementsMatch(t, []string{"bot", "ip"}, windowLabels(t, reader, "sluice.global.used"), "one series per global window")
	assert.ElementsMatch(t, []string{"bot", "ip"}, windowLabels(t, reader, "sluice.global.paused"))
	assert.ElementsMatch(t, []string{"normal", "normal", "normal", "interactive", "interactive", "interactive"},
		labels(t, reader, "sluice.wait", "sluice.priority"), "waits by kind and priority")
}

// windowLabels returns the sluice.window attribute of each data point of the
// gauge name.
func windowLabels(t testing.TB, reader *sdkmetric.ManualReader, name string) []string {
	return labels(t, reader, name, "sluice.window")
}

// labels returns the attribute key of each data point of the gauge or
// histogram name.
func labels(t testing.TB, reader *sdkmetric.ManualReader, name string, key attribute.Key) []string {
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var out []string
	add := func(set attribute.Set) {
		v, _ := set.Value(key)
		out = append(out, v.AsString())
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					add(p.Attributes)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					add(p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					add(p.Attributes)
				}
			}
		}
	}
	return out
}

// Spans and metrics go to any OpenTelemetry provider; here, in-process
// exporters print what one request produced.
func Example_openTelemetry() {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	srv, _ := sluicetest.NewServer(sluicetest.Options{})
	defer srv.Close()
	lim, _ := sluice.New(sluice.Options{BaseURL: srv.APIBase(), Token: "my-bot-token", TLSConfig: srv.ClientTLSConfig(),
		TracerProvider: tp, MeterProvider: mp})
	resp, _ := lim.Do(context.Background(), req("GET", "/users/@me", ""))
	resp.Body.Close()
	metrics := metricNames(nil, reader) // before Close, which unregisters the gauges
	lim.Close(context.Background())

	for _, s := range spans.GetSpans().Snapshots() {
		var events []string
		for _, e := range s.Events() {
			events = append(events, e.Name)
		}
		fmt.Println("span:", s.Name(), events)
	}
	var names []string
	for name := range metrics {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Println("metrics:", strings.Join(names, " "))
	// Output:
	// span: sluice GET /users/@me [queued dispatched sent headers done]
	// metrics: sluice.buckets.live sluice.connection.state sluice.global.paused sluice.global.used sluice.invalid_requests.budget sluice.requests sluice.requests.pending sluice.requests.running sluice.responses sluice.transitions sluice.wait
}
