package lanes

import (
	"time"

	"github.com/sluicehq/sluice/fsm"
	"github.com/sluicehq/sluice/internal/admission"
)

// Ask is what an ask for admission carries at now for the lanes ls whose
// head may go now (ready, asked of each lane with a head, in order): how
// many requests are ready (Want: the head, or, for a known lane that is
// not serial, as many of its queue as its window has room for), whether
// any needs a global slot, the longest backlog (Path), the earliest ready
// head's submission (Since and First: now and ^0 while none is earlier),
// the highest class among those asked for, and whether one is a pioneer
// (ready while its limit is unknown). Want is 0: none is ready.
func Ask[T comparable, R LaneRules[T]](ls []*Lane[T, R], now time.Time,
	ready func(*Lane[T, R], time.Time) (bool, time.Duration)) admission.Ask {
	var r R
	var zero T
	a := admission.Ask{Since: now, First: ^uint64(0), Class: admission.Bulk}
	for _, l := range ls {
		c := l.Line.Head()
		if c == zero {
			continue
		}
		if ok, _ := ready(l, now); !ok {
			continue
		}
		if s := r.Submitted(c); submittedBefore(s, r.Seq(c), a.Since, a.First) {
			a.Since, a.First = s, r.Seq(c)
		}
		n := 1
		if l.State.Known && !l.Serial {
			n = max(1, min(l.Line.Len(), l.Room(now)))
		}
		a.Want += n
		a.Class = max(a.Class, l.Line.TopClass(n))
		a.Global = a.Global || !r.Exempt(c)
		a.Path = max(a.Path, l.Backlog(now, l.Line.Len()))
		a.Pioneer = a.Pioneer || !l.State.Known // ready while unknown: its pioneer
	}
	return a
}

// submittedBefore reports whether a request submitted at sub, of
// sequence seq, came before the one of (since, first): the order of
// submission Ask and Keep tell admission, ties to the lower sequence.
func submittedBefore(sub time.Time, seq uint64, since time.Time, first uint64) bool {
	return sub.Before(since) || sub.Equal(since) && seq < first
}

// Soon is what Keep weighs besides the lanes and now.
type Soon struct {
	// Per is the global window's period: a keep is for a reopening within
	// it, of a queue whose backlog then is longer.
	Per time.Duration
	// RTT is the round-trip estimate: a pioneer's answer is that far, and
	// a known bucket's last window's slots free about that long after it
	// reopens (Keep.Slack).
	RTT time.Duration
	// Others: other actors wait for the global window. A known lane's
	// reopening is told only then.
	Others bool
	// Behind: a queue behind its pioneer may tell it (once a period at
	// most: no keep told within the last one).
	Behind bool
	// Told is the backlog (Path) the actor last told (0: none): a queue
	// behind its pioneer tells its keep again, within the period too, once
	// its backlog has doubled since (a queue still filling as its requests
	// are submitted).
	Told time.Duration
}

// Keep is what a keep carries at now for the lanes ls whose queue waits
// for its own bucket window (admission.Keep: the earliest reopening At,
// and Want, Path, Since, First and Class as Ask's, at the reopening; Want
// is 0: none tells one), and whether a keep is needed at all (needed: some
// queue would still have one told for it, were others waiting and its
// last one told a period ago; without one, a keep standing is withdrawn).
//
// A queue tells its keep if its head needs a global slot and its lane is
// not serial, and:
//   - behind its pioneer on the wire (its bucket's limit not known yet): it
//     asks at the pioneer's answer, a round trip away, for at most what a
//     period holds at the pace assumed for an unknown bucket
//     (admission.UnknownPace), whether others wait or not, when s.Behind;
//   - or known and reopening within the period (ready says when, as the
//     actor's own rule): for its queue, at most a window's Limit, only
//     when others wait (s.Others); such a keep has Slack s.RTT, its last
//     window's slots freeing about a round trip after it reopens.
//
// Either is needed only when its backlog at the reopening is a period or
// longer; a known lane whose reopening probe is on the wire (ProbeOut)
// needs its keep too, its queue asking at the probe's answer.
func Keep[T comparable, R LaneRules[T]](ls []*Lane[T, R], now time.Time, s Soon,
	ready func(*Lane[T, R], time.Time) (bool, time.Duration)) (k admission.Keep, needed bool) {
	var r R
	var zero T
	k.First, k.Class = ^uint64(0), admission.Bulk
	known := false    // a known lane's reopening is in the keep
	var own time.Time // when the global slots of the told known lanes' last windows free
	for _, l := range ls {
		c := l.Line.Head()
		if c == zero || r.Exempt(c) || l.Serial {
			continue
		}
		var readyAt time.Time
		var n int
		tell := false
		switch {
		case !l.State.Known && (l.Running > 0 || l.First):
			// Behind its pioneer: it asks at the pioneer's answer, for
			// at most what a period holds at the pace assumed for an
			// unknown bucket (admission.UnknownPace). A pioneer that
			// waits for its turn (its template's first pioneer, on
			// another actor, or another of the actor's pioneers) is a
			// round trip further: its queue asks a round trip after
			// that one's answer.
			readyAt = now.Add(s.RTT)
			if l.Running == 0 {
				readyAt = readyAt.Add(s.RTT)
			}
			n = min(l.Line.Len(), max(1, int(s.Per/admission.UnknownPace)))
			tell = s.Behind || s.Told > 0 && l.Backlog(readyAt, l.Line.Len()) >= 2*s.Told
		case l.State.Known && l.Machine.Current() != fsm.Initial:
			ok, wait := ready(l, now)
			if ok || wait <= 0 || wait >= s.Per {
				// A probe of its reopening on the wire: its queue asks at
				// the probe's answer, a round trip away (the actor keeps
				// its granted slots meanwhile: ProbeAwaited).
				needed = needed || l.ProbeOut()
				continue
			}
			readyAt, n, tell = now.Add(wait), min(l.Line.Len(), l.State.Limit), s.Others
			known = known || tell
			if l.settledAt != 0 {
				// The slots its last window took free a period after
				// their answers.
				if free := time.Unix(0, l.settledAt).Add(s.Per); free.After(own) {
					own = free
				}
			}
		default:
			continue
		}
		needed = needed || l.Backlog(readyAt, l.Line.Len()) >= s.Per
		if !tell {
			continue
		}
		if k.At.IsZero() || readyAt.Before(k.At) {
			k.At = readyAt
		}
		k.Want += n
		k.Class = max(k.Class, l.Line.TopClass(n))
		k.Path = max(k.Path, l.Backlog(readyAt, l.Line.Len()))
		if sub := r.Submitted(c); k.Since.IsZero() || submittedBefore(sub, r.Seq(c), k.Since, k.First) {
			k.Since, k.First = sub, r.Seq(c)
		}
	}
	if known {
		// Its last window's slots free about a round trip after it
		// reopens, or a period after their answers if that is later (a
		// window sent in pieces, answers slower than the estimate): it
		// waits for those anyway. At most a quarter period.
		k.Slack = s.RTT
		if d := own.Sub(k.At); d > k.Slack {
			k.Slack = min(d, s.Per/4)
		}
	}
	return k, needed
}

// AwaitsTurn reports whether a lane of ls whose limit is not known waits
// with a queue for its first pioneer's turn (its template's first pioneer
// on another actor, or another pioneer of the actor): Keep tells its
// keep, as for a queue behind its pioneer on the wire.
func AwaitsTurn[T comparable, R LaneRules[T]](ls []*Lane[T, R]) bool {
	for _, l := range ls {
		if !l.State.Known && l.First && l.Running == 0 && l.Line.Len() > 0 {
			return true
		}
	}
	return false
}

// ProbeAwaited reports whether a lane's queue waits for the answer to its
// window's probe (ProbeOut), which comes within a round trip. Global slots
// granted for that queue are kept for it meanwhile: given back, they went
// at once to other buckets under a binding global limit, and the queue,
// ready a round trip later, waited a whole global window behind them, on
// every window its bucket probed. A kept slot costs the global window
// nothing it does not count: each slot stays held until its request's
// answer plus a period (ratelimit.GlobalLimiter.Settle).
func ProbeAwaited[T comparable, R LaneRules[T]](ls []*Lane[T, R]) bool {
	var zero T
	for _, l := range ls {
		if l.Line.Head() != zero && l.ProbeOut() {
			return true
		}
	}
	return false
}

// HeadClasses is the highest and the lowest class of the lanes' heads (hi
// < lo: no lane has one).
func HeadClasses[T comparable, R LaneRules[T]](ls []*Lane[T, R]) (hi, lo admission.Class) {
	var r R
	var zero T
	hi, lo = admission.Bulk-1, admission.Interactive
	for _, l := range ls {
		if c := l.Line.Head(); c != zero {
			hi, lo = max(hi, r.Class(c)), min(lo, r.Class(c))
		}
	}
	return hi, lo
}

// Holders appends to out the queued requests grants slots of the global
// window, granted to the actor, are for, and returns it: the first live
// requests of its queues that need a global slot, lanes in the order the
// actor visits them next (from ls[next], round the slice). The global
// forecast serves them from those slots; counted among the requests still
// to serve, they took the window's next slots in the replay, and every
// request behind them a burst later.
func Holders[T comparable, R LaneRules[T]](ls []*Lane[T, R], next, grants int, out []T) []T {
	var r R
	for i := 0; grants > 0 && i < len(ls); i++ {
		l := ls[(next+i)%len(ls)]
		for _, c := range l.Line.Items() {
			if grants == 0 {
				break
			}
			if r.Finished(c) || r.Exempt(c) {
				continue
			}
			out = append(out, c)
			grants--
		}
	}
	return out
}
