package sluicediscordgo_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestErrorsThroughDiscordgo shows what discordgo returns when Sluice gives
// up on a request, and that errors.Is and errors.As still find Sluice's
// error through discordgo's handling: a *url.Error wrapping it, whether the
// limiter failed the request at once (RoundTrip's error, wrapped by
// http.Client) or after sending it (the body's Read error, wrapped the same
// way by the Transport).
func TestErrorsThroughDiscordgo(t *testing.T) {
	ch := channelID(0)

	t.Run("RateLimitError", func(t *testing.T) {
		// Another consumer of the token eats the global limit; with no
		// retries allowed the limiter gives up on the 429 it gets.
		srv := startServer(t, sluicetest.Options{Rules: scaled()})
		lim := startLimiter(t, srv, func(o *sluice.Options) { o.MaxRetries = -1 })
		s, _ := newSession(t, lim)
		srv.InjectGlobalLimit(time.Second)
		_, err := s.ChannelMessageSend(ch, "during an outage")
		var rle *sluice.RateLimitError
		require.ErrorAs(t, err, &rle)
		assert.Equal(t, "global", rle.Scope)
		assert.ErrorIs(t, err, sluice.ErrRateLimited)
		var ue *url.Error
		require.ErrorAs(t, err, &ue)
		assert.Equal(t, "Post", ue.Op)
		var re *discordgo.RESTError
		assert.False(t, errors.As(err, &re), "no RESTError: discordgo never saw a 429")
		st := srv.Stats()
		assert.Equal(t, st.InjectedGlobal, st.RateLimited["global"], "only the injected 429")
		t.Logf("discordgo returned %T: %v", err, err)
	})

	t.Run("WaitError", func(t *testing.T) {
		// A channel's window is used up; a message that may wait at most
		// 1 ms fails at once with the predicted wait. Discord's own window
		// (5 per 5 s), not the scaled one: five sends in a row took more
		// than the scaled 500 ms on a busy CI machine under -race, and the
		// window had reopened before the sixth.
		srv := startServer(t, sluicetest.Options{Rules: sluicetest.DefaultRules()})
		lim := startLimiter(t, srv, nil)
		s, rt := newSession(t, lim)
		for range 5 {
			_, err := s.ChannelMessageSend(ch, "filling the window")
			require.NoError(t, err)
		}
		ctx := sluice.WithMaxWait(context.Background(), time.Millisecond)
		_, err := s.ChannelMessageSend(ch, "in a hurry", discordgo.WithContext(ctx))
		var we *sluice.WaitError
		require.ErrorAs(t, err, &we)
		assert.Greater(t, we.Wait, time.Millisecond)
		assert.ErrorIs(t, err, sluice.ErrWaitTooLong)
		assert.Equal(t, 6, rt.count())
		assert.Equal(t, 5, srv.Stats().Requests, "the sixth was never sent")
		t.Logf("discordgo returned %T: %v", err, err)
	})

	t.Run("context", func(t *testing.T) {
		srv := startServer(t, sluicetest.Options{Rules: scaled(), Faults: sluicetest.Faults{Latency: 200 * time.Millisecond}})
		lim := startLimiter(t, srv, nil)
		s, _ := newSession(t, lim)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := s.ChannelMessageSend(ch, "too slow", discordgo.WithContext(ctx))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		t.Logf("discordgo returned %T: %v", err, err)
	})

	t.Run("502", func(t *testing.T) {
		// A 5xx the limiter returns (no retries allowed here; a webhook
		// execution would get none anyway): with MaxRestRetries = 0,
		// discordgo reports a 502 as a plain error, not a RESTError.
		srv := startServer(t, sluicetest.Options{Rules: scaled(), Faults: sluicetest.Faults{ServerErrorRate: 1}})
		lim := startLimiter(t, srv, func(o *sluice.Options) { o.MaxErrorRetries = -1 })
		s, rt := newSession(t, lim)
		_, err := s.ChannelMessageSend(ch, "meets a 502")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "Exceeded Max retries HTTP 502")
		var re *discordgo.RESTError
		assert.False(t, errors.As(err, &re))
		assert.Equal(t, 1, rt.count())
		t.Logf("discordgo returned %T: %v", err, err)
	})

	t.Run("RESTError", func(t *testing.T) {
		// The API's own 4xx answers are discordgo's RESTError, with the
		// status the Transport fills in once the body is read.
		srv := startServer(t, sluicetest.Options{Rules: scaled(), Forbidden: []string{forbiddenChan}})
		lim := startLimiter(t, srv, nil)
		s, _ := newSession(t, lim)
		_, err := s.ChannelMessageSend(forbiddenChan, "forbidden")
		var re *discordgo.RESTError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, http.StatusForbidden, re.Response.StatusCode)
		assert.Equal(t, "403 Forbidden", re.Response.Status)
		_, err = s.GuildRoles("1200000000000000001") // a route the simulator does not serve
		require.ErrorAs(t, err, &re)
		assert.Equal(t, http.StatusNotFound, re.Response.StatusCode)
		t.Logf("discordgo returned %T: %v", err, err)
	})
}
