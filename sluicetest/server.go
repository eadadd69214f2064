package sluicetest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Options configure a Server. The zero value serves DefaultRules over TLS
// with HTTP/2 on a random loopback port, with no faults.
type Options struct {
	// Rules are the limits to enforce; no rules means DefaultRules().
	Rules RuleSet
	// Tokens are the valid bot tokens; empty means any token is valid.
	Tokens []string
	// Forbidden lists major parameter values answered 403 (see Config).
	Forbidden []string
	// RevokedTokens lists webhook and interaction tokens answered 401
	// (see Config).
	RevokedTokens []string
	// Addr is the listen address; "" means "127.0.0.1:0".
	Addr string
	// H2C serves cleartext HTTP/2 (prior knowledge) and HTTP/1.1 instead of
	// TLS. The default is TLS with a fresh self-signed certificate,
	// offering HTTP/2 and falling back to HTTP/1.1.
	H2C bool
	// Clock is the time source of the rules engine; nil means time.Now.
	// Latency always uses the real clock.
	Clock func() time.Time
	// Faults are injected from the start; SetFaults changes them later.
	Faults Faults
	// TimelineLimit caps per-bucket timelines (see Config).
	TimelineLimit int
	// TrackDuplicates counts repeated requests (see Config).
	TrackDuplicates bool
	// Seed seeds the fault dice; 0 picks a random seed.
	Seed uint64
	// ErrorLog receives the HTTP server's own errors (TLS handshakes
	// aborted by clients, etc.); nil discards them.
	ErrorLog *log.Logger
}

// Faults are the failures the server injects on top of the rules.
type Faults struct {
	// Latency delays every answer; Jitter adds a uniformly random extra
	// delay in [0, Jitter). The rules engine decides at arrival, so a
	// window's timing is measured before the delay.
	Latency time.Duration `json:"latency,omitempty"`
	Jitter  time.Duration `json:"jitter,omitempty"`
	// ForwardJitter delays each request by a uniformly random time in
	// [0, ForwardJitter) before the rules engine counts it: a forward
	// trip that varies, as over the Internet (Latency and Jitter delay
	// only the answer). The server's clock in the answer's
	// X-RateLimit-Reset then places each count as late as its trip.
	ForwardJitter time.Duration `json:"forward_jitter,omitempty"`
	// ServerErrorRate is the probability (0 to 1) that a request is
	// answered with ServerErrorStatus and no rate-limit headers before the
	// rules see it (it spends no bucket and no global limit).
	ServerErrorRate float64 `json:"server_error_rate,omitempty"`
	// ServerErrorStatus is the injected status; 0 means 502 (Cloudflare's
	// HTML page). 500 answers Discord's JSON error body.
	ServerErrorStatus int `json:"server_error_status,omitempty"`
	// DropRate is the probability that the connection carrying a request
	// is closed abruptly after the rules engine has counted the request
	// and before any answer is written, so the request may have been
	// processed. Every other request on that connection dies with it.
	DropRate float64 `json:"drop_rate,omitempty"`
	// GoAwayRate is the probability that an answer is followed by an
	// HTTP/2 GOAWAY (Connection: close on HTTP/1.1): the connection
	// finishes its open streams and closes.
	GoAwayRate float64 `json:"goaway_rate,omitempty"`
	// ExternalGlobal schedules another consumer of the bot's token eating
	// the whole global limit.
	ExternalGlobal []GlobalOutage `json:"external_global,omitempty"`
	// LateReset makes every bucket window reopen this long after the reset
	// its headers announced, as real Discord is reported to do (clients add
	// 250-400 ms by hand): X-RateLimit-Reset / Reset-After keep announcing
	// the on-time reset, but a request that arrives between the announced
	// reset and the real one still finds the old window exhausted and is
	// answered with a user-scope 429 whose retry_after / Retry-After /
	// X-RateLimit-Reset-After tell the time left until the real reopening.
	// (If the old window still has room, the request is admitted into it,
	// with the same honest Reset-After.) The next request after the real
	// reopening opens a new window. Such 429s are counted in
	// Stats.LateReset429s and, when a window opened at the announced reset
	// would have admitted them, excused from Violations
	// (Stats.LateResetExcused). Sublimits and the global limit are not
	// affected. SetFaults changes it at once, for open windows too.
	LateReset time.Duration `json:"late_reset,omitempty"`
}

// GlobalOutage is a period during which the global limit is exhausted by
// someone else: every authenticated, non-exempt request gets a global 429.
type GlobalOutage struct {
	// After is when the outage starts, from Server start (Options.Faults)
	// or from the SetFaults call.
	After time.Duration `json:"after"`
	// For is how long it lasts.
	For time.Duration `json:"for"`
	// IP, when set, exhausts the per-IP global limit (requests without an
	// Authorization header) instead of the token's.
	IP bool `json:"ip,omitempty"`
}

// Server is a simulated Discord REST API on loopback: the rules engine
// behind a real HTTP/2 server, with fault injection. Create it with
// NewServer; it is safe for concurrent use. The admin endpoints under
// /_sluice/ (stats, global, reset) are documented in docs/simulator.md.
type Server struct {
	// URL is the base URL, "https://127.0.0.1:port" (or http:// with H2C).
	URL string

	engine  *Engine
	clock   func() time.Time
	h2c     bool
	srv     *http.Server
	ln      net.Listener
	cert    *x509.Certificate
	certPEM []byte
	client  *http.Client

	mu     sync.Mutex // guards faults and rnd
	faults Faults
	rnd    *rand.Rand

	connMu sync.Mutex
	conns  map[net.Conn]struct{}

	// handlers counts the handlers running. A handler joins it under
	// handlersMu unless closing is closed, which Close does under
	// handlersMu before it waits: no Add can race the Wait.
	handlersMu sync.Mutex
	handlers   sync.WaitGroup
	serveDone  chan struct{}
	closing    chan struct{}
	closeOnce  sync.Once
}

type connKey struct{}

// maxBody is the largest request body the simulator reads (Discord's upload
// limit is in this range).
const maxBody = 8 << 20

// NewServer starts a simulator and returns once it accepts connections.
// Call Close when done.
func NewServer(opts Options) (*Server, error) {
	clock := opts.Clock
	if clock == nil {
		clock = time.Now
	}
	start := clock()
	engine, err := NewEngine(start, Config{
		Rules: opts.Rules, Tokens: opts.Tokens, Forbidden: opts.Forbidden, RevokedTokens: opts.RevokedTokens, TimelineLimit: opts.TimelineLimit,
		TrackDuplicates: opts.TrackDuplicates,
	})
	if err != nil {
		return nil, err
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sluicetest: listen: %w", err)
	}
	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	s := &Server{
		engine:    engine,
		clock:     clock,
		h2c:       opts.H2C,
		ln:        ln,
		rnd:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		conns:     map[net.Conn]struct{}{},
		serveDone: make(chan struct{}),
		closing:   make(chan struct{}),
	}
	errLog := opts.ErrorLog
	if errLog == nil {
		errLog = log.New(io.Discard, "", 0)
	}
	s.srv = &http.Server{
		Handler:           s,
		ErrorLog:          errLog,
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ConnState: s.trackConn,
	}
	s.srv.Protocols = new(http.Protocols)
	s.srv.Protocols.SetHTTP1(true)
	if opts.H2C {
		s.srv.Protocols.SetUnencryptedHTTP2(true)
		s.URL = "http://" + ln.Addr().String()
	} else {
		s.srv.Protocols.SetHTTP2(true)
		cert, leaf, certPEM, err := selfSigned(time.Now())
		if err != nil {
			ln.Close()
			return nil, err
		}
		s.cert, s.certPEM = leaf, certPEM
		s.srv.TLSConfig = &tls.Config{
			Certificates: []tls.Certificate{cert},
			NextProtos:   []string{"h2", "http/1.1"},
			MinVersion:   tls.VersionTLS12,
		}
		s.ln = tls.NewListener(ln, s.srv.TLSConfig)
		s.URL = "https://" + ln.Addr().String()
	}
	s.setFaults(start, opts.Faults)
	go func() {
		defer close(s.serveDone)
		_ = s.srv.Serve(s.ln) // returns http.ErrServerClosed on Close
	}()
	return s, nil
}

func (s *Server) trackConn(c net.Conn, st http.ConnState) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	switch st {
	case http.StateNew:
		s.conns[c] = struct{}{}
	case http.StateClosed, http.StateHijacked:
		delete(s.conns, c)
	}
}

// APIBase is URL + "/api/v10", the base clients put before route paths.
func (s *Server) APIBase() string { return s.URL + "/api/v10" }

// Engine returns the rules engine, for direct inspection in tests.
func (s *Server) Engine() *Engine { return s.engine }

// Stats returns the strict accounting so far (see Stats).
func (s *Server) Stats() Stats { return s.engine.Stats() }

// AssertNoViolations fails t if the client exceeded any limit it could have
// known; see Stats.Violations.
func (s *Server) AssertNoViolations(t TB) bool {
	t.Helper()
	return AssertNoViolations(t, s.Stats())
}

// Certificate returns the server's self-signed certificate (nil with H2C).
func (s *Server) Certificate() *x509.Certificate { return s.cert }

// CertificatePEM returns the certificate in PEM form, for curl --cacert
// (nil with H2C).
func (s *Server) CertificatePEM() []byte { return s.certPEM }

// ClientTLSConfig returns a client TLS configuration that trusts the
// server's certificate and offers HTTP/2 (nil with H2C).
func (s *Server) ClientTLSConfig() *tls.Config {
	if s.cert == nil {
		return nil
	}
	pool := x509.NewCertPool()
	pool.AddCert(s.cert)
	return &tls.Config{RootCAs: pool, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}
}

// Client returns an HTTP client configured for the server: it trusts the
// certificate and speaks HTTP/2 (h2c with H2C). Its idle connections are
// closed by Close.
func (s *Server) Client() *http.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		tr := &http.Transport{TLSClientConfig: s.ClientTLSConfig(), ForceAttemptHTTP2: true}
		tr.Protocols = new(http.Protocols)
		if s.h2c {
			tr.Protocols.SetUnencryptedHTTP2(true)
		} else {
			tr.Protocols.SetHTTP2(true)
		}
		s.client = &http.Client{Transport: tr}
	}
	return s.client
}

// SetFaults replaces the injected faults. Outages in f start relative to
// now.
func (s *Server) SetFaults(f Faults) { s.setFaults(s.clock(), f) }

func (s *Server) setFaults(now time.Time, f Faults) {
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
	s.engine.SetLateReset(f.LateReset)
	for _, o := range f.ExternalGlobal {
		from := now.Add(o.After)
		if o.IP {
			s.engine.ExhaustIPGlobal(from, from.Add(o.For))
		} else {
			s.engine.ExhaustGlobal(from, from.Add(o.For))
		}
	}
}

// InjectGlobalLimit makes an external consumer exhaust the global limit
// from now for d.
func (s *Server) InjectGlobalLimit(d time.Duration) {
	now := s.clock()
	s.engine.ExhaustGlobal(now, now.Add(d))
}

// Elapsed returns the time since the engine started, as Stats and Event.At
// tell times.
func (s *Server) Elapsed() time.Duration { return s.engine.Since(s.clock()) }

// InjectIPGlobalLimit makes an external consumer exhaust the per-IP global
// limit (requests without an Authorization header) from now for d.
func (s *Server) InjectIPGlobalLimit(d time.Duration) {
	now := s.clock()
	s.engine.ExhaustIPGlobal(now, now.Add(d))
}

// DropConnections closes every client connection abruptly and returns how
// many it closed.
func (s *Server) DropConnections() int { return s.dropConnections(nil) }

func (s *Server) dropConnections(except net.Conn) int {
	s.connMu.Lock()
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		if c != except {
			conns = append(conns, c)
		}
	}
	s.connMu.Unlock()
	for _, c := range conns {
		c.Close()
		s.engine.RecordFault("drop")
	}
	return len(conns)
}

// Close stops the server: it closes the listener and every connection at
// once and returns after every handler has finished.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		// Connections first: a handler released before its connection is
		// closed would still send an (empty) answer.
		_ = s.srv.Close()
		s.handlersMu.Lock()
		close(s.closing)
		s.handlersMu.Unlock()
		<-s.serveDone
		s.handlers.Wait()
		s.mu.Lock()
		if s.client != nil {
			s.client.CloseIdleConnections()
		}
		s.mu.Unlock()
	})
	return nil
}

type dice struct {
	serverError, drop, goAway bool
	delay, forward            time.Duration
	status                    int
}

func (s *Server) roll() dice {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	d := dice{delay: f.Latency, status: f.ServerErrorStatus}
	if f.Jitter > 0 {
		d.delay += time.Duration(s.rnd.Int64N(int64(f.Jitter)))
	}
	if f.ForwardJitter > 0 {
		d.forward = time.Duration(s.rnd.Int64N(int64(f.ForwardJitter)))
	}
	d.serverError = f.ServerErrorRate > 0 && s.rnd.Float64() < f.ServerErrorRate
	d.drop = f.DropRate > 0 && s.rnd.Float64() < f.DropRate
	d.goAway = f.GoAwayRate > 0 && s.rnd.Float64() < f.GoAwayRate
	if d.status == 0 {
		d.status = http.StatusBadGateway
	}
	return d
}

// enter counts a handler in s.handlers, unless Close has begun.
func (s *Server) enter() bool {
	s.handlersMu.Lock()
	defer s.handlersMu.Unlock()
	select {
	case <-s.closing:
		return false
	default:
		s.handlers.Add(1)
		return true
	}
}

// ServeHTTP answers one request: admin endpoints, injected faults, then the
// rules engine.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.enter() {
		panic(http.ErrAbortHandler) // closed: the stream ends with no answer
	}
	defer s.handlers.Done()
	if strings.HasPrefix(r.URL.Path, "/_sluice/") {
		s.admin(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return // the client went away
	}
	if len(body) > maxBody {
		writeDecision(w, jsonError(http.StatusRequestEntityTooLarge, "Request entity too large", 40005), false)
		return
	}
	d := s.roll()
	if d.forward > 0 && !s.wait(r.Context(), d.forward) {
		return // (the forward trip: nothing has counted the request yet)
	}
	if d.serverError {
		s.engine.RecordFault("server_error")
		if !s.wait(r.Context(), d.delay) {
			return
		}
		writeDecision(w, serverError(d.status), d.goAway)
		return
	}
	ip, _, _ := net.SplitHostPort(r.RemoteAddr)
	dec := s.engine.Handle(s.clock(), Request{
		Method: r.Method, Path: r.URL.EscapedPath(), Authorization: r.Header.Get("Authorization"), IP: ip, Body: body,
	})
	if d.drop {
		if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
			s.engine.recordDrop(s.clock())
			c.Close()
			return
		}
	}
	s.engine.answering(dec, true)
	defer s.engine.answering(dec, false)
	if !s.wait(r.Context(), d.delay) {
		return
	}
	if d.goAway {
		s.engine.RecordFault("goaway")
	}
	writeDecision(w, dec, d.goAway)
}

// wait delays an answer by d unless the request or the server ends first.
func (s *Server) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.closing:
		return false
	}
}

func writeDecision(w http.ResponseWriter, d Decision, goAway bool) {
	h := w.Header()
	for k, v := range d.Header {
		h[k] = v
	}
	if goAway {
		// Go's HTTP/2 server turns Connection: close into a graceful GOAWAY;
		// HTTP/1.1 closes the connection after this answer.
		h.Set("Connection", "close")
	}
	w.WriteHeader(d.Status)
	_, _ = w.Write(d.Body)
}

func serverError(status int) Decision {
	h := make(http.Header, 2)
	switch status {
	case http.StatusInternalServerError:
		return jsonError(status, "500: Internal Server Error", 0)
	case http.StatusBadGateway:
		h.Set("Content-Type", "text/html")
		h.Set("Server", "cloudflare")
		return Decision{Status: status, Header: h, Body: []byte("<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center><hr><center>cloudflare</center></body></html>\n")}
	default:
		h.Set("Content-Type", "text/plain; charset=utf-8")
		return Decision{Status: status, Header: h, Body: []byte(http.StatusText(status) + "\n")}
	}
}

// admin serves the endpoints under /_sluice/:
//
//	GET  /_sluice/stats          Stats as JSON (?timeline=0 leaves timelines out)
//	POST /_sluice/global?for=2s  an external consumer exhausts the global limit
//	POST /_sluice/reset          forget all buckets, windows, bans and counts
//	POST /_sluice/drop           close every other connection abruptly
func (s *Server) admin(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/_sluice/stats" && r.Method == http.MethodGet:
		st := s.Stats()
		if r.URL.Query().Get("timeline") == "0" {
			for i := range st.Buckets {
				st.Buckets[i].Timeline = nil
			}
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
	case r.URL.Path == "/_sluice/global" && r.Method == http.MethodPost:
		d, err := time.ParseDuration(r.URL.Query().Get("for"))
		if err != nil || d <= 0 {
			http.Error(w, "for must be a positive duration such as 2s", http.StatusBadRequest)
			return
		}
		s.InjectGlobalLimit(d)
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/_sluice/reset" && r.Method == http.MethodPost:
		s.engine.Reset(s.clock())
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/_sluice/drop" && r.Method == http.MethodPost:
		// Every other connection dies at once; this one is closed
		// gracefully after the answer, so the caller learns the count.
		own, _ := r.Context().Value(connKey{}).(net.Conn)
		n := s.dropConnections(own)
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]int{"dropped": n})
	default:
		http.Error(w, "unknown admin endpoint", http.StatusNotFound)
	}
}
