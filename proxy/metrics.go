package proxy

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Sources of an answer, the "source" label.
const (
	sourceUpstream = "upstream" // relayed from the API
	sourceCache    = "cache"    // replayed from the cache
	sourceProxy    = "proxy"    // made by the proxy (ProxyHeader)
)

// metrics are the proxy's Prometheus collectors. Labels never carry a
// token: route is the template without ids ("/channels/{channel_id}").
type metrics struct {
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
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_proxy_requests_total",
			Help: "Requests answered, by method, route template, status and source (upstream, cache, proxy).",
		}, []string{"method", "route", "status", "source"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_proxy_request_duration_seconds",
			Help:    "Time from a request's arrival to its answer's headers, queueing for the rate limits included.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
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

// answered records one answer.
func (m *metrics) answered(method, route string, status int, source string, seconds float64) {
	m.requests.WithLabelValues(method, route, strconv.Itoa(status), source).Inc()
	m.duration.WithLabelValues(route, source).Observe(seconds)
}
