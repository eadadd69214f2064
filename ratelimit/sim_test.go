package ratelimit

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestBucketAgainstModelDiscord drives one Bucket with a greedy client
// against a model of one Discord bucket (a fixed window that starts with the
// first request after a reset) over a network whose latency jitters, so
// requests and responses are reordered, and some requests are cancelled
// before they are sent. The bucket must never cause a 429 and must keep a
// fair share of the ideal throughput. Virtual time only.
func TestBucketAgainstModelDiscord(t *testing.T) {
	type lat struct{ min, max time.Duration }
	for _, limit := range []int{1, 5, 50} {
		for _, period := range []time.Duration{250 * time.Millisecond, time.Second, 5 * time.Second} {
			for _, l := range []lat{{ms(1), ms(5)}, {ms(10), ms(100)}, {ms(100), ms(400)}} {
				for _, refundRate := range []float64{0, 0.2} {
					name := fmt.Sprintf("limit=%d/period=%v/latency=%v-%v/refund=%v", limit, period, l.min, l.max, refundRate)
					t.Run(name, func(t *testing.T) {
						s := newSim(uint64(limit)*31+uint64(period/time.Millisecond), limit, period, l.min, l.max, refundRate, 0)
						s.run(60 * time.Second)
						if s.violations > 0 {
							t.Fatalf("%d requests hit a 429 (sent %d)", s.violations, s.served)
						}
						// Ideal: limit per window, windows back to back. The
						// limiter pays up to one round trip per window for its
						// conservative reset estimate; demand a fair share.
						windows := float64(60*time.Second) / float64(period+2*l.max)
						if min := 0.5 * windows * float64(limit); float64(s.served) < min {
							t.Fatalf("served %d requests, want at least %.0f", s.served, min)
						}
					})
				}
			}
		}
	}
}

// TestBucketAgainstModelDiscordLosingHeaders is the same, but 2% of the
// responses lose their headers (a 5xx, a connection reset after the request
// was handled). Requests sent while the bucket was still unknown may then hit
// a 429: a pioneer without an answer tells nothing. Once the bucket is Known,
// none may.
func TestBucketAgainstModelDiscordLosingHeaders(t *testing.T) {
	for _, limit := range []int{1, 5, 50} {
		for _, period := range []time.Duration{250 * time.Millisecond, time.Second, 5 * time.Second} {
			name := fmt.Sprintf("limit=%d/period=%v", limit, period)
			t.Run(name, func(t *testing.T) {
				s := newSim(uint64(limit)*17+uint64(period/time.Millisecond), limit, period, ms(5), ms(150), 0.1, 0.02)
				s.run(60 * time.Second)
				if s.knownViolations > 0 {
					t.Fatalf("%d requests sent by a known bucket hit a 429", s.knownViolations)
				}
				if s.served < limit*10 {
					t.Fatalf("served only %d requests", s.served)
				}
			})
		}
	}
}

type simEvent struct {
	at    time.Duration
	kind  int // 0 client wake-up, 1 request arrives at Discord, 2 response arrives
	sent  time.Duration
	known bool // the bucket was Known when the request was admitted
	h     Headers
	seq   int
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type sim struct {
	rng                *rand.Rand
	q                  simQueue
	seq                int
	b                  Bucket
	limit              int
	period             time.Duration
	minLat, maxLat     time.Duration
	refundRate         float64
	lostRate           float64 // share of responses that lose their headers
	knownViolations    int
	serverReset        time.Duration // end of Discord's window; -1 before the first
	serverRemaining    int
	served, violations int
	wakeAt             time.Duration
}

func newSim(seed uint64, limit int, period, minLat, maxLat time.Duration, refundRate, lostRate float64) *sim {
	return &sim{
		rng: rand.New(rand.NewPCG(seed, 7)), limit: limit, period: period,
		minLat: minLat, maxLat: maxLat, refundRate: refundRate, lostRate: lostRate,
		serverReset: -1, wakeAt: -1,
	}
}

func (s *sim) push(e simEvent) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

func (s *sim) latency() time.Duration {
	return s.minLat + time.Duration(s.rng.Int64N(int64(s.maxLat-s.minLat)+1))
}

// client takes as many requests as the bucket allows at now.
func (s *sim) client(now time.Duration) {
	for {
		ok, wait := s.b.Take(t0.Add(now))
		if !ok {
			if at := now + wait; s.wakeAt <= now || at < s.wakeAt {
				s.wakeAt = at
				s.push(simEvent{at: at, kind: 0})
			}
			return
		}
		known := s.b.Known
		if s.rng.Float64() < s.refundRate {
			s.b.Refund(t0.Add(now))
			continue
		}
		s.push(simEvent{at: now + s.latency(), kind: 1, sent: now, known: known})
	}
}

func (s *sim) run(d time.Duration) {
	s.push(simEvent{at: 0, kind: 0})
	for s.q.Len() > 0 {
		e := heap.Pop(&s.q).(simEvent)
		if e.at > d {
			return
		}
		switch e.kind {
		case 0:
			s.client(e.at)
		case 1: // Discord handles the request.
			if s.serverReset < 0 || e.at >= s.serverReset {
				s.serverReset = e.at + s.period
				s.serverRemaining = s.limit
			}
			if s.serverRemaining == 0 {
				s.violations++
				if e.known {
					s.knownViolations++
				}
			} else {
				s.serverRemaining--
				s.served++
			}
			h := resp(s.limit, s.serverRemaining, s.serverReset-e.at)
			if s.lostRate > 0 && s.rng.Float64() < s.lostRate {
				h = Headers{}
			}
			s.push(simEvent{at: e.at + s.latency(), kind: 2, sent: e.sent, h: h})
		case 2:
			s.b.Observe(t0.Add(e.at), t0.Add(e.sent), e.h)
			s.client(e.at)
		}
	}
}
