package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/sluicetest"
)

// The proxy's listener over TLS (-tls-cert, -tls-key): HTTPS with HTTP/2
// and HTTP/1.1, TLS 1.2 or later; a half-given pair or a bad file stops it
// before it starts.

// selfSigned writes a new self-signed certificate for 127.0.0.1 and
// localhost, valid from an hour ago to an hour from now, and its key, as
// PEM files in a temporary directory, and returns their paths and a pool
// that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	return selfSignedUntil(t, time.Now().Add(time.Hour))
}

// selfSignedUntil is selfSigned with a certificate valid until notAfter.
func selfSignedUntil(t *testing.T, notAfter time.Time) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()),
		Subject:      pkix.Name{CommonName: "sluice proxy test"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    notAfter.Add(-2 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

// tlsClient is an HTTPS client trusting roots that speaks the given
// protocols (HTTP/1.1 only without h2), at most maxVersion of TLS (0: any).
func tlsClient(t *testing.T, roots *x509.CertPool, h2 bool, maxVersion uint16) *http.Client {
	t.Helper()
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(h2)
	tr := &http.Transport{
		// MinVersion 1.0: Go's client would otherwise refuse below 1.2
		// itself, and the test is that the proxy does.
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS10, MaxVersion: maxVersion},
		Protocols:       &protocols,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// startProxyTLS is startProxy for a proxy given -tls-cert: its listening
// line names an https:// address, and its client (p.get) trusts roots and
// speaks HTTP/2.
func startProxyTLS(t *testing.T, roots *x509.CertPool, env []string, args ...string) *proxyProc {
	t.Helper()
	p := launchProxy(t, tlsClient(t, roots, true, 0), env, args...)
	require.True(t, strings.HasPrefix(p.URL, "https://"), "listening on %s", p.URL)
	return p
}

// TestProxyServesTLS: with -tls-cert (a flag) and SLUICE_TLS_KEY (a
// variable), the listener serves HTTPS: requests are relayed over HTTP/2
// (ALPN h2) and HTTP/1.1, a client limited to TLS 1.1 is refused, plain
// HTTP on the port gets no answer from the API, and -metrics-listen stays
// plain HTTP. The key is never printed.
func TestProxyServesTLS(t *testing.T) {
	t.Parallel()
	srv, ca := newUpstream(t, sluicetest.Options{})
	certFile, keyFile, roots := selfSigned(t)
	p := startProxyTLS(t, roots, []string{"SLUICE_TLS_KEY=" + keyFile},
		"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-upstream", srv.APIBase(), "-ca-file", ca, "-tls-cert", certFile)
	assert.Equal(t, srv.APIBase(), p.Upstream)

	get := func(c *http.Client, url string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bot t")
		resp, err := c.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	resp := get(p.client, p.URL+"/api/v10/users/@me")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 2, resp.ProtoMajor, "HTTP/2 over TLS")
	require.NotNil(t, resp.TLS)
	assert.Equal(t, "h2", resp.TLS.NegotiatedProtocol)
	assert.GreaterOrEqual(t, resp.TLS.Version, uint16(tls.VersionTLS12))
	assert.Equal(t, "5", resp.Header.Get("X-RateLimit-Limit"), "the API's answer, relayed")

	resp = get(tlsClient(t, roots, false, 0), p.URL+"/api/v10/users/@me")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 1, resp.ProtoMajor, "HTTP/1.1 over TLS for a client without h2")

	status, _, body := p.get(proxy.ReadyPath)
	assert.Equal(t, http.StatusOK, status, body)

	_, err := tlsClient(t, roots, true, tls.VersionTLS11).Get(p.URL + proxy.HealthPath)
	assert.ErrorContains(t, err, "protocol version", "TLS 1.1 refused")

	plain := &http.Client{Transport: &http.Transport{}}
	defer plain.CloseIdleConnections()
	resp = get(plain, "http://"+strings.TrimPrefix(p.URL, "https://")+"/api/v10/users/@me")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP on the TLS port: net/http's 400")
	assert.Equal(t, 2, srv.Stats().Requests, "only the two HTTPS requests reached the API")

	waitFor(t, 10*time.Second, "the metrics line", func() bool { return strings.Contains(p.rest.String(), "metrics on") })
	m := regexp.MustCompile(`sluice proxy metrics on (http://\S+)/metrics`).FindStringSubmatch(p.rest.String())
	require.NotNil(t, m, p.rest.String())
	assert.Equal(t, 2.0, scrape(t, plain, m[1], "sluice_proxy_requests_total"), "metrics over plain HTTP")

	assert.Equal(t, 0, p.stop(syscall.SIGTERM))
	stdout, stderr := p.output()
	assert.Contains(t, stderr, "tls=true")
	keyPEM, err := os.ReadFile(keyFile)
	require.NoError(t, err)
	keyBody := strings.Split(string(keyPEM), "\n")[1] // the first line of base64
	assert.NotContains(t, stdout+stderr, keyBody)
	srv.AssertNoViolations(t)
}

// TestProxyTLSBadValuesExit2: -tls-cert without -tls-key (or the other way
// round, from flags or variables) and files that are missing, not PEM, or
// not a pair are usage errors naming the flag or variable and the file:
// exit status 2, nothing started.
func TestProxyTLSBadValuesExit2(t *testing.T) {
	t.Parallel()
	certFile, keyFile, _ := selfSigned(t)
	otherCert, _, _ := selfSigned(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	for _, tc := range []struct {
		env  []string
		args []string
		want string // in stderr
	}{
		{nil, []string{"-tls-cert", certFile}, "sluice proxy: -tls-cert needs -tls-key too, the certificate's private key: both or neither\n"},
		{nil, []string{"-tls-key", keyFile}, "sluice proxy: -tls-key needs -tls-cert too, the certificate of the key: both or neither\n"},
		{[]string{"SLUICE_TLS_CERT=" + certFile}, nil, "sluice proxy: SLUICE_TLS_CERT needs -tls-key too"},
		{[]string{"SLUICE_TLS_KEY=" + keyFile}, nil, "sluice proxy: SLUICE_TLS_KEY needs -tls-cert too"},
		{[]string{"SLUICE_TLS_KEY=" + keyFile}, []string{"-tls-cert", "/nonexistent/cert.pem"}, "sluice proxy: -tls-cert: open /nonexistent/cert.pem: no such file or directory\n"},
		{[]string{"SLUICE_TLS_CERT=" + certFile, "SLUICE_TLS_KEY=/nonexistent/key.pem"}, nil, "sluice proxy: SLUICE_TLS_KEY: open /nonexistent/key.pem: no such file or directory\n"},
		{nil, []string{"-tls-cert", notPEM, "-tls-key", keyFile}, "sluice proxy: -tls-cert " + notPEM + ", -tls-key " + keyFile + ": tls: failed to find any PEM data in certificate input\n"},
		{nil, []string{"-tls-cert", certFile, "-tls-key", notPEM}, "sluice proxy: -tls-cert " + certFile + ", -tls-key " + notPEM + ": tls: failed to find any PEM data in key input\n"},
		{nil, []string{"-tls-cert", otherCert, "-tls-key", keyFile}, ": tls: private key does not match public key\n"},
		{nil, []string{"-tls-cert", certFile, "-tls-key", certFile}, ": tls: found a certificate rather than a key in the PEM for the private key\n"},
	} {
		t.Run(strings.Join(append(append([]string{}, tc.env...), tc.args...), " "), func(t *testing.T) {
			t.Parallel()
			stderr := runRejectedProxy(t, tc.env, append([]string{"-listen", "127.0.0.1:0"}, tc.args...)...)
			assert.Contains(t, stderr, tc.want)
			assert.Contains(t, stderr, "Run \"sluice proxy -h\" for usage.", "a usage error")
			assert.NotContains(t, stderr, "PRIVATE KEY")
		})
	}
}

// An expired certificate is served anyway (refusing to start would cut
// off every client), with a warning in the log.
func TestProxyTLSExpiredCertificateWarns(t *testing.T) {
	t.Parallel()
	srv, ca := newUpstream(t, sluicetest.Options{})
	certFile, keyFile, roots := selfSignedUntil(t, time.Now().Add(-time.Minute))
	p := startProxyTLS(t, roots, []string{"SLUICE_TLS_CERT=" + certFile, "SLUICE_TLS_KEY=" + keyFile},
		"-listen", "127.0.0.1:0", "-upstream", srv.APIBase(), "-ca-file", ca)
	_, err := p.client.Get(p.URL + proxy.HealthPath)
	assert.ErrorContains(t, err, "certificate has expired", "a client that checks refuses it")
	assert.Equal(t, 0, p.stop(syscall.SIGTERM))
	_, stderr := p.output()
	assert.Contains(t, stderr, "sluice proxy: the certificate of SLUICE_TLS_CERT has expired")
}

// The usage names both flags.
func TestProxyHelpListsTLSFlags(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(t.Context(), []string{"proxy", "-h"}, &out, io.Discard))
	for _, f := range []string{"tls-cert", "tls-key"} {
		assert.Regexp(t, `\n  -`+f+` file\n`, out.String())
	}
	assert.Contains(t, out.String(), "With -tls-cert and -tls-key")
}
