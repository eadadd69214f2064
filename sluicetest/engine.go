package sluicetest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Config configures an Engine.
type Config struct {
	// Rules are the limits to enforce. A RuleSet with no rules means
	// DefaultRules().
	Rules RuleSet
	// Tokens are the valid bot tokens. Empty means any non-empty token is
	// valid. Requests with another token get 401.
	Tokens []string
	// Forbidden lists major parameter values (channel, guild, webhook or
	// interaction ids) whose requests get 403 Missing Access after being
	// counted against their bucket, as Discord does for resources the bot
	// cannot see.
	Forbidden []string
	// RevokedTokens lists webhook and interaction tokens (the
	// {webhook_token} or {interaction_token} in a path) answered 401
	// Invalid Webhook Token (code 50027), as Discord answers an expired
	// interaction token or a deleted webhook's.
	RevokedTokens []string
	// TimelineLimit caps the events kept per bucket in Stats. Zero means
	// 10000; negative keeps none.
	TimelineLimit int
	// TrackDuplicates counts, per method, requests whose method, path and
	// body the engine has already answered (Stats.Duplicates): a client
	// that resends a request that may have been processed shows up there.
	// It keeps a hash of every request, so it is off by default.
	TrackDuplicates bool
	// LateReset makes every bucket window reopen this long after the reset
	// its headers announced (Faults.LateReset; Engine.SetLateReset changes
	// it later). Zero or negative means on time.
	LateReset time.Duration
}

// Request is what the engine needs to know of one HTTP request.
type Request struct {
	// Method is the HTTP method.
	Method string
	// Path is the URL's escaped path, with or without the /api/vN prefix
	// (http.Request.URL.EscapedPath()).
	Path string
	// Authorization is the raw Authorization header value; "" when absent.
	// The engine never stores or reports it.
	Authorization string
	// IP is the client's address without port; it keys the per-IP global
	// limit, the invalid-request count and bans.
	IP string
	// Body is the request body; sublimits look at its top-level JSON fields.
	Body []byte
}

// Decision is the engine's answer to one Request.
type Decision struct {
	// Status is the HTTP status code.
	Status int
	// Header holds every header to send, rate-limit headers included.
	Header http.Header
	// Body is the response body.
	Body []byte
	// Rule is the name of the matched rule; "" when none matched.
	Rule string
	// Scope is the X-RateLimit-Scope of a 429 ("user", "global", "shared"),
	// "ban" for the Cloudflare answer, and "" otherwise.
	Scope string
	// Injected is true for a global 429 caused by the simulated external
	// consumer rather than by the client.
	Injected bool
	// Late is true for an answer given in a bucket window's late interval
	// (Faults.LateReset): after the reset the window's headers announced,
	// before the window really reopens.
	Late bool

	bucket *bucketState // the bucket the request reached; nil: none
}

// Engine is the simulator's rules engine: it decides the answer to each
// request at a time given as an argument, so its tests need no clock and no
// sleeps. It keeps the strict accounting that Stats reports. An Engine is
// safe for concurrent use; requests are decided one at a time, in the order
// Handle is called.
type Engine struct {
	mu        sync.Mutex
	rules     RuleSet
	router    *router
	majors    map[string]bool
	tokens    map[string]bool
	forbidden map[string]bool
	revoked   map[string]bool
	start     time.Time
	seq       uint64

	buckets   map[string]*bucketState
	sublimits map[string]*sublimitState
	globals   map[string]*globalState
	invalid   map[string]*slidingLog // per IP
	bans      map[string]time.Time   // IP -> banned until
	outages   []outage               // external consumer windows
	seen      map[[32]byte]bool      // request hashes, with TrackDuplicates
	messages  messageLog             // messages of the last NonceWindow
	stats     counters
	timeline  int
	lateReset time.Duration
}

type bucketState struct {
	win fixedWindow
	// onTime replays the requests of win's late interval against the
	// window an on-time Discord would have opened at its announced reset:
	// a late 429 it would have admitted is excused (Stats.LateResetExcused).
	onTime fixedWindow
	// onTimeWindows counts the windows onTime opened since win last
	// opened: with a LimitCycle, the on-time window i takes the limit of
	// window stats.Windows+i.
	onTimeWindows int
	// inFlight counts the bucket's answers decided and not yet written
	// (Server: during Faults.Latency); stats.MaxInFlight is its peak.
	inFlight int
	stats    BucketStats
}

type sublimitState struct {
	win         fixedWindow
	limited     int // 429s in the open window
	stats       SublimitStats
	windowCount int
}

type globalState struct {
	log   slidingLog
	stats GlobalStats
}

// outage is an external consumer's window: of the token's global limit,
// or of the per-IP one (ip) for requests without a token.
type outage struct {
	from, until time.Time
	ip          bool
}

type counters struct {
	requests         int
	byStatus         map[int]int
	rateLimited      map[string]int
	duplicates       map[string]int
	injected         int
	banned           int
	bans             int
	invalid          int
	serverErrors     int
	dropped          int
	dropTimes        []Duration // see Stats.DropTimes
	goAways          int
	maxBucket        int
	maxGlobal        int
	lateReset        int
	lateExcused      int
	reorderedExcused int // see Stats.ReorderedExcused
	globalReordered  int // see Stats.GlobalReorderedExcused
	lastBanExpires   time.Time

	messagesCreated      int
	messagesDeduplicated int
	duplicateMessages    int
}

// NewEngine returns an engine whose clock starts at start (Stats report
// times relative to it).
func NewEngine(start time.Time, cfg Config) (*Engine, error) {
	rs := cfg.Rules
	if len(rs.Rules) == 0 {
		rs = DefaultRules()
	}
	rs = rs.withDefaults()
	if err := rs.Validate(); err != nil {
		return nil, err
	}
	rt, err := newRouter(rs.Rules)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRules, err)
	}
	e := &Engine{
		rules:     rs,
		router:    rt,
		majors:    map[string]bool{},
		tokens:    map[string]bool{},
		forbidden: map[string]bool{},
		revoked:   map[string]bool{},
		start:     start,
		buckets:   map[string]*bucketState{},
		sublimits: map[string]*sublimitState{},
		globals:   map[string]*globalState{},
		invalid:   map[string]*slidingLog{},
		bans:      map[string]time.Time{},
		timeline:  cfg.TimelineLimit,
		lateReset: max(cfg.LateReset, 0),
		messages:  newMessageLog(),
	}
	if e.timeline == 0 {
		e.timeline = 10000
	}
	for _, m := range rs.MajorParams {
		e.majors[m] = true
	}
	for _, t := range cfg.Tokens {
		e.tokens[t] = true
	}
	for _, t := range cfg.RevokedTokens {
		e.revoked[t] = true
	}
	for _, f := range cfg.Forbidden {
		e.forbidden[f] = true
	}
	if cfg.TrackDuplicates {
		e.seen = map[[32]byte]bool{}
	}
	e.stats = newCounters()
	return e, nil
}

func newCounters() counters {
	return counters{byStatus: map[int]int{}, rateLimited: map[string]int{}, duplicates: map[string]int{}}
}

// Since returns now as Stats tell times: since the engine started (or was
// Reset).
func (e *Engine) Since(now time.Time) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return now.Sub(e.start)
}

// Rules returns the rule set in force, defaults filled in.
func (e *Engine) Rules() RuleSet { return e.rules }

// ExhaustGlobal simulates another consumer of the bot's token eating the
// whole global limit from from until until: every authenticated request
// that is not global-exempt gets a global 429 in that interval, with
// retry_after running to until. Those 429s are counted as injected.
func (e *Engine) ExhaustGlobal(from, until time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.outages = append(e.outages, outage{from: from, until: until})
}

// ExhaustIPGlobal is ExhaustGlobal for the per-IP global limit: every
// request without an Authorization header that is not global-exempt gets a
// global 429 from from until until, while authenticated requests go on.
func (e *Engine) ExhaustIPGlobal(from, until time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.outages = append(e.outages, outage{from: from, until: until, ip: true})
}

// SetLateReset makes every bucket window reopen d after the reset its
// headers announce, from the next request on; zero or negative means on
// time. It applies to windows already open too: their real end moves to
// their announced reset plus d (a window that has already reopened stays
// reopened). See Faults.LateReset.
func (e *Engine) SetLateReset(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lateReset = max(d, 0)
}

// identity names who a request counts against, without the token itself.
func identity(token, ip string) string {
	if token == "" {
		return "ip:" + ip
	}
	return "token:" + shortHash(token)
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}

// parseAuthorization returns the token of "Bot <t>" or "Bearer <t>".
func parseAuthorization(v string) (token string, ok bool) {
	for _, p := range []string{"Bot ", "Bearer "} {
		if len(v) > len(p) && strings.EqualFold(v[:len(p)], p) {
			return strings.TrimSpace(v[len(p):]), true
		}
	}
	return "", false
}

// Handle decides the answer to req at time now and records it.
func (e *Engine) Handle(now time.Time, req Request) Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.messages.expire(now)
	d := e.decide(now, req)
	if e.seen != nil {
		h := sha256.New()
		h.Write([]byte(req.Method + " " + req.Path + "\n"))
		h.Write(req.Body)
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		if e.seen[sum] {
			e.stats.duplicates[req.Method]++
		}
		e.seen[sum] = true
	}
	e.stats.requests++
	e.stats.byStatus[d.Status]++
	if d.Status == http.StatusTooManyRequests && d.Scope != "ban" {
		e.stats.rateLimited[d.Scope]++
		if d.Injected {
			e.stats.injected++
		}
	}
	if d.Status == 401 || d.Status == 403 || (d.Status == 429 && d.Scope != "shared" && d.Scope != "ban") {
		e.countInvalid(now, req.IP)
	}
	return d
}

func (e *Engine) countInvalid(now time.Time, ip string) {
	e.stats.invalid++
	l := e.invalid[ip]
	if l == nil {
		l = &slidingLog{window: e.rules.InvalidWindow.D()}
		e.invalid[ip] = l
	}
	l.add(now)
	if l.count(now) > e.rules.InvalidLimit {
		until := now.Add(e.rules.BanDuration.D())
		if e.bans[ip].Before(now) || e.bans[ip].IsZero() {
			e.stats.bans++
		}
		e.bans[ip] = until
		e.stats.lastBanExpires = until
		l.times, l.head, l.old = nil, 0, 0 // the ban starts a clean slate
	}
}

func (e *Engine) decide(now time.Time, req Request) Decision {
	if until, ok := e.bans[req.IP]; ok {
		if now.Before(until) {
			e.stats.banned++
			return banDecision()
		}
		delete(e.bans, req.IP)
	}
	path, ok := apiPath(req.Path)
	if !ok {
		return jsonError(http.StatusNotFound, "404: Not Found", 0)
	}
	rule, params, otherMethod := e.router.match(req.Method, path)
	if rule == nil {
		if otherMethod {
			return jsonError(http.StatusMethodNotAllowed, "405: Method Not Allowed", 0)
		}
		return jsonError(http.StatusNotFound, "404: Not Found", 0)
	}

	token := ""
	if req.Authorization != "" {
		t, ok := parseAuthorization(req.Authorization)
		if !ok || t == "" || (len(e.tokens) > 0 && !e.tokens[t]) {
			return named(jsonError(http.StatusUnauthorized, "401: Unauthorized", 0), rule)
		}
		token = t
	} else if rule.Auth == AuthRequired {
		return named(jsonError(http.StatusUnauthorized, "401: Unauthorized", 0), rule)
	}
	if e.revoked[params["webhook_token"]] || e.revoked[params["interaction_token"]] {
		return named(jsonError(http.StatusUnauthorized, "Invalid Webhook Token", 50027), rule)
	}
	who := identity(token, req.IP)

	if !rule.GlobalExempt {
		if d, limited := e.checkGlobal(now, who, token != ""); limited {
			return named(d, rule)
		}
	}

	major := e.majorString(rule.tmpl, params)
	key := who + "/" + rule.Bucket + "/" + major
	b := e.buckets[key]
	if b == nil {
		b = &bucketState{
			win:    fixedWindow{limit: rule.Limit, length: rule.Window.D()},
			onTime: fixedWindow{limit: rule.Limit, length: rule.Window.D()},
			stats: BucketStats{
				Key: key, Hash: rule.Bucket, Major: major, Identity: who,
				Limit: rule.Limit, LimitCycle: rule.LimitCycle, Window: rule.Window,
			},
		}
		e.buckets[key] = b
	}
	b.stats.addRule(rule.Name)
	d := e.decideInBucket(now, req, rule, params, who, major, key, b)
	d.bucket = b
	return d
}

// decideInBucket is decide's part once the request reached bucket b (key).
func (e *Engine) decideInBucket(now time.Time, req Request, rule *compiledRule, params map[string]string, who, major, key string, b *bucketState) Decision {
	b.win.late = e.lateReset
	if b.win.roll(now) {
		b.onTime.open, b.onTime.count, b.onTimeWindows = false, 0, 0
	}
	// In the late interval the client was told the window had reset; what
	// would an on-time Discord have done with this request? Its window
	// would be the bucket's next one, with the next limit of a LimitCycle.
	late, onTimeAdmits := b.win.inLate(now), false
	if late {
		b.onTime.roll(now)
		if !b.onTime.open {
			b.onTime.limit = rule.windowLimit(b.stats.Windows + b.onTimeWindows)
		}
		var onTimeOpened bool
		onTimeAdmits, onTimeOpened = b.onTime.take(now)
		if onTimeOpened {
			b.onTimeWindows++
		}
	}
	if !b.win.open {
		b.win.limit = rule.windowLimit(b.stats.Windows) // each window its own limit
	}
	early := b.win.stampedEarly(now)
	admitted, opened := b.win.take(now)
	fits := early && b.win.arrive(now)
	if admitted && early {
		b.win.early++
	}
	if opened {
		b.stats.Windows++
	}
	b.stats.Requests++
	h := e.bucketHeaders(now, rule, &b.win)
	if !admitted {
		b.stats.RateLimited++
		wait := b.win.resetAfter(now)
		d := rateLimited(h, "user", wait, false, 0)
		if late {
			d.Late = true
			b.stats.LateReset429s++
			e.stats.lateReset++
			if onTimeAdmits {
				b.stats.LateResetExcused++
				e.stats.lateExcused++
			}
		}
		// By arrival, the client kept the limit: this request fitted
		// the window its stamp falls in, or the window is full only with
		// requests stamped before it opened.
		if !(late && onTimeAdmits) && (fits || (!early && !b.win.inOrderFull())) {
			b.stats.ReorderedExcused++
			e.stats.reorderedExcused++
		}
		e.record(b, now, rule, d, b.win.remaining())
		return named(d, rule)
	}
	b.stats.Admitted++
	if b.win.count > b.stats.MaxAdmitted {
		b.stats.MaxAdmitted = b.win.count
	}
	if over := b.win.count - b.win.limit; over > b.stats.MaxOverLimit {
		b.stats.MaxOverLimit = over
	}
	if b.win.count > e.stats.maxBucket {
		e.stats.maxBucket = b.win.count
	}

	if d, limited := e.checkSublimits(now, rule, key, params, req.Body, h); limited {
		d.Late = late
		e.record(b, now, rule, d, b.win.remaining())
		return named(d, rule)
	}

	for name, v := range params {
		if e.majors[name] && e.forbidden[v] {
			d := jsonError(http.StatusForbidden, "Missing Access", 50001)
			mergeHeader(d.Header, h)
			d.Late = late
			e.record(b, now, rule, d, b.win.remaining())
			return named(d, rule)
		}
	}

	d := Decision{Status: rule.Status, Header: h, Late: late}
	if rule.CreatesMessage {
		d = e.createMessage(now, rule, params, who, major, req.Body, d)
	} else if rule.Status != http.StatusNoContent {
		d.Header.Set("Content-Type", "application/json")
		d.Body = e.successBody(now, rule, params, req.Body)
	}
	e.record(b, now, rule, d, b.win.remaining())
	return named(d, rule)
}

func named(d Decision, r *compiledRule) Decision {
	d.Rule = r.Name
	return d
}

func (e *Engine) checkGlobal(now time.Time, who string, authed bool) (Decision, bool) {
	g := e.globals[who]
	if g == nil {
		limit := e.rules.GlobalLimit
		if !authed {
			limit = e.rules.IPGlobalLimit
		}
		g = &globalState{
			log:   slidingLog{window: e.rules.GlobalWindow.D()},
			stats: GlobalStats{Identity: who, Limit: limit, Window: e.rules.GlobalWindow},
		}
		e.globals[who] = g
	}
	for _, o := range e.outages {
		if o.ip != authed && !now.Before(o.from) && now.Before(o.until) {
			g.stats.RateLimited++
			g.stats.Injected++
			return globalLimited(o.until.Sub(now), true), true
		}
	}
	if n := g.log.count(now); n >= g.stats.Limit {
		g.stats.RateLimited++
		if len(g.stats.Refused) < refusedCap {
			g.stats.Refused = append(g.stats.Refused, Duration(now.Sub(e.start)))
		}
		if g.log.fitsByArrival(now, g.stats.Limit) {
			// Refused only because requests stamped later were
			// handled first (Stats.GlobalReorderedExcused).
			g.stats.ReorderedExcused++
			e.stats.globalReordered++
		}
		return globalLimited(g.log.freeAt().Sub(now), false), true
	}
	g.log.add(now)
	g.stats.Admitted++
	if n := g.log.count(now); n > g.stats.MaxInWindow {
		g.stats.MaxInWindow = n
		if n > e.stats.maxGlobal {
			e.stats.maxGlobal = n
		}
	}
	return Decision{}, false
}

func (e *Engine) checkSublimits(now time.Time, rule *compiledRule, bucketKey string, params map[string]string, body []byte, h http.Header) (Decision, bool) {
	if len(rule.Sublimits) == 0 {
		return Decision{}, false
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(body, &fields) // a body that is not an object touches no field
	for i := range rule.Sublimits {
		sl := &rule.Sublimits[i]
		if !touches(sl.Fields, fields) {
			continue
		}
		key := bucketKey + "/" + sl.Name
		if sl.Per != "" { // a group across rules: see Sublimit.Per
			v := params[sl.Per]
			if strings.HasSuffix(sl.Per, "_token") {
				v = "#" + shortHash(v)
			}
			key = "group " + sl.Name + " " + sl.Per + "=" + v
		}
		s := e.sublimits[key]
		if s == nil {
			s = &sublimitState{
				win:   fixedWindow{limit: sl.Limit, length: sl.Window.D()},
				stats: SublimitStats{Key: key, Name: sl.Name, Limit: sl.Limit, Window: sl.Window},
			}
			e.sublimits[key] = s
		}
		if s.win.roll(now) {
			s.limited = 0
		}
		admitted, opened := s.win.take(now)
		if opened {
			s.stats.Windows++
		}
		if admitted {
			s.stats.Admitted++
			continue
		}
		s.limited++
		s.stats.RateLimited++
		if s.limited > s.stats.Max429sInWindow {
			s.stats.Max429sInWindow = s.limited
		}
		return rateLimited(h.Clone(), "shared", s.win.resetAfter(now), false, sl.Code), true
	}
	return Decision{}, false
}

func touches(want []string, fields map[string]json.RawMessage) bool {
	if len(want) == 0 {
		return true
	}
	for _, f := range want {
		if _, ok := fields[f]; ok {
			return true
		}
	}
	return false
}

// majorString is the canonical major-parameter part of a bucket key, in
// template order. Webhook and interaction tokens appear hashed.
func (e *Engine) majorString(t template, params map[string]string) string {
	var b strings.Builder
	for _, s := range t {
		if s.param == "" || !e.majors[s.param] {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		v := params[s.param]
		if strings.HasSuffix(s.param, "_token") {
			v = "#" + shortHash(v)
		}
		b.WriteString(s.param)
		b.WriteByte('=')
		b.WriteString(v)
	}
	return b.String()
}

func (e *Engine) record(b *bucketState, now time.Time, rule *compiledRule, d Decision, remaining int) {
	if e.timeline < 0 || len(b.stats.Timeline) >= e.timeline {
		return
	}
	b.stats.Timeline = append(b.stats.Timeline, Event{
		At: now.Sub(e.start), Rule: rule.Name, Status: d.Status, Scope: d.Scope, Remaining: remaining, Late: d.Late,
	})
}

// answering marks d's answer as being written (begin) or written (!begin),
// for BucketStats.MaxInFlight. Decisions outside a bucket are ignored.
func (e *Engine) answering(d Decision, begin bool) {
	if d.bucket == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	b := d.bucket
	if !begin {
		b.inFlight--
		return
	}
	b.inFlight++
	if b.inFlight > b.stats.MaxInFlight {
		b.stats.MaxInFlight = b.inFlight
	}
}

// RecordFault counts a fault the server injected outside the rules engine:
// "server_error", "drop" or "goaway". Unknown kinds are ignored.
func (e *Engine) RecordFault(kind string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch kind {
	case "server_error":
		e.stats.serverErrors++
	case "drop":
		e.stats.dropped++
	case "goaway":
		e.stats.goAways++
	}
}

// recordDrop counts a connection dropped at now after a request on it was
// handled (Stats.DropTimes).
func (e *Engine) recordDrop(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats.dropped++
	if len(e.stats.dropTimes) < refusedCap {
		e.stats.dropTimes = append(e.stats.dropTimes, Duration(now.Sub(e.start)))
	}
}

// Stats returns a deep copy of the accounting so far, with buckets, globals
// and sublimits sorted by key.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.stats
	s := Stats{
		Requests:               c.requests,
		ByStatus:               map[int]int{},
		RateLimited:            map[string]int{},
		Duplicates:             map[string]int{},
		InjectedGlobal:         c.injected,
		Banned:                 c.banned,
		Bans:                   c.bans,
		Invalid:                c.invalid,
		ServerErrors:           c.serverErrors,
		Dropped:                c.dropped,
		DropTimes:              append([]Duration(nil), c.dropTimes...),
		GoAways:                c.goAways,
		MaxBucketWindow:        c.maxBucket,
		MaxGlobalWindow:        c.maxGlobal,
		LateReset429s:          c.lateReset,
		LateResetExcused:       c.lateExcused,
		ReorderedExcused:       c.reorderedExcused,
		GlobalReorderedExcused: c.globalReordered,
		MessagesCreated:        c.messagesCreated,
		MessagesDeduplicated:   c.messagesDeduplicated,
		DuplicateMessages:      c.duplicateMessages,
		GlobalLimit:            e.rules.GlobalLimit,
		GlobalWindow:           e.rules.GlobalWindow,
		InvalidLimit:           e.rules.InvalidLimit,
		InvalidWindowLen:       e.rules.InvalidWindow,
	}
	for k, v := range c.byStatus {
		s.ByStatus[k] = v
	}
	for k, v := range c.rateLimited {
		s.RateLimited[k] = v
	}
	for k, v := range c.duplicates {
		s.Duplicates[k] = v
	}
	for _, b := range e.buckets {
		bs := b.stats
		bs.Rules = append([]string(nil), bs.Rules...)
		if bs.LimitCycle != nil {
			bs.LimitCycle = append([]int(nil), bs.LimitCycle...)
		}
		bs.Timeline = append([]Event(nil), bs.Timeline...)
		s.Buckets = append(s.Buckets, bs)
	}
	for _, sl := range e.sublimits {
		s.Sublimits = append(s.Sublimits, sl.stats)
	}
	for _, g := range e.globals {
		gs := g.stats
		gs.Refused = append([]Duration(nil), gs.Refused...)
		s.Globals = append(s.Globals, gs)
	}
	sort.Slice(s.Buckets, func(i, j int) bool { return s.Buckets[i].Key < s.Buckets[j].Key })
	sort.Slice(s.Sublimits, func(i, j int) bool { return s.Sublimits[i].Key < s.Sublimits[j].Key })
	sort.Slice(s.Globals, func(i, j int) bool { return s.Globals[i].Identity < s.Globals[j].Identity })
	return s
}

// Reset forgets every bucket, window, ban, count and remembered message
// (nonce deduplication starts afresh), as if the engine had just been
// created at now. The rules, scheduled outages and LateReset stay.
func (e *Engine) Reset(now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.start = now
	e.buckets = map[string]*bucketState{}
	e.sublimits = map[string]*sublimitState{}
	e.globals = map[string]*globalState{}
	e.invalid = map[string]*slidingLog{}
	e.bans = map[string]time.Time{}
	e.messages = newMessageLog()
	if e.seen != nil {
		e.seen = map[[32]byte]bool{}
	}
	e.stats = newCounters()
}
