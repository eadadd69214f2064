package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
)

// RequestIDHeader names a request in the proxy's log lines and answers:
// a caller's value is kept when it is 1 to 64 bytes of letters, digits and
// "-", "_", ".", ":"; otherwise (or without one) the proxy makes one, 16
// hex digits. Every answer carries it, and every line the proxy logs about
// the request has it as request_id. It is forwarded upstream as the
// caller sent it.
const RequestIDHeader = "X-Request-Id"

type requestIDKey struct{}

// requestID returns v if it is a usable request ID, else a new one.
func requestID(v string) string {
	if len(v) >= 1 && len(v) <= 64 {
		ok := true
		for i := 0; i < len(v) && ok; i++ {
			c := v[i]
			ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':'
		}
		if ok {
			return v
		}
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// idOf is r's request ID ("" for the proxy's own endpoints).
func idOf(r *http.Request) string {
	id, _ := r.Context().Value(requestIDKey{}).(string)
	return id
}
