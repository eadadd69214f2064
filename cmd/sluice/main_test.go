package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
)

// startSimulate runs "sluice simulate" with args and returns the API base
// it printed, a function that stops it, and the rest of its output.
func startSimulate(t *testing.T, args ...string) (apiBase string, stop func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, append([]string{"simulate", "-addr", "127.0.0.1:0", "-stats-every", "0"}, args...), pw, io.Discard)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "API base:"); ok {
			apiBase = strings.TrimSpace(rest)
			break
		}
	}
	require.NotEmpty(t, apiBase)
	return apiBase, func() string {
		cancel()
		var b strings.Builder
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		require.NoError(t, <-errc)
		return b.String()
	}
}

func TestSimulateServesTLSWithTheWrittenCertificate(t *testing.T) {
	cert := filepath.Join(t.TempDir(), "cert.pem")
	base, stop := startSimulate(t, "-cert-out", cert)
	pem, err := os.ReadFile(cert)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", base+"/users/@me", nil)
	req.Header.Set("Authorization", "Bot test")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, 2, resp.ProtoMajor)
	tr.CloseIdleConnections()
	out := stop()
	assert.Contains(t, out, "final: requests=1")
}

func TestSimulateH2CAndRules(t *testing.T) {
	rules := filepath.Join(t.TempDir(), "r.json")
	require.NoError(t, os.WriteFile(rules, []byte(`{"rules":[{"name":"ping","method":"GET","route":"/ping","bucket":"p","limit":1,"window":"1h","auth":"optional"}]}`), 0o600))
	base, stop := startSimulate(t, "-h2c", "-rules", rules)
	tr := &http.Transport{}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for _, want := range []int{200, 429} {
		resp, err := c.Get(base + "/ping")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, want, resp.StatusCode)
	}
	tr.CloseIdleConnections()
	assert.Contains(t, stop(), "user=1")
}

func TestSimulateFlagsAndCommands(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(context.Background(), []string{"simulate", "-dump-rules"}, &out, io.Discard))
	assert.Contains(t, out.String(), "create_message")
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"version"}, &out, io.Discard))
	assert.Equal(t, "sluice "+sluice.Version+"\n", out.String())
	assert.Error(t, run(context.Background(), []string{"nope"}, io.Discard, io.Discard))
	assert.Error(t, run(context.Background(), nil, io.Discard, io.Discard))
	assert.Error(t, run(context.Background(), []string{"simulate", "-scale", "0"}, io.Discard, io.Discard))
	assert.Error(t, run(context.Background(), []string{"simulate", "-error-rate", "2"}, io.Discard, io.Discard))
	assert.Error(t, run(context.Background(), []string{"simulate", "-rules", "/nonexistent.yaml"}, io.Discard, io.Discard))
	assert.Error(t, run(context.Background(), []string{"simulate", "extra"}, io.Discard, io.Discard))
}
