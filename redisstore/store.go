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
// background probe pings Redis; when it answers, the store counts in Redis
// again at once. The grants it made on its share alone may still count at
// Discord for a while (a period after their answers, or a bucket's
// window): until then the store is Recovering, and Redis keeps its share
// out of what it hands to every process. The processes that have not
// noticed yet are silent in Redis, so their shares are kept out too. The
// switches are logged and counted ([Store.Stats]), and the limiter's
// requests held by the share's waits ask again when Redis answers.
//
// # When Redis loses state
//
// State Redis may have lost is unknown, and unknown is full. A generation
// marker every script checks finds a wipe (FLUSHALL, a restart without
// persistence, a failover to an empty replica); each key that must exist
// until a known time (the global log, a bucket's in-flight set) is checked
// against it; a bucket a process knows whose record is gone was evicted.
// What was lost counts as full: the global window for a period, a bucket
// for a window ([Stats].Lost counts the losses). While Redis evicts (its
// policy evicts and its evicted_keys rose lately), keys go in batches and
// may leave nothing that tells they were there: then absence is loss, and
// a bucket Redis holds nothing of waits a window before its first request
// (evicting.go). A process silent in Redis,
// or on its fallback share, has its share kept out of what Redis hands the
// others, so a partition never adds up to more than a limit. A reservation
// whose call failed is given back when Redis answers again, and one that
// runs after its caller's deadline takes nothing. docs/scale-out.md has the
// failure table and the Redis settings to use.
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
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
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
	// FallbackOnRefusal makes New start in the fallback when Redis refuses
	// the store (NOAUTH, a wrong password, an ACL without EVALSHA), as it
	// does when Redis cannot be reached. Default false: New returns an
	// error wrapping ErrRefused, since a store that can never count in
	// Redis would run on its fallback share for good, silently.
	FallbackOnRefusal bool
	// RefuseEviction makes New fail with ErrEviction when Redis may evict
	// the store's keys (a maxmemory with a policy other than noeviction:
	// every key of the store has an expiry, so the volatile-* policies
	// evict them too). Default false: New logs a warning, and the store
	// runs, holding what it finds evicted as full (Stats.Lost) and, while
	// Redis evicts, what it finds absent (a bucket new to Redis waits a
	// window).
	RefuseEviction bool
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
	// Recovering: Redis answers again, and grants made on the fallback
	// share alone may still count at Discord: in Redis, which keeps this
	// process's share out of what it hands every process until they no
	// longer count (requests in declared groups count on the share too).
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
	// Owed is the number of calls kept for when Redis answers again: the
	// leases of reservations that failed or timed out (which may have run
	// in Redis, or may yet run there), and the reports of answers that
	// came while Redis was unreachable. Dropped counts those dropped
	// because too many were owed, or because Redis refused them for what
	// it found (a key of the wrong type): their leases expire in Redis.
	Owed    int
	Dropped int64
	// Lost counts the losses of shared state this store found or saw: a
	// generation that changed (Redis flushed, restarted empty, failed over
	// to an empty replica, or evicted the marker), a global log or a
	// bucket's record gone before its time (evicted).
	Lost int64
}

// Store shares rate limits through Redis. Create it with New.
type Store struct {
	cfg    Config
	rdb    redis.UniversalClient
	owned  bool // rdb is the store's copy of the caller's client (bounded), closed by Close
	sc     *scriptSet
	ns     string
	procID string
	log    *slog.Logger
	leases atomic.Uint64

	mode       atomic.Int32
	processes  atomic.Int32
	reserved   atomic.Int64
	fbReserved atomic.Int64
	outages    atomic.Int64
	errs       atomic.Int64

	fb *fallback
	// evict follows whether Redis evicts keys (evicting.go).
	evict evictions
	// refusals are what Redis refused, told once per process
	// (coalesce.go).
	refusals refusals

	// gen is the generation of the shared state this store last saw (see
	// lossLua in scripts.go); lost counts the losses it found or saw.
	gen atomic.Pointer[string]
	// peers is P:seen as the last heartbeat read it, in the generation it
	// read it in; restore is set when a loss was found and not yet
	// written back: the next heartbeat writes peers back (heartbeatLua).
	peers   atomic.Pointer[peerList]
	restore atomic.Bool
	// refusedSince is when Redis began refusing every reservation (Unix
	// ns, 0: the last one succeeded), refusedLog when it was last logged.
	refusedSince atomic.Int64
	refusedLog   atomic.Int64
	mostMu       sync.Mutex
	most         int32 // the most processes seen, since mostAt (mostProcesses)
	mostAt       time.Time
	lost         atomic.Int64
	lostLog      atomic.Int64 // Unix ns of the last loss logged

	// skew is Redis's clock less the local one, as the last heartbeat
	// measured it (nil before one did): a reservation's deadline on
	// Redis's clock.
	skew atomic.Pointer[skew]

	// owed are the Redis calls that must still be made once Redis answers
	// (see owe), oldest first, at most maxOwed.
	owedMu   sync.Mutex
	owed     []func(context.Context) error
	settleMu sync.Mutex   // held by settle, across its Redis calls (the heartbeat's goroutine)
	dropped  atomic.Int64 // owed calls dropped at maxOwed (their leases expire)

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

// ErrRefused is wrapped by the error New returns when Redis refuses the
// store's first call: it needs a password the client lacks (NOAUTH), the
// password is wrong (WRONGPASS), or the user may not run the store's
// commands (NOPERM). Config.FallbackOnRefusal starts the store in its
// fallback instead.
var ErrRefused = errors.New("redisstore: Redis refuses the store")

// ErrEviction is wrapped by the error New returns with
// Config.RefuseEviction when Redis may evict the store's keys.
var ErrEviction = errors.New("redisstore: Redis may evict the shared limits' keys (maxmemory-policy is not noeviction)")

// refusal reports whether err is Redis refusing the client for good (its
// credentials or permissions), rather than failing for a while.
func refusal(err error) bool { return redis.IsAuthError(err) || redis.IsPermissionError(err) }

// New returns a Store on rdb and starts its heartbeat and subscriber. It
// makes the first heartbeat, and waits up to Config.Timeout for the
// subscription to the wake-ups to be active, so no answer published after
// New returns is missed (a limiter told to wait for another process's
// pioneer would otherwise wait for the lease to expire). An unreachable
// Redis starts the store in fallback; one that refuses it (ErrRefused)
// makes New fail, unless Config.FallbackOnRefusal.
//
// Every call the store makes ends by its deadline (Config.Timeout), even
// on a connection that went silent: a *redis.Client, *redis.ClusterClient
// or *redis.Ring without ContextTimeoutEnabled (go-redis's default, whose
// commands ignore their context's deadline and wait for ReadTimeout, 3 s)
// is copied, with ContextTimeoutEnabled set, into a client of the store's
// own that Close closes; hooks added to rdb do not run on the copy (set
// ContextTimeoutEnabled on rdb to have the store use it as it is). rdb
// itself is never closed.
func New(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	return open(rdb, cfg, liveScripts)
}

// open is New with the scripts sc.
func open(rdb redis.UniversalClient, cfg Config, sc *scriptSet) (*Store, error) {
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
	s := &Store{cfg: cfg, sc: sc, ns: cfg.Namespace, procID: hex.EncodeToString(id[:]), log: log,
		probe: make(chan struct{}, 1)}
	s.rdb, s.owned = bounded(rdb)
	s.processes.Store(DefaultFallbackProcesses)
	s.fb = newFallback(cfg.GlobalLimit, cfg.GlobalPeriod, s.silence(), s.share)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	abort := func(err error) (*Store, error) {
		s.cancel()
		if s.owned {
			s.rdb.Close()
		}
		return nil, err
	}
	s.evict.keys.Store(-1)
	if err := s.beat(); err != nil {
		if refusal(err) && !cfg.FallbackOnRefusal {
			return abort(fmt.Errorf("%w: %w", ErrRefused, err))
		}
		s.failed(err, cfg.Clock())
	} else if policy := s.evictingPolicy(); policy != "" {
		if cfg.RefuseEviction {
			return abort(fmt.Errorf("%w: maxmemory-policy %s", ErrEviction, policy))
		}
		log.Warn("sluice: Redis may evict the shared rate limits' keys: set maxmemory-policy noeviction, or give Sluice a Redis of its own; evicted state counts as full until it is known again (docs/scale-out.md)",
			slog.String("maxmemory_policy", policy))
	}
	ps := s.rdb.Subscribe(s.ctx, s.ns+":wake")
	rctx, cancel := context.WithTimeout(s.ctx, cfg.Timeout)
	_, _ = ps.Receive(rctx) // the confirmation; on failure Channel retries
	cancel()
	s.wg.Add(2)
	go s.heartbeat()
	go s.subscribe(ps)
	return s, nil
}

// Close removes the process from the count of those sharing the token,
// stops the store's goroutines and waits for them: within twice
// Config.Timeout, since every Redis call ends by its deadline. The
// caller's Redis client stays open (the store's own copy, see New, is
// closed). Calls still owed to Redis (see Stats.Owed) are not made: their
// leases expire there (Config.LeaseTTL).
func (s *Store) Close() error {
	s.relMu.Lock()
	s.relClosed = true
	s.relMu.Unlock()
	if s.Mode() != Fallback {
		// Leave: the others need not keep this process's share out of
		// their count as they would for a silent one, once the grants it
		// counted only on its share no longer count.
		_, ahead, _ := s.sharing()
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
		_ = s.sc.heartbeat.Run(ctx, s.rdb, []string{s.ns}, s.procID, 0, ms(DefaultKeep), s.generation(), 1, ahead).Err()
		cancel()
	}
	s.cancel()
	s.wg.Wait()
	if s.owned {
		return s.rdb.Close()
	}
	return nil
}

// bounded returns a client whose commands end at their context's deadline
// (ContextTimeoutEnabled): rdb if it is one, else a copy of it, which the
// store owns (owned), for the client types whose options can be copied.
// Another implementation is used as it is.
func bounded(rdb redis.UniversalClient) (c redis.UniversalClient, owned bool) {
	switch r := rdb.(type) {
	case *redis.Client:
		if o := r.Options(); !o.ContextTimeoutEnabled {
			cp := *o
			cp.ContextTimeoutEnabled = true
			// NewClient put its own processor here, with handlers that
			// cannot be registered twice: the copy makes one of its own.
			cp.PushNotificationProcessor = nil
			return redis.NewClient(&cp), true
		}
	case *redis.ClusterClient:
		if o := r.Options(); !o.ContextTimeoutEnabled {
			cp := *o
			cp.ContextTimeoutEnabled = true
			cp.PushNotificationProcessor = nil
			return redis.NewClusterClient(&cp), true
		}
	case *redis.Ring:
		if o := r.Options(); !o.ContextTimeoutEnabled {
			cp := *o
			cp.ContextTimeoutEnabled = true
			return redis.NewRing(&cp), true
		}
	}
	return rdb, false
}

// skew is a measure of Redis's clock against the local one.
type skew struct {
	offset int64 // Redis's Unix ms less the local Unix ms
	err    int64 // how far off offset may be, ms (half the round trip)
}

// owe keeps a Redis call that must be made once Redis answers: a lease
// to give back (its reservation failed or timed out, and may have run in
// Redis or be queued there), a report that could not be made. The
// heartbeat makes them, oldest first, right after its next call succeeds
// (it is nudged now). At maxOwed the oldest is dropped: its lease expires
// in Redis after Config.LeaseTTL.
func (s *Store) owe(f func(context.Context) error) {
	s.owedMu.Lock()
	if len(s.owed) >= maxOwed {
		s.owed[0] = nil
		s.owed = s.owed[1:]
		s.dropped.Add(1)
	}
	s.owed = append(s.owed, f)
	s.owedMu.Unlock()
	if s.Mode() != Fallback {
		s.nudge() // in fallback the probe runs often enough
	}
}

// maxOwed bounds the calls a store keeps for when Redis answers again.
const maxOwed = 4096

// settle makes the owed calls, oldest first, until one fails (it is kept,
// and the store falls back): it reports whether all were made. One settle
// runs at a time (settleMu), so the calls are made in order, and one that
// returns has seen every call owed before it made.
func (s *Store) settle() bool {
	s.settleMu.Lock()
	defer s.settleMu.Unlock()
	for s.ctx.Err() == nil {
		s.owedMu.Lock()
		if len(s.owed) == 0 {
			s.owedMu.Unlock()
			return true
		}
		f := s.owed[0]
		s.owed[0] = nil
		s.owed = s.owed[1:]
		s.owedMu.Unlock()
		ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
		err := f(ctx)
		cancel()
		if err != nil && callRefusal(err) {
			// refused for what it found (a key of the wrong type):
			// trying again would refuse again and hold the others up
			s.errs.Add(1)
			s.dropped.Add(1)
			continue
		}
		if err != nil {
			s.owedMu.Lock()
			s.owed = append([]func(context.Context) error{f}, s.owed...)
			s.owedMu.Unlock()
			s.failed(err, s.cfg.Clock())
			return false
		}
	}
	return false
}

// nudge makes the heartbeat run now.
func (s *Store) nudge() {
	select {
	case s.probe <- struct{}{}:
	default:
	}
}

// Mode returns where the store counts now.
func (s *Store) Mode() Mode { return Mode(s.mode.Load()) }

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	s.owedMu.Lock()
	owed := len(s.owed)
	s.owedMu.Unlock()
	return Stats{Mode: s.Mode(), Processes: int(s.processes.Load()),
		Reserved: s.reserved.Load(), FallbackReserved: s.fbReserved.Load(),
		Outages: s.outages.Load(), Errors: s.errs.Load(), Owed: owed, Dropped: s.dropped.Load(),
		Lost: s.lost.Load()}
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
	if mode == Recovering && s.resume(r.Now) {
		mode = Shared
	}
	if mode == Fallback {
		return s.localOnly(r, s.local(r))
	}
	// A key Redis refused for a while is refused here until then; a
	// contended one is asked one reservation at a time (coalesce.go).
	refused, done := s.refusals.enter(ctx, keysOf(r), s.cfg.Clock)
	if done == nil {
		return refused
	}
	if s.Mode() == Fallback {
		// It fell back while this one waited for its turn.
		done(ratelimit.SharedGrant{}, false)
		return s.localOnly(r, s.local(r))
	}
	// Recovering: grants made on the fallback share may still count at
	// Discord. Redis keeps this process's share out of what it hands to
	// every process, itself included, in the global window and the
	// buckets (Store.sharing); the declared groups have no such keep-out,
	// so a request in one counts on the share too.
	both := mode == Recovering && len(r.Groups) > 0
	var local ratelimit.SharedGrant
	if both {
		if local = s.local(r); !local.OK {
			done(ratelimit.SharedGrant{}, false)
			return local
		}
	}
	lease := s.procID + ":" + strconv.FormatUint(s.leases.Add(1), 36)
	g, err := s.reserve(ctx, lease, r)
	done(g, err == nil)
	if err == nil {
		s.refusedSince.Store(0)
	} else {
		// The script may have run (its answer is what failed) or may run
		// yet (queued in a frozen Redis): its lease is given back as soon
		// as Redis answers, and a late run takes nothing (its deadline and
		// the lease's tombstone).
		s.owe(func(ctx context.Context) error { return s.cancelLease(ctx, lease, r) })
	}
	if err == nil && g.OK && !both && s.Mode() == Fallback {
		// The store fell back while this call was under way: the grant is
		// spent only if the local share counts it too (the fallback's hold
		// at the switch), else it is given back.
		if local = s.local(r); !local.OK {
			a := ratelimit.SharedAnswer{Now: r.Now, Template: r.Template, Major: r.Major}
			s.owe(func(ctx context.Context) error { return s.report(ctx, lease, g, a) })
			return local
		}
		both = true
	}
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller's context ended (the request was cancelled, its
		// attempt timed out, Close): not Redis's fault, and nothing to send.
		if both {
			s.fb.report(local, ratelimit.SharedAnswer{Now: r.Now}, false)
		}
		return ratelimit.SharedGrant{Scope: "bucket"}
	case err != nil && s.refusedOnce(err):
		// Redis answers but refused this call (a key of the wrong type,
		// memory full at maxmemory, a script error on what it found): this
		// request waits and tries again; Redis is not down for the others.
		if both {
			s.fb.report(local, ratelimit.SharedAnswer{Now: r.Now}, false)
		}
		return ratelimit.SharedGrant{Scope: "bucket", Wait: callRefusedWait}
	case err != nil:
		s.failed(err, r.Now)
		if both {
			return s.localOnly(r, local) // counted locally already
		}
		return s.localOnly(r, s.local(r))
	case !both:
		return g
	case !g.OK:
		s.fb.report(local, ratelimit.SharedAnswer{Now: r.Now}, false) // never sent
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

// localOnly returns g, a grant from the fallback share that Redis does not
// count, once the fallback counts it among the grants whose share the
// other processes must keep out (fallback.only). If the store left its
// fallback meanwhile, the heartbeat that brought it back may have told
// Redis that nothing here counts any more: the grant is given back, and
// the caller asks again at once (through Redis).
func (s *Store) localOnly(r ratelimit.SharedRequest, g ratelimit.SharedGrant) ratelimit.SharedGrant {
	if !g.OK {
		return g
	}
	s.fb.begin()
	if s.Mode() == Fallback {
		return g
	}
	s.fb.report(ratelimit.SharedGrant{Key: fallbackKey(g.Lease), Global: g.Global, Groups: g.Groups},
		ratelimit.SharedAnswer{Now: r.Now}, true)
	return ratelimit.SharedGrant{Scope: "bucket", Wait: time.Millisecond}
}

// resume ends Recovering once no grant counted only on the fallback share
// may count at Discord any more (at now): the shared limits alone apply
// from then on. It reports whether the store counts in Redis alone.
func (s *Store) resume(now time.Time) bool {
	if s.fb.holds(now) {
		return s.Mode() == Shared
	}
	if s.mode.CompareAndSwap(int32(Recovering), int32(Shared)) {
		s.log.Info("sluice: Redis: shared limits resumed")
		s.changed(Recovering, Shared)
	}
	return s.Mode() == Shared
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

func (s *Store) reserve(ctx context.Context, lease string, r ratelimit.SharedRequest) (ratelimit.SharedGrant, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	var limit, remaining, resetIn, endedAgo int64
	if r.Local.Known {
		// What Discord counted, as far as this process knows: its own
		// requests in flight (this one included) are left out, since each
		// counts itself when it reaches the script.
		limit = int64(r.Local.Limit)
		remaining = int64(min(r.Local.Limit, r.Local.Remaining+r.Local.InFlight()))
		resetIn = ms(r.Local.ResetAt.Sub(r.Now))
		if !r.Local.ResetAt.IsZero() {
			endedAgo = ms(r.Now.Sub(r.Local.ResetAt))
		}
	}
	args := []any{lease, r.Route, r.Template, r.Major, b2i(r.Global),
		s.cfg.GlobalLimit, ms(s.cfg.GlobalPeriod), ms(s.cfg.LeaseTTL),
		limit, remaining, resetIn, ms(r.Window), ms(r.Margin),
		s.cfg.InvalidLimit, ms(s.cfg.InvalidWindow) / 60000, ms(DefaultKeep), r.Hash, b2i(r.Serial),
		s.groupID(r.GroupID), len(r.Groups), s.deadline(ctx), s.generation(), endedAgo, ms(s.silence()),
		b2i(s.mayEvict()), r.GroupClass, s.processes.Load()}
	res, err := s.sc.reserve.Run(ctx, s.rdb, []string{s.ns}, groupArgs(args, r.Groups, true)...).Slice()
	if err != nil {
		return ratelimit.SharedGrant{}, err
	}
	if len(res) != 8 {
		return ratelimit.SharedGrant{}, fmt.Errorf("redisstore: reserve: %d results", len(res))
	}
	gen, _ := res[6].(string)
	lost, _ := res[7].(int64)
	s.saw(gen, lost == 1)
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
		if r.Window > 0 {
			g.Window = r.Window + r.Margin
		}
		return g, nil
	}
	g.Wait = time.Duration(wait) * time.Millisecond
	g.Notify = flag == 1
	return g, nil
}

// callRefusedWait is how long a request waits after Redis refused its
// reservation (refusedOnce).
const callRefusedWait = 100 * time.Millisecond

// refusedStreak is how long Redis may refuse every reservation before the
// store counts it as down and falls back.
const refusedStreak = 2 * time.Second

// callRefusal reports whether err is Redis refusing one call while it
// answers: WRONGTYPE (a key of another application's), OOM (an evicting
// Redis at its maxmemory refuses a script's writes until it has evicted),
// or an error the script met (ERR). Authentication, permissions, a
// read-only replica, a loading or busy server are not: for those Redis is
// of no use to any call.
func callRefusal(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	return redis.HasErrorPrefix(err, "WRONGTYPE") || redis.HasErrorPrefix(err, "OOM") || redis.HasErrorPrefix(err, "ERR")
}

// refusedOnce reports whether err is a refusal of this call only
// (callRefusal), as long as Redis has not refused every reservation for
// refusedStreak: then it is counted as an outage like any other failure.
// A refusal is counted (Stats.Errors) and logged at most once a second.
func (s *Store) refusedOnce(err error) bool {
	if !callRefusal(err) {
		return false
	}
	s.errs.Add(1)
	since := s.refusedSince.Load()
	if since == 0 {
		s.refusedSince.CompareAndSwap(0, time.Now().UnixNano())
	} else if time.Since(time.Unix(0, since)) > refusedStreak {
		return false
	}
	if t, last := time.Now().UnixNano(), s.refusedLog.Load(); t-last >= int64(time.Second) && s.refusedLog.CompareAndSwap(last, t) {
		s.log.Warn("sluice: Redis refused a reservation; the request waits and tries again", slog.String("error", err.Error()))
	}
	return true
}

// mostProcesses returns the most processes seen sharing the token within
// DefaultKeep, n (read in Redis now) included: Redis keeps that count too,
// but may have lost it (evicted, wiped), and a count that dropped would
// raise the fallback share over the limit.
func (s *Store) mostProcesses(n int32) int32 {
	s.mostMu.Lock()
	defer s.mostMu.Unlock()
	now := time.Now()
	if n >= s.most || now.Sub(s.mostAt) > DefaultKeep {
		s.most, s.mostAt = n, now
	}
	return s.most
}

// silence is how long a process may go unheard in Redis before the others
// keep its fallback share out of their count: two heartbeats and a call's
// timeout. A process that falls back sends nothing for at least that long
// (fallback.hold), so its share is kept out before it spends any.
func (s *Store) silence() time.Duration { return 2*s.cfg.Heartbeat + s.cfg.Timeout }

// generation is the generation of the shared state last seen ("" before
// any).
func (s *Store) generation() string {
	if g := s.gen.Load(); g != nil {
		return *g
	}
	return ""
}

// saw records what a script said of the state's generation: a new one
// (after one this store knew) or lost set means the shared state was
// evicted or wiped; the scripts hold what was lost as full (see lossLua),
// and the loss is counted (Stats.Lost) and logged.
func (s *Store) saw(gen string, lost bool) {
	if gen == "" {
		return
	}
	if old := s.gen.Load(); old == nil || *old != gen {
		// (stored only when it changes: this runs on every reservation)
		if old := s.gen.Swap(&gen); old != nil && *old != gen {
			lost = true
		}
	}
	if !lost {
		return
	}
	s.lost.Add(1)
	if s.restore.CompareAndSwap(false, true) {
		s.nudge() // write back who was silent (beat)
	}
	now := time.Now().UnixNano()
	if last := s.lostLog.Load(); now-last >= int64(time.Second) && s.lostLog.CompareAndSwap(last, now) {
		s.log.Warn("sluice: Redis lost shared rate-limit state (evicted, flushed or restarted empty); what was lost counts as full for a window: use a Redis of its own, or maxmemory-policy noeviction (docs/scale-out.md)",
			slog.Int64("losses", s.lost.Load()))
	}
}

// deadline is ctx's deadline on Redis's clock (Unix ms), later by the
// clock measure's error: a reservation script that runs after it takes
// nothing, its caller having given up. 0 (no deadline) before the first
// heartbeat measured the clock.
func (s *Store) deadline(ctx context.Context) int64 {
	d, ok := ctx.Deadline()
	k := s.skew.Load()
	if !ok || k == nil {
		return 0
	}
	return d.UnixMilli() + k.offset + k.err + 1
}

// cancelLease gives back the slots the reservation lease of r took, if it
// ran, and leaves a tombstone that makes it take nothing if it runs later.
func (s *Store) cancelLease(ctx context.Context, lease string, r ratelimit.SharedRequest) error {
	g := ratelimit.SharedGrant{Key: r.Route, Global: r.Global, Groups: r.Groups, GroupID: r.GroupID}
	return s.run(ctx, lease, g, ratelimit.SharedAnswer{Now: r.Now, Template: r.Template, Major: r.Major}, r.Route)
}

// Report implements ratelimit.Shared. A report that cannot be made now
// (Redis is unreachable, or the call fails) is owed: made once Redis
// answers, so the lease and the slots it holds are settled then, not at
// the lease's expiry.
func (s *Store) Report(ctx context.Context, g ratelimit.SharedGrant, a ratelimit.SharedAnswer) {
	lease := splitLease(g.Lease)
	if g.Local {
		s.fb.report(ratelimit.SharedGrant{Key: fallbackKey(g.Lease), Global: g.Global, Groups: g.Groups}, a, lease == "")
		if _, inflight, _ := s.fb.holding(); lease == "" && !inflight && s.Mode() == Recovering {
			// The last grant made on the share is answered: the next
			// beat, at once, tells Redis when it stops counting, rather
			// than the guess made while it was in flight (Store.sharing).
			s.nudge()
		}
	}
	if lease == "" {
		return // counted locally only
	}
	later := func(ctx context.Context) error { return s.report(ctx, lease, g, a) }
	if s.Mode() == Fallback {
		s.owe(later)
		return
	}
	if err := s.report(ctx, lease, g, a); err != nil {
		if callRefusal(err) {
			s.errs.Add(1) // made again once, when the heartbeat settles what is owed
		} else {
			s.failed(err, a.Now)
		}
		s.owe(later)
	}
}

func (s *Store) report(ctx context.Context, lease string, g ratelimit.SharedGrant, a ratelimit.SharedAnswer) error {
	return s.run(ctx, lease, g, a, "")
}

// run runs the report script: for an answer, or, with cancel set to the
// request's route key, to give back a reservation that may or may not have
// run (its bucket's key is then found as the reservation found it).
func (s *Store) run(ctx context.Context, lease string, g ratelimit.SharedGrant, a ratelimit.SharedAnswer, cancelRoute string) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	h := a.Headers
	full := h.Has.Limit && h.Has.Remaining && h.Has.ResetAfter && h.Limit >= 1
	hash := ""
	if h.Has.Bucket {
		hash = h.Bucket
	}
	// What the answer means, by the one outcome table: the script acts
	// on it, and decides none of it again.
	o := a.Outcome()
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
	args := []any{lease, g.Key, chargeArg(o.Charge), a.Status, b2i(full),
		h.Limit, h.Remaining, ms(max(resetIn, time.Millisecond)), hash, a.Template, a.Major,
		o.Pause.String(), ms(o.Wait), b2i(o.Invalid), b2i(g.Global),
		ms(s.cfg.GlobalPeriod), ms(a.RoundTrip), ms(DefaultKeep), ms(s.cfg.InvalidWindow) / 60000,
		ms(s.cfg.LeaseTTL), resetMs, s.groupID(g.GroupID), len(g.Groups), b2i(cancelRoute != ""), cancelRoute,
		b2i(g.Pioneer), ms(g.Window)}
	res, err := s.sc.report.Run(ctx, s.rdb, []string{s.ns}, groupArgs(args, g.Groups, true)...).Int64Slice()
	if err != nil {
		return err
	}
	if len(res) == 2 && res[1] == 1 {
		// The answer made room in its bucket (a newer window, an earlier
		// end, a slot given back): a refusal of it remembered here no
		// longer holds.
		keys := []string{g.Key}
		if hash != "" {
			keys = append(keys, routes.BucketKey(hash, a.Major))
		}
		s.refusals.lift(keys...)
	}
	return nil
}

// chargeArg is the report script's argument for charge c.
func chargeArg(c ratelimit.Charge) int {
	switch c {
	case ratelimit.ChargeNone:
		return 0
	case ratelimit.ChargeArrived:
		return 2
	}
	return 1
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
			s.nudge()
			return
		}
	}
}

func (s *Store) changed(from, to Mode) {
	s.refusals.forget()
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
		if err := s.beat(); err != nil {
			if s.ctx.Err() == nil && s.Mode() != Fallback {
				s.failed(err, s.cfg.Clock())
			}
		}
	}
}

// beat records the process alive, measures Redis's clock, makes the calls
// owed to Redis and, in fallback, starts the recovery.
func (s *Store) beat() error {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	s.watchEvictions(ctx)
	sent := time.Now()
	onShare, ahead, began := s.sharing()
	args := []any{s.procID, ms(3 * s.cfg.Heartbeat), ms(DefaultKeep), s.generation(), onShare, ahead, b2i(s.mayEvict())}
	back := false
	if pl := s.peers.Load(); s.restore.Load() && pl != nil && pl.gen != s.generation() {
		// read in the generation that was lost
		args, back = pl.args(args), true
	} else {
		args = append(args, 0)
		back = s.restore.Load() // nothing of another generation to write back
	}
	res, err := s.sc.heartbeat.Run(ctx, s.rdb, []string{s.ns}, args...).Slice()
	if err != nil {
		return err
	}
	if len(res) != 5 {
		return fmt.Errorf("redisstore: heartbeat: %d results", len(res))
	}
	rtt := time.Since(sent)
	n, _ := res[0].(int64)
	redisNow, _ := res[1].(int64)
	gen, _ := res[2].(string)
	lost, _ := res[3].(int64)
	s.skew.Store(&skew{offset: redisNow - sent.Add(rtt/2).UnixMilli(), err: ms(rtt/2) + 1})
	s.processes.Store(s.mostProcesses(int32(max(1, n))))
	s.saw(gen, lost == 1)
	if back {
		s.restore.Store(false)
	}
	if !s.restore.Load() {
		// (kept from before a loss found now, until written back)
		s.peers.Store(readPeers(gen, res[4]))
	}
	if !s.settle() {
		return nil // a call failed again: recorded, and the store is in fallback
	}
	if s.mode.CompareAndSwap(int32(Fallback), int32(Recovering)) {
		s.log.Info("sluice: Redis answers again; counting the local share too while grants made on it may count")
		s.changed(Fallback, Recovering)
		if _, _, now := s.fb.holding(); now != began {
			// A grant was made on the share while this call was under
			// way: told in the next beat, at once.
			s.nudge()
		}
	}
	if s.Mode() == Recovering {
		s.resume(s.cfg.Clock())
	}
	return nil
}

// sharing returns what the heartbeat tells Redis of this process's
// fallback share: 2 while grants counted only on it (made in fallback, not
// in Redis) may still count at Discord, with how far ahead of Redis's now
// to date its P:ex entry (see heartbeatLua: the others keep the share
// out of the global window until a period after that date), else 0 and
// "". began is how many such grants were ever made. A grant still in
// flight may count until a period after its answer, which the next beat
// tells: until then, and until the process counts as unheard if that beat
// fails, it is dated Store.silence ahead.
func (s *Store) sharing() (onShare int, ahead string, began uint64) {
	end, inflight, began := s.fb.holding()
	now := s.cfg.Clock()
	if !inflight && !now.Before(end) {
		return 0, "", began
	}
	d := end.Sub(now) - s.cfg.GlobalPeriod
	if inflight {
		d = max(d, s.silence())
	}
	return 2, strconv.FormatInt(ms(d+clockSlack), 10), began
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

// peerList is P:seen as a heartbeat read it: the processes and their
// last heartbeats (Redis ms), in generation gen.
type peerList struct {
	gen  string
	ids  []string
	last []int64
}

// readPeers reads heartbeatLua's list of P:seen (id, score pairs).
func readPeers(gen string, v any) *peerList {
	pl := &peerList{gen: gen}
	flat, _ := v.([]any)
	for i := 0; i+1 < len(flat) && len(pl.ids) < maxPeers; i += 2 {
		id, _ := flat[i].(string)
		score, _ := flat[i+1].(string)
		last, err := strconv.ParseFloat(score, 64)
		if id == "" || len(id) > maxPeerID || err != nil || last <= 0 || last > math.MaxInt64/2 {
			continue
		}
		pl.ids, pl.last = append(pl.ids, id), append(pl.last, int64(last))
	}
	return pl
}

// args appends to a heartbeat's arguments the processes to write back
// (heartbeatLua: their count, then id and last heartbeat each).
func (pl *peerList) args(args []any) []any {
	args = append(args, len(pl.ids))
	for i, id := range pl.ids {
		args = append(args, id, pl.last[i])
	}
	return args
}
