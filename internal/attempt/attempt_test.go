package attempt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/ratelimit"
)

func TestMountPath(t *testing.T) {
	for base, want := range map[string]string{
		"":                   "",
		"/api":               "",
		"/api/v10":           "",
		"/api/v10/":          "",
		"/discord/api/v10":   "/discord",
		"/a/b/api":           "/a/b",
		"/discord":           "/discord",
		"/apis":              "/apis",
		"/api/vx":            "/api/vx",
		"/api/v":             "/api/v",
		"/x/api/v9/channels": "/x/api/v9/channels",
	} {
		if got := MountPath(base); got != want {
			t.Errorf("MountPath(%q) = %q, want %q", base, got, want)
		}
	}
}

func TestResolve(t *testing.T) {
	for _, c := range []struct{ base, in, want string }{
		{"https://discord.com/api/v10", "/channels/1/messages", "https://discord.com/api/v10/channels/1/messages"},
		{"https://discord.com/api/v10", "/api/v10/channels/1", "https://discord.com/api/v10/channels/1"},
		{"https://discord.com/api/v10/", "channels/1", "https://discord.com/api/v10/channels/1"},
		{"https://discord.com/api/v10", "https://discord.com/api/v9/users/@me", "https://discord.com/api/v9/users/@me"},
		{"https://proxy.local/discord/api/v10", "https://discord.com/api/v9/users/@me", "https://proxy.local/discord/api/v9/users/@me"},
		{"https://proxy.local/discord/api/v10", "/guilds/1?with_counts=true", "https://proxy.local/discord/api/v10/guilds/1?with_counts=true"},
		{"https://discord.com/api/v10", "/channels/1/messages/2/reactions/a%2Fb/@me", "https://discord.com/api/v10/channels/1/messages/2/reactions/a%2Fb/@me"},
		{"https://discord.com", "/api/v10/channels/1", "https://discord.com/api/v10/channels/1"},
		// Discord's own prefix with another version, or in capitals, is
		// sent where routes.Parse counts it: below the mount point.
		{"https://discord.com/api/v10", "/api/v9/users/@me", "https://discord.com/api/v9/users/@me"},
		{"https://discord.com/api/v10", "/API/V10/users/@me", "https://discord.com/api/v10/users/@me"},
		{"https://discord.com/api/v10", "/Api/users/@me", "https://discord.com/api/v10/users/@me"},
		{"https://discord.com", "/api/users/@me", "https://discord.com/api/users/@me"},
		{"https://proxy.local/discord/api/v10", "/api/v9/users/@me", "https://proxy.local/discord/api/v9/users/@me"},
		{"https://proxy.local/discord/api/v10", "/discord/api/v10/users/@me", "https://proxy.local/discord/api/v10/users/@me"},
		{"https://discord.com/api/v10", "/apis/1", "https://discord.com/api/v10/apis/1"},
	} {
		base, err := url.Parse(c.base)
		require.NoError(t, err)
		in, err := url.Parse(c.in)
		require.NoError(t, err)
		got, err := Resolve(base, in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got.String(), "%s on %s", c.in, c.base)
		assert.Equal(t, c.base, base.String(), "the base is not written")
	}
}

// body is a response body whose bytes arrive in pieces.
type body struct{ r io.Reader }

func (b body) Read(p []byte) (int, error) {
	if len(p) > 7 {
		p = p[:7]
	}
	return b.r.Read(p)
}
func (body) Close() error { return nil }

// gated is a body whose first Read says it is waiting, then waits for
// release.
type gated struct {
	waiting, release chan struct{}
	once             sync.Once
	r                io.Reader
}

func (g *gated) Read(p []byte) (int, error) {
	g.once.Do(func() {
		close(g.waiting)
		<-g.release
	})
	return g.r.Read(p)
}
func (*gated) Close() error { return nil }

func answer(n int, declared bool) *http.Response {
	r := &http.Response{Body: body{bytes.NewReader(bytes.Repeat([]byte("x"), n))}, ContentLength: -1}
	if declared {
		r.ContentLength = int64(n)
	}
	return r
}

func TestReaderBounds(t *testing.T) {
	for _, c := range []struct {
		name     string
		max      int64
		n        int
		declared bool
		tooLarge bool
	}{
		{"small, declared", 100, 50, true, false},
		{"small, undeclared", 100, 50, false, false},
		{"exactly the bound", 100, 100, false, false},
		{"one over, undeclared", 100, 101, false, true},
		{"declared over", 100, 101, true, true},
		{"large, undeclared, grows", 1 << 20, 300_000, false, false},
		{"zero bound is the default", 0, 1000, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &Reader{MaxBytes: c.max}
			got, err := r.Read(answer(c.n, c.declared))
			if c.tooLarge {
				assert.ErrorIs(t, err, ErrResponseTooLarge)
				return
			}
			require.NoError(t, err)
			assert.Len(t, got, c.n)
			assert.Zero(t, r.buffered.Load(), "the bytes are the caller's once read")
		})
	}
	// A body longer than its Content-Length is refused beyond the bound.
	r := &Reader{MaxBytes: 10}
	_, err := r.Read(&http.Response{Body: body{strings.NewReader(strings.Repeat("y", 20))}, ContentLength: 5})
	assert.ErrorIs(t, err, ErrResponseTooLarge)
}

// TestReaderSharedBound: reads in progress together never hold more than
// MaxBuffered; one that would is refused, and what it held is given back.
func TestReaderSharedBound(t *testing.T) {
	r := &Reader{MaxBytes: 1 << 20, MaxBuffered: 1000}
	waiting, release := make(chan struct{}), make(chan struct{})
	held := &http.Response{Body: &gated{waiting: waiting, release: release, r: bytes.NewReader(bytes.Repeat([]byte("z"), 800))}, ContentLength: 800}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := r.Read(held)
		assert.NoError(t, err)
	}()
	<-waiting // the first read holds 801 bytes while it waits for its body
	assert.EqualValues(t, 801, r.buffered.Load())
	_, err := r.Read(answer(300, true))
	assert.ErrorIs(t, err, ErrResponseTooLarge)
	assert.EqualValues(t, 801, r.buffered.Load(), "the refused read gave back what it took")
	close(release)
	wg.Wait()
	assert.Zero(t, r.buffered.Load())
	got, err := r.Read(answer(300, true))
	require.NoError(t, err)
	assert.Len(t, got, 300)
}

func http2Server(t *testing.T, h http.HandlerFunc) (*httptest.Server, http.RoundTripper) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, srv.Client().Transport
}

// TestExchangeSendsTheSealedRequestAndReadsTheAnswer: two attempts of one
// sealed request against a real HTTP/2 server: each sends the whole body
// and the headers, leaves the sealed request as it was, and returns the
// answer buffered, its headers parsed and classified, with its wire time
// between the hand-over and the answer.
func TestExchangeSendsTheSealedRequestAndReadsTheAnswer(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv, rt := http2Server(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, r.Proto+" "+r.Header.Get("X-Test")+" "+string(b))
		n := len(bodies)
		mu.Unlock()
		w.Header().Set("X-RateLimit-Limit", "5")
		w.Header().Set("X-RateLimit-Remaining", "4")
		w.Header().Set("X-RateLimit-Reset-After", "1.5")
		w.Header().Set("X-RateLimit-Bucket", "abc")
		if n == 2 {
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("Retry-After", "2")
			w.Header().Set("X-RateLimit-Scope", "user")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"message":"You are being rate limited.","retry_after":2,"global":false}`)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	})
	payload := []byte(`{"content":"hi"}`)
	sealed, err := http.NewRequest("POST", srv.URL+"/channels/1/messages", bytes.NewReader(payload))
	require.NoError(t, err)
	sealed.Header.Set("X-Test", "sealed")
	x := &Exchange{Clock: time.Now, Body: &Reader{}}

	before := time.Now()
	a, err := x.Do(context.Background(), rt, sealed)
	require.NoError(t, err)
	require.True(t, a.Answered)
	assert.Equal(t, http.StatusOK, a.Status)
	assert.Equal(t, "abc", a.Headers.Bucket)
	assert.Equal(t, 5, a.Headers.Limit)
	assert.Equal(t, ratelimit.OK, a.Verdict.Kind)
	b, err := io.ReadAll(a.Resp.Body)
	require.NoError(t, err)
	assert.Equal(t, `{"ok":true}`, string(b))
	assert.EqualValues(t, len(b), a.Resp.ContentLength)
	assert.False(t, a.Wired.Before(before), "wired after the hand-over")
	assert.False(t, a.At.Before(a.Wired), "answered after the headers were written")

	a, err = x.Do(context.Background(), rt, sealed)
	require.NoError(t, err)
	assert.Equal(t, http.StatusTooManyRequests, a.Status)
	assert.Equal(t, ratelimit.UserLimit, a.Verdict.Kind)
	assert.Equal(t, 2*time.Second, a.Verdict.Wait)

	assert.Equal(t, []string{"HTTP/2.0 sealed " + string(payload), "HTTP/2.0 sealed " + string(payload)}, bodies)
	assert.Equal(t, http.Header{"X-Test": {"sealed"}}, sealed.Header, "the sealed request is not written")
	assert.Equal(t, context.Background(), sealed.Context())
}

func TestExchangeErrors(t *testing.T) {
	srv, rt := http2Server(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Bucket", "abc")
		io.WriteString(w, strings.Repeat("x", 100))
	})
	x := &Exchange{Clock: time.Now, Body: &Reader{MaxBytes: 10}}

	t.Run("a body that cannot be rebuilt is not sent", func(t *testing.T) {
		req, err := http.NewRequest("POST", srv.URL+"/x", strings.NewReader("b"))
		require.NoError(t, err)
		boom := errors.New("boom")
		req.GetBody = func() (io.ReadCloser, error) { return nil, boom }
		a, err := x.Do(context.Background(), rt, req)
		var ns *NotSentError
		require.ErrorAs(t, err, &ns)
		assert.ErrorIs(t, err, boom)
		assert.False(t, a.Answered)
	})
	t.Run("an answer over the bound keeps its headers", func(t *testing.T) {
		req, err := http.NewRequest("GET", srv.URL+"/x", nil)
		require.NoError(t, err)
		a, err := x.Do(context.Background(), rt, req)
		assert.ErrorIs(t, err, ErrResponseTooLarge)
		assert.True(t, a.Answered)
		assert.Equal(t, "abc", a.Headers.Bucket)
		assert.Nil(t, a.Resp)
	})
	t.Run("a cancelled attempt is not answered", func(t *testing.T) {
		req, err := http.NewRequest("GET", srv.URL+"/x", nil)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		a, err := x.Do(ctx, rt, req)
		assert.ErrorIs(t, err, context.Canceled)
		assert.False(t, a.Answered)
		assert.Nil(t, a.Resp)
	})
}
