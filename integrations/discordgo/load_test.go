package sluicediscordgo_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	sluicediscordgo "github.com/sluicehq/sluice/integrations/discordgo"
	"github.com/sluicehq/sluice/sluicetest"
)

// wiring is how a load is sent.
type wiring string

const (
	// sluiceAlone sends the load's requests with lim.Do, without discordgo:
	// the reference.
	sluiceAlone wiring = "Sluice alone (lim.Do)"
	// applied is discordgo through sluicediscordgo.Apply.
	applied wiring = "discordgo + Sluice, Apply"
	// plainTransport is discordgo with s.Client = &http.Client{Transport:
	// lim}, retries off: what Apply would be without its Transport.
	plainTransport wiring = "discordgo + Sluice, plain Transport: lim"
	// strippedHeaders is plainTransport with the X-RateLimit-* headers
	// removed from the answers discordgo sees, so its limiter never sleeps
	// on its own reading of them (it still locks the bucket per round trip).
	strippedHeaders wiring = "discordgo + Sluice, plain Transport, X-RateLimit-* stripped"
	// discordgoAlone is discordgo with its own limiter and retries, no
	// Sluice, talking to the simulator directly.
	discordgoAlone wiring = "discordgo alone"
)

// load is a burst of calls made all at once: Messages messages spread
// over Channels channels and Reactions reactions added per channel (to
// fixed message ids).
type load struct {
	Channels, Messages, Reactions int
	Latency                       time.Duration
	Rules                         sluicetest.RuleSet
}

// outcome is what one run of a load gave.
type outcome struct {
	Elapsed time.Duration
	Failed  int
	Stats   sluicetest.Stats
	// MaxInFlight is the largest BucketStats.MaxInFlight of the
	// create_message buckets.
	MaxInFlight int
}

// reactionEmoji is the emoji of the loads' reactions.
const reactionEmoji = "👍"

// messageOf is the id of the i-th message reacted to.
func messageOf(i int) string { return fmt.Sprintf("16000000000000000%02d", i+1) }

// runLoad sends ld with w against a fresh simulator and returns the
// outcome, once every call has ended.
func runLoad(t testing.TB, w wiring, ld load) outcome {
	t.Helper()
	srv, err := sluicetest.NewServer(sluicetest.Options{Rules: ld.Rules, Faults: sluicetest.Faults{Latency: ld.Latency}})
	require.NoError(t, err)
	defer srv.Close()

	var lim *sluice.Limiter
	if w != discordgoAlone {
		lim, err = sluice.New(sluice.Options{BaseURL: srv.APIBase(), TLSConfig: srv.ClientTLSConfig(), Token: botToken})
		require.NoError(t, err)
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, lim.Close(ctx))
		}()
	}
	var s *discordgo.Session
	if w != sluiceAlone {
		s, err = discordgo.New("Bot " + botToken)
		require.NoError(t, err)
		switch w {
		case applied:
			sluicediscordgo.Apply(s, lim)
		case plainTransport:
			s.Client = &http.Client{Transport: lim}
			s.ShouldRetryOnRateLimit, s.MaxRestRetries = false, 0
		case strippedHeaders:
			s.Client = &http.Client{Transport: stripRateLimitHeaders{lim}}
			s.ShouldRetryOnRateLimit, s.MaxRestRetries = false, 0
		case discordgoAlone:
			// discordgo's defaults (its limiter, 429 and 502 retries), the
			// simulator standing for discord.com.
			s.Client = &http.Client{Transport: redirect{to: srv.URL, base: srv.Client().Transport}, Timeout: 20 * time.Second}
		}
	}

	// call sends one message (reaction false) or one reaction.
	call := func(ch string, i int, reaction bool) error {
		switch {
		case s != nil && reaction:
			return s.MessageReactionAdd(ch, messageOf(i), reactionEmoji)
		case s != nil:
			_, err := s.ChannelMessageSend(ch, fmt.Sprintf("message %d", i))
			return err
		}
		var (
			req *http.Request
			err error
		)
		if reaction {
			req, err = http.NewRequest(http.MethodPut, fmt.Sprintf("/channels/%s/messages/%s/reactions/%s/@me", ch, messageOf(i), url.PathEscape(reactionEmoji)), nil)
		} else {
			req, err = http.NewRequest(http.MethodPost, "/channels/"+ch+"/messages", strings.NewReader(fmt.Sprintf(`{"content":"message %d"}`, i)))
			req.Header.Set("Content-Type", "application/json")
		}
		if err != nil {
			return err
		}
		resp, err := lim.Do(context.Background(), req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed int
	)
	do := func(ch string, i int, reaction bool) {
		wg.Go(func() {
			if err := call(ch, i, reaction); err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
				t.Logf("%s: %v", w, err)
			}
		})
	}
	began := time.Now()
	for i := range ld.Messages {
		do(channelID(i%ld.Channels), i, false)
	}
	for c := range ld.Channels {
		for i := range ld.Reactions {
			do(channelID(c), i, true)
		}
	}
	wg.Wait()
	out := outcome{Elapsed: time.Since(began), Failed: failed, Stats: srv.Stats()}
	for _, b := range out.Stats.Buckets {
		if len(b.Rules) > 0 && b.Rules[0] == "create_message" {
			out.MaxInFlight = max(out.MaxInFlight, b.MaxInFlight)
		}
	}
	return out
}

// redirect sends requests for discord.com to the simulator: discordgo
// without Sluice, as a bot would use it against the real API.
type redirect struct {
	to   string
	base http.RoundTripper
}

func (r redirect) RoundTrip(req *http.Request) (*http.Response, error) {
	u, err := url.Parse(r.to)
	if err != nil {
		return nil, err
	}
	c := req.Clone(req.Context())
	c.URL.Scheme, c.URL.Host, c.Host = u.Scheme, u.Host, ""
	return r.base.RoundTrip(c)
}

// stripRateLimitHeaders removes the X-RateLimit-* headers from the answers
// of the transport it wraps.
type stripRateLimitHeaders struct{ base http.RoundTripper }

func (s stripRateLimitHeaders) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(req)
	if resp != nil {
		for k := range resp.Header {
			if strings.HasPrefix(k, "X-Ratelimit-") {
				resp.Header.Del(k)
			}
		}
	}
	return resp, err
}
