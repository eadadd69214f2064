package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/diamondburned/arikawa/v3/api"
	"github.com/diamondburned/arikawa/v3/api/webhook"
	arikawadiscord "github.com/diamondburned/arikawa/v3/discord"
	"github.com/diamondburned/arikawa/v3/utils/httputil"
	"github.com/diamondburned/arikawa/v3/utils/httputil/httpdriver"
	disgodiscord "github.com/disgoorg/disgo/discord"
	"github.com/disgoorg/disgo/rest"
	"github.com/disgoorg/snowflake/v2"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sluicetest"
)

// Token is the bot token every client sends; the simulator accepts any.
const Token = "Bot test"

// Client performs scenario operations the way a bot using one library
// would.
type Client interface {
	// Do performs op and returns when the library reports its outcome.
	// ctx is only cancelled after the scenario's timeout, to clean up.
	Do(ctx context.Context, op Op) error
	// Close releases the client.
	Close()
}

// ClientSpec names a client and builds it against a simulator.
type ClientSpec struct {
	Name string
	New  func(srv *sluicetest.Server, cfg Config) (Client, error)
	// Unsupported lists the operations the library has no API for, each
	// with a note; Run skips the client in scenarios that use one.
	Unsupported map[OpKind]string
}

// Config is what a bot tells its library about its account: the global
// limit, which Discord does not advertise and raises for large bots.
// Sluice (Options.GlobalLimit, GlobalWindow) and @discordjs/rest
// (globalRequestsPerSecond) have a setting for it; discordgo, disgo and
// arikawa have none (no proactive global limit) and run as they are.
// Sluice alone also counts the per-IP global limit of requests sent
// without a token (Options.IPGlobalLimit); @discordjs/rest counts every
// request, with a token or not, on its one globalRequestsPerSecond.
type Config struct {
	GlobalLimit   int           // requests with the token per GlobalWindow
	IPGlobalLimit int           // requests without a token per GlobalWindow
	GlobalWindow  time.Duration // the global limits' window
}

// ConfigFor is the configuration a bot running s would give its library:
// the scenario's global limits (Discord's 50 per 1 s each by default).
func ConfigFor(s Scenario) Config {
	c := Config{GlobalLimit: s.Rules.GlobalLimit, IPGlobalLimit: s.Rules.IPGlobalLimit, GlobalWindow: s.Rules.GlobalWindow.D()}
	if c.GlobalLimit == 0 {
		c.GlobalLimit = 50
	}
	if c.IPGlobalLimit == 0 {
		c.IPGlobalLimit = 50
	}
	if c.GlobalWindow == 0 {
		c.GlobalWindow = time.Second
	}
	return c
}

// unsupported is the error of a client asked for an operation it has no API
// for. List such operations in its ClientSpec.Unsupported: Run then marks
// the client n/a for scenarios using them, rather than faking the request.
func unsupported(op Op) error {
	return fmt.Errorf("%w: %v", errors.ErrUnsupported, op.Kind)
}

// Clients are the Go clients compared, Sluice first.
func Clients() []ClientSpec {
	return []ClientSpec{
		{Name: "Sluice", New: newSluice},
		{Name: "discordgo", New: newDiscordgo},
		{Name: "disgo", New: newDisgo},
		{Name: "arikawa", New: newArikawa},
	}
}

// peerHTTPClient returns an HTTP client that sends every request, whatever
// its host (discord.com), to the simulator, over TLS trusting the
// simulator's certificate, with HTTP/2 as Discord offers it. The library's
// URLs, headers and limiter are left as they are.
func peerHTTPClient(srv *sluicetest.Server, timeout time.Duration) *http.Client {
	addr := strings.TrimPrefix(srv.URL, "https://")
	tlsConf := srv.ClientTLSConfig()
	tlsConf.ServerName = "localhost"
	var d net.Dialer
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		TLSClientConfig:   tlsConf,
		ForceAttemptHTTP2: true,
		MaxIdleConns:      100,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// ---- Sluice ----------------------------------------------------------------

type sluiceClient struct{ lim *sluice.Limiter }

func newSluice(srv *sluicetest.Server, cfg Config) (Client, error) {
	// Webhook executions go through Do like every request, with no
	// Authorization header of their own: Sluice sends them without the
	// bot's token (Options.WebhookAuth false) and counts them on the
	// per-IP global window.
	// The scenarios' rules are Discord's with other windows (roles 10 per
	// 1 s, renames 2 per 1 s): Discord's figures in sluice.DefaultLimits
	// do not hold there, and the peers know no hidden limit either.
	lim, err := sluice.New(sluice.Options{BaseURL: srv.APIBase(), Token: Token, TLSConfig: srv.ClientTLSConfig(),
		GlobalLimit: cfg.GlobalLimit, IPGlobalLimit: cfg.IPGlobalLimit, GlobalWindow: cfg.GlobalWindow, NoDefaultLimits: true})
	if err != nil {
		return nil, err
	}
	return &sluiceClient{lim: lim}, nil
}

// Request builds the raw HTTP request for op, relative to the API base.
func Request(op Op) *http.Request {
	var method, path string
	var body any
	ch := strconv.FormatUint(op.Channel, 10)
	switch op.Kind {
	case SendMessage:
		method, path, body = "POST", "/channels/"+ch+"/messages", map[string]string{"content": op.Text}
	case EditMessage:
		method, path, body = "PATCH", "/channels/"+ch+"/messages/"+strconv.FormatUint(op.Message, 10), map[string]string{"content": op.Text}
	case RenameChannel:
		method, path, body = "PATCH", "/channels/"+ch, map[string]string{"name": op.Text}
	case AddRole, RemoveRole:
		method = "PUT"
		if op.Kind == RemoveRole {
			method = "DELETE"
		}
		path = fmt.Sprintf("/guilds/%d/members/%d/roles/%d", op.Guild, op.User, op.Role)
	case DeleteMessage:
		method, path = "DELETE", "/channels/"+ch+"/messages/"+strconv.FormatUint(op.Message, 10)
	case AddReaction, RemoveOwnReaction, RemoveUserReaction:
		method = "PUT"
		if op.Kind != AddReaction {
			method = "DELETE"
		}
		user := "@me"
		if op.Kind == RemoveUserReaction {
			user = strconv.FormatUint(op.User, 10)
		}
		path = fmt.Sprintf("/channels/%d/messages/%d/reactions/%s/%s", op.Channel, op.Message, url.PathEscape(op.Emoji), user)
	case ExecuteWebhook:
		method, path, body = "POST", fmt.Sprintf("/webhooks/%d/%s", op.Webhook, url.PathEscape(op.WebhookToken)), map[string]string{"content": op.Text}
	default:
		panic(fmt.Sprintf("harness: no request for %v", op.Kind))
	}
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, path, r)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

func (c *sluiceClient) Do(ctx context.Context, op Op) error {
	resp, err := c.lim.Do(sluice.WithPriority(ctx, op.Priority), Request(op))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

func (c *sluiceClient) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.lim.Close(ctx)
}

// ---- discordgo -------------------------------------------------------------

type discordgoClient struct{ s *discordgo.Session }

func newDiscordgo(srv *sluicetest.Server, _ Config) (Client, error) {
	s, err := discordgo.New(Token)
	if err != nil {
		return nil, err
	}
	// discordgo's default client is &http.Client{Timeout: 20 * time.Second};
	// only its transport changes. Its limiter, retries and URLs
	// (https://discord.com/api/v9/...) stay.
	s.Client = peerHTTPClient(srv, 20*time.Second)
	return &discordgoClient{s: s}, nil
}

func (c *discordgoClient) Do(ctx context.Context, op Op) error {
	o := discordgo.WithContext(ctx)
	ch, g, u, r := strconv.FormatUint(op.Channel, 10), strconv.FormatUint(op.Guild, 10), strconv.FormatUint(op.User, 10), strconv.FormatUint(op.Role, 10)
	var err error
	switch op.Kind {
	case SendMessage:
		_, err = c.s.ChannelMessageSend(ch, op.Text, o)
	case EditMessage:
		_, err = c.s.ChannelMessageEdit(ch, strconv.FormatUint(op.Message, 10), op.Text, o)
	case RenameChannel:
		_, err = c.s.ChannelEdit(ch, &discordgo.ChannelEdit{Name: op.Text}, o)
	case AddRole:
		err = c.s.GuildMemberRoleAdd(g, u, r, o)
	case RemoveRole:
		err = c.s.GuildMemberRoleRemove(g, u, r, o)
	case DeleteMessage:
		err = c.s.ChannelMessageDelete(ch, strconv.FormatUint(op.Message, 10), o)
	case AddReaction:
		err = c.s.MessageReactionAdd(ch, strconv.FormatUint(op.Message, 10), op.Emoji, o)
	case RemoveOwnReaction:
		err = c.s.MessageReactionRemove(ch, strconv.FormatUint(op.Message, 10), op.Emoji, "@me", o)
	case RemoveUserReaction:
		err = c.s.MessageReactionRemove(ch, strconv.FormatUint(op.Message, 10), op.Emoji, u, o)
	case ExecuteWebhook:
		// discordgo sets the session's token on every request, this one
		// included: the execution carries the bot's Authorization and
		// counts on the token's global limit.
		_, err = c.s.WebhookExecute(strconv.FormatUint(op.Webhook, 10), op.WebhookToken, false, &discordgo.WebhookParams{Content: op.Text}, o)
	default:
		err = unsupported(op)
	}
	return err
}

func (c *discordgoClient) Close() { c.s.Client.CloseIdleConnections() }

// ---- disgo -----------------------------------------------------------------

type disgoClient struct {
	client rest.Client
	rest   rest.Rest
}

func newDisgo(srv *sluicetest.Server, _ Config) (Client, error) {
	quiet := slog.New(slog.DiscardHandler)
	// disgo's default client is &http.Client{Timeout: 20 * time.Second};
	// only its transport changes. Its logs (warnings on every 429) are
	// discarded; its limiter and retries stay at their defaults.
	client := rest.NewClient(strings.TrimPrefix(Token, "Bot "),
		rest.WithHTTPClient(peerHTTPClient(srv, 20*time.Second)),
		rest.WithLogger(quiet),
		rest.WithRateLimiterConfigOpts(rest.WithRateLimiterLogger(quiet)),
	)
	return &disgoClient{client: client, rest: rest.New(client)}, nil
}

func (c *disgoClient) Do(ctx context.Context, op Op) error {
	o := rest.WithCtx(ctx)
	ch, g, u, r := snowflake.ID(op.Channel), snowflake.ID(op.Guild), snowflake.ID(op.User), snowflake.ID(op.Role)
	var err error
	switch op.Kind {
	case SendMessage:
		_, err = c.rest.CreateMessage(ch, disgodiscord.MessageCreate{Content: op.Text}, o)
	case EditMessage:
		text := op.Text
		_, err = c.rest.UpdateMessage(ch, snowflake.ID(op.Message), disgodiscord.MessageUpdate{Content: &text}, o)
	case RenameChannel:
		// rest.Channels.UpdateChannel decodes the answer into a typed
		// channel, which needs fields the simulator does not send; the same
		// request through the same client and limiter, without decoding:
		name := op.Text
		err = c.client.Do(rest.UpdateChannel.Compile(nil, ch), disgodiscord.GuildTextChannelUpdate{Name: &name}, nil, o)
	case AddRole:
		err = c.rest.AddMemberRole(g, u, r, o)
	case RemoveRole:
		err = c.rest.RemoveMemberRole(g, u, r, o)
	case DeleteMessage:
		err = c.rest.DeleteMessage(ch, snowflake.ID(op.Message), o)
	case AddReaction:
		err = c.rest.AddReaction(ch, snowflake.ID(op.Message), op.Emoji, o)
	case RemoveOwnReaction:
		err = c.rest.RemoveOwnReaction(ch, snowflake.ID(op.Message), op.Emoji, o)
	case RemoveUserReaction:
		err = c.rest.RemoveUserReaction(ch, snowflake.ID(op.Message), op.Emoji, u, o)
	case ExecuteWebhook:
		// A no-bot-auth endpoint: sent without the bot's token, through the
		// same client and limiter (one global pause for both windows).
		_, err = c.rest.CreateWebhookMessage(snowflake.ID(op.Webhook), op.WebhookToken, disgodiscord.WebhookMessageCreate{Content: op.Text}, false, 0, o)
	default:
		err = unsupported(op)
	}
	return err
}

func (c *disgoClient) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.client.Close(ctx)
}

// ---- arikawa ---------------------------------------------------------------

type arikawaClient struct {
	c  *api.Client
	h  *httputil.Client // the bare client, without the bot's token
	hc *http.Client

	mu       sync.Mutex
	webhooks map[arikawadiscord.WebhookID]*webhook.Client
}

func newArikawa(srv *sluicetest.Server, _ Config) (Client, error) {
	// arikawa's default HTTP client is a zero http.Client (no timeout);
	// only its transport changes. Its limiter, retries and URLs
	// (https://discord.com/api/v9/...) stay.
	hc := peerHTTPClient(srv, 0)
	h := httputil.NewClient()
	h.Client = httpdriver.WrapClient(*hc)
	return &arikawaClient{c: api.NewCustomClient(Token, h), h: h, hc: hc, webhooks: map[arikawadiscord.WebhookID]*webhook.Client{}}, nil
}

// webhook is the webhook package's client for one webhook, made once, as
// webhook.New makes it (NewCustom for the transport): it sends without
// the bot's token and has its own limiter, global pauses included, apart
// from the bot's and the other webhooks'. (webhook.FromAPI would share
// the bot's client, and send the bot's token.)
func (c *arikawaClient) webhook(id arikawadiscord.WebhookID, token string) *webhook.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.webhooks[id]
	if w == nil {
		w = webhook.NewCustom(id, token, c.h)
		c.webhooks[id] = w
	}
	return w
}

func (c *arikawaClient) Do(ctx context.Context, op Op) error {
	cl := c.c.WithContext(ctx)
	ch := arikawadiscord.ChannelID(op.Channel)
	g, u, r := arikawadiscord.GuildID(op.Guild), arikawadiscord.UserID(op.User), arikawadiscord.RoleID(op.Role)
	var err error
	switch op.Kind {
	case SendMessage:
		_, err = cl.SendMessage(ch, op.Text)
	case EditMessage:
		_, err = cl.EditMessage(ch, arikawadiscord.MessageID(op.Message), op.Text)
	case RenameChannel:
		err = cl.ModifyChannel(ch, api.ModifyChannelData{Name: op.Text})
	case AddRole:
		err = cl.AddRole(g, u, r, api.AddRoleData{})
	case RemoveRole:
		err = cl.RemoveRole(g, u, r, "")
	case DeleteMessage:
		err = cl.DeleteMessage(ch, arikawadiscord.MessageID(op.Message), "")
	case AddReaction:
		err = cl.React(ch, arikawadiscord.MessageID(op.Message), arikawadiscord.APIEmoji(op.Emoji))
	case RemoveOwnReaction:
		err = cl.Unreact(ch, arikawadiscord.MessageID(op.Message), arikawadiscord.APIEmoji(op.Emoji))
	case RemoveUserReaction:
		err = cl.DeleteUserReaction(ch, arikawadiscord.MessageID(op.Message), arikawadiscord.UserID(op.User), arikawadiscord.APIEmoji(op.Emoji))
	case ExecuteWebhook:
		err = c.webhook(arikawadiscord.WebhookID(op.Webhook), op.WebhookToken).WithContext(ctx).Execute(webhook.ExecuteData{Content: op.Text})
	default:
		err = unsupported(op)
	}
	return err
}

func (c *arikawaClient) Close() { c.hc.CloseIdleConnections() }
