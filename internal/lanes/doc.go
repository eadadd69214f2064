// Package lanes holds the rules of one rate-limit bucket's lane as pure
// code, with time as an argument: the lane itself (Lane: its key and
// routes, which routes it serves and which buckets it may share, merging
// two lanes that turn out to share a bucket, its state machine kept in
// step with its count, when it is idle), its queue of requests (Queue:
// who goes next, the lower classes' share, retries, merging two queues)
// and its pace (Pace: when the request at each place may go, and how long
// the whole queue needs); what a bucket actor tells admission of its
// lanes (Ask: the requests ready now; Keep: a queue about to reopen),
// which queued requests the global slots it holds are for (Holders, which
// the global forecast reads); what an attempt's end does to the lanes (its
// lane's count and a first pioneer's holds, each reported exactly once:
// Settle, SettleHolds; what the answer teaches: Answered, Widen; a 429's
// pause: Limited); and the part of a request's ETA its lane tells
// (forecast.Part: Part, Queued, Retrying, at its position among the live
// requests, Live) and its figures in a Snapshot (Lane.Snapshot); where a
// request joins a queue and when its bucket lets it go from there, the
// queue compacted before a request is refused for its wait (Lane.Place).
// Each reads the actor's lanes, in the order it keeps them, and time; the
// actor decides whether to tell, and sends the message.
//
// Whether a lane's head may go is the lane's state machine as far as the
// actor's lanes tell it (Lane.Ready, then Lane.FirstReady for a first
// pioneer: the shared count's hold, one pioneer at a time, a first pioneer
// alone with a slot held in every known lane it may share, a serial
// lane's one request, the count). The actor's readiness rule adds what
// reads more than its lanes (the template's first pioneer turn, between
// the two; the declared groups, after): Ask and Keep are passed it as
// ready, called as the actor would, on each lane in turn, and it may move
// the lane's machine and reorder its queue's head.
//
// A bucket actor (package actors) owns one lane per bucket and calls these
// from its own goroutine; nothing here is safe for concurrent use, starts
// a goroutine, reads a clock or sends a message. The actor keeps what
// reads more than its lanes: whether a lane's head is ready (the
// template's first pioneer turn, the declared groups, with the count of
// its pioneers out passed to Ready; passed to Ask and Keep as a function),
// whether to tell admission at all, and the messages; a lane's machine is
// made by the actor, with its tracing hook (NewLane); where an attempt ends,
// the declared groups, the global slot, the store's aliases, rekeying and
// the pioneers' turns; in an ETA, whether a global slot is held for the
// request (forecast.Part.Granted) and a request on the wire. The global forecast
// (package forecast) weighs a lane's backlog with the same rule
// (admission.Backlog).
package lanes
