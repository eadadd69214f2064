package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDemoMixedReportsNoAvoidable429s(t *testing.T) {
	var out, errOut strings.Builder
	err := run(context.Background(), []string{"demo", "-size", "120", "-progress", "off"}, &out, &errOut)
	require.NoError(t, err, out.String())
	report := out.String()
	t.Log(report)
	assert.Contains(t, report, "Done: 120 requests")
	assert.Contains(t, report, "Avoidable 429s (the simulator's verdict): 0")
	assert.Contains(t, report, "Ideal for this load, from the rules:")
	assert.Contains(t, report, "Where the time went")
	for _, kind := range []string{"fan-out", "hot channel", "reactions", "new route", "shared hash", "interactions", "renames"} {
		assert.Contains(t, report, kind)
	}
}

func TestDemoTraceAndLiveView(t *testing.T) {
	var out, errOut strings.Builder
	err := run(context.Background(), []string{"demo", "-scenario", "saturated", "-size", "12", "-trace", "-progress", "on"}, &out, &errOut)
	require.NoError(t, err)
	trace := errOut.String()
	assert.Contains(t, trace, "bucket     receive    enqueue")
	assert.Contains(t, trace, "transition discovered")
	assert.NotContains(t, trace, "demo-token")
	assert.Contains(t, out.String(), "supervisor connected")
	assert.Contains(t, out.String(), "live buckets")
}

func TestDemoFlags(t *testing.T) {
	ctx := context.Background()
	assert.Error(t, run(ctx, []string{"demo", "-scenario", "nope"}, &strings.Builder{}, &strings.Builder{}))
	assert.Error(t, run(ctx, []string{"demo", "-size", "0"}, &strings.Builder{}, &strings.Builder{}))
	assert.Error(t, run(ctx, []string{"demo", "-progress", "sometimes"}, &strings.Builder{}, &strings.Builder{}))
}
