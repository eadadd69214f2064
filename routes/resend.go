package routes

// Resend says whether a request may be sent again when its answer was lost
// (the connection died after the request left, or the attempt timed out)
// or was a 5xx without rate-limit headers: the request may have been
// processed, so sending it again must not do twice what once would.
//
// A request that provably never reached the server (an HTTP/2 stream the
// server refused or left unprocessed after GOAWAY, a connection that died
// before the request was written) is always sent again: that is not a
// resend in this sense.
//
// The one table deciding it is [Route.Resend]; docs/failure-modes.md
// shows it.
type Resend uint8

const (
	// ResendNever: sending twice may act twice (a webhook message, an
	// interaction callback, a channel, an invite, a ban with a reason
	// logged twice…). Only a caller's own assurance (sluice.WithRetrySafe)
	// makes it resendable.
	ResendNever Resend = iota
	// ResendSafe: sending twice leaves the same state as once: reads, and
	// Discord's PUT, PATCH and DELETE, which set or remove a resource. A
	// repeated DELETE may be answered 404 (already gone); that answer is
	// returned as is.
	ResendSafe
	// ResendWithNonce: creating a channel message. Discord deduplicates it
	// when the JSON body carries "nonce" with "enforce_nonce": true (the
	// same author and nonce within minutes returns the message already
	// created), so it is safe exactly when the body has both. Sluice adds
	// them to a JSON body that has no nonce.
	ResendWithNonce
)

// String returns "never", "safe" or "with_nonce".
func (r Resend) String() string {
	switch r {
	case ResendSafe:
		return "safe"
	case ResendWithNonce:
		return "with_nonce"
	}
	return "never"
}

// resendPOST lists the POST routes that are safe to send twice. Every other
// POST is ResendNever.
var resendPOST = map[string]Resend{
	"/channels/{channel_id}/messages": ResendWithNonce,
	// Opening a DM returns the existing DM channel.
	"/users/@me/channels": ResendSafe,
	// The typing indicator lasts 10 s whether triggered once or twice.
	"/channels/{channel_id}/typing": ResendSafe,
}

// Resend returns the route's resend policy (see [Resend]): by method, with
// the POST routes of resendPOST as exceptions.
func (r Route) Resend() Resend {
	switch r.Method {
	case "GET", "HEAD", "OPTIONS", "PUT", "PATCH", "DELETE":
		return ResendSafe
	case "POST":
		return resendPOST[r.Template]
	}
	return ResendNever
}
