// Package redisstore shares one bot token's rate limits between processes
// through Redis: its buckets (a window opens at the first request into an
// empty bucket, as Discord's do), its global sliding window, the election of
// one pioneer per unknown bucket, the lockouts of 429s and the
// invalid-request budget. It implements [ratelimit.Shared]; a Limiter uses
// it when Options.Redis is set.
//
// # How a request is counted
//
// Before a request is sent, [Store.Reserve] runs one Lua script: in one
// atomic step, with Redis's clock, it checks the global block and the
// shared invalid-request count, takes a slot of the global window (a sorted
// set of leases, each held while its request is in flight and for one
// period after its answer), resolves the route's bucket hash if another
// process learned it, and takes a slot of the bucket's window (or elects the
// request as the bucket's only pioneer). After the answer,
// [Store.Report] runs a second script, off the caller's path: it releases
// the in-flight lease, settles the global slot, corrects the bucket from
// Discord's headers (what remains can only drop within a window; a window's
// end guessed at its first request is replaced by the first answer's),
// records the route's hash for every process, pauses the bucket or the
// global window after a 429, counts invalid answers, and publishes a
// wake-up for processes that wait on the answer. Neither script ever
// admits more than the shared count allows, whatever the processes'
// interleaving: see docs/scale-out.md for the argument.
//
// # When Redis cannot be reached
//
// A call that fails or takes longer than Config.Timeout switches the store
// to its fallback: every limit is counted locally with a share of it
// (Config.Share, by default 1/N for N processes last seen sharing the token),
// never all of it (failing open is how bots get Cloudflare-banned). A
// background probe pings Redis; when it answers, the store counts in both
// places (shared and local share) for a cool-down, so the processes that
// have not noticed yet cannot push the total over, then in Redis alone. The
// switches are logged and counted ([Store.Stats]).
//
// A Store starts two goroutines (the heartbeat that counts processes and
// probes, and the wake-up subscriber); Close stops them. It never closes the
// Redis client, which belongs to the caller. A Store is safe for concurrent
// use.
package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/ratelimit"
)

// Defaults of Config.
const (
	// DefaultTimeout bounds one Redis call before the store falls back to
	// local limits.
	DefaultTimeout = 250 * time.Millisecond
	// DefaultLeaseTTL is how long a reservation is held when its process
	// never reports it (it crashed).
	DefaultLeaseTTL = 40 * time.Second
	// DefaultKeep is how long a bucket's record is kept after its window.
	DefaultKeep = 10 * time.Minute
	// DefaultHeartbeat is how often a process records itself alive (and, in
	// fallback, probes Redis).
	DefaultHeartbeat = time.Second
	// DefaultFallbackProcesses is the N of the 1/N fallback share when no
	// process count was ever read from Redis.
	DefaultFallbackProcesses = 4
)

// Config configures a Store. Every zero field means the default its comment
// gives.
type Config struct {
	// Namespace is the token's hash tag (see Namespace). Required.
	Namespace string
	// GlobalLimit and GlobalPeriod are the token's global window. Defaults
	// ratelimit.DefaultGlobalLimit per ratelimit.DefaultGlobalPeriod.
	GlobalLimit  int
	GlobalPeriod time.Duration
	// InvalidLimit is the shared invalid-request budget: at that many 401,
	// 403 and non-shared 429 answers within InvalidWindow (counted per
	// minute, across every process), Reserve refuses with scope "budget".
	// 0: no shared budget.
	InvalidLimit  int
	InvalidWindow time.Duration
	// Timeout bounds each Redis call. Default DefaultTimeout.
	Timeout time.Duration
	// LeaseTTL is how long a reservation holds its slots without a Report
	// (set it above the longest attempt). Default DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Share is the fraction of every limit this process uses while Redis is
	// unreachable, in (0, 1]. Default: 1/N, N the most processes seen
	// alive at once in Redis over the last 10 minutes
	// (DefaultFallbackProcesses before any was seen).
	Share float64
	// Heartbeat is how often the process records itself alive and, in
	// fallback, probes Redis. Default DefaultHeartbeat.
	Heartbeat time.Duration
	// Wake is called, on the subscriber's goroutine, when an answer another
	// process waited for arrives, with the bucket's major parameters
	// (SharedGrant.Notify). Default: none (waits end at their bound).
	Wake func(major string)
	// GlobalBlocked is called when any process met a global 429, with how
	// long the global window is paused. Default: none (Reserve refuses
	// meanwhile anyway).
	GlobalBlocked func(wait time.Duration)
	// ModeChanged, when set, is called after every switch between Shared,
	// Fallback and Recovering, on the goroutine that made it. Default: none.
	ModeChanged func(from, to Mode)
	// Logger receives the fallback switches. Default: none.
	Logger *slog.Logger
	// Clock is the clock of the times in SharedRequest and SharedAnswer
	// (the limiter's Options.Clock). Default time.Now.
	Clock func() time.Time
}

// Namespace returns the hash tag for a token's keys: "{sluice:" and the
// first 16 hex digits of the token's SHA-256, "}". A "Bot " scheme is
// dropped first, so "Bot abc" and "abc" (which a limiter sends as
// "Bot abc") share their limits. The token itself is never written to
// Redis nor logged.
func Namespace(token string) string {
	token = strings.TrimSpace(token)
	if len(token) > 4 && strings.EqualFold(token[:4], "bot ") {
		token = strings.TrimSpace(token[4:])
	}
	sum := sha256.Sum256([]byte(token))
	return "{sluice:" + hex.EncodeToString(sum[:8]) + "}"
}

// IPNamespace returns the hash tag for the keys of the requests sent
// without a token from one egress IP: "{sluice:ip:" and the first 16 hex
// digits of key's SHA-256, "}". Processes that share key share the per-IP
// global window and those requests' buckets.
func IPNamespace(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "{sluice:ip:" + hex.EncodeToString(sum[:8]) + "}"
}

// Mode is where a Store counts.
type Mode int32

// Modes of a Store.
const (
	// Shared: in Redis.
	Shared Mode = iota
	// Fallback: Redis is unreachable; locally, with the fallback share.
	Fallback
	// Recovering: Redis answers again; in Redis and, until the cool-down
	// ends, locally with the fallback share too.
	Recovering
)

// String returns "shared", "fallback" or "recovering".
func (m Mode) String() string {
	switch m {
	case Shared:
		return "shared"
	case Fallback:
		return "fallback"
	case Recovering:
		return "recovering"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Stats are a Store's counters since it was created.
type Stats struct {
	// Mode is where the store counts now.
	Mode Mode
	// Processes is the number of processes last seen sharing the token.
	Processes int
	// Reserved counts reservations answered by Redis, FallbackReserved
	// those decided locally while Redis was unreachable.
	Reserved, FallbackReserved int64
	// Outages counts switches to the fallback.
	Outages int64
	// Errors counts failed Redis calls.
	Errors int64
}

// Store shares rate limits through Redis. Create it with New.
type Store struct {
	cfg    Config
	rdb    redis.UniversalClient
	ns     string
	procID string
	log    *slog.Logger
	leases atomic.Uint64

	mode       atomic.Int32
	coolUntil  atomic.Int64 // Recovering ends then (Unix ns, local clock)
	processes  atomic.Int32
	reserved   atomic.Int64
	fbReserved atomic.Int64
	outages    atomic.Int64
	errs       atomic.Int64

	fb *fallback

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	probe  chan struct{} // nudges the heartbeat to probe now
	// relMu guards relClosed: no ReleaseGroups goroutine starts after
	// Close began (its wg.Add would race with the Wait).
	relMu     sync.Mutex
	relClosed bool
}

var _ ratelimit.Shared = (*Store)(nil)

// ErrNoNamespace is returned by New without Config.Namespace.
var ErrNoNamespace = errors.New("redisstore: Config.Namespace is required (use Namespace(token))")

// New returns a Store on rdb and starts its heartbeat and subscriber. It
// waits up to Config.Timeout for the subscription to the wake-ups to be
// active, so no answer published after New returns is missed (a limiter
// told to wait for another process's pioneer would otherwise wait for the
// lease to expire); an unreachable Redis starts it in fallback.
func New(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("redisstore: nil Redis client")
	}
	if cfg.Namespace == "" {
		return nil, ErrNoNamespace
	}
	if cfg.Share < 0 || cfg.Share > 1 || cfg.Share != cfg.Share {
		return nil, fmt.Errorf("redisstore: Share %v is not in (0, 1]", cfg.Share)
	}
	if cfg.GlobalLimit <= 0 {
		cfg.GlobalLimit = ratelimit.DefaultGlobalLimit
	}
	if cfg.GlobalPeriod <= 0 {
		cfg.GlobalPeriod = ratelimit.DefaultGlobalPeriod
	}
	if cfg.InvalidWindow <= 0 {
		cfg.InvalidWindow = 10 * time.Minute
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var id [8]byte
	for i := range id {
		id[i] = byte(rand.Uint32())
	}
	s := &Store{cfg: cfg, rdb: rdb, ns: cfg.Namespace, procID: hex.EncodeToString(id[:]), log: log,
		probe: make(chan struct{}, 1)}
	s.processes.Store(DefaultFallbackProcesses)
	s.fb = newFallback(cfg.GlobalLimit, cfg.GlobalPeriod, s.share)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	ps := rdb.Subscribe(s.ctx, s.ns+":wake")
	rctx, cancel := context.WithTimeout(s.ctx, cfg.Timeout)
	_, _ = ps.Receive(rctx) // the confirmation; on failure Channel retries
	cancel()
	s.wg.Add(2)
	go s.heartbeat()
	go s.subscribe(ps)
	return s, nil
}

// Close stops the store's goroutines and waits for them. The Redis client
// stays open.
func (s *Store) Close() error {
	s.relMu.Lock()
	s.relClosed = true
	s.relMu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

// Mode returns where the store counts now.
func (s *Store) Mode() Mode { return Mode(s.mode.Load()) }

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{Mode: s.Mode(), Processes: int(s.processes.Load()),
		Reserved: s.reserved.Load(), FallbackReserved: s.fbReserved.Load(),
		Outages: s.outages.Load(), Errors: s.errs.Load()}
}

// share is the fallback share now.
func (s *Store) share() float64 {
	if s.cfg.Share > 0 {
		return s.cfg.Share
	}
	return 1 / float64(max(1, s.processes.Load()))
}

func ms(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Reserve implements ratelimit.Shared.
func (s *Store) Reserve(ctx context.Context, r ratelimit.SharedRequest) ratelimit.SharedGrant {
	mode := s.Mode()
	if mode == Recovering && r.Now.UnixNano() >= s.coolUntil.Load() {
		if s.mode.CompareAndSwap(int32(Recovering), int32(Shared)) {
			s.log.Info("sluice: Redis: shared limits resumed")
			s.changed(Recovering, Shared)
		}
		mode = Shared
	}
	if mode == Fallback {
		return s.local(r)
	}
	var local ratelimit.SharedGrant
	if mode == Recovering {
		// Count the share locally too, until every process noticed.
		if local = s.local(r); !local.OK {
			return local
		}
	}
	g, err := s.reserve(ctx, r)
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller's context ended (the request was cancelled, its
		// attempt timed out, Close): not Redis's fault, and nothing to send.
		if mode == Recovering {
			s.fb.report(local, ratelimit.SharedAnswer{Now: r.Now})
		}
		return ratelimit.SharedGrant{Scope: "bucket"}
	case err != nil:
		s.failed(err, r.Now)
		if mode == Recovering {
			return local // counted locally already
		}
		return s.local(r)
	case mode != Recovering:
		return g
	case !g.OK:
		s.fb.report(local, ratelimit.SharedAnswer{Now: r.Now}) // never sent
		return g
	}
	g.Local = true
	g.Lease = joinLease(splitLease(g.Lease), local.Key)
	return g
}

// local reserves from the fallback share.
func (s *Store) local(r ratelimit.SharedRequest) ratelimit.SharedGrant {
	g := s.fb.reserve(r)
	if g.OK {
		s.fbReserved.Add(1)
	}
	return g
}

// A grant's Lease is "<Redis lease>|<fallback key>": either part is empty
// when the slot was not taken there.
func joinLease(redisLease, fallbackKey string) string { return redisLease + "|" + fallbackKey }

func splitLease(l string) (redisLease string) {
	redisLease, _, _ = strings.Cut(l, "|")
	return redisLease
}

func fallbackKey(l string) string {
	_, k, _ := strings.Cut(l, "|")
	return k
}

func (s *Store) reserve(ctx context.Context, r ratelimit.SharedRequest) (ratelimit.SharedGrant, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	lease := s.procID + ":" + strconv.FormatUint(s.leases.Add(1), 36)
	var limit, remaining, resetIn int64
	if r.Local.Known {
		// What Discord counted, as far as this process knows: its own
		// requests in flight (this one included) are left out, since each
		// counts itself when it reaches the script.
		limit = int64(r.Local.Limit)
		remaining = int64(min(r.Local.Limit, r.Local.Remaining+r.Local.InFlight()))
		resetIn = ms(r.Local.ResetAt.Sub(r.Now))
	}
	args := []any{lease, r.Route, r.Template, r.Major, b2i(r.Global),
		s.cfg.GlobalLimit, ms(s.cfg.GlobalPeriod), ms(s.cfg.LeaseTTL),
		limit, remaining, resetIn, ms(r.Window), ms(r.Margin),
		s.cfg.InvalidLimit, ms(s.cfg.InvalidWindow) / 60000, ms(DefaultKeep), r.Hash, b2i(r.Serial),
		s.groupID(r.GroupID), len(r.Groups)}
	res, err := reserveScript.Run(ctx, s.rdb, []string{s.ns}, groupArgs(args, r.Groups, true)...).Slice()
	if err != nil {
		return ratelimit.SharedGrant{}, err
	}
	if len(res) != 6 {
		return ratelimit.SharedGrant{}, fmt.Errorf("redisstore: reserve: %d results", len(res))
	}
	ok, _ := res[0].(int64)
	wait, _ := res[1].(int64)
	scope, _ := res[2].(string)
	hash, _ := res[3].(string)
	flag, _ := res[4].(int64)
	key, _ := res[5].(string)
	s.reserved.Add(1)
	g := ratelimit.SharedGrant{OK: ok == 1, Scope: scope, Hash: hash, Key: key}
	if g.OK {
		g.Lease, g.Global, g.Pioneer = joinLease(lease, ""), r.Global, flag == 1
		g.Groups, g.GroupID = r.Groups, r.GroupID
		return g, nil
	}
	g.Wait = time.Duration(wait) * time.Millisecond
	g.Notify = flag == 1
	return g, nil
}

// Report implements ratelimit.Shared.
func (s *Store) Report(ctx context.Context, g ratelimit.SharedGrant, a ratelimit.SharedAnswer) {
	if g.Local {
		s.fb.report(ratelimit.SharedGrant{Key: fallbackKey(g.Lease), Global: g.Global, Groups: g.Groups}, a)
	}
	lease := splitLease(g.Lease)
	if lease == "" || s.Mode() == Fallback {
		return // counted locally only; or Redis is down: the lease expires there
	}
	if err := s.report(ctx, lease, g, a); err != nil {
		s.failed(err, a.Now)
	}
}

func (s *Store) report(ctx context.Context, lease string, g ratelimit.SharedGrant, a ratelimit.SharedAnswer) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	h := a.Headers
	full := h.Has.Limit && h.Has.Remaining && h.Has.ResetAfter && h.Limit >= 1
	hash := ""
	if h.Has.Bucket {
		hash = h.Bucket
	}
	scope := ""
	if a.Status == 429 {
		scope = a.Verdict.Kind.Scope()
	}
	invalid := a.Sent && ratelimit.CountsAsInvalid(a.Status, a.Verdict)
	// The window's end as a duration from now, as ratelimit.Bucket
	// estimates it: the receive time plus Reset-After (late by the return
	// trip already), or, if earlier, the server clock's reopening plus
	// ReopenMargin, trusted only if it is not before the request's send
	// time plus Reset-After.
	now := s.cfg.Clock()
	resetIn := h.ResetAfter - now.Sub(a.Now)
	if sent := a.Now.Add(-a.RoundTrip); !h.Reopen.IsZero() && !h.Reopen.Before(sent.Add(h.ResetAfter)) {
		resetIn = min(resetIn, h.Reopen.Add(ratelimit.ReopenMargin).Sub(now))
	}
	var resetMs int64
	if h.Has.Reset {
		resetMs = h.Reset.UnixMilli()
	}
	args := []any{lease, g.Key, b2i(a.Sent), a.Status, b2i(full),
		h.Limit, h.Remaining, ms(max(resetIn, time.Millisecond)), hash, a.Template, a.Major,
		scope, ms(a.Verdict.Wait), b2i(invalid), b2i(g.Global),
		ms(s.cfg.GlobalPeriod), ms(a.RoundTrip), ms(DefaultKeep), ms(s.cfg.InvalidWindow) / 60000,
		ms(s.cfg.LeaseTTL), resetMs, s.groupID(g.GroupID), len(g.Groups)}
	return reportScript.Run(ctx, s.rdb, []string{s.ns}, groupArgs(args, g.Groups, true)...).Err()
}

// failed records a failed Redis call and switches to the fallback at now
// (the caller's clock).
func (s *Store) failed(err error, now time.Time) {
	s.errs.Add(1)
	if errors.Is(err, context.Canceled) && s.ctx.Err() != nil {
		return // closing
	}
	for {
		m := s.mode.Load()
		if Mode(m) == Fallback {
			return
		}
		if s.mode.CompareAndSwap(m, int32(Fallback)) {
			s.fb.enter(now)
			s.outages.Add(1)
			s.log.Warn("sluice: Redis unreachable; counting limits locally with a share of each until it answers",
				slog.Float64("share", s.share()), slog.String("error", err.Error()))
			s.changed(Mode(m), Fallback)
			select {
			case s.probe <- struct{}{}:
			default:
			}
			return
		}
	}
}

func (s *Store) changed(from, to Mode) {
	if f := s.cfg.ModeChanged; f != nil {
		f(from, to)
	}
}

// heartbeat records the process alive every Heartbeat, reads how many share
// the token and, in fallback, brings the store back when Redis answers.
func (s *Store) heartbeat() {
	defer s.wg.Done()
	t := time.NewTimer(s.cfg.Heartbeat)
	defer t.Stop()
	for {
		s.beat()
		// In fallback, probe four times as often: the sooner shared
		// limits resume, the less of each limit goes unused.
		next := s.cfg.Heartbeat
		if s.Mode() == Fallback {
			next /= 4
		}
		t.Reset(next)
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.probe:
		}
	}
}

func (s *Store) beat() {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	n, err := heartbeatScript.Run(ctx, s.rdb, []string{s.ns}, s.procID, ms(3*s.cfg.Heartbeat), ms(DefaultKeep)).Int64()
	if err != nil {
		if s.ctx.Err() == nil && s.Mode() != Fallback {
			s.failed(err, s.cfg.Clock())
		}
		return
	}
	s.processes.Store(int32(max(1, n)))
	if s.Mode() == Fallback {
		// Every process notices within a heartbeat (plus a call's
		// timeout); until then, and for a global period after, count the
		// local share too.
		cool := 2*s.cfg.Heartbeat + s.cfg.Timeout + s.cfg.GlobalPeriod
		s.coolUntil.Store(s.cfg.Clock().Add(cool).UnixNano())
		if s.mode.CompareAndSwap(int32(Fallback), int32(Recovering)) {
			s.log.Info("sluice: Redis answers again; counting in both places for a cool-down", slog.Duration("cool_down", cool))
			s.changed(Fallback, Recovering)
		}
	}
}

// subscribe forwards wake-ups and global pauses published by any process.
func (s *Store) subscribe(ps *redis.PubSub) {
	defer s.wg.Done()
	defer ps.Close()
	ch := ps.Channel()
	for {
		select {
		case <-s.ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			s.deliver(m.Payload)
		}
	}
}

func (s *Store) deliver(p string) {
	kind, arg, ok := strings.Cut(p, "|")
	if !ok {
		return
	}
	switch kind {
	case "w":
		if s.cfg.Wake != nil {
			s.cfg.Wake(arg)
		}
	case "g":
		n, err := strconv.ParseInt(arg, 10, 64)
		if err == nil && n > 0 && s.cfg.GlobalBlocked != nil {
			s.cfg.GlobalBlocked(time.Duration(n) * time.Millisecond)
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
