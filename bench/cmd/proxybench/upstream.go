package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/sluicehq/sluice/sluicetest"
)

// upstreamEnv, when set to "1", makes this binary serve a simulator (with
// the default, Discord-like rules) instead of benchmarking: the memory
// measurement runs its upstream in such a child process so that the
// simulator's own per-connection memory and goroutines stay out of the
// proxy's figures.
const upstreamEnv = "PROXYBENCH_UPSTREAM"

// upstream is a simulator the limiters and the proxy send to.
type upstream struct {
	apiBase string
	certPEM string
	tls     *tls.Config
	srv     *sluicetest.Server // nil for a child process
	close   func()
}

// inProcess starts a simulator in this process.
func inProcess(opts sluicetest.Options) (*upstream, error) {
	srv, err := sluicetest.NewServer(opts)
	if err != nil {
		return nil, err
	}
	return &upstream{apiBase: srv.APIBase(), certPEM: string(srv.CertificatePEM()), tls: srv.ClientTLSConfig(), srv: srv, close: func() { _ = srv.Close() }}, nil
}

// childHello is the line a child upstream prints once it listens.
type childHello struct {
	APIBase string `json:"api_base"`
	CertPEM string `json:"cert_pem"`
}

// child starts a simulator with the default rules in a child process (this
// binary again, with upstreamEnv set). It ends when its stdin closes.
func child() (*upstream, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), upstreamEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil {
		stop()
		return nil, fmt.Errorf("child upstream: %w", err)
	}
	var h childHello
	if err := json.Unmarshal(line, &h); err != nil {
		stop()
		return nil, fmt.Errorf("child upstream: %w", err)
	}
	up, err := remote(h.APIBase, h.CertPEM)
	if err != nil {
		stop()
		return nil, err
	}
	up.close = stop
	return up, nil
}

// remote is an upstream another process serves; closing it does nothing.
func remote(apiBase, certPEM string) (*upstream, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(certPEM)) {
		return nil, errors.New("upstream: bad certificate")
	}
	cfg := &tls.Config{RootCAs: pool, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}
	return &upstream{apiBase: apiBase, certPEM: certPEM, tls: cfg, close: func() {}}, nil
}

// serveChild is the child's side: it serves until stdin closes.
func serveChild() {
	srv, err := sluicetest.NewServer(sluicetest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxybench upstream:", err)
		os.Exit(1)
	}
	b, _ := json.Marshal(childHello{APIBase: srv.APIBase(), CertPEM: string(srv.CertificatePEM())})
	os.Stdout.Write(append(b, '\n'))
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
}
