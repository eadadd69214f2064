// Command ratelimited-api is a small API limited per client by a leaky
// bucket (package leakybucket): each client may send 10 requests at once,
// then one every 100 ms. It prints the address it listens on and serves
// until SIGINT or SIGTERM:
//
//	go run ./examples/ratelimited-api -listen 127.0.0.1:8080
//	curl -i http://127.0.0.1:8080/
//
// Every answer carries X-RateLimit-Remaining and X-RateLimit-Clear (and the
// draft's RateLimit-Policy and RateLimit fields unless -draft=false); a
// request over the limit gets a 429 with X-RateLimit-Reset, Retry-After and
// an application/problem+json body. GET /metrics (not limited) counts the
// decisions.
//
// Flags:
//
//	-listen ADDR       address to listen on (default 127.0.0.1:8080; port 0 picks one)
//	-redis URL         share the buckets through Redis (redis://host:6379/0, unix:///path)
//	-unavailable P     while Redis is unreachable: closed (503), open or local (default closed)
//	-trusted CIDRS     proxies whose X-Forwarded-For is believed, comma-separated
//	-draft             also send RateLimit-Policy and RateLimit (default true)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/leakybucket"
)

// limit is the bucket every client gets: 10 at once, then 1 per 100 ms.
var limit = leakybucket.Limit{Name: "api", Size: 10, DripRate: 100 * time.Millisecond, DripSize: 1}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "ratelimited-api:", err)
		os.Exit(2)
	}
}

// metrics counts the middleware's decisions (its Observe hook).
type metrics struct {
	Admitted, Blocked, Unavailable, Errors atomic.Int64
}

func (m *metrics) snapshot() map[string]int64 {
	return map[string]int64{
		"admitted":          m.Admitted.Load(),
		"blocked":           m.Blocked.Load(),
		"store_unavailable": m.Unavailable.Load(),
		"store_errors":      m.Errors.Load(),
	}
}

func (m *metrics) observe(e leakybucket.Event) {
	switch {
	case errors.Is(e.Err, leakybucket.ErrUnavailable):
		m.Unavailable.Add(1)
	case e.Err != nil:
		m.Errors.Add(1)
	}
	if e.Blocked {
		m.Blocked.Add(1)
	} else {
		m.Admitted.Add(1)
	}
}

// run parses args, serves until ctx is done, then shuts down gracefully.
// clock replaces time.Now for the in-memory buckets (tests); nil means the
// real clock.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, clock func() time.Time) error {
	fs := flag.NewFlagSet("ratelimited-api", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on (port 0 picks a free one)")
	redisURL := fs.String("redis", "", "share the buckets through this Redis (redis://host:6379/0, unix:///path); empty: in memory")
	unavailable := fs.String("unavailable", "closed", "while Redis is unreachable: closed (answer 503), open (admit all) or local (limit per process)")
	trusted := fs.String("trusted", "", "comma-separated CIDRs of proxies whose X-Forwarded-For is believed")
	draft := fs.Bool("draft", true, "also send the IETF draft's RateLimit-Policy and RateLimit fields")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var keys leakybucket.IPKey
	for _, s := range strings.Split(*trusted, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("-trusted: %w", err)
		}
		keys.TrustedProxies = append(keys.TrustedProxies, p)
	}
	policies := map[string]leakybucket.Policy{"closed": leakybucket.FailClosed, "open": leakybucket.FailOpen, "local": leakybucket.FailLocal}
	policy, ok := policies[*unavailable]
	if !ok {
		return fmt.Errorf("-unavailable: %q is not closed, open or local", *unavailable)
	}

	var store leakybucket.Store = &leakybucket.Memory{Clock: clock}
	backend := "in memory"
	if *redisURL != "" {
		opt, err := redis.ParseURL(*redisURL)
		if err != nil {
			return fmt.Errorf("-redis: %w", err)
		}
		client := redis.NewClient(opt)
		defer client.Close()
		if store, err = leakybucket.NewRedis(client, leakybucket.RedisOptions{OnUnavailable: policy}); err != nil {
			return err
		}
		backend = "on Redis " + opt.Addr + ", " + policy.String() + " while it is unreachable"
	}

	m := &metrics{}
	mw, err := leakybucket.NewMiddleware(store, leakybucket.MiddlewareOptions{
		Limits:       []leakybucket.Limit{limit},
		Key:          keys.Key,
		DraftHeaders: *draft,
		Observe:      m.observe,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]string{"message": "hello, " + keys.Key(r)})
	})))
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, m.snapshot()) })

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "listening on http://%s (%s, buckets %s)\n", ln.Addr(), limit, backend)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdown)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err == nil {
		fmt.Fprintln(stdout, "shut down")
	}
	return err
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
