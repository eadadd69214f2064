package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
)

// Sentinel errors. Compare with errors.Is; the errors returned by this
// package wrap them.
var (
	// ErrConnectionDied matches every *ConnectionDiedError.
	ErrConnectionDied = errors.New("transport: connection died")

	// ErrClosed is the death reason of a Conn that was closed by its own
	// Close method.
	ErrClosed = errors.New("transport: connection closed by Close")

	// ErrGoAway matches every *GoAwayError: the server sent GOAWAY.
	ErrGoAway = errors.New("transport: server sent GOAWAY")

	// ErrUnusable is (or is wrapped by) the death reason of a Conn that
	// net/http retired without a GOAWAY, once nothing was in flight: after
	// the server reset a stream with PROTOCOL_ERROR, stream ids exhausted,
	// SETTINGS_MAX_CONCURRENT_STREAMS = 0.
	ErrUnusable = errors.New("transport: connection no longer accepts requests")

	// ErrPingTimeout is the death reason of a Conn whose liveness PING was
	// not acknowledged within Config.PingTimeout.
	ErrPingTimeout = errors.New("transport: PING not acknowledged in time; connection lost")

	// ErrServerClosed is the death reason of a Conn whose peer closed the
	// TCP connection (FIN or TLS close_notify). It wraps io.ErrUnexpectedEOF,
	// which is what in-flight HTTP/2 requests see in that case.
	ErrServerClosed = &wrapped{msg: "transport: server closed the connection", err: io.ErrUnexpectedEOF}

	// ErrHTTP2Required is returned (inside a *DialError) when HTTP/2 could
	// not be used and Config.AllowHTTP1 is false: the TLS server did not
	// select "h2" through ALPN, or the URL is http:// and Config.H2C is
	// false.
	ErrHTTP2Required = errors.New("transport: HTTP/2 not negotiated and HTTP/1 fallback is disabled")
)

// GoAwayError is the death reason of a Conn that received a GOAWAY frame:
// either every in-flight request finished and the Conn closed itself, or
// the server closed the connection after sending it. errors.Is(err,
// ErrGoAway) matches it.
type GoAwayError struct {
	// LastStreamID is the highest stream the server may have processed.
	LastStreamID uint32
	// Code is the HTTP/2 error code (0 is NO_ERROR, a graceful shutdown).
	Code uint32
}

// Error implements error.
func (e *GoAwayError) Error() string {
	return fmt.Sprintf("transport: server sent GOAWAY (last stream %d, %s)", e.LastStreamID, h2CodeName(e.Code))
}

// Is reports whether target is ErrGoAway.
func (e *GoAwayError) Is(target error) bool { return target == ErrGoAway }

func h2CodeName(code uint32) string {
	names := [...]string{"NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
		"SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL",
		"COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY",
		"HTTP_1_1_REQUIRED"}
	if int(code) < len(names) {
		return names[code]
	}
	return fmt.Sprintf("error code 0x%x", code)
}

// wrapped is a fixed message wrapping a cause.
type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg + ": " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

// DialError reports a failure to establish the connection. No request was
// sent, so Classify reports NotSent.
type DialError struct {
	// Addr is the host:port that was dialed. It never contains the URL's
	// user information, path or query.
	Addr string
	// Err is the underlying error (net, TLS, context or ErrHTTP2Required).
	Err error
}

// Error implements error.
func (e *DialError) Error() string {
	return "transport: dial " + e.Addr + ": " + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *DialError) Unwrap() error { return e.Err }

// ConnectionDiedError is returned by Conn.RoundTrip when the request failed
// because the connection stopped working.
//
// Sent reports whether the request may have reached the server. When Sent
// is false the request provably was not processed and may be resent on a
// new connection whatever its method. When Sent is true the server may have
// processed it: resend only idempotent or explicitly safe requests.
type ConnectionDiedError struct {
	// Reason is the error reported by net/http or, for requests refused
	// by an already dead Conn, the Conn's death reason (Conn.Err).
	Reason error
	// Sent is false only when the request provably never reached the
	// server.
	Sent bool
}

// Error implements error.
func (e *ConnectionDiedError) Error() string {
	var b strings.Builder
	b.WriteString("transport: connection died")
	if !e.Sent {
		b.WriteString(" (request not sent)")
	}
	if e.Reason != nil {
		b.WriteString(": ")
		b.WriteString(e.Reason.Error())
	}
	return b.String()
}

// Unwrap returns Reason.
func (e *ConnectionDiedError) Unwrap() error { return e.Reason }

// Is reports whether target is ErrConnectionDied.
func (e *ConnectionDiedError) Is(target error) bool { return target == ErrConnectionDied }

// Failure is the class of a request error; see Classify.
type Failure int

// Failure classes. See the package documentation for the full table.
const (
	// None means there was no error.
	None Failure = iota
	// NotSent means the request provably never reached the server; it is
	// safe to resend it on another connection whatever its method.
	NotSent
	// ConnectionDied means the connection died after the request may have
	// been sent and before a complete response was received. The server
	// may have processed it.
	ConnectionDied
	// Canceled means the caller's context was canceled or its deadline
	// expired. The request may or may not have been sent.
	Canceled
	// Other is any other error (invalid request, stream-level protocol
	// error, body read error from the caller's own reader, ...).
	Other
)

// String returns the name of the class.
func (f Failure) String() string {
	switch f {
	case None:
		return "None"
	case NotSent:
		return "NotSent"
	case ConnectionDied:
		return "ConnectionDied"
	case Canceled:
		return "Canceled"
	case Other:
		return "Other"
	}
	return "Failure(?)"
}

// Messages of unexported net/http (bundled HTTP/2, Go 1.26) errors. They
// cannot be matched with errors.Is, so they are matched by text. The tests
// exercise the ones that a real server can trigger.
var (
	// Request provably not processed by the server.
	notSentMessages = []string{
		// errClientConnUnusable: the conn got GOAWAY, was closed or is
		// otherwise unusable before a stream was allocated.
		"http2: client conn not usable",
		// errClientConnNotEstablished: first request on a conn that
		// closed before it could be sent.
		"http2: client conn could not be established",
		// errClientConnGotGoAway: stream id above the GOAWAY's
		// last-stream-id; RFC 9113 section 6.8 guarantees it was not
		// processed.
		"http2: Transport received Server's graceful shutdown GOAWAY",
		// Same, for the first stream of a conn with a non-NO_ERROR
		// GOAWAY (net/http just refuses to retry it automatically).
		"http2: Transport received GOAWAY from server ErrCode:",
		// REFUSED_STREAM: RFC 9113 section 8.7, not processed.
		"; REFUSED_STREAM",
	}
	// Connection-level failure after the request may have been sent (the
	// peer's doing or this side's).
	diedMessages = []string{
		// GoAwayError: server closed TCP after GOAWAY; this stream was
		// at or below last-stream-id, so it may have been processed.
		serverGoAwayClosed,
		// closeForLostPing.
		"http2: client connection lost",
		// ClientConn.Close (our Close, or a write error).
		"http2: client connection force closed via ClientConn.Close",
		// errClientConnClosed: conn closed while the body was written.
		"http2: client conn is closed",
		// ConnectionError from the read loop (protocol error).
		"connection error: ",
		// HTTP/1 fallback.
		"ClientConn closed",
		"http: server closed idle connection",
		"net/http: HTTP/1.x transport connection broken",
	}
	// net/http's errRequestCanceled (Request.Cancel), also used by h2.
	canceledMessage = "net/http: request canceled"
)

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// Classify sorts a request error into a Failure class. It understands the
// errors returned by Conn.RoundTrip and Dial as well as raw net/http errors
// (for example an error from reading a response body):
//
//   - nil: None.
//   - *ConnectionDiedError: NotSent if !Sent, else ConnectionDied.
//   - *DialError: NotSent.
//   - context.Canceled, context.DeadlineExceeded, "net/http: request
//     canceled": Canceled.
//   - HTTP/2 "not usable", "could not be established", GOAWAY above
//     last-stream-id, REFUSED_STREAM: NotSent.
//   - io.ErrUnexpectedEOF, io.EOF, net.ErrClosed, ECONNRESET, EPIPE,
//     ECONNABORTED, the HTTP/2 GoAwayError, lost PING, forced close,
//     connection errors: ConnectionDied.
//   - anything else: Other.
func Classify(err error) Failure {
	if err == nil {
		return None
	}
	var cde *ConnectionDiedError
	if errors.As(err, &cde) {
		if cde.Sent {
			return ConnectionDied
		}
		return NotSent
	}
	var de *DialError
	if errors.As(err, &de) {
		return NotSent
	}
	if isCanceled(err) {
		return Canceled
	}
	msg := err.Error()
	if containsAny(msg, notSentMessages) {
		return NotSent
	}
	if isConnLevel(err, msg) {
		return ConnectionDied
	}
	return Other
}

func isCanceled(err error) bool {
	return errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) ||
		strings.Contains(err.Error(), canceledMessage)
}

// serverGoAwayClosed is net/http's GoAwayError text: the server closed
// TCP after a GOAWAY.
const serverGoAwayClosed = "http2: server sent GOAWAY and closed the connection"

// PeerClosed reports whether err shows the server (or a proxy in front of
// it) ending the connection a request was sent on: it reset or closed the
// connection (EOF, ECONNRESET, EPIPE, ECONNABORTED), or closed it after a
// GOAWAY. From then on the server reads nothing more from that connection,
// so a request it has not received by then never reaches it. A connection
// this side closed (Close, an unanswered PING) or a canceled request is not
// the peer's doing: its request may still be on the way, or in the server's
// buffers, and PeerClosed reports false.
func PeerClosed(err error) bool {
	if err == nil || isCanceled(err) || closedHere(err) {
		return false
	}
	return peerClosed(err, err.Error())
}

// peerClosed reports whether err is one of the connection-level failures
// the server causes (see PeerClosed).
func peerClosed(err error, msg string) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, ErrGoAway) ||
		strings.Contains(msg, serverGoAwayClosed)
}

// closedHere reports whether err is a connection this side ended: Close,
// a socket closed here, a PING unanswered.
func closedHere(err error) bool {
	return errors.Is(err, ErrPingTimeout) || errors.Is(err, ErrClosed) || errors.Is(err, net.ErrClosed)
}

// isConnLevel reports whether err is a connection-level failure that
// happened after the request may have been written: the peer's doing or
// this side's.
func isConnLevel(err error, msg string) bool {
	return peerClosed(err, msg) || closedHere(err) || containsAny(msg, diedMessages)
}
