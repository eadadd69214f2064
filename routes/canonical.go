package routes

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Path is a request path in the one form Sluice reads, keys and sends:
// what [CanonicalPath] makes of a path as a client wrote it. Two spellings
// that a server following RFC 3986 would take for the same resource have
// one Path, and a spelling whose meaning depends on the server (a dot
// segment, an encoded slash) has none: it is refused.
//
// A Path may carry a webhook or interaction token: it is for building the
// request, never for a log, a label or a key ([Route] is).
type Path struct {
	// Version is the API version the path names, lower-cased ("v10"), or
	// "" when it names none (/api/channels/1, /channels/1).
	Version string
	// Escaped is the path below the /api and /api/vN prefix: "/" followed
	// by the canonical segments joined by "/", without the query string,
	// empty segments or a trailing slash.
	Escaped string
}

// String returns the path as sent to the API: "/api/" + Version +
// Escaped, or Escaped alone without a version. It may carry a token.
func (p Path) String() string {
	if p.Version == "" {
		return p.Escaped
	}
	return "/api/" + p.Version + p.Escaped
}

// BaseVersion returns the API version an API base path ends with,
// lower-cased ("/api/v10" → "v10", "/discord/api/V9/" → "v9"), or "" when
// its last segment is not a version: the version CanonicalPath gives a
// path that names none, when it is sent below that base.
func BaseVersion(base string) string {
	base = strings.TrimSuffix(base, "/")
	if i := strings.LastIndexByte(base, '/'); i >= 0 && isVersion(base[i+1:]) {
		return strings.ToLower(base[i+1:])
	}
	return ""
}

// CanonicalPath returns rawPath (escaped, as a client sent it, optionally
// with an /api or /api/vN prefix and a query string) in canonical form,
// after the rules of RFC 3986 §6.2.2 that cannot change which resource a
// server means:
//
//   - a percent-encoded unreserved character (%41, %2e, %7E) is decoded,
//     every other escape is kept with upper-case hex digits (%f0 → %F0);
//   - empty segments (repeated and trailing slashes) are dropped;
//   - the /api prefix and its version are recognised in any case
//     (/API/V10) and written in lower case, and so are the webhooks and
//     interactions segments that start a token route.
//
// It refuses, with an error wrapping [ErrInvalidPath], what a server may
// read in more than one way:
//
//   - a dot segment, "." or "..", however spelled (%2e, .%2E):
//     resolving it would let a client name one route to the limiter and
//     another to the server (a webhook route that is not recognised as one
//     and so carries the bot token), or leave the upstream's base path;
//   - an encoded slash or backslash (%2F, %5C) and a raw backslash, which
//     some servers and gateways take for a separator;
//   - an encoded control character (%00-%1F, %7F);
//   - a semicolon, raw or encoded (%3B): some servers and gateways take
//     what follows it in a segment for parameters and drop it
//     (/api/v10/webhooks;x/1/T is a webhook's route to them);
//   - the /api prefix twice (/api/api/x, /api/v10/API/x);
//   - a version after /api that is "v" and more than 3 digits
//     (/api/v0010/webhooks/…): a server may read it as a version, where
//     this router would read it as a route's first segment;
//   - a version without /api before it, or a second one (/v10/webhooks/…,
//     /api/v10/v9/…): joined onto a base without a version
//     (https://discord.com/api) it becomes one, and the route a token
//     route this router did not see;
//   - a first segment (below the prefix) that is not an ASCII word of
//     letters, digits, - and _, as every first segment of Discord's routes
//     is: a server that folds case (webhookſ with U+017F), normalises
//     compatibility forms (fullwidth ｗｅｂｈｏｏｋｓ) or trims spaces
//     (webhooks%20) might see a token route;
//   - an escaped escape (%2577, %252e, %25%32%65, %25u002e: a percent
//     sign before two hex digits, or before u and four): a server or
//     gateway that decodes twice reads another path (%252e%252e is a dot
//     segment to it);
//   - a segment that a server normalising what it decodes may read as a
//     dot segment or a separator: dots and spaces only ("...", "..%20"),
//     not valid UTF-8 once decoded (the overlong %C0%AE), or holding a
//     character whose compatibility form (NFKC) is a dot, a slash, a
//     backslash, a percent sign or a semicolon (．．, ‥, ／, ＼);
//   - an empty path, one not starting with "/", longer than
//     [MaxPathLength], with a raw control character or space, a malformed
//     escape, or nothing after the prefix ([Parse] refuses all of these,
//     and a webhook or interaction id that is not a snowflake).
func CanonicalPath(rawPath string) (Path, error) {
	segs, version, err := canonicalSegments(rawPath, 0)
	if err != nil {
		return Path{}, err
	}
	return Path{Version: version, Escaped: "/" + strings.Join(segs, "/")}, nil
}

// canonicalSegments is CanonicalPath's work: the canonical segments below
// the prefix and the version.
//
// The slice has room for spare times as many strings again past its
// length, for the caller's own use (Parse: one allocation for all).
func canonicalSegments(rawPath string, spare int) (segs []string, version string, err error) {
	switch {
	case rawPath == "":
		return nil, "", pathError("empty path")
	case len(rawPath) > MaxPathLength:
		return nil, "", pathError("path longer than " + strconv.Itoa(MaxPathLength) + " bytes")
	case rawPath[0] != '/':
		return nil, "", pathError(`path does not start with "/"`)
	}
	p := rawPath
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	segs = make([]string, 0, (1+spare)*strings.Count(p, "/"))
	for s := range strings.SplitSeq(p, "/") {
		if s == "" {
			continue
		}
		c, err := canonicalSegment(s)
		if err != nil {
			return nil, "", err
		}
		segs = append(segs, c)
	}
	if len(segs) > 0 && strings.EqualFold(segs[0], "api") {
		segs = segs[1:]
		switch {
		case len(segs) > 0 && isVersion(segs[0]):
			version = strings.ToLower(segs[0])
			segs = segs[1:]
		case len(segs) > 0 && versionLike(segs[0]):
			// A server may read it as a version (/api/v0010/webhooks/...
			// as a webhook's route) where this router would read a
			// route's first segment: the two would disagree on whether
			// it is a token route.
			return nil, "", pathError("the version after /api is not v followed by 1 to 3 digits")
		}
	}
	if len(segs) == 0 {
		return nil, "", pathError("path has no segment after the /api/vN prefix")
	}
	if strings.EqualFold(segs[0], "api") {
		// No route of Discord's starts so, and without a version between
		// them the two prefixes could not be told apart again (/api/api/x
		// would be sent as /api/x).
		return nil, "", pathError("path repeats the /api prefix")
	}
	if versionLike(segs[0]) {
		// No route of Discord's starts so either. Without /api before it
		// (/v10/webhooks/1/T), joined onto a base without a version
		// (https://discord.com/api), it becomes a version, and the route
		// a token route this router did not see: it would carry the
		// bot's token there.
		return nil, "", pathError("a version without /api before it, or a second one")
	}
	if !resourceWord(segs[0]) {
		// Every first segment of Discord's routes is such a word. Any
		// other may be one to a server that normalises what this router
		// keeps: Unicode's case folding (webhookſ with U+017F, webhoo\u212As),
		// compatibility forms (fullwidth ｗｅｂｈｏｏｋｓ), trimmed spaces
		// (webhooks%20), each maybe percent-encoded; it would see a token
		// route where this router sees another.
		return nil, "", pathError("path's first segment is not an ASCII word (letters, digits, - and _)")
	}
	for _, k := range [...]string{"webhooks", "interactions"} {
		if asciiFold(segs[0], k) {
			segs[0] = k
			break
		}
	}
	return segs, version, nil
}

// resourceWord reports whether a canonical segment is made of ASCII
// letters, digits, - and _ only (it then holds no escape either).
func resourceWord(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// asciiFold reports whether s is k, a lower-case ASCII word, in any ASCII
// case (strings.EqualFold also takes U+017F for s and U+212A for k).
func asciiFold(s, k string) bool {
	if len(s) != len(k) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != k[i] && c+('a'-'A') != k[i] {
			return false
		}
	}
	return true
}

// canonicalSegment normalises one non-empty raw segment and refuses the
// ambiguous ones (see CanonicalPath).
func canonicalSegment(s string) (string, error) {
	if !strings.ContainsAny(s, "%\\") {
		// No escape: the segment is canonical as written (no copy).
		ascii := true
		for i := 0; i < len(s); i++ {
			switch {
			case s[i] <= ' ' || s[i] == 0x7f:
				return "", pathError("path contains a control character or a space")
			case s[i] == ';':
				return "", pathError("path contains a semicolon")
			case s[i] >= utf8.RuneSelf:
				ascii = false
			}
		}
		if strings.Trim(s, ".") == "" {
			return "", pathError("path contains a dot segment")
		}
		if !ascii {
			if err := normalisable(s); err != nil {
				return "", err
			}
		}
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c <= ' ' || c == 0x7f:
			return "", pathError("path contains a control character or a space")
		case c == '\\':
			return "", pathError("path contains a backslash")
		case c == ';':
			return "", pathError("path contains a semicolon")
		case c != '%':
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return "", pathError("malformed percent-encoding")
		}
		d := unhex(s[i+1])<<4 | unhex(s[i+2])
		i += 2
		switch {
		case d < 0x20 || d == 0x7f:
			return "", pathError("path contains an encoded control character")
		case d == '/' || d == '\\':
			return "", pathError("path contains an encoded slash or backslash")
		case d == ';':
			return "", pathError("path contains a semicolon")
		case unreserved(d):
			b.WriteByte(d)
		default:
			const hexDigits = "0123456789ABCDEF"
			b.WriteByte('%')
			b.WriteByte(hexDigits[d>>4])
			b.WriteByte(hexDigits[d&15])
		}
	}
	out := b.String()
	for rest, i := out, strings.Index(out, "%25"); i >= 0; i = strings.Index(rest, "%25") {
		// An escaped percent sign before two hex digits, or before u and
		// four (IIS's %u escapes), however spelled (%252e, %25%32%65,
		// %25u002e): decoded once more, by a server or gateway that
		// decodes twice, it is another escape, so another path (a dot
		// segment, a slash, a token route's word).
		if r := rest[i+3:]; len(r) >= 2 && isHex(r[0]) && isHex(r[1]) ||
			len(r) >= 5 && (r[0] == 'u' || r[0] == 'U') && isHex(r[1]) && isHex(r[2]) && isHex(r[3]) && isHex(r[4]) {
			return "", pathError("path contains an escaped escape (decoded twice, another path)")
		}
		rest = rest[i+3:]
	}
	if err := normalisable(out); err != nil {
		return "", err
	}
	return out, nil
}

// normalisable refuses a canonical segment that a server normalising
// what it decodes may read as a dot segment or a separator, where this
// router reads an ordinary segment: decoded, it is dots and spaces only
// (".", "..", "...", ".. ", "..%C2%A0": servers trim trailing dots and
// spaces), it is not valid UTF-8 (overlong forms: %C0%AE is "." to a
// lenient decoder), or it holds a character whose compatibility form is
// a dot, a slash, a backslash, a percent sign or a semicolon
// (compatSeparator). Other non-ASCII characters (a reaction's emoji) are
// ordinary.
func normalisable(canon string) error {
	var buf [128]byte // a segment this long or shorter is decoded on the stack
	d := buf[:0]
	for i := 0; i < len(canon); i++ { // its escapes were validated
		if c := canon[i]; c == '%' {
			d = append(d, unhex(canon[i+1])<<4|unhex(canon[i+2]))
			i += 2
		} else {
			d = append(d, c)
		}
	}
	if !utf8.Valid(d) {
		return pathError("path is not valid UTF-8 once decoded")
	}
	onlyDots, dot := true, false
	for _, r := range string(d) {
		switch {
		case r == '.':
			dot = true
		case unicode.IsSpace(r):
		case compatSeparator(r):
			return pathError("path contains a character a server may normalise to a dot, a slash, a backslash, a percent sign or a semicolon")
		default:
			onlyDots = false
		}
	}
	if onlyDots && dot {
		return pathError("path contains a dot segment")
	}
	return nil
}

// compatSeparator reports the characters whose compatibility
// decomposition (Unicode NFKC) holds a dot, a slash, a backslash, a
// percent sign or a semicolon: all 44 of them in Unicode 14 (every code
// point above 0x7F was normalised to find them). A server that applies
// NFKC reads ．． (U+FF0E) as a dot segment and ／ (U+FF0F) as a separator.
func compatSeparator(r rune) bool {
	switch {
	case r < 0x37e:
		return false
	case r == 0x37e, // ; GREEK QUESTION MARK
		0x2024 <= r && r <= 0x2026,                         // ․ ‥ … (dot leaders, ellipsis)
		r == 0x2100, r == 0x2101, r == 0x2105, r == 0x2106, // ℀ ℁ ℅ ℆ (a/c, a/s, c/o, c/u)
		0x2488 <= r && r <= 0x249b,            // ⒈ to ⒛ (digit full stops)
		r == 0x33c2, r == 0x33c7, r == 0x33d8, // ㏂ ㏇ ㏘ (a.m., Co., p.m.)
		r == 0xfe14, r == 0xfe19, r == 0xfe30, // vertical semicolon, ellipsis, two dot leader
		r == 0xfe52, r == 0xfe54, r == 0xfe68, r == 0xfe6a, // small . ; \ %
		r == 0xff05, r == 0xff0e, r == 0xff0f, r == 0xff1b, r == 0xff3c, // fullwidth % . / ; \
		r == 0x1f100: // 🄀 (digit zero full stop)
		return true
	}
	return false
}

// unreserved reports RFC 3986's unreserved characters, whose escapes mean
// the character itself.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
