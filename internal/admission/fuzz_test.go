package admission_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/admission"
	"github.com/sluicehq/sluice/ratelimit"
)

// countingWindow counts the slots it reserved.
type countingWindow struct {
	*ratelimit.SlidingWindow
	reserved int
}

func (w *countingWindow) Reserve(now time.Time) (bool, time.Duration) {
	ok, wait := w.SlidingWindow.Reserve(now)
	if ok {
		w.reserved++
	}
	return ok, wait
}

// FuzzQueue drives a Queue with any sequence of asks, keeps, removals,
// refunds, clears and serves, time moving forward, and checks its
// invariants: a grant never holds more slots than its bucket wants nor
// any for an exempt one, a bucket served in part stays in line and one
// served whole leaves it, every slot granted was reserved in the window
// (and every reserved slot granted), a bucket is in line at most once and
// granted once per serve, the head is the earliest place, and of
// ShareEvery slots in a row (slot by slot, SetSlotHook) while a lower
// class waits one goes to a lower class (unless a keep may be live: a
// share's pick held back by one lets the head go on).
func FuzzQueue(f *testing.F) {
	f.Add([]byte{0, 1, 3, 0, 10, 5, 1, 2, 0, 2, 3, 4, 5, 50, 5, 0})
	f.Add([]byte{0, 0, 4, 2, 0, 1, 4, 1, 1, 3, 0, 0, 5, 0, 5, 9, 0, 2, 2, 2, 5, 20})
	f.Add([]byte{1, 2, 3, 4, 0, 2, 5, 0, 5, 1, 5, 30, 2, 2, 5, 200, 4, 5, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		base := time.Unix(1_700_000_000, 0)
		now := base
		const limit, per = 4, time.Second
		q := admission.New[int](limit, per)
		w := &countingWindow{SlidingWindow: ratelimit.NewSlidingWindow(limit, per)}
		wants := map[int]int{}   // in line: what each still wants
		global := map[int]bool{} // in line: needs slots
		class := map[int]admission.Class{}
		run := 0 // slots in a row to the highest class while a lower one waited
		granted := 0
		var keepsUntil time.Time // a keep may be live until then: the share may be held back
		var slots []int          // this serve's, in order
		admission.SetSlotHook(q, func(k int) { slots = append(slots, k) })
		next := func() byte {
			if len(ops) == 0 {
				return 0
			}
			b := ops[0]
			ops = ops[1:]
			return b
		}
		for len(ops) > 0 {
			op, key := next()%6, int(next()%4)
			switch op {
			case 0:
				a := admission.Ask{Want: 1 + int(next()%6), Global: next()%4 != 0, Path: time.Duration(next()) * 50 * time.Millisecond,
					Pioneer: next()%8 == 0, Since: base.Add(time.Duration(next()) * 10 * time.Millisecond), First: uint64(next()),
					Class: admission.Class(int(next()%3) - 1)}
				q.Want(now, key, a)
				wants[key], global[key], class[key] = a.Want, a.Global, a.Class
			case 1:
				k := admission.Keep{At: now.Add(time.Duration(next()) * 5 * time.Millisecond), Want: int(next() % 6),
					Path: time.Duration(next()) * 50 * time.Millisecond, Since: base.Add(time.Duration(next()) * 10 * time.Millisecond), First: uint64(next()),
					Class: admission.Class(int(next()%3) - 1)}
				if _, in := wants[key]; !in && k.Want > 0 && k.At.Add(admission.SoonGrace).After(keepsUntil) {
					keepsUntil = k.At.Add(admission.SoonGrace) // it lasts until then at most
				}
				q.Soon(now, key, k)
			case 2:
				q.Remove(key)
				delete(wants, key)
			case 3:
				q.Refund(int(next() % 3))
			case 4:
				q.Clear()
				clear(wants)
			case 5:
				before := w.reserved
				slots = slots[:0]
				grants, retry, again := q.Serve(now, w, next()%5 == 0)
				// The share, slot by slot: what each global bucket in line
				// still wants as the slots go.
				left := map[int]int{}
				for k, n := range wants {
					if global[k] {
						left[k] = n
					}
				}
				for _, k := range slots {
					hi, lo := admission.Bulk, admission.Interactive
					for o := range left {
						hi, lo = max(hi, class[o]), min(lo, class[o])
					}
					switch c := class[k]; {
					case c < hi:
						run = 0 // the share
					case lo < c:
						if run++; run > admission.ShareEvery-1 && now.After(keepsUntil) {
							t.Fatalf("%d slots in a row to %v while %v waited", run, c, lo)
						}
					default:
						run = 0
					}
					if left[k]--; left[k] <= 0 {
						delete(left, k)
					}
				}
				seen := map[int]bool{}
				for _, g := range grants {
					want, ok := wants[g.Key]
					switch {
					case !ok:
						t.Fatalf("a grant for %d, not in line", g.Key)
					case seen[g.Key]:
						t.Fatalf("two grants for %d in one serve", g.Key)
					case !global[g.Key] && g.Slots != 0:
						t.Fatalf("%d slots for exempt %d", g.Slots, g.Key)
					case global[g.Key] && g.Slots <= 0:
						t.Fatalf("an empty grant for %d", g.Key)
					case g.Slots > want:
						t.Fatalf("%d slots for %d, which wants %d", g.Slots, g.Key, want)
					case g.More != (g.Slots < want && global[g.Key]):
						t.Fatalf("grant %+v for a want of %d", g, want)
					}
					seen[g.Key] = true
					granted += g.Slots
					if g.More {
						wants[g.Key] = want - g.Slots
					} else {
						delete(wants, g.Key)
					}
					for range g.Slots {
						w.Settle(now)
					}
				}
				if w.reserved-before != granted {
					t.Fatalf("%d slots reserved, %d granted", w.reserved-before, granted)
				}
				granted = 0
				if again && retry < 0 {
					t.Fatalf("retry in %v", retry)
				}
			}
			now = now.Add(time.Duration(next()) * time.Millisecond)
			if q.Len() != len(wants) {
				t.Fatalf("%d in line, %d expected", q.Len(), len(wants))
			}
			places := q.Places()
			for k := range wants {
				if !q.Waiting(k) {
					t.Fatalf("%d not in line", k)
				}
			}
			if len(places) != len(wants) {
				t.Fatalf("%d places for %d in line", len(places), len(wants))
			}
			if k, p, _, ok := q.Head(); ok {
				if _, in := wants[k]; !in {
					t.Fatalf("head %d not in line", k)
				}
				for _, o := range places {
					if o.Before(p) {
						t.Fatalf("head at %+v, another at %+v", p, o)
					}
				}
				if p.Class != class[k] {
					t.Fatalf("head of class %v, asked %v", p.Class, class[k])
				}
			}
			pending := 0
			for _, n := range wants {
				pending += n
			}
			if q.Pending() != pending {
				t.Fatalf("pending %d, %d expected", q.Pending(), pending)
			}
		}
	})
}
