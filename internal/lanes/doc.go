// Package lanes holds the rules of one rate-limit bucket's lane as pure
// code, with time as an argument: the lane itself (Lane: its key and
// routes, which routes it serves and which buckets it may share, merging
// two lanes that turn out to share a bucket, its state machine kept in
// step with its count, when it is idle), its queue of requests (Queue:
// who goes next, the lower classes' share, retries, merging two queues)
// and its pace (Pace: when the request at each place may go, and how long
// the whole queue needs); and what a bucket actor tells admission of its
// lanes (Ask: the requests ready now; Keep: a queue about to reopen;
// Holders: which queued requests the slots it holds are for).
//
// A bucket actor (package actors) owns one lane per bucket and calls these
// from its own goroutine; nothing here is safe for concurrent use, starts
// a goroutine, reads a clock or sends a message. The actor keeps what
// reads more than its lanes: whether a lane's head is ready (the other
// pioneers, the declared groups; passed to Ask and Keep as a function),
// whether to tell admission at all, and the messages; a lane's machine is
// made by the actor, with its tracing hook (NewLane). The global forecast
// (package forecast) weighs a lane's backlog with the same rule
// (admission.Backlog).
package lanes
