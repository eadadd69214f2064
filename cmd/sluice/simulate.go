package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/sluicetest"
)

// simulate serves the simulated Discord API until ctx ends or -for passes.
func simulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	var (
		addr       = fs.String("addr", "127.0.0.1:8443", "listen `address` (port 0 picks a free one)")
		rulesPath  = fs.String("rules", "", "rules `file` (.yaml, .yml or .json); default: the built-in Discord-like rules")
		dumpRules  = fs.Bool("dump-rules", false, "print the built-in rules as YAML and exit")
		h2c        = fs.Bool("h2c", false, "serve cleartext HTTP/2 and HTTP/1.1 instead of TLS")
		global     = fs.Int("global", 0, "global limit per token per second, 0 or more (0: the rules' value, 50 by default)")
		ipGlobal   = fs.Int("ip-global", 0, "global limit per IP for requests without a token, 0 or more (0: the rules' value)")
		scale      = fs.Float64("scale", 1, "multiply every bucket and sublimit window by `factor`, 0.001 to 1000")
		tokens     = fs.String("tokens", "", "comma-separated valid bot tokens (default: any token is valid)")
		latency    = fs.Duration("latency", 0, "delay every answer by this much (0 or more)")
		jitter     = fs.Duration("jitter", 0, "add a random delay up to this much (0 or more)")
		fwdJitter  = fs.Duration("forward-jitter", 0, "delay each request a random time up to this much before the rules count it (0 or more)")
		errorRate  = fs.Float64("error-rate", 0, "probability of a 502 without rate-limit headers, 0 to 1")
		dropRate   = fs.Float64("drop-rate", 0, "probability of closing a request's connection abruptly, 0 to 1")
		goAwayRate = fs.Float64("goaway-rate", 0, "probability of an HTTP/2 GOAWAY after an answer, 0 to 1")
		lateReset  = fs.Duration("late-reset", 0, "reopen every bucket window this long after its announced reset (Discord is reported to be 250-400 ms late)")
		certOut    = fs.String("cert-out", filepath.Join(os.TempDir(), "sluice-simulator.pem"), "write the self-signed certificate to `file`")
		runFor     = fs.Duration("for", 0, "stop after this long (0: run until interrupted)")
		statsEvery = fs.Duration("stats-every", 10*time.Second, "print a stats line this often (0: only at exit)")
	)
	const usage = "Usage: sluice simulate [flags]\n\nServe a simulated, rate-limited Discord REST API on loopback.\n"
	if done, err := parseFlags(fs, args, usage, stdout); done {
		return err
	}
	for _, err := range []error{
		atLeast("simulate", "global", *global, 0),
		atLeast("simulate", "ip-global", *ipGlobal, 0),
		between("simulate", "scale", *scale, 0.001, 1000),
		atLeast("simulate", "latency", *latency, 0),
		atLeast("simulate", "jitter", *jitter, 0),
		atLeast("simulate", "forward-jitter", *fwdJitter, 0),
		between("simulate", "error-rate", *errorRate, 0, 1),
		between("simulate", "drop-rate", *dropRate, 0, 1),
		between("simulate", "goaway-rate", *goAwayRate, 0, 1),
		atLeast("simulate", "late-reset", *lateReset, 0),
		atLeast("simulate", "for", *runFor, 0),
		atLeast("simulate", "stats-every", *statsEvery, 0),
	} {
		if err != nil {
			return err
		}
	}
	if *dumpRules {
		_, err := stdout.Write(sluicetest.DefaultRulesYAML())
		return err
	}
	rules := sluicetest.DefaultRules()
	if *rulesPath != "" {
		var err error
		if rules, err = sluicetest.LoadRules(*rulesPath); err != nil {
			return err
		}
	}
	if *scale != 1 {
		rules = rules.Scaled(*scale)
	}
	if *global > 0 {
		rules.GlobalLimit = *global
	}
	if *ipGlobal > 0 {
		rules.IPGlobalLimit = *ipGlobal
	}
	var valid []string
	for _, t := range strings.Split(*tokens, ",") {
		if t = strings.TrimSpace(t); t != "" {
			valid = append(valid, t)
		}
	}
	srv, err := sluicetest.NewServer(sluicetest.Options{
		Rules: rules, Tokens: valid, Addr: *addr, H2C: *h2c,
		Faults: sluicetest.Faults{
			Latency: *latency, Jitter: *jitter, ForwardJitter: *fwdJitter,
			ServerErrorRate: *errorRate, DropRate: *dropRate, GoAwayRate: *goAwayRate, LateReset: *lateReset,
		},
	})
	if err != nil {
		return err
	}
	defer srv.Close()

	curlTLS := "--http2-prior-knowledge"
	proto := "HTTP/2 (h2c) and HTTP/1.1, cleartext"
	if !*h2c {
		if err := os.WriteFile(*certOut, srv.CertificatePEM(), 0o644); err != nil {
			return fmt.Errorf("writing certificate: %w", err)
		}
		curlTLS = "--cacert " + *certOut
		proto = "HTTP/2 over TLS, HTTP/1.1 fallback"
	}
	fmt.Fprintf(stdout, "Sluice simulator listening on %s (%s)\n", srv.URL, proto)
	fmt.Fprintf(stdout, "API base:    %s\n", srv.APIBase())
	if !*h2c {
		fmt.Fprintf(stdout, "Certificate: %s\n", *certOut)
	}
	fmt.Fprintf(stdout, "Rules:       %d routes, global limit %d per %s per token\n", len(rules.Rules), rules.GlobalLimit, rules.GlobalWindow)
	fmt.Fprintf(stdout, "Try:         curl %s -H 'Authorization: Bot test' %s/users/@me -i\n", curlTLS, srv.APIBase())
	fmt.Fprintf(stdout, "Stats:       curl %s %s/_sluice/stats\n", curlTLS, srv.URL)

	var done <-chan time.Time
	if *runFor > 0 {
		t := time.NewTimer(*runFor)
		defer t.Stop()
		done = t.C
	}
	var tick <-chan time.Time
	if *statsEvery > 0 {
		t := time.NewTicker(*statsEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-tick:
			fmt.Fprintln(stdout, "stats:", srv.Stats().Summary())
		case <-done:
			fmt.Fprintln(stdout, "final:", srv.Stats().Summary())
			return nil
		case <-ctx.Done():
			fmt.Fprintln(stdout, "final:", srv.Stats().Summary())
			return nil
		}
	}
}
