package proxy

import (
	"context"
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

type redisStats = redisstore.Stats

// redisModes are the values of the mode label.
var redisModes = []string{redisstore.Shared.String(), redisstore.Fallback.String(), redisstore.Recovering.String()}

// The limiters' side of /metrics. Two sources, both bounded whatever the
// traffic, and neither with a token in a label:
//
//   - Counters and the wait histogram come from the limiters' own
//     OpenTelemetry instruments (sluice.Options.MeterProvider): every
//     token's limiter records into one MeterProvider, whose Prometheus
//     exporter sums them, so they survive a token's limiter being closed.
//     Names: sluice_responses_total (by http_response_status_code and, for
//     429s, sluice_rate_limit_scope), sluice_requests_total (by
//     sluice_outcome and sluice_window), sluice_wait_seconds (by
//     sluice_wait_kind and sluice_window), sluice_transitions_total (by
//     sluice_machine, sluice_event and sluice_window).
//   - Gauges are read at each scrape from every live limiter
//     (sluice.Limiter.Load: atomic loads, no actor message) and aggregated
//     by token class (the "tokens" label): "default" for Config.DefaultToken,
//     "none" for the token-less limiter (webhooks, interactions, the per-IP
//     limit), "caller" for the tokens callers bring, summed. The limiters'
//     own observable gauges are dropped from the exporter: one value per
//     limiter cannot be summed by it.
//
// Token classes.
const (
	classDefault = "default"
	classNone    = "none"
	classCaller  = "caller"
)

// limiterStates are the supervisor's states, each a value of the state
// label (a limiter is counted in its state).
var limiterStates = []string{"disconnected", "connecting", "connected", "global_limit"}

// limiterMetrics aggregates the live limiters' Load at each scrape.
//
// Invariant (under mu): retired holds the Redis counters of the limiters
// closed so far, so the exported counters only grow.
type limiterMetrics struct {
	p            *Proxy
	provider     *sdkmetric.MeterProvider
	defaultToken string // normToken(Config.DefaultToken), "" without one

	pending, running, buckets, states      *prometheus.Desc
	globalUsed, globalLimit, globalPaused  *prometheus.Desc
	globalPauseSecs, invalidLeft, redisMod *prometheus.Desc
	redisOutages, redisErrors              *prometheus.Desc

	mu      sync.Mutex
	retired map[string]*redisCounts // by token class
}

type redisCounts struct{ outages, errors int64 }

func newLimiterMetrics(p *Proxy, reg *prometheus.Registry) (*limiterMetrics, error) {
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, err
	}
	drop := sdkmetric.NewView(sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindObservableGauge}, sdkmetric.Stream{Aggregation: sdkmetric.AggregationDrop{}})
	// The SDK's default boundaries (0 to 10,000) suit milliseconds; the
	// waits are in seconds, as the proxy's own duration histogram.
	waits := sdkmetric.NewView(sdkmetric.Instrument{Name: "sluice.wait"}, sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: durationBuckets}})
	m := &limiterMetrics{p: p, defaultToken: normToken(p.cfg.DefaultToken), provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithView(drop, waits)), retired: map[string]*redisCounts{}}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append([]string{"tokens"}, labels...), nil)
	}
	m.pending = d("sluice_limiter_requests_pending", "Requests submitted to the limiters and not yet answered (queued, waiting for admission or on the wire), by token class.")
	m.running = d("sluice_limiter_requests_running", "Requests on the wire, by token class.")
	m.buckets = d("sluice_limiter_buckets", "Live bucket actors, by token class.")
	m.states = d("sluice_limiter_state", "Limiters in each connection state (disconnected, connecting, connected, global_limit), by token class.", "state")
	m.globalUsed = d("sluice_limiter_global_used", "Global-limit slots held now (in flight and answered within the window), summed over the class's limiters, by window (bot: with a token, ip: without).", "window")
	m.globalLimit = d("sluice_limiter_global_limit", "Global limit per window, summed over the class's limiters (used / limit is the class's use).", "window")
	m.globalPaused = d("sluice_limiter_global_paused", "Limiters whose global window is paused by a global 429 now, by window.", "window")
	m.globalPauseSecs = d("sluice_limiter_global_pause_seconds", "Longest time left of a global 429's pause among the class's limiters, by window.", "window")
	m.invalidLeft = d("sluice_limiter_invalid_budget_left", "Fewest invalid answers (401, 403, non-shared 429) any of the class's limiters still accepts before refusing requests (Discord bans an IP at 10,000 per 10 minutes).")
	m.redisMod = d("sluice_limiter_redis_mode", "Redis stores in each mode (shared, fallback, recovering), by token class; none without -redis.", "mode")
	m.redisOutages = d("sluice_limiter_redis_outages_total", "Switches of a Redis store to its fallback (Redis unreachable), by token class.")
	m.redisErrors = d("sluice_limiter_redis_errors_total", "Failed Redis calls, by token class.")
	if err := reg.Register(m); err != nil {
		_ = m.provider.Shutdown(context.Background())
		return nil, err
	}
	return m, nil
}

// class is the token class of a limiter's token.
func (m *limiterMetrics) class(token string) string {
	switch {
	case token == "":
		return classNone
	case token == m.defaultToken:
		return classDefault
	default:
		return classCaller
	}
}

// retire adds a limiter's Redis counters to the retired ones: it is being
// closed. Called under the registry's lock, with the tenant still counted
// nowhere else.
func (m *limiterMetrics) retire(token string, lim *sluice.Limiter) {
	ld := lim.Load()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.retired[m.class(token)]
	if r == nil {
		r = &redisCounts{}
		m.retired[m.class(token)] = r
	}
	for _, st := range []*redisStats{ld.Shared, ld.IPShared} {
		if st != nil {
			r.outages += st.Outages
			r.errors += st.Errors
		}
	}
}

// Describe implements prometheus.Collector.
func (m *limiterMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.pending, m.running, m.buckets, m.states, m.globalUsed, m.globalLimit,
		m.globalPaused, m.globalPauseSecs, m.invalidLeft, m.redisMod, m.redisOutages, m.redisErrors} {
		ch <- d
	}
}

// classTotals are one class's figures at a scrape.
type classTotals struct {
	pending, running, buckets int
	states                    map[string]int
	used, limit, paused       map[string]int
	pause                     map[string]float64
	invalidLeft               int // -1: no limiter with a budget
	modes                     map[string]int
	outages, errors           int64
}

// Collect implements prometheus.Collector.
func (m *limiterMetrics) Collect(ch chan<- prometheus.Metric) {
	totals := map[string]*classTotals{}
	for _, c := range []string{classDefault, classNone, classCaller} {
		totals[c] = &classTotals{states: map[string]int{}, used: map[string]int{}, limit: map[string]int{}, paused: map[string]int{},
			pause: map[string]float64{}, invalidLeft: -1, modes: map[string]int{}}
	}
	// Hold the registry's lock while reading, so a limiter retired
	// meanwhile is counted once: live here or in retired.
	m.p.reg.mu.Lock()
	for e := m.p.reg.lru.Front(); e != nil; e = e.Next() {
		t := e.Value.(*tenant)
		select {
		case <-t.ready:
		default:
			continue // being made
		}
		if t.lim == nil {
			continue
		}
		ld := t.lim.Load()
		c := totals[m.class(t.token)]
		c.pending += ld.Pending
		c.running += ld.Running
		c.buckets += ld.Buckets
		c.states[ld.State]++
		if ld.InvalidLeft >= 0 && (c.invalidLeft < 0 || ld.InvalidLeft < c.invalidLeft) {
			c.invalidLeft = ld.InvalidLeft
		}
		for _, w := range ld.Windows {
			c.used[w.Name] += w.Used
			c.limit[w.Name] += w.Limit
			if w.PausedFor > 0 {
				c.paused[w.Name]++
			}
			c.pause[w.Name] = max(c.pause[w.Name], w.PausedFor.Seconds())
		}
		for _, st := range []*redisStats{ld.Shared, ld.IPShared} {
			if st != nil {
				c.modes[st.Mode.String()]++
				c.outages += st.Outages
				c.errors += st.Errors
			}
		}
	}
	m.mu.Lock()
	for class, r := range m.retired {
		totals[class].outages += r.outages
		totals[class].errors += r.errors
	}
	m.mu.Unlock()
	m.p.reg.mu.Unlock()

	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for class, c := range totals {
		gauge(m.pending, float64(c.pending), class)
		gauge(m.running, float64(c.running), class)
		gauge(m.buckets, float64(c.buckets), class)
		for _, s := range limiterStates {
			gauge(m.states, float64(c.states[s]), class, s)
		}
		for _, w := range []string{"bot", "ip"} {
			gauge(m.globalUsed, float64(c.used[w]), class, w)
			gauge(m.globalLimit, float64(c.limit[w]), class, w)
			gauge(m.globalPaused, float64(c.paused[w]), class, w)
			gauge(m.globalPauseSecs, c.pause[w], class, w)
		}
		if c.invalidLeft >= 0 {
			gauge(m.invalidLeft, float64(c.invalidLeft), class)
		}
		for _, mode := range redisModes {
			gauge(m.redisMod, float64(c.modes[mode]), class, mode)
		}
		ch <- prometheus.MustNewConstMetric(m.redisOutages, prometheus.CounterValue, float64(c.outages), class)
		ch <- prometheus.MustNewConstMetric(m.redisErrors, prometheus.CounterValue, float64(c.errors), class)
	}
}

// close stops the MeterProvider; the limiters are closed by then.
func (m *limiterMetrics) close() error {
	err := m.provider.Shutdown(context.Background())
	if errors.Is(err, sdkmetric.ErrReaderShutdown) {
		return nil
	}
	return err
}
