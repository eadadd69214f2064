package sluicetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"time"
	"unicode/utf8"
)

// NonceWindow is how long the simulator remembers a created message for
// Discord's nonce deduplication (a request with the same author, channel and
// nonce and "enforce_nonce": true gets it back instead of creating another)
// and for counting duplicate messages (Stats.DuplicateMessages). Discord
// documents "a few minutes"; the simulator takes 5, measured on the
// engine's clock from the message's creation.
const NonceWindow = 5 * time.Minute

// maxNonceLen is Discord's limit on a nonce, in characters.
const maxNonceLen = 25

// messageLog remembers, for NonceWindow, the messages created by rules with
// CreatesMessage: by nonce (to deduplicate and to count duplicates) and,
// for messages without a nonce, by a hash of their body (to count
// duplicates). Its memory is bounded by the messages created in the last
// NonceWindow: expire forgets older entries in creation order.
type messageLog struct {
	nonces map[string]sentMessage // author \x00 channel \x00 nonce -> latest message created with it
	bodies map[[32]byte]time.Time // hash(author, channel, body) -> latest creation without a nonce
	queue  []logEntry             // in creation order
	head   int                    // queue[:head] have expired
}

type sentMessage struct {
	at   time.Time
	body []byte // the success answer, returned as is on deduplication
}

type logEntry struct {
	at       time.Time
	nonceKey string   // set for a message created with a nonce
	bodyKey  [32]byte // otherwise
}

func newMessageLog() messageLog {
	return messageLog{nonces: map[string]sentMessage{}, bodies: map[[32]byte]time.Time{}}
}

func live(at, now time.Time) bool { return now.Sub(at) < NonceWindow }

// expire forgets the entries created NonceWindow or more before now. An
// entry refreshed by a later creation stays until that one expires.
func (l *messageLog) expire(now time.Time) {
	for l.head < len(l.queue) && !live(l.queue[l.head].at, now) {
		q := l.queue[l.head]
		l.queue[l.head] = logEntry{}
		l.head++
		if q.nonceKey != "" {
			if m, ok := l.nonces[q.nonceKey]; ok && !live(m.at, now) {
				delete(l.nonces, q.nonceKey)
			}
		} else if at, ok := l.bodies[q.bodyKey]; ok && !live(at, now) {
			delete(l.bodies, q.bodyKey)
		}
	}
	if l.head > 64 && l.head*2 > len(l.queue) {
		l.queue = append(l.queue[:0], l.queue[l.head:]...)
		l.head = 0
	}
}

// Problems parseNonce reports, as the "code" of Discord's form error.
const (
	nonceTooLong = "BASE_TYPE_MAX_LENGTH"
	nonceBadType = "NONCE_TYPE_INVALID"
)

// parseNonce reads a message body's "nonce". problem is set when it is
// present but not a string or an integer of at most 25 characters. An
// absent, null or empty nonce is no nonce. The integer 123 and the string
// "123" are the same nonce.
func parseNonce(raw json.RawMessage) (nonce, problem string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", ""
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", nonceBadType
		}
		if utf8.RuneCountInString(s) > maxNonceLen {
			return "", nonceTooLong
		}
		return s, ""
	}
	digits := raw
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 {
		return "", nonceBadType
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return "", nonceBadType
		}
	}
	if len(raw) > maxNonceLen {
		return "", nonceTooLong
	}
	return string(raw), ""
}

// messageAuthor is who a created message is attributed to: the webhook
// (its id and hashed token) on webhook routes, else the request's identity.
func messageAuthor(who string, params map[string]string) string {
	if id, ok := params["webhook_id"]; ok {
		return "webhook:" + id + "/#" + shortHash(params["webhook_token"])
	}
	return who
}

// messageChannel is the channel a created message lands in: channel_id, or
// the rule's major parameters on routes without one (a webhook posts to its
// own channel).
func messageChannel(major string, params map[string]string) string {
	if c, ok := params["channel_id"]; ok {
		return "channel_id=" + c
	}
	return major
}

// createMessage completes the admitted request d of a CreatesMessage rule:
// it applies nonce deduplication, creates the message (its answer body)
// and counts it.
func (e *Engine) createMessage(now time.Time, rule *compiledRule, params map[string]string, who, major string, body []byte, d Decision) Decision {
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(body, &fields) // a body that is not an object carries no nonce
	nonce, problem := parseNonce(fields["nonce"])
	if problem != "" {
		bad := invalidNonce(problem)
		mergeHeader(bad.Header, d.Header)
		bad.Late = d.Late
		return bad
	}
	enforce := string(bytes.TrimSpace(fields["enforce_nonce"])) == "true"
	author, channel := messageAuthor(who, params), messageChannel(major, params)

	var entry logEntry
	if nonce != "" {
		entry.nonceKey = author + "\x00" + channel + "\x00" + nonce
		if m, ok := e.messages.nonces[entry.nonceKey]; ok && live(m.at, now) {
			if enforce {
				e.stats.messagesDeduplicated++
				d.Body = bytes.Clone(m.body)
				if d.Body != nil {
					d.Header.Set("Content-Type", "application/json")
				}
				return d
			}
			e.stats.duplicateMessages++
		}
	} else {
		h := sha256.New()
		h.Write([]byte(author))
		h.Write([]byte{0})
		h.Write([]byte(channel))
		h.Write([]byte{0})
		h.Write(body)
		h.Sum(entry.bodyKey[:0])
		if at, ok := e.messages.bodies[entry.bodyKey]; ok && live(at, now) {
			e.stats.duplicateMessages++
		}
	}

	if rule.Status != http.StatusNoContent {
		d.Header.Set("Content-Type", "application/json")
		d.Body = e.successBody(now, rule, params, body)
	}
	e.stats.messagesCreated++
	entry.at = now
	if entry.nonceKey != "" {
		e.messages.nonces[entry.nonceKey] = sentMessage{at: now, body: d.Body}
	} else {
		e.messages.bodies[entry.bodyKey] = now
	}
	e.messages.queue = append(e.messages.queue, entry)
	return d
}

// invalidNonce is Discord's 400 (form error shape) for a nonce that is not
// a string or an integer of at most 25 characters.
func invalidNonce(problem string) Decision {
	h := make(http.Header, 1)
	h.Set("Content-Type", "application/json")
	body, _ := json.Marshal(map[string]any{
		"message": "Invalid Form Body",
		"code":    50035,
		"errors": map[string]any{"nonce": map[string]any{"_errors": []any{map[string]any{
			"code":    problem,
			"message": "Must be a string or an integer of 25 or fewer characters.",
		}}}},
	})
	return Decision{Status: http.StatusBadRequest, Header: h, Body: body}
}
