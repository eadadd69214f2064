package sluicedisgo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/disgoorg/disgo/discord"
	"github.com/disgoorg/disgo/rest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
	sluicedisgo "github.com/sluicehq/sluice/integrations/disgo"
	"github.com/sluicehq/sluice/sluicetest"
)

// saturate fills the create_message window of channel(0) (5 messages) and
// returns once they are all answered, so the next message of the channel
// waits for the window's reset.
func saturate(t *testing.T, r rest.Rest) {
	t.Helper()
	out := runDisgo(t.Context(), r, load{Channels: 1, Messages: 5})
	require.Empty(t, out.Errors)
}

// waitQueued returns once lim holds a request queued in a bucket. It polls
// the limiter's own Snapshot: the condition is the limiter's state, not a
// guessed delay.
func waitQueued(t *testing.T, lim *sluice.Limiter) {
	t.Helper()
	require.Eventually(t, func() bool {
		snap, err := lim.Snapshot(t.Context())
		if err != nil {
			return false
		}
		for _, b := range snap.Buckets {
			if b.Queued > 0 {
				return true
			}
		}
		return false
	}, 5*time.Second, time.Millisecond, "the request never queued in Sluice")
}

// TestCancelReachesSluice cancels the context of a disgo call queued in
// Sluice behind a saturated channel. With WithContext the call fails at once
// with context.Canceled and nothing is sent. With disgo's own rest.WithCtx
// the cancellation never reaches Sluice (disgo sends a request without the
// context): the call waits for the window and the message is created anyway.
func TestCancelReachesSluice(t *testing.T) {
	const window = time.Second // create_message: 5 per second (Scaled 0.2)
	for _, tc := range []struct {
		name  string
		opt   func(context.Context) rest.RequestOpt
		fixed bool
	}{
		{"WithContext", sluicedisgo.WithContext, true},
		{"disgo's WithCtx", rest.WithCtx, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, sluicetest.Options{Rules: sluicetest.DefaultRules().Scaled(0.2)})
			lim := newLimiter(t, srv, nil)
			r, calls := newRest(t, lim)
			saturate(t, r)
			began := time.Now()

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := r.CreateMessage(channel(0), discord.MessageCreate{Content: "queued"}, tc.opt(ctx))
				done <- err
			}()
			waitQueued(t, lim)
			cancel()
			cancelled := time.Now()
			err := <-done
			took := time.Since(cancelled)
			st := srv.Stats()
			requireClean(t, st)
			assert.EqualValues(t, 6, calls.n.Load())
			if tc.fixed {
				require.ErrorIs(t, err, context.Canceled)
				assert.Less(t, took, 250*time.Millisecond, "the call did not end when its context did")
				assert.Equal(t, 5, st.MessagesCreated, "the cancelled message was sent")
			} else {
				// disgo's bug: the cancelled call is sent when the window
				// reopens, and succeeds.
				require.NoError(t, err)
				assert.Equal(t, 6, st.MessagesCreated)
				assert.Greater(t, time.Since(began), window/2)
			}
			t.Logf("returned %v %s after the cancel", err, took.Round(time.Millisecond))
		})
	}
}

// TestDeadlineReachesSluice gives a disgo call queued behind a saturated
// channel a deadline shorter than the wait. With WithContext Sluice sees the
// deadline and refuses the call at once with a *sluice.WaitError carrying
// the predicted wait, which errors.As finds through disgo's wrapping. With
// rest.WithCtx Sluice sees no deadline: the call waits the whole window and
// succeeds, long after its deadline.
func TestDeadlineReachesSluice(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opt   func(context.Context) rest.RequestOpt
		fixed bool
	}{
		{"WithContext", sluicedisgo.WithContext, true},
		{"disgo's WithCtx", rest.WithCtx, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, sluicetest.Options{Rules: sluicetest.DefaultRules().Scaled(0.2)})
			lim := newLimiter(t, srv, nil)
			r, _ := newRest(t, lim)
			saturate(t, r)

			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			defer cancel()
			began := time.Now()
			_, err := r.CreateMessage(channel(0), discord.MessageCreate{Content: "late"}, tc.opt(ctx))
			took := time.Since(began)
			st := srv.Stats()
			requireClean(t, st)
			if tc.fixed {
				var we *sluice.WaitError
				require.ErrorAs(t, err, &we)
				require.ErrorIs(t, err, sluice.ErrWaitTooLong)
				assert.Greater(t, we.Wait, 100*time.Millisecond)
				assert.Less(t, took, 100*time.Millisecond, "refused only when the deadline passed")
				assert.Equal(t, 5, st.MessagesCreated)
			} else {
				require.NoError(t, err)
				assert.Greater(t, took, 100*time.Millisecond, "the call ended by its deadline")
				assert.Equal(t, 6, st.MessagesCreated)
			}
			t.Logf("returned %v after %s", err, took.Round(time.Millisecond))
		})
	}
}

// TestErrorsSurviveDisgosWrapping checks that Sluice's typed errors are
// found with errors.As and errors.Is on the error a disgo call returns, and
// that answers Sluice returns as responses become disgo's rest.Error; in
// every case disgo sent the request once.
func TestErrorsSurviveDisgosWrapping(t *testing.T) {
	t.Run("RateLimitError", func(t *testing.T) {
		srv := newServer(t, sluicetest.Options{Rules: sluicetest.DefaultRules().Scaled(0.1)})
		// No 429 retries: the first 429 is Sluice's final answer.
		lim := newLimiter(t, srv, func(o *sluice.Options) { o.MaxRetries = -1 })
		r, calls := newRest(t, lim)
		_, err := r.CreateMessage(channel(0), discord.MessageCreate{Content: "warm up"}, sluicedisgo.WithContext(t.Context()))
		require.NoError(t, err)
		srv.InjectGlobalLimit(time.Second) // someone else spends the bot's global limit
		_, err = r.CreateMessage(channel(0), discord.MessageCreate{Content: "refused"}, sluicedisgo.WithContext(t.Context()))
		var rle *sluice.RateLimitError
		require.ErrorAs(t, err, &rle)
		require.ErrorIs(t, err, sluice.ErrRateLimited)
		assert.Equal(t, "global", rle.Scope)
		var re rest.Error
		assert.False(t, errors.As(err, &re), "a 429 reached disgo as a response")
		assert.EqualValues(t, 2, calls.n.Load())
		t.Log(err)
	})
	t.Run("ConnectionDied", func(t *testing.T) {
		srv := newServer(t, sluicetest.Options{Rules: sluicetest.DefaultRules().Scaled(0.1)})
		lim := newLimiter(t, srv, nil)
		r, calls := newRest(t, lim)
		_, err := r.CreateWebhookMessage(webhookID, webhookToken, discord.WebhookMessageCreate{Content: "first"}, true, 0, sluicedisgo.WithContext(t.Context()))
		require.NoError(t, err)
		// A webhook execution is never resent (it has no nonce): when its
		// connection dies after the server processed it, Sluice says so,
		// and disgo must not send it again either.
		srv.SetFaults(sluicetest.Faults{DropRate: 1})
		_, err = r.CreateWebhookMessage(webhookID, webhookToken, discord.WebhookMessageCreate{Content: "lost"}, true, 0, sluicedisgo.WithContext(t.Context()))
		require.ErrorIs(t, err, sluice.ErrConnectionDied)
		st := srv.Stats()
		assert.Equal(t, 2, st.MessagesCreated, "the lost answer's message was created once")
		assert.Zero(t, st.DuplicateMessages)
		assert.EqualValues(t, 2, calls.n.Load())
		t.Log(err)
	})
	t.Run("ServerError", func(t *testing.T) {
		srv := newServer(t, sluicetest.Options{
			Rules:  sluicetest.DefaultRules().Scaled(0.1),
			Faults: sluicetest.Faults{ServerErrorRate: 1, ServerErrorStatus: http500},
		})
		lim := newLimiter(t, srv, nil)
		r, calls := newRest(t, lim)
		_, err := r.CreateWebhookMessage(webhookID, webhookToken, discord.WebhookMessageCreate{Content: "5xx"}, true, 0, sluicedisgo.WithContext(t.Context()))
		var re rest.Error
		require.ErrorAs(t, err, &re)
		require.NotNil(t, re.Response)
		assert.Equal(t, http500, re.Response.StatusCode)
		assert.EqualValues(t, 1, calls.n.Load())
		assert.Equal(t, 1, srv.Stats().ServerErrors, "the webhook execution was resent")
		t.Log(err)
	})
	t.Run("Forbidden", func(t *testing.T) {
		forbidden := channel(9)
		srv := newServer(t, sluicetest.Options{Rules: sluicetest.DefaultRules().Scaled(0.1), Forbidden: []string{forbidden.String()}})
		lim := newLimiter(t, srv, nil)
		r, calls := newRest(t, lim)
		_, err := r.CreateMessage(forbidden, discord.MessageCreate{Content: "no access"}, sluicedisgo.WithContext(t.Context()))
		var re rest.Error
		require.ErrorAs(t, err, &re)
		assert.Equal(t, 403, re.Response.StatusCode)
		assert.EqualValues(t, 50001, re.Code)
		assert.EqualValues(t, 1, calls.n.Load())
		t.Log(err)
	})
}

// http500 is the injected server error: Discord's JSON 500.
const http500 = 500
