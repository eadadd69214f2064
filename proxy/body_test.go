package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// bodyProxy is a proxy with small body bounds in front of the simulator,
// served over loopback HTTP/1.1.
func bodyProxy(t *testing.T, cfg Config) (*Proxy, *httptest.Server) {
	t.Helper()
	srv, err := sluicetest.NewServer(sluicetest.Options{})
	require.NoError(t, err)
	cfg.Upstream = srv.APIBase()
	cfg.Limiter = sluice.Options{TLSConfig: srv.ClientTLSConfig()}
	p, err := New(cfg)
	require.NoError(t, err)
	front := httptest.NewServer(p)
	t.Cleanup(func() {
		front.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, p.Close(ctx))
		srv.Close()
	})
	return p, front
}

// rawRequest writes raw on a new connection to front and reads one answer.
func rawRequest(t *testing.T, front *httptest.Server, raw string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", front.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestStalledBodyIsAnswered408: a body that stops arriving is answered 408
// after BodyTimeout, and the connection closed; its bytes go back to the
// budget.
func TestStalledBodyIsAnswered408(t *testing.T) {
	p, front := bodyProxy(t, Config{DefaultToken: "Bot x", BodyTimeout: 300 * time.Millisecond})
	resp := rawRequest(t, front, "POST /api/v10/channels/1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bot made-up\r\nContent-Length: 1000\r\n\r\n0123456789")
	assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	assert.Equal(t, ReasonBodyTimeout, resp.Header.Get(ProxyHeader))
	assert.True(t, resp.Close, "the connection is closed")
	assert.Zero(t, p.body.used.Load(), "the budget is given back")
	assert.Empty(t, p.reg.peekName("Bot made-up"), "a stalled upload took no token's place")
}

// TestBodyBoundsAndBudget: a declared or streamed body over MaxBody is
// 413 with Discord's code; bodies that fit are relayed; the budget is
// back at zero after every kind of answer.
func TestBodyBoundsAndBudget(t *testing.T) {
	p, front := bodyProxy(t, Config{DefaultToken: "Bot x", MaxBody: 4096, MaxBuffered: 3 * 4096})
	big := strings.Repeat("x", 5000)
	resp := rawRequest(t, front, "POST /api/v10/channels/1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n")
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "refused on its Content-Length, before its body")
	assert.Equal(t, ReasonBodyTooLarge, resp.Header.Get(ProxyHeader))
	chunked := fmt.Sprintf("POST /api/v10/channels/1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(big), big)
	resp = rawRequest(t, front, chunked)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "refused once its streamed body passed the bound")
	assert.True(t, resp.Close)
	ok := `{"content":"fits"}`
	resp = rawRequest(t, front, fmt.Sprintf("POST /api/v10/channels/1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(ok), ok))
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Zero(t, p.body.used.Load(), "the budget is given back")
}

// TestBodyBudgetRefusesBeyondItsBound: with the budget held by another
// request, one that needs more is answered 503 overloaded with
// Retry-After.
func TestBodyBudgetRefusesBeyondItsBound(t *testing.T) {
	p, front := bodyProxy(t, Config{DefaultToken: "Bot x", MaxBody: 1 << 20, MaxBuffered: 3 << 20})
	require.True(t, p.body.take(3<<20-1000), "another request holds nearly all of it")
	defer p.body.give(3<<20 - 1000)
	resp := rawRequest(t, front, "POST /api/v10/channels/1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n"+strings.Repeat("x", 5000))
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, ReasonOverloaded, resp.Header.Get(ProxyHeader))
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Equal(t, int64(3<<20-1000), p.body.used.Load(), "the refused request holds nothing")
}

// peekName returns the name of token's tenant if it is live, else "".
func (r *registry) peekName(token string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.byKey[token]; t != nil {
		return t.name
	}
	return ""
}

// TestStalledUploadHoldsWhatItSent: memory is taken in chunks as the bytes
// arrive (4 KiB, then doubling to 64 KiB), so an upload that announces
// 1 MiB, sends 10,000 bytes and stalls holds 12 KiB, not what it announced.
func TestStalledUploadHoldsWhatItSent(t *testing.T) {
	p, front := bodyProxy(t, Config{DefaultToken: "Bot x", BodyTimeout: time.Minute})
	c, err := net.Dial("tcp", front.Listener.Addr().String())
	require.NoError(t, err)
	_, err = io.WriteString(c, "POST /api/v10/channels/1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=x\r\nContent-Length: 1048576\r\n\r\n"+strings.Repeat("x", 10000))
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for p.body.used.Load() < 10000 {
		require.True(t, time.Now().Before(deadline), "the proxy never read the 10,000 bytes (holds %d)", p.body.used.Load())
		<-tick.C
	}
	assert.Equal(t, int64(4+8)<<10, p.body.used.Load(), "two chunks: 4 and 8 KiB")
	require.NoError(t, c.Close())
	deadline = time.Now().Add(10 * time.Second)
	for p.body.used.Load() != 0 {
		require.True(t, time.Now().Before(deadline), "a client that hung up still holds %d bytes", p.body.used.Load())
		<-tick.C
	}
}
