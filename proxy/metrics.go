package proxy

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/routes"
)

// Sources of an answer, the "source" label.
const (
	sourceUpstream = "upstream" // relayed from the API
	sourceCache    = "cache"    // replayed from the cache
	sourceProxy    = "proxy"    // made by the proxy (ProxyHeader)
)

// durationBuckets are the boundaries, in seconds, of the histograms of
// times: a request's, and the limiters' waits.
var durationBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// maxRouteLabels bounds the values of the route label: a hard bound on
// the series whatever the input, beside the vocabulary that bounds
// routes.Route.Label.
const maxRouteLabels = 256

// Fixed route labels: a request refused before its path was classified,
// and every route once maxRouteLabels are in use.
const (
	labelInvalid = "invalid"
	labelOther   = "other"
)

// metrics are the proxy's Prometheus collectors. Labels never carry
// anything a client wrote as written: method is one of routes.Methods or
// "other", route a known template without ids
// ("/channels/{channel_id}"), "other" or "invalid", status a number,
// source and reason the package's constants.
type metrics struct {
	mu     sync.Mutex
	routes map[string]bool // route label values in use, at most maxRouteLabels

	requests  *prometheus.CounterVec   // method, route, status, source
	duration  *prometheus.HistogramVec // route, source
	refused   *prometheus.CounterVec   // reason
	inFlight  prometheus.Gauge
	tokens    prometheus.Gauge
	evictions *prometheus.CounterVec // reason: idle, lru
	cacheLen  prometheus.GaugeFunc
}

func newMetrics(reg *prometheus.Registry, cacheLen func() float64) (*metrics, error) {
	m := &metrics{
		routes: map[string]bool{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_proxy_requests_total",
			Help: "Requests answered, by method, route template, status and source (upstream, cache, proxy).",
		}, []string{"method", "route", "status", "source"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_proxy_request_duration_seconds",
			Help:    "Time from a request's arrival to its answer's headers, queueing for the rate limits included.",
			Buckets: durationBuckets,
		}, []string{"route", "source"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_proxy_refused_total",
			Help: "Answers made by the proxy itself, by reason (the X-Sluice-Proxy header).",
		}, []string{"reason"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_proxy_requests_in_flight",
			Help: "Requests accepted and not yet answered.",
		}),
		tokens: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_proxy_tokens",
			Help: "Tokens with a live limiter (the token-less, per-IP one included).",
		}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_proxy_token_evictions_total",
			Help: "Token limiters closed, by reason: idle (IdleTimeout) or lru (MaxTokens).",
		}, []string{"reason"}),
		cacheLen: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_proxy_cache_entries",
			Help: "Answers in the cache of hopeless answers (expired ones not yet pushed out included).",
		}, cacheLen),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.refused, m.inFlight, m.tokens, m.evictions, m.cacheLen} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// route returns the label value for a route label: itself while fewer
// than maxRouteLabels values are in use, else "other".
func (m *metrics) route(label string) string {
	if label == "" {
		return labelInvalid
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.routes[label] {
		return label
	}
	if len(m.routes) >= maxRouteLabels {
		return labelOther
	}
	m.routes[label] = true
	return label
}

// answered records one answer.
func (m *metrics) answered(method, route string, status int, source string, seconds float64) {
	method, route = routes.MethodLabel(method), m.route(route)
	m.requests.WithLabelValues(method, route, strconv.Itoa(status), source).Inc()
	m.duration.WithLabelValues(route, source).Observe(seconds)
}
