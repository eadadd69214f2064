// Package transport owns exactly one HTTP/2 connection to the upstream
// (Discord's REST API) and reports precisely when and why it dies.
//
// It is built on Go 1.26's (*http.Transport).NewClientConn, which returns
// an *http.ClientConn bound to a single connection. A Conn never dials on
// its own: when it dies the owner (the supervisor actor) answers the
// requests that were sent on it, keeps the unsent ones queued, waits
// Backoff.Delay and calls Dial again.
//
// # Lifecycle
//
//  1. Dial opens TCP, then TLS with ALPN "h2" (https://) or cleartext
//     HTTP/2 with prior knowledge (http:// with Config.H2C). If HTTP/2 is
//     not negotiated Dial fails with ErrHTTP2Required unless
//     Config.AllowHTTP1 is set. Failures are *DialError.
//  2. Live: RoundTrip multiplexes requests as streams; Available and
//     InFlight report stream slots. After PingInterval without any frame
//     from the server a PING is sent; no ACK within PingTimeout kills the
//     connection.
//  3. Draining: after the server's GOAWAY, Available is 0 and new
//     RoundTrips fail NotSent; streams at or below the GOAWAY's
//     last-stream-id run to completion.
//  4. Dead: Done is closed exactly once and Err returns the reason.
//
// Death reasons (Err):
//
//   - ErrServerClosed (wraps io.ErrUnexpectedEOF): the peer closed TCP/TLS.
//   - "transport: connection read failed: ..." or "... write failed: ...":
//     reset or other socket error (wraps the net error).
//   - ErrPingTimeout: PING not acknowledged.
//   - ErrGoAway: GOAWAY received and every in-flight request finished; the
//     Conn closes the socket itself instead of waiting for the server.
//     Wrapped with the error code for a non-NO_ERROR GOAWAY.
//   - ErrClosed: Close was called.
//
// Death is detected through http.ClientConn.SetStateHook plus
// ClientConn.Err, which says only "closed": the cause is taken from
// HTTP2Config.CountError and from the wrapped TCP conn. One watcher
// goroutine per Conn re-checks the state whenever the read loop asks for
// more bytes or a stream finishes, to catch the drained-but-still-open
// GOAWAY case that net/http does not report.
//
// Always call Close, also after Done: it is idempotent.
//
// # Classifying request errors
//
// Classify maps any error from RoundTrip, Dial or a response body read to
// a Failure. Most net/http HTTP/2 errors are unexported, so errors.Is is
// used where possible and the documented message text otherwise:
//
//	error                                                 class           why
//	----------------------------------------------------  --------------  ------------------------------------------
//	nil                                                   None
//	*DialError                                            NotSent         no connection, nothing written
//	*ConnectionDiedError{Sent: false}                     NotSent         see the next rows
//	RoundTrip on a dead Conn                              NotSent         refused before touching the socket
//	"http2: client conn not usable"                       NotSent         GOAWAY'd/closed before a stream existed
//	"http2: client conn could not be established"         NotSent         conn closed before the first stream
//	"...received Server's graceful shutdown GOAWAY"       NotSent         stream id > last-stream-id (RFC 9113 6.8)
//	"...received GOAWAY from server ErrCode:"             NotSent         same, first stream, error GOAWAY
//	stream error "REFUSED_STREAM"                         NotSent         RFC 9113 8.7 (connection stays up)
//	other stream errors (RST_STREAM from the server)      Other           stream-level; may have been processed
//	context.Canceled, context.DeadlineExceeded,
//	"net/http: request canceled"                          Canceled        caller gave up; may or may not be sent
//	*ConnectionDiedError{Sent: true}                      ConnectionDied  see the next rows
//	io.ErrUnexpectedEOF, io.EOF                           ConnectionDied  peer closed mid-request
//	net.ErrClosed, ECONNRESET, EPIPE, ECONNABORTED        ConnectionDied  socket failed
//	"http2: server sent GOAWAY and closed the connection" ConnectionDied  stream <= last-stream-id, maybe processed
//	"http2: client connection lost"                       ConnectionDied  PING timeout
//	"...force closed via ClientConn.Close"                ConnectionDied  Close (or write error) with stream open
//	"http2: client conn is closed"                        ConnectionDied  closed while writing the body
//	"connection error: ..."                               ConnectionDied  HTTP/2 protocol error on the conn
//	(RoundTrip) other error while the conn is closed      ConnectionDied  conservative: may have been sent
//	anything else                                         Other
//
// NotSent requests may be resent whatever their method. ConnectionDied
// requests may have been processed: resend only idempotent ones (see
// IdempotentMethod) or ones the caller marked safe; Failure.SafeToResend
// encodes this. A resent request needs a fresh body (Request.GetBody).
//
// # Goroutines
//
// A Conn starts one goroutine of its own (the watcher), which exits when
// the Conn dies or is closed; Close waits for it. net/http's goroutines for
// the connection (read loop, per-request writers) exit once the socket is
// closed, which Close does before returning.
package transport
