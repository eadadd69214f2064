package sluicediscordgo

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/bwmarrin/discordgo"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/routes"
)

// Apply makes s send every REST call through lim: s.Client becomes an
// http.Client (without Timeout) whose transport is NewTransport(lim), and
// discordgo's own resends are switched off (s.MaxRestRetries = 0,
// s.ShouldRetryOnRateLimit = false). Call it before the session makes its
// first call; it replaces any Client set before. See the package
// documentation for why each setting.
func Apply(s *discordgo.Session, lim *sluice.Limiter) {
	s.Client = &http.Client{Transport: NewTransport(lim)}
	s.ShouldRetryOnRateLimit = false
	s.MaxRestRetries = 0
}

// Transport is the http.RoundTripper Apply installs. It submits API
// requests to its limiter and answers at once with a response that is
// completed when its body is first read, so discordgo's rate limiter,
// which locks a bucket until the response headers are back, releases it
// while the request is still queued, and Sluice can have several requests
// of a bucket in flight. Requests to other hosts go through the limiter's
// RoundTrip and are answered complete. Create one with NewTransport; it is
// safe for concurrent use.
type Transport struct {
	lim *sluice.Limiter
}

// NewTransport returns a Transport sending through lim.
func NewTransport(lim *sluice.Limiter) *Transport { return &Transport{lim: lim} }

// RoundTrip sends req through the limiter, with req.Context() as the
// request's context; it always closes req.Body.
//
// For a request to the API (a URL the limiter rate-limits: see
// sluice.Limiter.APIHost) it returns once the limiter has queued
// the request, or has already failed it (then with that error). The
// response's StatusCode is then 0 and its Header empty: the status, the
// headers and the body are filled in on the first Read of the body, or on
// Close if the answer is already there. If the limiter fails the request
// later, that Read returns a *url.Error wrapping the limiter's error, as
// http.Client.Do would have. Closing the body before the answer arrives
// does not cancel the request; cancel its context for that.
//
// A route that carries its own token in the path (a webhook's, an
// interaction's) goes without the Authorization header discordgo puts on
// every request, as it does through the other integrations: it then counts
// on the per-IP global limit, not on the bot's (sluice.Options.WebhookAuth
// has the limiter send the bot's token with them instead).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.lim.APIHost(req.URL) {
		return t.lim.RoundTrip(req)
	}
	req = withoutBotToken(req)
	fut := t.lim.Send(req.Context(), req)
	select {
	case <-fut.Done():
		// Failed at once (a bad request, a *sluice.WaitError, a full
		// queue, ErrUnauthorized...): the error, as http.Client.Do gives
		// one. An answer that is there already goes the pending way below
		// all the same: returned complete, its X-RateLimit-* headers would
		// reach discordgo's limiter, which then slept on them (a
		// channel's sixth message waited out the window in discordgo,
		// whatever Sluice knew).
		if _, err := fut.Await(context.Background()); err != nil {
			return nil, err
		}
	default:
	}
	resp := &http.Response{
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        make(http.Header),
		ContentLength: -1,
		Request:       req,
	}
	resp.Body = &pendingBody{fut: fut, resp: resp, req: req}
	return resp, nil
}

// withoutBotToken returns req without its Authorization header if its
// route carries its own token (routes.Route.PerToken), else req itself.
// The copy shares req's body.
func withoutBotToken(req *http.Request) *http.Request {
	if req.Header.Get("Authorization") == "" {
		return req
	}
	if route, err := routes.Parse(req.Method, req.URL.EscapedPath()); err != nil || !route.PerToken {
		return req
	}
	r := req.Clone(req.Context())
	r.Header.Del("Authorization")
	return r
}

// pendingBody is the body of a response returned before its answer: the
// first Read (or a Close once the answer is there) waits for the limiter's
// outcome and copies the answer's status and headers into resp.
type pendingBody struct {
	fut  *sluice.Future
	resp *http.Response
	req  *http.Request

	once sync.Once
	body io.ReadCloser // the answer's body, once resolved without error
	err  error         // the request's error, once resolved with one
}

// resolve waits for the outcome and completes resp; it runs once.
func (b *pendingBody) resolve() {
	b.once.Do(func() {
		// The request's own context (given to Send) bounds the wait.
		answer, err := b.fut.Await(context.Background())
		if err != nil {
			b.err = &url.Error{Op: urlErrorOp(b.req.Method), URL: redacted(b.req.URL), Err: err}
			return
		}
		r := b.resp
		r.Status, r.StatusCode = answer.Status, answer.StatusCode
		r.Proto, r.ProtoMajor, r.ProtoMinor = answer.Proto, answer.ProtoMajor, answer.ProtoMinor
		r.Header, r.Trailer = answer.Header, answer.Trailer
		r.ContentLength, r.Uncompressed, r.TLS = answer.ContentLength, answer.Uncompressed, answer.TLS
		b.body = answer.Body
		if b.body == nil {
			b.body = http.NoBody
		}
	})
}

// Read waits for the answer on its first call, then reads its body.
func (b *pendingBody) Read(p []byte) (int, error) {
	b.resolve()
	if b.err != nil {
		return 0, b.err
	}
	return b.body.Read(p)
}

// Close closes the answer's body if it has arrived, and otherwise leaves
// the request to finish in the limiter (its answer is held in memory).
func (b *pendingBody) Close() error {
	select {
	case <-b.fut.Done():
		b.resolve()
		if b.body != nil {
			return b.body.Close()
		}
	default:
	}
	return nil
}

// urlErrorOp is the Op net/http puts in a *url.Error: "Get", "Post"...
func urlErrorOp(method string) string {
	if method == "" {
		return "Get"
	}
	return method[:1] + strings.ToLower(method[1:])
}

// redacted returns u as a string, without the webhook or interaction token
// a path may carry (the limiter's errors never show tokens either).
func redacted(u *url.URL) string {
	segs := strings.Split(u.EscapedPath(), "/")
	for i := 0; i+2 < len(segs); i++ {
		if segs[i] == "webhooks" || segs[i] == "interactions" {
			segs[i+2] = "REDACTED"
		}
	}
	return u.Scheme + "://" + u.Host + strings.Join(segs, "/")
}
