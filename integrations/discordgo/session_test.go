package sluicediscordgo_test

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	sluicediscordgo "github.com/sluicehq/sluice/integrations/discordgo"
	"github.com/sluicehq/sluice/sluicetest"
)

// cdn is a plain-HTTP server standing for cdn.discordapp.com: it serves a
// 2x2 PNG for every path and records the Authorization header of each
// request.
type cdn struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string // "METHOD path: Authorization"
}

// startCDN starts the CDN and points discordgo's CDN endpoint variables at
// it until the test ends. Not safe while discordgo calls run elsewhere;
// the tests of this package do not run in parallel.
func startCDN(t *testing.T) *cdn {
	t.Helper()
	var img bytes.Buffer
	m := image.NewRGBA(image.Rect(0, 0, 2, 2))
	m.Set(1, 1, color.RGBA{R: 255, A: 255})
	require.NoError(t, png.Encode(&img, m))
	c := &cdn{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.auth = append(c.auth, r.Method+" "+r.URL.Path+": "+r.Header.Get("Authorization"))
		c.mu.Unlock()
		w.Header().Set("Content-Type", "image/png")
		w.Write(img.Bytes())
	}))
	t.Cleanup(c.Close)

	saved := []string{discordgo.EndpointCDN, discordgo.EndpointCDNAvatars, discordgo.EndpointCDNAttachments}
	t.Cleanup(func() {
		discordgo.EndpointCDN, discordgo.EndpointCDNAvatars, discordgo.EndpointCDNAttachments = saved[0], saved[1], saved[2]
	})
	discordgo.EndpointCDN = c.URL + "/"
	discordgo.EndpointCDNAvatars = discordgo.EndpointCDN + "avatars/"
	discordgo.EndpointCDNAttachments = discordgo.EndpointCDN + "attachments/"
	return c
}

// requests returns what the CDN saw.
func (c *cdn) requests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.auth...)
}

// TestSessionMethodsThroughSluice drives discordgo's own API through Apply
// against the simulator: 30 messages over 3 channels at once, reactions
// added and removed, webhook executions, a file upload, a 403, and two CDN
// fetches (discordgo's UserAvatarDecode and a Get with the session's
// client). Every call succeeds (the 403 fails as a *discordgo.RESTError),
// discordgo makes exactly one round trip per call, the simulator answers no
// 429, a channel's messages were in flight together, and no Authorization
// reaches the CDN.
func TestSessionMethodsThroughSluice(t *testing.T) {
	const (
		channels   = 3
		perChannel = 10 // two windows of create_message (5 per 500 ms)
		reacted    = 2  // messages per channel reacted to and unreacted
		hooks      = 3
		emoji      = "👍"
	)
	cdn := startCDN(t)
	srv := startServer(t, sluicetest.Options{
		Rules:     scaled(),
		Forbidden: []string{forbiddenChan},
		Faults:    sluicetest.Faults{Latency: 20 * time.Millisecond},
	})
	lim := startLimiter(t, srv, nil)
	s, rt := newSession(t, lim)

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		calls int
		ids   = map[string][]string{} // channel -> message ids
	)
	call := func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		assert.NoError(t, err, what)
	}
	for c := range channels {
		ch := channelID(c)
		for i := range perChannel {
			wg.Go(func() {
				content := fmt.Sprintf("message %d to %s", i, ch)
				m, err := s.ChannelMessageSend(ch, content)
				call("ChannelMessageSend", err)
				if err == nil {
					assert.Equal(t, content, m.Content)
					assert.Equal(t, ch, m.ChannelID)
					assert.NotEmpty(t, m.ID)
					mu.Lock()
					ids[ch] = append(ids[ch], m.ID)
					mu.Unlock()
				}
			})
		}
	}
	for i := range hooks {
		wg.Go(func() {
			content := fmt.Sprintf("webhook %d", i)
			m, err := s.WebhookExecute(hookID, hookToken, true, &discordgo.WebhookParams{Content: content, Username: "sluice"})
			call("WebhookExecute", err)
			if err == nil {
				assert.Equal(t, content, m.Content)
				assert.NotEmpty(t, m.ID)
			}
		})
	}
	wg.Go(func() {
		m, err := s.ChannelMessageSendComplex(channelID(channels), &discordgo.MessageSend{
			Content: "with a file",
			Files:   []*discordgo.File{{Name: "hello.txt", ContentType: "text/plain", Reader: strings.NewReader("hello from discordgo")}},
		})
		call("ChannelMessageSendComplex with Files", err)
		if err == nil {
			assert.NotEmpty(t, m.ID)
		}
	})
	wg.Go(func() {
		_, err := s.ChannelMessageSend(forbiddenChan, "not allowed")
		mu.Lock()
		calls++
		mu.Unlock()
		var re *discordgo.RESTError
		if assert.ErrorAs(t, err, &re, "a 403 is discordgo's RESTError") {
			assert.Equal(t, http.StatusForbidden, re.Response.StatusCode)
			assert.Equal(t, discordgo.ErrCodeMissingAccess, re.Message.Code)
		}
	})
	wg.Go(func() {
		img, err := s.UserAvatarDecode(&discordgo.User{ID: "1300000000000000001", Avatar: "a1b2c3"})
		call("UserAvatarDecode", err)
		if err == nil {
			assert.Equal(t, image.Rect(0, 0, 2, 2), img.Bounds())
		}
	})
	wg.Go(func() {
		resp, err := s.Client.Get(discordgo.EndpointCDNAttachments + "1/2/file.png")
		call("Client.Get on the CDN", err)
		if err == nil {
			defer resp.Body.Close()
			// Requests to other hosts are answered complete: the status is
			// there before the body is read.
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, "image/png", resp.Header.Get("Content-Type"))
			b, err := io.ReadAll(resp.Body)
			assert.NoError(t, err)
			assert.NotEmpty(t, b)
		}
	})
	wg.Wait()

	// Reactions: added and removed on the first messages of each channel.
	for ch, list := range ids {
		for _, id := range list[:reacted] {
			wg.Go(func() {
				call("MessageReactionAdd", s.MessageReactionAdd(ch, id, emoji))
				call("MessageReactionRemove", s.MessageReactionRemove(ch, id, emoji, "@me"))
			})
		}
	}
	wg.Wait()

	want := channels*perChannel + hooks + 1 + 1 + 2 + channels*reacted*2
	require.Equal(t, want, calls)
	assert.Equal(t, calls, rt.count(), "one round trip per discordgo call (no resend by discordgo)")

	st := srv.Stats()
	no429s(t, st)
	assert.Equal(t, channels*perChannel+hooks+1, st.MessagesCreated)
	sluicetest.AssertNoDuplicateMessages(t, st)
	for c := range channels {
		b := bucketOf(t, st, "create_message", channelID(c))
		assert.Equal(t, perChannel, b.Admitted, b.Key)
		assert.Greater(t, b.MaxInFlight, 1, "%s: pipelined", b.Key)
	}
	assert.Equal(t, 2*channels*reacted, bucketOf(t, st, "add_reaction", channelID(0)).Admitted+
		bucketOf(t, st, "add_reaction", channelID(1)).Admitted+bucketOf(t, st, "add_reaction", channelID(2)).Admitted)

	// The upload went as multipart, discordgo's webhook executions went
	// without its bot token (it sets Authorization on every request; the
	// transport removes it from routes that carry their own token), so
	// they counted on the per-IP limit, and nothing of the bot's reached
	// the CDN: the limiter strips a bot token from requests to other hosts.
	var multipart int
	for _, r := range rt.requests() {
		if strings.HasPrefix(r.contentType, "multipart/form-data") {
			multipart++
		}
	}
	assert.Equal(t, 1, multipart)
	assert.Equal(t, "ip", identityKind(bucketOf(t, st, "execute_webhook", hookID).Identity))
	cdnSaw := cdn.requests()
	assert.Len(t, cdnSaw, 2)
	for _, r := range cdnSaw {
		assert.True(t, strings.HasSuffix(r, ": "), "the CDN got an Authorization header: %q", r)
	}
	t.Logf("%d calls, %d round trips; CDN saw %q; %s", calls, rt.count(), cdnSaw, st.Summary())
}

// identityKind is "token" or "ip": how the simulator counted a bucket.
func identityKind(identity string) string {
	kind, _, _ := strings.Cut(identity, ":")
	return kind
}

// TestWebhookWithoutTokenStaysWithout executes webhooks from a session
// without a bot token, as a webhook-only program does, through a limiter
// that has one (Options.Token): the limiter must not add it, so the
// executions count on the per-IP limit, and a burst over the webhook's
// bucket (5 per 200 ms here) waits instead of drawing a 429.
func TestWebhookWithoutTokenStaysWithout(t *testing.T) {
	const n = 8
	srv := startServer(t, sluicetest.Options{Rules: scaled(), Faults: sluicetest.Faults{Latency: 10 * time.Millisecond}})
	lim := startLimiter(t, srv, nil)
	s, err := discordgo.New("")
	require.NoError(t, err)
	sluicediscordgo.Apply(s, lim)

	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			m, err := s.WebhookExecute(hookID, hookToken, true, &discordgo.WebhookParams{Content: fmt.Sprint("hook ", i)})
			if assert.NoError(t, err) {
				assert.Equal(t, fmt.Sprint("hook ", i), m.Content)
			}
		})
	}
	wg.Wait()
	st := srv.Stats()
	no429s(t, st)
	assert.Equal(t, n, st.MessagesCreated)
	b := bucketOf(t, st, "execute_webhook", hookID)
	assert.Equal(t, "ip", identityKind(b.Identity), "counted as %s", b.Identity)
	assert.Greater(t, b.MaxInFlight, 1, "pipelined")
}

// TestApplySettings checks what Apply changes on the session.
func TestApplySettings(t *testing.T) {
	srv := startServer(t, sluicetest.Options{})
	lim := startLimiter(t, srv, nil)
	s, err := discordgo.New("Bot " + botToken)
	require.NoError(t, err)
	before := s.Ratelimiter
	sluicediscordgo.Apply(s, lim)
	assert.Zero(t, s.MaxRestRetries)
	assert.False(t, s.ShouldRetryOnRateLimit)
	assert.Zero(t, s.Client.Timeout, "a Timeout would count the time queued in Sluice")
	assert.IsType(t, &sluicediscordgo.Transport{}, s.Client.Transport)
	assert.Same(t, before, s.Ratelimiter, "discordgo's limiter cannot be replaced by anything else; it is left as it is")
	var _ http.RoundTripper = sluicediscordgo.NewTransport(lim)
	var _ *sluice.Limiter = lim
}

// TestTransportCompletesTheResponseOnRead shows the Transport's contract on
// its own: an API response comes back before its answer, with StatusCode 0
// and no headers; the first Read of its body fills in the real status and
// headers. Closing a body whose answer has not arrived neither blocks nor
// cancels the request.
func TestTransportCompletesTheResponseOnRead(t *testing.T) {
	srv := startServer(t, sluicetest.Options{Rules: scaled(), Faults: sluicetest.Faults{Latency: 100 * time.Millisecond}})
	lim := startLimiter(t, srv, nil)
	client := &http.Client{Transport: sluicediscordgo.NewTransport(lim)}
	post := func(content string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, discordgo.EndpointChannelMessages(channelID(0)), strings.NewReader(`{"content":"`+content+`"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		require.NoError(t, err)
		return resp
	}

	resp := post("read")
	assert.Zero(t, resp.StatusCode, "not known before the body is read")
	assert.Empty(t, resp.Header)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "200 OK", resp.Status)
	assert.Equal(t, "5", resp.Header.Get("X-RateLimit-Limit"))
	assert.Contains(t, string(b), `"content":"read"`)

	closed := post("closed unread")
	require.NoError(t, closed.Body.Close(), "returns at once")
	// The request goes on: a message sent after it to the same channel
	// (dispatched after it: a bucket sends in submission order) is answered
	// 100 ms after the simulator counted it, by when the first one had long
	// been counted too.
	last := post("after")
	_, err = io.ReadAll(last.Body)
	require.NoError(t, err)
	last.Body.Close()
	assert.Equal(t, http.StatusOK, last.StatusCode)
	assert.Equal(t, 3, srv.Stats().MessagesCreated, "the unread message was sent too")
}

// An answer that is there before RoundTrip returns (a fast server) is
// still handed over on the first Read: a response returned complete showed
// its X-RateLimit-* headers to discordgo's own limiter, which then slept
// on them (a channel's sixth message waited out the window in discordgo
// one run in five, the window's last message having come back that
// fast). Twenty channels' windows used up, five messages each, one after
// another: none is returned with its status or headers.
func TestTransportNeverReturnsTheAnswerBeforeTheRead(t *testing.T) {
	srv := startServer(t, sluicetest.Options{Rules: sluicetest.DefaultRules()})
	lim := startLimiter(t, srv, nil)
	client := &http.Client{Transport: sluicediscordgo.NewTransport(lim)}
	for i := range 100 {
		req, err := http.NewRequest(http.MethodPost, discordgo.EndpointChannelMessages(channelID(i/5)), strings.NewReader(`{"content":"fast"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		require.NoError(t, err)
		assert.Zero(t, resp.StatusCode, "message %d: returned with its answer", i)
		assert.Empty(t, resp.Header.Get("X-RateLimit-Remaining"), "message %d: discordgo would see the bucket's headers", i)
		_, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	}
}
