package sluicearikawa

import (
	"net/http"
	"reflect"

	"github.com/diamondburned/arikawa/v3/api"
	"github.com/diamondburned/arikawa/v3/api/rate"
	"github.com/diamondburned/arikawa/v3/api/webhook"
	"github.com/diamondburned/arikawa/v3/discord"
	"github.com/diamondburned/arikawa/v3/utils/httputil"
	"github.com/diamondburned/arikawa/v3/utils/httputil/httpdriver"
)

// HTTPClient returns an arikawa httputil.Client that sends through lim:
// its driver is an http.Client whose Transport is lim (no Timeout), it
// makes one attempt per call (Retries 1) and it has no hooks. lim is
// normally a *sluice.Limiter, or a RoundTripper that wraps one.
//
// It is the base of NewClient and NewWebhookClient; use it to build
// arikawa clients of other kinds (api.NewCustomClient would add arikawa's
// limiter back: use NewClient).
func HTTPClient(lim http.RoundTripper) *httputil.Client {
	c := httputil.NewClient()
	c.Client = httpdriver.WrapClient(http.Client{Transport: lim})
	c.Retries = 1
	c.Timeout = 0
	return c
}

// NewClient returns an arikawa API client that sends every request
// through lim (normally a *sluice.Limiter) with arikawa's rate limiter
// and retries switched off.
//
// token is given as arikawa expects it, "Bot " and the bot's token, and is
// sent as the Authorization header (from Session.Token, read at each
// request). An empty token sends none, so the limiter adds its own
// (sluice.Options.Token). Each request also carries Session.UserAgent,
// arikawa's api.UserAgent unless changed.
//
// The client has Session.Limiter set, as arikawa's do, but never uses it.
func NewClient(token string, lim http.RoundTripper) *api.Client {
	c := &api.Client{
		Client: HTTPClient(lim),
		Session: &api.Session{
			Limiter:   rate.NewLimiter(api.Path),
			Token:     token,
			UserAgent: api.UserAgent,
		},
	}
	c.Client.OnRequest = []httputil.RequestOption{headers{c}.inject}
	return c
}

// Apply makes an existing API client send through lim (normally a
// *sluice.Limiter) as NewClient's do. It is meant for the client inside a
// *session.Session or *state.State built by arikawa's constructors:
//
//	s := state.New("Bot " + token)
//	sluicearikawa.Apply(s.Client, lim)
//
// It changes c.Client (the *httputil.Client, shared with any
// webhook.FromAPI client made from c) in place: its driver sends through
// lim (an http.Client driver keeps its other fields, with Timeout
// cleared), Retries becomes 1 and Timeout 0, arikawa's rate-limit hooks
// (those of api.Client and of webhook.Session) are removed, and the hook
// that set the Authorization and User-Agent headers is replaced by one
// that sets only the headers. Hooks of your own (WithLocale's, or ones you
// appended) are kept in their place.
//
// Call it before the client makes any request and before copies are made
// with WithContext or WithLocale: those copies keep what they were given.
// It is not safe to call while requests are in flight.
func Apply(c *api.Client, lim http.RoundTripper) {
	apply(c.Client, lim, headers{c}.inject)
}

// NewWebhookClient returns a client of one webhook (package api/webhook)
// that sends through lim (normally a *sluice.Limiter) with arikawa's rate
// limiter and retries switched off. Like arikawa's, it sends no
// Authorization header: the webhook's token is in the path, and Sluice
// sends such requests without the bot's token (unless
// sluice.Options.WebhookAuth is set), on the per-IP global limit.
// The User-Agent is Sluice's (sluice.Options.UserAgent).
func NewWebhookClient(id discord.WebhookID, token string, lim http.RoundTripper) *webhook.Client {
	return &webhook.Client{
		Client: HTTPClient(lim),
		Session: &webhook.Session{
			Limiter: rate.NewLimiter(api.Path),
			ID:      id,
			Token:   token,
		},
	}
}

// ApplyWebhook makes an existing webhook client (from webhook.New,
// webhook.NewCustom or webhook.NewFromURL) send through lim as
// NewWebhookClient's do. It gives c a changed copy of its httputil.Client,
// so a client shared with an api.Client (webhook.FromAPI) is not changed
// under the api.Client; such a client also loses the bot's Authorization
// and User-Agent hook, so its executions go without the bot's token. Call
// it before the client makes any request.
func ApplyWebhook(c *webhook.Client, lim http.RoundTripper) {
	hc := c.Client.Copy()
	apply(hc, lim, nil)
	c.Client = hc
}

// apply switches hc to lim, one attempt and no timeout, and removes
// arikawa's rate-limit hooks; a hook that set headers besides acquiring
// the limiter (api.Client.InjectRequest) is replaced by inject, or
// dropped when inject is nil. An inject already installed by an earlier
// apply is replaced too, so applying twice leaves one.
func apply(hc *httputil.Client, lim http.RoundTripper, inject httputil.RequestOption) {
	hcl := http.Client{}
	switch d := hc.Client.(type) {
	case httpdriver.DefaultClient:
		hcl = http.Client(d)
	case *httpdriver.DefaultClient:
		if d != nil {
			hcl = http.Client(*d)
		}
	}
	hcl.Transport = lim
	hcl.Timeout = 0
	hc.Client = httpdriver.WrapClient(hcl)
	hc.Retries = 1
	hc.Timeout = 0

	req := make([]httputil.RequestOption, 0, len(hc.OnRequest)+1)
	injected := false
	for _, fn := range hc.OnRequest {
		switch funcPC(fn) {
		case apiInjectPC, headersPC:
			if inject != nil && !injected {
				req = append(req, inject)
				injected = true
			}
		case webhookRequestPC:
		default:
			req = append(req, fn)
		}
	}
	hc.OnRequest = req

	var resp []httputil.ResponseFunc
	for _, fn := range hc.OnResponse {
		switch funcPC(fn) {
		case apiResponsePC, webhookResponsePC:
		default:
			resp = append(resp, fn)
		}
	}
	hc.OnResponse = resp
}

// headers is the request hook NewClient and Apply install in place of
// api.Client.InjectRequest: the same headers, no rate limiter.
type headers struct{ c *api.Client }

// inject sets Authorization (when the session has a token) and User-Agent
// (when it has one) from the client's session at each request, as
// api.Client.InjectRequest does, without acquiring arikawa's limiter.
func (h headers) inject(r httpdriver.Request) error {
	s := h.c.Session
	hd := make(http.Header, 2)
	if s.Token != "" {
		hd["Authorization"] = []string{s.Token}
	}
	if s.UserAgent != "" {
		hd["User-Agent"] = []string{s.UserAgent}
	}
	if len(hd) > 0 {
		r.AddHeader(hd)
	}
	return nil
}

// The code pointers of the hooks apply recognizes. A method value's code
// pointer is that of the method's one wrapper, whatever the receiver, so
// the hooks arikawa's constructors appended (c.InjectRequest, c.OnResponse,
// ses.OnRequest, ses.OnResponse) compare equal to these.
var (
	apiInjectPC       = funcPC(httputil.RequestOption((&api.Client{}).InjectRequest))
	apiResponsePC     = funcPC(httputil.ResponseFunc((&api.Client{}).OnResponse))
	webhookRequestPC  = funcPC(httputil.RequestOption((&webhook.Session{}).OnRequest))
	webhookResponsePC = funcPC(httputil.ResponseFunc((&webhook.Session{}).OnResponse))
	headersPC         = funcPC(httputil.RequestOption(headers{}.inject))
)

// funcPC is fn's code pointer (0 for nil).
func funcPC[F any](fn F) uintptr {
	v := reflect.ValueOf(fn)
	if v.Kind() != reflect.Func || v.IsNil() {
		return 0
	}
	return v.Pointer()
}
