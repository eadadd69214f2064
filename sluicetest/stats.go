package sluicetest

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Stats is the simulator's strict accounting. Keys never contain tokens:
// a token appears as "token:" and the first 8 hex digits of its SHA-256,
// webhook and interaction tokens as "#" and the same.
type Stats struct {
	// Requests is the number of requests the rules engine answered
	// (injected 5xx answers and dropped connections are counted apart).
	Requests int `json:"requests"`
	// ByStatus counts answers by HTTP status.
	ByStatus map[int]int `json:"by_status"`
	// RateLimited counts 429s by X-RateLimit-Scope: "user", "global",
	// "shared". Cloudflare bans are in Banned, not here.
	RateLimited map[string]int `json:"rate_limited"`
	// Duplicates counts, by method, requests identical (method, path,
	// body) to one answered before; only with Config.TrackDuplicates.
	Duplicates map[string]int `json:"duplicates,omitempty"`
	// InjectedGlobal is how many of RateLimited["global"] the simulated
	// external consumer caused.
	InjectedGlobal int `json:"injected_global"`
	// Banned counts requests answered with the Cloudflare ban page.
	Banned int `json:"banned"`
	// Bans counts the times an IP was banned.
	Bans int `json:"bans"`
	// LateReset429s is how many of RateLimited["user"] were answered in a
	// bucket window's late interval (Faults.LateReset): after the reset
	// the window's headers announced, before it really reopened. They are
	// also counted in Invalid, as Discord would.
	LateReset429s int `json:"late_reset_429s"`
	// LateResetExcused is how many of LateReset429s were not the client's
	// fault: a Discord that reset on time would have admitted them (they
	// fitted the limit of a window opened at the announced reset). Late
	// 429s beyond that, for instance a retry sent before the retry_after
	// of a late 429 had passed once that window was used up, are
	// violations like any user 429.
	LateResetExcused int `json:"late_reset_excused"`
	// ReorderedExcused is how many of RateLimited["user"] were the
	// simulator's own doing: it judges each request at the time stamped
	// when it arrived, and a request whose handling was held up (a
	// goroutine starved on a busy machine) can be handled after one
	// stamped later, which opened a new window. Counted by arrival, the
	// client kept the limit: the request fitted the window its stamp falls
	// in, or the window was full only with such late-handled requests.
	// Discord stamps requests as it handles them, but its handling is not
	// held up by the client's machine.
	ReorderedExcused int `json:"reordered_excused"`
	// GlobalReorderedExcused is how many of RateLimited["global"] were
	// the simulator's own doing in the same way: the global window's
	// count saw requests stamped after the refused one that had been
	// handled before it, and by their stamps every interval of the global
	// window containing it had room.
	GlobalReorderedExcused int `json:"global_reordered_excused"`
	// Invalid counts 401, 403 and 429 answers except shared-scope 429s and
	// ban pages: what Discord's invalid-request limit counts.
	Invalid int `json:"invalid"`
	// ServerErrors counts injected 5xx answers.
	ServerErrors int `json:"server_errors"`
	// Dropped counts connections closed abruptly by fault injection.
	Dropped int `json:"dropped"`
	// DropTimes lists when (since the engine started, as Event.At) the
	// first 64 connections dropped after a request on them was handled
	// (Faults.DropRate) were closed: the request's answer, and those of
	// the others in flight on the connection, never reached the client.
	DropTimes []Duration `json:"drop_times,omitempty"`
	// GoAways counts GOAWAY frames (or Connection: close) sent by fault
	// injection.
	GoAways int `json:"goaways"`
	// MaxBucketWindow is the most requests ever admitted in one window of
	// any bucket. With a Rule.LimitCycle each window is held to its own
	// limit; BucketStats.MaxOverLimit says whether one ever exceeded it.
	MaxBucketWindow int `json:"max_bucket_window"`
	// MaxGlobalWindow is the most requests ever admitted, for one token or
	// IP, in any interval of length GlobalWindow.
	MaxGlobalWindow int `json:"max_global_window"`
	// MessagesCreated counts messages the routes with Rule.CreatesMessage
	// really created: admitted requests (2xx) that were not answered with
	// an existing message. A request whose connection was then dropped
	// (Faults.DropRate) still created its message.
	MessagesCreated int `json:"messages_created"`
	// MessagesDeduplicated counts admitted requests that created nothing
	// because they carried "enforce_nonce": true and a nonce with which the
	// same author had created a message in the same channel within
	// NonceWindow: they were answered with that message (same id). They
	// are requests like any other for the bucket and global limits.
	MessagesDeduplicated int `json:"messages_deduplicated"`
	// DuplicateMessages counts messages created twice, which a client that
	// resends a message create (after a lost answer or a 5xx) without
	// enforce_nonce produces. Each is one of MessagesCreated that the same
	// author had already created in the same channel within NonceWindow:
	// with a nonce, a creation whose nonce had already created a message
	// (only possible without enforce_nonce); without a nonce, a creation
	// whose exact body equals that of a message created without a nonce.
	// Two messages alike by chance count too, so a client that sends the
	// same text twice on purpose should give each a distinct nonce. They
	// are not rate-limit violations: Violations leaves them out, and
	// AssertNoDuplicateMessages checks them.
	DuplicateMessages int `json:"duplicate_messages"`
	// GlobalLimit and GlobalWindow are the token global limit in force.
	GlobalLimit  int      `json:"global_limit"`
	GlobalWindow Duration `json:"global_window"`
	// InvalidLimit and InvalidWindowLen are the invalid-request limit.
	InvalidLimit     int      `json:"invalid_limit"`
	InvalidWindowLen Duration `json:"invalid_window"`
	// Buckets, Sublimits and Globals hold per-key detail, sorted by key.
	Buckets   []BucketStats   `json:"buckets"`
	Sublimits []SublimitStats `json:"sublimits"`
	Globals   []GlobalStats   `json:"globals"`
}

// BucketStats is the accounting of one real bucket: one identity (token or
// IP), one hash, one set of major parameters.
type BucketStats struct {
	// Key is Identity + "/" + Hash + "/" + Major.
	Key      string `json:"key"`
	Identity string `json:"identity"`
	Hash     string `json:"hash"`
	Major    string `json:"major"`
	// Rules are the names of the rules whose requests landed here, in the
	// order first seen; more than one means a shared hash.
	Rules []string `json:"rules"`
	// Limit is the rule's limit: that of the first window when LimitCycle
	// is set.
	Limit int `json:"limit"`
	// LimitCycle is the rule's Rule.LimitCycle: window i admits
	// LimitCycle[i % len(LimitCycle)]. Empty means Limit for every window.
	LimitCycle []int    `json:"limit_cycle,omitempty"`
	Window     Duration `json:"window"`
	// Requests reached the bucket (after the global limit); Admitted of
	// them fitted the window; RateLimited got a user-scope 429.
	Requests    int `json:"requests"`
	Admitted    int `json:"admitted"`
	RateLimited int `json:"rate_limited"`
	// LateReset429s of RateLimited were answered in a window's late
	// interval, and LateResetExcused of those are not the client's fault
	// (see Stats.LateReset429s and Stats.LateResetExcused).
	LateReset429s    int `json:"late_reset_429s"`
	LateResetExcused int `json:"late_reset_excused"`
	// ReorderedExcused of RateLimited fitted their window by arrival
	// (see Stats.ReorderedExcused).
	ReorderedExcused int `json:"reordered_excused"`
	// Windows is the number of windows opened.
	Windows int `json:"windows"`
	// MaxAdmitted is the most requests admitted in one window (at most
	// Limit, or the largest entry of LimitCycle).
	MaxAdmitted int `json:"max_admitted"`
	// MaxOverLimit is the most requests one window admitted beyond its own
	// limit: always 0 unless the simulator is broken.
	MaxOverLimit int `json:"max_over_limit,omitempty"`
	// MaxInFlight is the most of the bucket's requests a Server was
	// answering at once: decided by the rules engine and not yet written,
	// which with Faults.Latency shows whether a client pipelines a bucket
	// (more than 1) or sends one request at a time. Always 0 for an Engine
	// used alone.
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// Timeline lists the bucket's answers in order (capped by
	// Config.TimelineLimit).
	Timeline []Event `json:"timeline,omitempty"`
}

// Event is one answer in a bucket's timeline.
type Event struct {
	// At is the time since the engine started (or was Reset).
	At time.Duration `json:"at"`
	// Rule is the matched rule's name.
	Rule string `json:"rule"`
	// Status is the HTTP status sent.
	Status int `json:"status"`
	// Scope is set on 429s.
	Scope string `json:"scope,omitempty"`
	// Remaining is the bucket's remaining count after the request.
	Remaining int `json:"remaining"`
	// Late marks an answer given in the window's late interval
	// (Faults.LateReset).
	Late bool `json:"late,omitempty"`
}

// SublimitStats is the accounting of one hidden sublimit of one bucket, or
// of one group of a sublimit with Per (Key "group <name> <per>=<value>").
type SublimitStats struct {
	Key         string   `json:"key"`
	Name        string   `json:"name"`
	Limit       int      `json:"limit"`
	Window      Duration `json:"window"`
	Admitted    int      `json:"admitted"`
	RateLimited int      `json:"rate_limited"`
	Windows     int      `json:"windows"`
	// Max429sInWindow is the most shared 429s given in one sublimit window.
	// A client can't see a hidden limit coming, so one per window is
	// unavoidable; more means it did not back off.
	Max429sInWindow int `json:"max_429s_in_window"`
}

// GlobalStats is the global-limit accounting of one token or IP.
type GlobalStats struct {
	Identity    string   `json:"identity"`
	Limit       int      `json:"limit"`
	Window      Duration `json:"window"`
	Admitted    int      `json:"admitted"`
	RateLimited int      `json:"rate_limited"`
	Injected    int      `json:"injected"`
	// ReorderedExcused of RateLimited fitted by arrival (see
	// Stats.GlobalReorderedExcused).
	ReorderedExcused int `json:"reordered_excused"`
	// MaxInWindow is the most requests admitted in any interval of
	// length Window (<= Limit).
	MaxInWindow int `json:"max_in_window"`
	// Refused lists when (since the engine started, as Event.At) the
	// first 64 of RateLimited that the client caused were answered
	// (excused ones included; injected ones not): to find, when a test
	// fails on a global 429, what was sent around it.
	Refused []Duration `json:"refused,omitempty"`
}

// refusedCap bounds GlobalStats.Refused.
const refusedCap = 64

func (b *BucketStats) addRule(name string) {
	for _, r := range b.Rules {
		if r == name {
			return
		}
	}
	b.Rules = append(b.Rules, name)
}

// Violations lists every way the client broke the rules: user-scope 429s
// (excused late-reset ones excluded), global 429s it caused (injected ones
// excluded), more than one shared 429 in a hidden sublimit's window, and
// bans. Empty means the client never exceeded a limit it could have known.
// Duplicate messages are not rate-limit violations and are not listed; see
// AssertNoDuplicateMessages.
func (s Stats) Violations() []string {
	var v []string
	if n := s.ClientUser429s(); n > 0 {
		msg := fmt.Sprintf("%d user-scope 429s (bucket limits exceeded)", n)
		if late := s.LateReset429s - s.LateResetExcused; late > 0 {
			msg += fmt.Sprintf(", %d of them in late-reset intervals beyond what an on-time window would have admitted", late)
		}
		v = append(v, msg)
	}
	if n := s.ClientGlobal429s(); n > 0 {
		v = append(v, fmt.Sprintf("%d global 429s caused by the client (global limit %d per %s exceeded)", n, s.GlobalLimit, s.GlobalWindow))
	}
	for _, sl := range s.Sublimits {
		if sl.Max429sInWindow > 1 {
			v = append(v, fmt.Sprintf("sublimit %s: %d shared 429s in one window (at most 1 is unavoidable)", sl.Key, sl.Max429sInWindow))
		}
	}
	if s.Bans > 0 || s.Banned > 0 {
		v = append(v, fmt.Sprintf("banned %d times; %d requests answered with the Cloudflare page", s.Bans, s.Banned))
	}
	for _, b := range s.Buckets {
		if b.MaxOverLimit > 0 {
			v = append(v, fmt.Sprintf("bucket %s admitted %d beyond one window's own limit (simulator bug)", b.Key, b.MaxOverLimit))
		} else if len(b.LimitCycle) == 0 && b.MaxAdmitted > b.Limit {
			v = append(v, fmt.Sprintf("bucket %s admitted %d in one window, limit %d (simulator bug)", b.Key, b.MaxAdmitted, b.Limit))
		}
	}
	for _, g := range s.Globals {
		if g.MaxInWindow > g.Limit {
			v = append(v, fmt.Sprintf("global %s admitted %d in one window, limit %d (simulator bug)", g.Identity, g.MaxInWindow, g.Limit))
		}
	}
	return v
}

// ClientUser429s is how many user-scope 429s the client caused: those
// answered, less those a Discord that reset on time would have admitted
// (LateResetExcused) and those that fitted their window by arrival
// (ReorderedExcused).
func (s Stats) ClientUser429s() int {
	return s.RateLimited["user"] - s.LateResetExcused - s.ReorderedExcused
}

// ClientGlobal429s is how many global 429s the client caused: those
// answered, less those of the simulated external consumer
// (InjectedGlobal) and those that fitted by arrival
// (GlobalReorderedExcused).
func (s Stats) ClientGlobal429s() int {
	return s.RateLimited["global"] - s.InjectedGlobal - s.GlobalReorderedExcused
}

// Summary is a short human-readable report of s.
func (s Stats) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "requests=%d invalid=%d banned=%d 429s{", s.Requests, s.Invalid, s.Banned)
	scopes := make([]string, 0, len(s.RateLimited))
	for k := range s.RateLimited {
		scopes = append(scopes, k)
	}
	sort.Strings(scopes)
	for i, k := range scopes {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, s.RateLimited[k])
	}
	b.WriteByte('}')
	if s.LateReset429s > 0 {
		fmt.Fprintf(&b, " late_reset_429s=%d excused=%d", s.LateReset429s, s.LateResetExcused)
	}
	if s.ReorderedExcused > 0 || s.GlobalReorderedExcused > 0 {
		fmt.Fprintf(&b, " reordered_excused=%d global_reordered_excused=%d", s.ReorderedExcused, s.GlobalReorderedExcused)
	}
	if s.MessagesCreated > 0 || s.MessagesDeduplicated > 0 {
		fmt.Fprintf(&b, " messages_created=%d deduplicated=%d duplicate=%d", s.MessagesCreated, s.MessagesDeduplicated, s.DuplicateMessages)
	}
	fmt.Fprintf(&b, " injected_global=%d 5xx=%d dropped=%d goaways=%d max_bucket_window=%d max_global_window=%d/%d buckets=%d",
		s.InjectedGlobal, s.ServerErrors, s.Dropped, s.GoAways, s.MaxBucketWindow, s.MaxGlobalWindow, s.GlobalLimit, len(s.Buckets))
	return b.String()
}

// TB is the part of testing.TB that AssertNoViolations and
// AssertNoDuplicateMessages use, so this package does not import testing.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
}

// AssertNoViolations fails t, listing each violation, if the client
// exceeded any limit it could have known (see Stats.Violations).
func AssertNoViolations(t TB, s Stats) bool {
	t.Helper()
	v := s.Violations()
	if len(v) == 0 {
		return true
	}
	t.Errorf("sluicetest: the client exceeded the simulated API's limits:\n  %s\n%s%s", strings.Join(v, "\n  "), s.Summary(), s.Around429s())
	return false
}

// Around429s lays out, for each bucket that answered a user-scope 429, the
// timeline from a window's worth of answers before its first 429 to ten
// after, with the connection drops (DropTimes) among them: what a failing
// test needs to tell a client's mistake from a fault's. Empty when no bucket
// answered a 429 or timelines are off (Options.TimelineLimit < 0).
func (s Stats) Around429s() string {
	var b strings.Builder
	for _, bs := range s.Buckets {
		first := -1
		for i, e := range bs.Timeline {
			if e.Status == 429 && e.Scope == "user" {
				first = i
				break
			}
		}
		if first < 0 {
			continue
		}
		lo, hi := max(0, first-bs.Limit-10), min(len(bs.Timeline), first+10)
		fmt.Fprintf(&b, "\nbucket %s (limit %d, %d 429s), answers %d-%d of %d:", bs.Key, bs.Limit, bs.RateLimited, lo, hi, len(bs.Timeline))
		from, to := bs.Timeline[lo].At, bs.Timeline[hi-1].At
		drops := s.DropTimes
		for _, e := range bs.Timeline[lo:hi] {
			for len(drops) > 0 && time.Duration(drops[0]) <= e.At {
				if d := time.Duration(drops[0]); d >= from {
					fmt.Fprintf(&b, "\n  %9.3fms connection dropped", millis(d))
				}
				drops = drops[1:]
			}
			fmt.Fprintf(&b, "\n  %9.3fms %d remaining=%d", millis(e.At), e.Status, e.Remaining)
			if e.Scope != "" {
				b.WriteString(" " + e.Scope)
			}
			if e.Late {
				b.WriteString(" late")
			}
		}
		for _, d := range drops {
			if time.Duration(d) <= to+time.Second {
				fmt.Fprintf(&b, "\n  %9.3fms connection dropped", millis(time.Duration(d)))
			}
		}
	}
	return b.String()
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// AssertNoDuplicateMessages fails t if any message was created twice (see
// Stats.DuplicateMessages): the client resent a message create that had
// already succeeded without letting the API deduplicate it (a nonce with
// "enforce_nonce": true).
func AssertNoDuplicateMessages(t TB, s Stats) bool {
	t.Helper()
	if s.DuplicateMessages == 0 {
		return true
	}
	t.Errorf("sluicetest: %d messages were created twice (%d created, %d deduplicated by enforce_nonce)\n%s",
		s.DuplicateMessages, s.MessagesCreated, s.MessagesDeduplicated, s.Summary())
	return false
}
