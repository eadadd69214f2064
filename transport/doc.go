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
//     InFlight report stream slots, and Load adds the requests an owner
//     Claimed for the connection before their RoundTrip (for picking the
//     least loaded of several). After PingInterval without any frame
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
//     reset or other socket error (wraps the net error, e.g. ECONNRESET).
//   - ErrPingTimeout: PING not acknowledged within PingTimeout.
//   - *GoAwayError (errors.Is ErrGoAway), with last-stream-id and error
//     code: a GOAWAY was received and then the in-flight requests finished
//     (net/http or the Conn closes the socket; the server is not waited
//     for) or the server closed the connection.
//   - ErrUnusable (wrapped): the HTTP/2 client retired the connection for
//     another reason (a stream reset with PROTOCOL_ERROR, stream ids
//     exhausted, SETTINGS_MAX_CONCURRENT_STREAMS = 0).
//   - ErrClosed: Close was called.
//
// How death is detected: http.ClientConn.SetStateHook fires on every state
// change, and ClientConn.Err turns non-nil when net/http closed the
// connection, but for HTTP/2 it only says "connection closed", and Go 1.26's
// HTTP/2 client ignores HTTP2Config.CountError. So Dial does TLS and ALPN
// itself and hands net/http the decrypted stream as a cleartext
// prior-knowledge HTTP/2 connection, wrapped in a watchConn that follows
// the frame headers in both directions (GOAWAY, RST_STREAM codes, PINGs
// sent vs. acknowledged) and records socket errors and whether net/http
// closed the socket while its read loop was blocked (only the PING health
// check does that). One watcher goroutine per Conn turns those
// observations into the death reason, and also closes a connection that
// received GOAWAY while idle but that the server keeps open (net/http never
// reports that state). The watcher exits on death; Close waits for it.
//
// Always call Close, also after Done: it is idempotent.
//
// # A pool of connections
//
// The owner may keep several Conns (a blast radius: a reset ends only the
// requests of one): Pick chooses the connection a request goes on (the
// least loaded live one, Claimed, taking turns among equals) and AnyAlive
// whether one can send. (Sluice's own policy of when to grow its pool and
// when failures back off is internal to it.)
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
// requests may have been processed: whether one may go again is the
// request's resend policy (routes.Route.Resend), not the transport's. A
// resent request needs a fresh body (Request.GetBody).
// PeerClosed tells the ConnectionDied errors that the server caused (EOF,
// a reset, a GOAWAY and close) from those this side caused (Close, a PING
// unanswered): after the former, a request the server had not received
// can no longer reach it, which bounds when it may have been counted.
//
// # Goroutines
//
// A Conn starts one goroutine of its own (the watcher), which exits when
// the Conn dies or is closed; Close waits for it. net/http's goroutines for
// the connection (read loop, per-request writers) exit once the socket is
// closed, which Close does before returning.
package transport
