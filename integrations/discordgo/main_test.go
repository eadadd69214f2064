package sluicediscordgo_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	sluicediscordgo "github.com/sluicehq/sluice/integrations/discordgo"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestMain fails the run if the simulator, a limiter or discordgo left a
// goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// IDs and tokens of the tests. Ids are snowflakes, as Discord's are.
const (
	botToken      = "discordgo-integration-token"
	hookID        = "1500000000000000001"
	hookToken     = "webhook-token-0123456789"
	forbiddenChan = "1100000000000000666"
)

// channelID is the i-th channel of the tests.
func channelID(i int) string { return fmt.Sprintf("11000000000000000%02d", i+1) }

// scaled is the simulator's default rule set with every bucket window ten
// times shorter (5 messages per 500 ms per channel, a reaction per 25 ms);
// the global limit stays 50 per second.
func scaled() sluicetest.RuleSet { return sluicetest.DefaultRules().Scaled(0.1) }

// startServer starts a simulator, closed at the end of the test.
func startServer(t testing.TB, opts sluicetest.Options) *sluicetest.Server {
	t.Helper()
	srv, err := sluicetest.NewServer(opts)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	return srv
}

// startLimiter starts a limiter pointed at srv, closed at the end of the
// test (before the server: cleanups run last in, first out). edit, if not
// nil, changes the options first.
func startLimiter(t testing.TB, srv *sluicetest.Server, edit func(*sluice.Options)) *sluice.Limiter {
	t.Helper()
	opts := sluice.Options{BaseURL: srv.APIBase(), TLSConfig: srv.ClientTLSConfig(), Token: botToken}
	if edit != nil {
		edit(&opts)
	}
	lim, err := sluice.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := lim.Close(ctx); err != nil {
			t.Errorf("closing the limiter: %v", err)
		}
	})
	return lim
}

// newSession is a REST-only discordgo session wired to lim by Apply, its
// transport wrapped in a counter of discordgo's round trips.
func newSession(t testing.TB, lim *sluice.Limiter) (*discordgo.Session, *counter) {
	t.Helper()
	s, err := discordgo.New("Bot " + botToken)
	require.NoError(t, err)
	sluicediscordgo.Apply(s, lim)
	c := &counter{base: s.Client.Transport}
	s.Client.Transport = c
	return s, c
}

// counter is an http.RoundTripper that counts the requests discordgo hands
// to the transport it wraps: a resend by discordgo shows up as a second
// round trip for one call.
type counter struct {
	base http.RoundTripper

	mu    sync.Mutex
	n     int
	seen  []sentRequest
	stats map[string]int // by "METHOD path"
}

// sentRequest is what discordgo sent, as the counter saw it.
type sentRequest struct {
	method, url, contentType string
	authorized               bool
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n++
	if c.stats == nil {
		c.stats = map[string]int{}
	}
	c.stats[r.Method+" "+r.URL.Path]++
	c.seen = append(c.seen, sentRequest{r.Method, r.URL.String(), r.Header.Get("Content-Type"), r.Header.Get("Authorization") != ""})
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

// count is the number of round trips so far.
func (c *counter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// requests are the requests seen so far.
func (c *counter) requests() []sentRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sentRequest(nil), c.seen...)
}

// bucketOf returns the bucket of st whose rules include rule and whose
// major parameters name id, or fails the test.
func bucketOf(t testing.TB, st sluicetest.Stats, rule, id string) sluicetest.BucketStats {
	t.Helper()
	for _, b := range st.Buckets {
		for _, r := range b.Rules {
			if r == rule && strings.Contains(b.Major, id) {
				return b
			}
		}
	}
	t.Fatalf("no bucket of rule %s for %s in %v", rule, id, st.Summary())
	return sluicetest.BucketStats{}
}

// no429s fails t if the simulator answered any 429.
func no429s(t testing.TB, st sluicetest.Stats) {
	t.Helper()
	require.Empty(t, st.RateLimited, "429s by scope")
	require.Zero(t, st.Banned, "ban pages")
	sluicetest.AssertNoViolations(t, st)
}
