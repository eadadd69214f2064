package ratelimit

import (
	"net/http"
	"strconv"
	"time"
)

// Attempt is what one attempt of a request met, as far as the limits and
// the request's fate go: the input of [Judge].
type Attempt struct {
	// Sent reports that the request reached the wire. One that never left
	// (no connection, a request that could not be built, a shared count
	// that refused it) was counted nowhere.
	Sent bool
	// Status is the answer's HTTP status; 0 when no answer came (the
	// connection died, the attempt timed out).
	Status int
	// PeerClosed reports, for an attempt without an answer, that the
	// server closed the connection: it cannot count the request after
	// that. (Not when the caller's side gave up: the request may still be
	// on its way.)
	PeerClosed bool
	// Headers are the answer's rate-limit headers (ParseHeaders).
	Headers Headers
	// Verdict classifies the answer (Classify).
	Verdict Verdict
	// BotToken reports that the request carried the limiter's bot token:
	// a 401 then says the token itself is rejected.
	BotToken bool
	// Safe reports that the request may be sent again although the server
	// may have processed it (its route's resend policy, or the caller's
	// word).
	Safe bool
	// Retries is how many 429s the request met before this attempt, and
	// MaxRetries how many it may meet and still be sent again.
	Retries, MaxRetries int
	// ErrorRetries is how many times the request was sent again after a
	// server or transport error, and MaxErrorRetries how many times it may
	// be.
	ErrorRetries, MaxErrorRetries int
}

// Outcome is what an attempt means: what its bucket and the global window
// count, what pauses, whether it counts against the invalid-request limit,
// and what becomes of the request. [Judge] gives it; the live limiter, the
// shared store's scripts and its local fallback all act on it, so the rule
// is written once.
type Outcome struct {
	// Charge is what the request's bucket counts. The global slot and the
	// declared groups' slots follow it: given back with ChargeNone, held a
	// period from the answer otherwise (Counted).
	Charge Charge
	// Pause is what stops sending, for Wait from the answer.
	Pause Pause
	// Wait is how long Pause lasts (the 429's verdict); 0 without a pause
	// and for PauseAuth, whose end is found by checking the token again.
	Wait time.Duration
	// Invalid reports that the answer counts against Discord's
	// invalid-request limit (CountsAsInvalid).
	Invalid bool
	// Next is what becomes of the request.
	Next Next
}

// Counted reports whether the limits count the attempt: its bucket (as
// Charge says), its global slot and its declared groups' slots.
func (o Outcome) Counted() bool { return o.Charge != ChargeNone }

// String returns the outcome as the conformance table shows it, e.g.
// "charge=arrived pause=bucket invalid next=requeue".
func (o Outcome) String() string {
	s := "charge=" + o.Charge.String() + " pause=" + o.Pause.String()
	if o.Invalid {
		s += " invalid"
	}
	return s + " next=" + o.Next.String()
}

// Charge is what an attempt's end tells its bucket about the request's
// count. The zero value is ChargeUnknown.
type Charge uint8

// Charges.
const (
	// ChargeUnknown: the request may have reached the server, which may
	// count it in any window beginning up to a period after it was sent
	// (Bucket.Observe): no answer came and the caller's side ended the
	// attempt.
	ChargeUnknown Charge = iota
	// ChargeNone: no bucket counted it. It never left, or a global 429 or
	// a ban without X-RateLimit-Remaining refused it before any bucket
	// did. Its slots are given back (Bucket.Refund), its global slot too.
	ChargeNone
	// ChargeArrived: the server cannot count it after the attempt ended:
	// it answered (the headers, if any, say how), or it closed the
	// connection (Bucket.ObserveLost).
	ChargeArrived
)

// String returns the charge's name: "unknown", "none" or "arrived".
func (c Charge) String() string {
	switch c {
	case ChargeUnknown:
		return "unknown"
	case ChargeNone:
		return "none"
	case ChargeArrived:
		return "arrived"
	}
	return "Charge(" + strconv.Itoa(int(c)) + ")"
}

// Pause is what an answer stops, for Outcome.Wait from the answer. The
// zero value is PauseNone.
type Pause uint8

// Pauses.
const (
	// PauseNone: nothing pauses.
	PauseNone Pause = iota
	// PauseBucket: the request's bucket (a user 429). A window that
	// reopened later than estimated teaches the reopening margin
	// (Bucket.LateReopen).
	PauseBucket
	// PauseSerial: the request's bucket, and from now on it sends one
	// request at a time (a shared or sublimit 429: a limit no header
	// shows); the declared groups the request counts in pause too.
	PauseSerial
	// PauseGlobal: every request of the window that is not exempt (a
	// global 429).
	PauseGlobal
	// PauseBan: every request from this IP, through the ban breaker (a
	// 429 that is not Discord's: a Cloudflare ban).
	PauseBan
	// PauseAuth: every request sent with the bot's token, until a check
	// finds it accepted again (a 401 to the bot's token).
	PauseAuth
)

// String returns the pause's name: "none", "bucket", "serial", "global",
// "ban" or "auth".
func (p Pause) String() string {
	switch p {
	case PauseNone:
		return "none"
	case PauseBucket:
		return "bucket"
	case PauseSerial:
		return "serial"
	case PauseGlobal:
		return "global"
	case PauseBan:
		return "ban"
	case PauseAuth:
		return "auth"
	}
	return "Pause(" + strconv.Itoa(int(p)) + ")"
}

// Next is what becomes of a request after an attempt. The zero value is
// Deliver.
type Next uint8

// Fates of a request.
const (
	// Deliver: the answer goes to the caller, whatever its status.
	Deliver Next = iota
	// Requeue: back at the head of its queue, sent again once admitted
	// (it never left, or a 429 within MaxRetries: the server did not
	// process it).
	Requeue
	// Resend: sent again after a backoff (a server or transport error):
	// the server may have processed it, and it is safe to repeat.
	Resend
	// Fail: the caller gets an error: a 429's (more than MaxRetries, or a
	// ban, which is never retried at once), or the transport's.
	Fail
)

// String returns the fate's name: "deliver", "requeue", "resend" or "fail".
func (n Next) String() string {
	switch n {
	case Deliver:
		return "deliver"
	case Requeue:
		return "requeue"
	case Resend:
		return "resend"
	case Fail:
		return "fail"
	}
	return "Next(" + strconv.Itoa(int(n)) + ")"
}

// Judge decides what an attempt means. It is the one outcome table of the
// limiter; in order:
//
//  1. Never sent: ChargeNone, requeue.
//  2. No answer: ChargeArrived if the server closed the connection, else
//     ChargeUnknown; resent if Safe and within MaxErrorRetries, else
//     fail.
//  3. A 429, by its verdict (Wait is the verdict's), counted as invalid
//     unless shared (CountsAsInvalid):
//     - CloudflareBan: ChargeNone, PauseBan, fail (never retried at once);
//     - GlobalLimit: PauseGlobal, ChargeNone unless the answer shows
//     X-RateLimit-Remaining (then a bucket counted it: ChargeArrived);
//     - SharedLimit, Sublimit: PauseSerial;
//     - UserLimit: PauseBucket;
//     then requeued within MaxRetries, else fail.
//  4. A 401 to the bot's token: PauseAuth, invalid, deliver.
//  5. A 5xx without rate-limit headers: resent if Safe and within
//     MaxErrorRetries, else deliver.
//  6. Anything else: deliver (a 401 to another token, or a 403, counts as
//     invalid).
//
// Every answered attempt of rules 3 to 6 is ChargeArrived unless said
// otherwise. What the caller did (gave up, Close) ends a request before
// its attempt is judged; Judge speaks for the attempt only.
func Judge(a Attempt) Outcome {
	if !a.Sent {
		return Outcome{Charge: ChargeNone, Next: Requeue}
	}
	if a.Status == 0 {
		o := Outcome{Charge: ChargeUnknown, Next: Fail}
		if a.PeerClosed {
			o.Charge = ChargeArrived
		}
		if a.mayResend() {
			o.Next = Resend
		}
		return o
	}
	o := Outcome{Charge: ChargeArrived, Invalid: CountsAsInvalid(a.Status, a.Verdict)}
	switch {
	case a.Status == http.StatusTooManyRequests:
		o.Wait = a.Verdict.Wait
		o.Next = Requeue
		if a.Retries >= a.MaxRetries {
			o.Next = Fail
		}
		switch a.Verdict.Kind {
		case CloudflareBan:
			o.Charge, o.Pause, o.Next = ChargeNone, PauseBan, Fail
		case GlobalLimit:
			o.Pause = PauseGlobal
			if !a.Headers.Has.Remaining {
				o.Charge = ChargeNone
			}
		case SharedLimit, Sublimit:
			o.Pause = PauseSerial
		default:
			o.Pause = PauseBucket
		}
	case a.Status == http.StatusUnauthorized && a.BotToken:
		o.Pause = PauseAuth
	case a.Status >= 500 && !a.Headers.Has.RateLimit && a.mayResend():
		o.Next = Resend
	}
	return o
}

func (a Attempt) mayResend() bool { return a.Safe && a.ErrorRetries < a.MaxErrorRetries }
