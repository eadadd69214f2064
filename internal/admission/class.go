package admission

import "fmt"

// Class is a request's priority class. Wherever requests wait for a limit
// (a bucket's queue, a global window's line) a higher class goes first,
// and a lower class keeps a share (Share): a user's interaction is not
// answered behind the bot's bulk work, and bulk work still moves while
// interactions keep coming. The zero value is Normal.
type Class int8

// The classes, lowest first.
const (
	// Bulk is work that may wait for everything else: mass updates,
	// sweeps, migrations.
	Bulk Class = -1
	// Normal is the default.
	Normal Class = 0
	// Interactive is what a user waits for: a follow-up to an interaction,
	// a reply to a command.
	Interactive Class = 1
)

// Classes are the classes, highest first: the order requests are served
// in when they all wait.
var Classes = [...]Class{Interactive, Normal, Bulk}

// String returns "interactive", "normal" or "bulk" (or "class(N)" for a
// value outside them).
func (c Class) String() string {
	switch c {
	case Interactive:
		return "interactive"
	case Normal:
		return "normal"
	case Bulk:
		return "bulk"
	}
	return fmt.Sprintf("class(%d)", int8(c))
}

// Valid reports whether c is one of the classes.
func (c Class) Valid() bool { return c >= Bulk && c <= Interactive }

// ShareEvery sets the lower classes' share: while a request of a lower
// class waits, at least one in ShareEvery slots handed out goes to a lower
// class (the one whose request is first in line regardless of class). A
// lower class does not starve behind higher ones, and a higher one still
// gets seven slots in eight when both wait: an interaction waits at most
// one such slot more than it would with no lower class at all. One
// exception, in a global window's line: when the share comes due while
// the slots left are kept for buckets ahead of its pick that reopen within
// the period (Keep), the line goes on in its order rather than leave them
// unused, and the share waits for the next slot it can use: keeps that
// overlap without end would hold it back as long.
const ShareEvery = 8

// Share counts the slots handed to a class above one that waits. The zero
// value is ready: no slot handed out yet. Not safe for concurrent use: the
// owner of the line it counts for calls it.
type Share struct {
	// credit is the slots handed out, since a lower class last got one,
	// while a lower class waited, counted up to ShareEvery (the share is
	// due from ShareEvery-1 on). Invariant: 0 <= credit <= ShareEvery. An
	// int32: a lane keeps a Share, and a live bucket a lane.
	credit int32
}

// Due reports whether the next slot goes to a lower class than the
// highest waiting, if one waits.
func (s *Share) Due() bool { return s.credit >= ShareEvery-1 }

// Left is how many slots may go in a row to a higher class than one that
// waits before the share is due; one once it is overdue (its pick could
// not be served), so the share is looked at again after every slot.
func (s *Share) Left() int { return max(1, ShareEvery-1-int(s.credit)) }

// SharePick returns the index in line of what the lower classes' share
// goes to when it is due: the first in line (before) of the items whose
// class is below top, among those that may take it (class reports ok);
// -1 if there is none. The bucket queue, the global line and the forecast
// each pass their own line and order.
func SharePick[T any](line []T, top Class, class func(T) (c Class, ok bool), before func(a, b T) bool) int {
	at := -1
	for i, x := range line {
		if c, ok := class(x); ok && c < top && (at < 0 || before(x, line[at])) {
			at = i
		}
	}
	return at
}

// Served counts n slots handed out: to a lower class than the highest
// waiting (lower: the share was served), or to the highest while a lower
// class waited (passed), or with no lower class waiting (neither: the
// count starts again).
func (s *Share) Served(n int, lower, passed bool) {
	switch {
	case n <= 0:
	case lower, !passed:
		s.credit = 0
	default:
		s.credit = int32(min(int(s.credit)+n, ShareEvery))
	}
}
