package sluicetest

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names exactly as Discord sends them (HTTP/2 lowercases them on the
// wire; net/http canonicalizes them in Go).
const (
	headerLimit      = "X-RateLimit-Limit"
	headerRemaining  = "X-RateLimit-Remaining"
	headerReset      = "X-RateLimit-Reset"
	headerResetAfter = "X-RateLimit-Reset-After"
	headerBucket     = "X-RateLimit-Bucket"
	headerScope      = "X-RateLimit-Scope"
	headerGlobal     = "X-RateLimit-Global"
	headerRetryAfter = "Retry-After"
)

// ceilMillis rounds d up to whole milliseconds, so a client that waits the
// advertised time never arrives early.
func ceilMillis(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// seconds3 formats d as seconds with millisecond precision: "4.250".
func seconds3(d time.Duration) string {
	return strconv.FormatFloat(ceilMillis(d).Seconds(), 'f', 3, 64)
}

func (e *Engine) bucketHeaders(now time.Time, rule *compiledRule, w *fixedWindow) http.Header {
	after := ceilMillis(w.resetAfter(now))
	reset := now.Add(after)
	h := make(http.Header, 8)
	h.Set(headerLimit, strconv.Itoa(w.limit))
	h.Set(headerRemaining, strconv.Itoa(w.remaining()))
	h.Set(headerReset, strconv.FormatFloat(float64(reset.UnixMilli())/1000, 'f', 3, 64))
	h.Set(headerResetAfter, seconds3(after))
	h.Set(headerBucket, rule.Bucket)
	return h
}

type rateLimitBody struct {
	Message    string  `json:"message"`
	RetryAfter float64 `json:"retry_after"`
	Global     bool    `json:"global"`
	Code       int     `json:"code,omitempty"`
}

// rateLimited builds a 429 with the bucket headers h (nil for the global
// shape), the scope, Retry-After as whole seconds rounded up, and the JSON
// body with retry_after in seconds to the millisecond.
func rateLimited(h http.Header, scope string, wait time.Duration, global bool, code int) Decision {
	if h == nil {
		h = make(http.Header, 4)
	}
	wait = ceilMillis(wait)
	h.Set(headerScope, scope)
	if global {
		h.Set(headerGlobal, "true")
	}
	h.Set(headerRetryAfter, strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
	h.Set("Content-Type", "application/json")
	body, _ := json.Marshal(rateLimitBody{
		Message:    "You are being rate limited.",
		RetryAfter: math.Round(wait.Seconds()*1000) / 1000,
		Global:     global,
		Code:       code,
	})
	return Decision{Status: http.StatusTooManyRequests, Header: h, Body: body, Scope: scope}
}

// globalLimited is Discord's documented global 429: Retry-After,
// X-RateLimit-Global and X-RateLimit-Scope, and no bucket headers.
func globalLimited(wait time.Duration, injected bool) Decision {
	d := rateLimited(nil, "global", wait, true, 0)
	d.Injected = injected
	return d
}

// cloudflareBanBody is the static page Cloudflare serves to a banned IP:
// HTML, no Retry-After, no rate-limit headers.
const cloudflareBanBody = `<!DOCTYPE html>
<html><head><title>Access denied | discord.com used Cloudflare to restrict access</title></head>
<body><div id="cf-wrapper"><h1>Error 1015</h1><h2>You are being rate limited</h2>
<p>The owner of this website (discord.com) has banned you temporarily from accessing this website.</p>
</div></body></html>
`

func banDecision() Decision {
	h := make(http.Header, 2)
	h.Set("Content-Type", "text/html; charset=UTF-8")
	h.Set("Server", "cloudflare")
	return Decision{Status: http.StatusTooManyRequests, Header: h, Body: []byte(cloudflareBanBody), Scope: "ban"}
}

func jsonError(status int, message string, code int) Decision {
	h := make(http.Header, 1)
	h.Set("Content-Type", "application/json")
	body, _ := json.Marshal(struct {
		Message string `json:"message"`
		Code    int    `json:"code"`
	}{message, code})
	return Decision{Status: status, Header: h, Body: body}
}

func mergeHeader(dst, src http.Header) {
	for k, v := range src {
		if _, ok := dst[k]; !ok {
			dst[k] = v
		}
	}
}

// discordEpoch is 2015-01-01T00:00:00Z in milliseconds.
const discordEpoch = 1420070400000

func (e *Engine) snowflake(now time.Time) string {
	e.seq++
	ms := now.UnixMilli() - discordEpoch
	if ms < 0 {
		ms = 0
	}
	return strconv.FormatUint(uint64(ms)<<22|(e.seq&0x3fffff), 10)
}

// successBody is a plausible JSON object for a successful request: an id,
// the path parameters (tokens left out) and the request's own top-level
// JSON fields echoed back, with a few route-specific shapes. For a rule
// with CreatesMessage it is a message object: a fresh snowflake id,
// channel_id, content, the nonce when given, a timestamp and type 0.
func (e *Engine) successBody(now time.Time, rule *compiledRule, params map[string]string, reqBody []byte) []byte {
	var obj map[string]any
	switch rule.Name {
	case "get_gateway":
		obj = map[string]any{"url": "wss://gateway.discord.gg"}
	case "get_gateway_bot":
		obj = map[string]any{
			"url": "wss://gateway.discord.gg", "shards": 1,
			"session_start_limit": map[string]any{"total": 1000, "remaining": 999, "reset_after": 14400000, "max_concurrency": 1},
		}
	case "get_current_user":
		obj = map[string]any{"id": e.snowflake(now), "username": "sluice-simulator", "bot": true}
	default:
		obj = map[string]any{}
		dec := json.NewDecoder(bytes.NewReader(reqBody))
		dec.UseNumber() // integers (a nonce) are echoed digit for digit
		if dec.Decode(&obj) != nil || obj == nil {
			obj = map[string]any{} // a body that is not an object is not echoed
		}
		for k, v := range params {
			if !strings.HasSuffix(k, "_token") {
				obj[k] = v
			}
		}
		if _, ok := params["message_id"]; !ok {
			obj["id"] = e.snowflake(now)
		} else {
			obj["id"] = params["message_id"]
		}
		if strings.HasSuffix(rule.Name, "_message") || rule.Name == "execute_webhook" || rule.CreatesMessage {
			obj["timestamp"] = now.UTC().Format(time.RFC3339Nano)
		}
		if rule.CreatesMessage {
			// A message object: enforce_nonce is a request flag, not a
			// message field; the nonce, if any, is echoed. A webhook's
			// route names no channel: the webhook id stands for it.
			delete(obj, "enforce_nonce")
			if _, ok := obj["channel_id"]; !ok {
				if id, ok := params["webhook_id"]; ok {
					obj["channel_id"] = id
				}
			}
			if _, ok := obj["content"]; !ok {
				obj["content"] = ""
			}
			obj["type"] = 0
		}
	}
	if rule.Name == "get_messages" {
		b, _ := json.Marshal([]any{obj})
		return b
	}
	b, _ := json.Marshal(obj)
	return b
}
