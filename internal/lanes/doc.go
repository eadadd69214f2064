// Package lanes holds the rules of one rate-limit bucket's lane as pure
// code, with time as an argument: its queue of requests (Queue: who goes
// next, the lower classes' share, retries, merging two lanes that turn out
// to share a bucket) and its pace (Pace: when the request at each place
// may go, and how long the whole queue needs).
//
// A bucket actor (package actors) owns one lane per bucket and calls these
// from its own goroutine; nothing here is safe for concurrent use, starts
// a goroutine, reads a clock or sends a message. The global forecast
// (package forecast) weighs a lane's backlog with the same rule
// (admission.Backlog).
package lanes
