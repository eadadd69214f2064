package routes

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
)

// MaxPathLength is the longest raw path, query string included, that [Parse]
// accepts. Discord's longest real routes are a few hundred bytes (an
// interaction token is about 200); anything longer is rejected rather than
// hashed or copied.
const MaxPathLength = 2048

// MaxLiteralLength is the longest segment outside Discord's vocabulary
// that [Route.Template] keeps as written; a longer one, which may be a
// token in a place the router does not expect (/webhook/1/TOKEN), is named
// by a hash, "{~" + 8 hex digits of its SHA-256 + "}", so that keys and
// the logs and traces that name a bucket by its key never carry it.
// Discord's longest words are 27 bytes ("application-role-connection"):
// those are known and kept.
const MaxLiteralLength = 24

// TokenHashLength is the number of hex digits of a token's SHA-256 that
// [Route.Major] carries in place of the token (64 bits).
const TokenHashLength = 16

// ErrInvalidPath is returned (wrapped in a [*ParseError]) when the path given
// to [Parse] or [CanonicalPath] is one a server may read in more than one
// way (a dot segment, an encoded slash or backslash, a semicolon, a
// version of more than 3 digits or without /api before it, the /api
// prefix twice, a first segment that is no ASCII word, an escaped escape,
// a segment a normalising server reads as dots or a separator:
// [CanonicalPath] lists them),
// is empty, does not start with "/", is longer than [MaxPathLength],
// contains a control character, a space or a malformed percent-encoding,
// has no segment left once the /api/vN prefix is removed, or (Parse) puts
// something other than a snowflake where Discord expects a webhook or
// interaction id.
var ErrInvalidPath = errors.New("routes: invalid path")

// ErrInvalidMethod is returned (wrapped in a [*ParseError]) when the method
// given to [Parse] is not made of ASCII letters or is longer than 32 bytes.
var ErrInvalidMethod = errors.New("routes: invalid method")

// ParseError describes why [Parse] rejected its input. It never contains the
// input itself, which may carry a webhook or interaction token.
type ParseError struct {
	// Err is ErrInvalidPath or ErrInvalidMethod.
	Err error
	// Reason is a short description of the problem, e.g. "empty path".
	Reason string
}

// Error implements error.
func (e *ParseError) Error() string { return e.Err.Error() + ": " + e.Reason }

// Unwrap returns e.Err so that errors.Is(err, ErrInvalidPath) works.
func (e *ParseError) Unwrap() error { return e.Err }

func pathError(reason string) error   { return &ParseError{Err: ErrInvalidPath, Reason: reason} }
func methodError(reason string) error { return &ParseError{Err: ErrInvalidMethod, Reason: reason} }

// Route is a request classified for rate limiting. The zero value is not a
// valid route; obtain one from [Parse]. A Route holds no secret: every field
// and method is safe to log.
type Route struct {
	// Method is the upper-cased HTTP method ("GET" when Parse got "").
	Method string
	// Template is the path without the /api/vN prefix, with ids and tokens
	// replaced by placeholders, e.g. "/channels/{channel_id}/messages/{message_id}".
	Template string
	// Major is the canonical major-parameter string: "" for routes without
	// one, or "name=value" pairs joined by ";" in a fixed order, e.g.
	// "channel_id=123", "guild_id=9",
	// "webhook_id=1;webhook_token=0123456789abcdef" (a SHA-256 prefix of the
	// token, never the token) or "interaction_id=5".
	Major string
	// GlobalExempt reports whether Discord exempts the route from the global
	// (per bot) limit: true only for POST
	// /interactions/{interaction_id}/{interaction_token}/callback.
	GlobalExempt bool
	// PerToken reports whether the route is keyed by a webhook or interaction
	// token. Such buckets are short-lived (interaction tokens expire after 15
	// minutes) and numerous, so a limiter should collect them eagerly.
	PerToken bool
	// HiddenSublimit reports a route where Discord enforces a limit that no
	// header advertises: PATCH /channels/{channel_id}, whose name and topic
	// changes are limited to 2 per 10 minutes (discord-api-docs #1900). A
	// limiter should send such requests one at a time, so at most one meets
	// the hidden limit per window.
	HiddenSublimit bool

	redacted string
	label    string
	// methodTemplate is Method + " " + Template as Parse built them, with
	// Template a part of it: TemplateKey without an allocation.
	methodTemplate string
}

// TemplateKey returns Method + " " + Template: what a route's template is
// known by (Discord reveals a bucket's hash per template). A route from
// Parse returns it without allocating.
func (r Route) TemplateKey() string {
	if mt := r.methodTemplate; len(mt) == len(r.Method)+1+len(r.Template) && mt[:len(r.Method)] == r.Method && mt[len(r.Method)+1:] == r.Template {
		return mt
	}
	return r.Method + " " + r.Template
}

// Key returns the bucket key used before Discord has revealed the route's
// X-RateLimit-Bucket hash: Method + " " + Template + " " + Major. The Major
// part may be empty, leaving a trailing space; the format is fixed so that
// keys compare equal across processes.
func (r Route) Key() string {
	return r.Method + " " + r.Template + " " + r.Major
}

// Redacted returns the path without the /api/vN prefix and query string,
// with every webhook or interaction token replaced by "{token}" and every
// literal segment that is not one of the words of Discord's routes (see
// [Route.Label]) by "{redacted}": a path the router does not know may
// carry a token where it does not expect one (/webhook/1/TOKEN).
func (r Route) Redacted() string { return r.redacted }

// String returns Method + " " + Redacted().
func (r Route) String() string { return r.Method + " " + r.redacted }

// LogValue implements slog.LogValuer so that a Route logged with log/slog
// shows its redacted form.
func (r Route) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("method", r.Method),
		slog.String("path", r.redacted),
		slog.String("template", r.Template),
		slog.String("major", r.Major),
	)
}

// BucketKey returns the key of a bucket once Discord has revealed its hash:
// "bucket " + hash + " " + major. Routes that report the same hash and have
// the same major share this key and so one counter. The lower-case "bucket"
// prefix cannot collide with [Route.Key], whose method is upper case.
func BucketKey(hash, major string) string {
	return "bucket " + hash + " " + major
}

// Parse classifies a request. method is case-insensitive ("" means GET).
// rawPath is the request path as sent (escaped), optionally with an /api or
// /api/vN prefix, a query string and trailing slashes. See the package
// documentation for the rules. The error, if any, wraps [ErrInvalidPath] or
// [ErrInvalidMethod].
func Parse(method, rawPath string) (Route, error) {
	m, err := canonicalMethod(method)
	if err != nil {
		return Route{}, err
	}
	segs, _, err := canonicalSegments(rawPath, 3)
	if err != nil {
		return Route{}, err
	}

	// Decoded forms, used for matching; the raw forms are what a template
	// keeps for literal segments.
	// The decoded, template and redacted segments live in the room
	// canonicalSegments left past segs (at least 3 per segment kept).
	n := len(segs)
	buf := segs[n : 4*n : 4*n]
	dec := buf[:n:n]
	for i, s := range segs {
		dec[i] = s
		if strings.IndexByte(s, '%') >= 0 {
			// split validated every escape, so this cannot fail.
			if d, err := url.PathUnescape(s); err == nil {
				dec[i] = d
			}
		}
	}

	p := parser{segs: segs, dec: dec, tmpl: buf[n : 2*n : 2*n], red: buf[2*n:]}
	copy(p.red, segs)
	r := Route{Method: m}

	start := 0
	switch dec[0] {
	case "webhooks", "interactions":
		kind := strings.TrimSuffix(dec[0], "s") // "webhook" or "interaction"
		p.tmpl[0] = segs[0]
		if len(segs) >= 2 {
			id, ok := snowflake(dec[1])
			if !ok {
				return Route{}, pathError(kind + " id is not a snowflake")
			}
			p.tmpl[1] = "{" + kind + "_id}"
			r.Major = kind + "_id=" + id
		}
		if len(segs) >= 3 {
			p.token = dec[2]
			p.tokenName = "{" + kind + "_token}"
			p.redactToken(2)
			r.PerToken = true
			if kind == "webhook" {
				r.Major += ";webhook_token=" + hashToken(p.token)
			}
		}
		r.GlobalExempt = kind == "interaction" && m == "POST" && len(segs) == 4 && dec[3] == "callback"
		start = 3
		p.prev = prevNone
		if len(segs) < 3 {
			start = len(segs)
		}
	default:
		if len(segs) >= 2 {
			if name, ok := topLevelMajor[dec[0]]; ok {
				if id, ok := snowflake(dec[1]); ok {
					r.Major = name + "=" + id
				}
			}
		}
	}
	p.walk(start)

	r.methodTemplate = methodTemplate(m, p.tmpl, !p.unknown && len(segs) <= maxLabelSegments)
	r.Template = r.methodTemplate[len(m)+1:]
	r.redacted = joinedIn(rawPath, p.red)
	r.label = r.Template
	if p.unknown || len(segs) > maxLabelSegments {
		r.label = OtherLabel
	}
	r.HiddenSublimit = r.Method == "PATCH" && r.Template == "/channels/{channel_id}"
	return r, nil
}

// joinedIn returns "/" followed by segs joined by "/": the end of rawPath
// (before its query) when it reads so, as it does unless a segment was
// redacted or rewritten, or slashes doubled; otherwise a new string.
func joinedIn(rawPath string, segs []string) string {
	p := rawPath
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimRight(p, "/")
	n := len(segs)
	for _, s := range segs {
		n += len(s)
	}
	if len(p) >= n {
		cand, at := p[len(p)-n:], 0
		for _, s := range segs {
			if cand[at] != '/' || cand[at+1:at+1+len(s)] != s {
				return slashJoin("", segs)
			}
			at += 1 + len(s)
		}
		return cand
	}
	return slashJoin("", segs)
}

// slashJoin returns "/" followed by segs joined by "/", after method and a
// space unless method is "", in one allocation.
func slashJoin(method string, segs []string) string {
	n := len(segs)
	if method != "" {
		n += len(method) + 1
	}
	for _, s := range segs {
		n += len(s)
	}
	var b strings.Builder
	b.Grow(n)
	if method != "" {
		b.WriteString(method)
		b.WriteByte(' ')
	}
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(s)
	}
	return b.String()
}

// appendSlashJoin appends what slashJoin returns to b.
func appendSlashJoin(b []byte, method string, segs []string) []byte {
	if method != "" {
		b = append(b, method...)
		b = append(b, ' ')
	}
	for _, s := range segs {
		b = append(b, '/')
		b = append(b, s...)
	}
	return b
}

// topLevelMajor maps the top-level resources whose id is a major parameter
// to the parameter's name.
var topLevelMajor = map[string]string{
	"channels": "channel_id",
	"guilds":   "guild_id",
}

// idNames names the snowflake that follows a collection segment. Collections
// not listed here get "{id}".
var idNames = map[string]string{
	"answers":           "answer_id",
	"applications":      "application_id",
	"bans":              "user_id",
	"channels":          "channel_id",
	"commands":          "command_id",
	"emojis":            "emoji_id",
	"entitlements":      "entitlement_id",
	"guilds":            "guild_id",
	"integrations":      "integration_id",
	"interactions":      "interaction_id",
	"lobbies":           "lobby_id",
	"members":           "user_id",
	"messages":          "message_id",
	"permissions":       "overwrite_id",
	"pins":              "message_id",
	"polls":             "message_id",
	"recipients":        "user_id",
	"roles":             "role_id",
	"rules":             "rule_id",
	"scheduled-events":  "guild_scheduled_event_id",
	"skus":              "sku_id",
	"soundboard-sounds": "sound_id",
	"stage-instances":   "channel_id",
	"sticker-packs":     "pack_id",
	"stickers":          "sticker_id",
	"subscriptions":     "subscription_id",
	"thread-members":    "user_id",
	"threads":           "thread_id",
	"users":             "user_id",
	"voice-states":      "user_id",
	"webhooks":          "webhook_id",
}

// codeNames lists collections whose members are identified by a code that is
// not a snowflake. Whatever follows them becomes the placeholder.
var codeNames = map[string]string{
	"activity-instances": "{instance_id}",
	"invites":            "{invite_code}",
	"reactions":          "{emoji}",
	"templates":          "{template_code}",
}

type prevKind uint8

const (
	prevNone    prevKind = iota // start of the walk, or after a generic placeholder
	prevLiteral                 // the previous segment was kept literally
	prevEmoji                   // the previous segment was {emoji}
)

// parser holds the state of one Parse call.
type parser struct {
	segs, dec []string // raw and decoded segments
	tmpl, red []string // template and redacted segments being built

	token     string // decoded webhook or interaction token, "" if none
	tokenName string // its template placeholder
	prev      prevKind
	unknown   bool // a literal segment is not one of Discord's words
}

func (p *parser) redactToken(i int) {
	p.tmpl[i] = p.tokenName
	p.red[i] = "{token}"
}

// walk fills p.tmpl from segment start on with the generic rules.
func (p *parser) walk(start int) {
	if start > 0 {
		p.prev = prevNone
	}
	for i := start; i < len(p.segs); i++ {
		d := p.dec[i]
		if p.token != "" && d == p.token {
			// The token repeated later in the path: hide it as well.
			p.redactToken(i)
			p.prev = prevNone
			continue
		}
		switch p.prev {
		case prevLiteral:
			coll := p.dec[i-1]
			if ph, ok := codeNames[coll]; ok {
				p.tmpl[i] = ph
				p.red[i] = ph
				p.prev = prevNone
				if ph == "{emoji}" {
					p.prev = prevEmoji
				}
				continue
			}
			if _, ok := snowflake(d); ok {
				name, ok := idNames[coll]
				if !ok {
					name = "id"
				}
				p.tmpl[i] = "{" + name + "}"
				p.prev = prevNone
				continue
			}
		case prevEmoji:
			if _, ok := snowflake(d); ok {
				p.tmpl[i] = "{user_id}"
				p.prev = prevNone
				continue
			}
		default:
			if _, ok := snowflake(d); ok {
				p.tmpl[i] = "{id}"
				p.prev = prevNone
				continue
			}
		}
		p.tmpl[i] = p.segs[i]
		if !knownWords[d] {
			p.red[i] = "{redacted}"
			p.unknown = true
			if len(p.segs[i]) > MaxLiteralLength { // as written: escapes count
				p.tmpl[i] = "{~" + hashToken(d)[:8] + "}"
			}
		}
		p.prev = prevLiteral
	}
}

// canonicalMethod upper-cases method and checks that it is a plausible HTTP
// method.
func canonicalMethod(method string) (string, error) {
	if method == "" {
		return "GET", nil
	}
	if len(method) > 32 {
		return "", methodError("method longer than 32 bytes")
	}
	for i := 0; i < len(method); i++ {
		c := method[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return "", methodError("method contains a byte that is not an ASCII letter")
		}
	}
	return strings.ToUpper(method), nil
}

// isVersion reports whether s is "v" or "V" followed by 1 to 3 decimal
// digits.
func isVersion(s string) bool { return len(s) <= 4 && versionLike(s) }

// versionLike reports whether s is "v" or "V" followed by decimal digits
// only, however many (isVersion: 1 to 3 of them).
func versionLike(s string) bool {
	if len(s) < 2 || (s[0] != 'v' && s[0] != 'V') {
		return false
	}
	return strings.Trim(s[1:], "0123456789") == ""
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// snowflake reports whether s is a decimal number that fits in 64 bits and
// returns it in canonical form (no leading zeros).
func snowflake(s string) (string, bool) {
	if s == "" || len(s) > 20 {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return "", false
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return "", false
	}
	if s[0] != '0' {
		return s, true
	}
	return strconv.FormatUint(n, 10), true
}

// hashToken returns the first TokenHashLength hex digits of the SHA-256 of
// token.
func hashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:TokenHashLength/2])
}
