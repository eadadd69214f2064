package sluice

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"mime"
	"strconv"
	"time"
)

// discordEpoch is the first second of 2015, the epoch of Discord snowflakes.
const discordEpoch = 1420070400000

// newNonce returns a snowflake-shaped nonce: milliseconds since Discord's
// epoch and 22 random bits, unique per limiter and across processes in
// practice, at most 20 digits (Discord accepts up to 25 characters).
func newNonce(now time.Time) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	ms := uint64(max(0, now.UnixMilli()-discordEpoch))
	return strconv.FormatUint(ms<<22|uint64(binary.LittleEndian.Uint32(r[:])&(1<<22-1)), 10)
}

// withNonce makes a message creation safe to resend (routes.ResendWithNonce):
// a JSON object body without "nonce" gets "nonce" and "enforce_nonce": true
// appended, so Discord returns the message already created if the request
// is sent twice. It reports whether the result is safe to resend: true for
// such a body and for one whose own nonce is enforced; false (body
// unchanged) for a caller's nonce without enforce_nonce (the caller chose
// not to deduplicate), for a body that is not a JSON object, and for
// multipart bodies (files), which are left as they are.
func withNonce(contentType string, body []byte, now time.Time) ([]byte, bool) {
	if !JSONBody(contentType) {
		return body, false
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) < 2 || trimmed[0] != '{' || trimmed[len(trimmed)-1] != '}' {
		return body, false
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return body, false
	}
	if _, ok := fields["nonce"]; ok {
		var enforce bool
		_ = json.Unmarshal(fields["enforce_nonce"], &enforce)
		return body, enforce
	}
	add := `"nonce":"` + newNonce(now) + `","enforce_nonce":true}`
	out := make([]byte, 0, len(trimmed)+len(add)+1)
	out = append(out, trimmed[:len(trimmed)-1]...)
	if len(fields) > 0 {
		out = append(out, ',')
	}
	return append(out, add...), true
}

// JSONBody reports whether a request body of contentType is one a Limiter
// reads as JSON: no Content-Type, or application/json. A message creation
// with such a body is held in memory to get a nonce (two copies of it
// while that is added); any other body is sent as it is, from the
// request's GetBody when it has one, without a copy (package proxy counts
// its buffers by this rule).
func JSONBody(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}
