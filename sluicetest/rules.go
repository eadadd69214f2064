package sluicetest

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ErrInvalidRules is returned (wrapped, with the offending rule named) when a
// RuleSet fails validation: a missing route, a limit (or limit_cycle entry)
// below 1, a zero window, a template that does not parse, or two rules for
// the same method and route.
var ErrInvalidRules = errors.New("sluicetest: invalid rules")

// Auth says whether a route needs an Authorization header.
type Auth string

const (
	// AuthRequired routes answer 401 without a valid "Bot" or "Bearer" token.
	// Authenticated requests count against the token's global limit.
	AuthRequired Auth = "required"
	// AuthOptional routes (webhooks with a token, interaction callbacks) work
	// without a token. Such requests count against the caller IP's global
	// limit instead of a token's.
	AuthOptional Auth = "optional"
)

// Rule is one route template with the limit of the bucket it belongs to.
//
// Several rules may name the same Bucket hash: their requests then share one
// counter per combination of major parameters, exactly as routes that
// Discord reports with the same X-RateLimit-Bucket do. The Limit, Window
// and LimitCycle of rules sharing a hash must agree.
type Rule struct {
	// Name identifies the rule in stats and errors, e.g. "create_message".
	Name string `json:"name" yaml:"name"`
	// Method is the HTTP method, upper case.
	Method string `json:"method" yaml:"method"`
	// Route is the template without the /api/vN prefix, with parameters in
	// braces: "/channels/{channel_id}/messages/{message_id}". Parameters
	// named in RuleSet.MajorParams separate buckets; the others do not.
	Route string `json:"route" yaml:"route"`
	// Bucket is the hash sent in X-RateLimit-Bucket.
	Bucket string `json:"bucket" yaml:"bucket"`
	// Limit is the number of requests a bucket admits per window. With a
	// LimitCycle it may be 0 and then defaults to LimitCycle[0]; if set, it
	// must equal LimitCycle[0].
	Limit int `json:"limit" yaml:"limit"`
	// LimitCycle, when set, makes the limit change from one window to the
	// next: each real bucket's first window admits LimitCycle[0] requests,
	// its second LimitCycle[1], and so on, wrapping around at the end.
	// X-RateLimit-Limit and -Remaining report the open window's limit, and
	// the accounting judges each window against its own limit. Every entry
	// must be at least 1. Empty means Limit for every window.
	LimitCycle []int `json:"limit_cycle,omitempty" yaml:"limit_cycle,omitempty"`
	// Window is the bucket's window. It starts with the first request into
	// an empty bucket and admits Limit requests until it ends.
	Window Duration `json:"window" yaml:"window"`
	// Auth is AuthRequired when empty.
	Auth Auth `json:"auth,omitempty" yaml:"auth,omitempty"`
	// GlobalExempt routes do not count against, and are never refused by,
	// the global limit (Discord's interaction callbacks).
	GlobalExempt bool `json:"global_exempt,omitempty" yaml:"global_exempt,omitempty"`
	// Status is the success status; 0 means 204 for DELETE and PUT, else 200.
	Status int `json:"status,omitempty" yaml:"status,omitempty"`
	// Sublimits are hidden limits that no header advertises.
	Sublimits []Sublimit `json:"sublimits,omitempty" yaml:"sublimits,omitempty"`
	// CreatesMessage marks a route that creates a message (create_message,
	// execute_webhook): its success answer is a message object with a fresh
	// snowflake id, and it applies Discord's nonce deduplication: a request
	// whose JSON body carries "nonce" (a string or an integer of at most 25
	// characters) and "enforce_nonce": true gets back the message the same
	// author already created in the same channel with that nonce within
	// NonceWindow, and creates nothing. Created, deduplicated and duplicate
	// messages are counted in Stats (MessagesCreated, MessagesDeduplicated,
	// DuplicateMessages). A nonce of another type or longer than 25
	// characters is answered 400 (Invalid Form Body, code 50035).
	CreatesMessage bool `json:"creates_message,omitempty" yaml:"creates_message,omitempty"`
}

// windowLimit is the limit of a bucket's window number i (0 for the first).
func (r *Rule) windowLimit(i int) int {
	if len(r.LimitCycle) == 0 {
		return r.Limit
	}
	return r.LimitCycle[i%len(r.LimitCycle)]
}

// effectiveLimit is Limit, or LimitCycle[0] when Limit is 0 and a cycle is
// set (before withDefaults fills it in).
func (r *Rule) effectiveLimit() int {
	if r.Limit == 0 && len(r.LimitCycle) > 0 {
		return r.LimitCycle[0]
	}
	return r.Limit
}

// Sublimit is a hidden limit inside a bucket, such as Discord's two channel
// renames per ten minutes. A request that exceeds it gets a 429 with
// X-RateLimit-Scope: shared and the bucket's headers (which show calls
// remaining unless that request took the last one): the route's limiter
// counted the request, so it spends the bucket, and then the resource's
// limiter refused it. It is not an invalid request.
type Sublimit struct {
	// Name identifies the sublimit in stats, e.g. "channel_name".
	Name string `json:"name" yaml:"name"`
	// Fields are top-level JSON body fields that make a request count
	// against the sublimit. Empty means every request of the rule counts.
	Fields []string `json:"fields,omitempty" yaml:"fields,omitempty"`
	// Limit is the number of requests admitted per window.
	Limit int `json:"limit" yaml:"limit"`
	// Window starts with the first counted request into an empty sublimit.
	Window Duration `json:"window" yaml:"window"`
	// Code is the optional "code" of the 429 body (e.g. 20028).
	Code int `json:"code,omitempty" yaml:"code,omitempty"`
	// Per, when set, makes the sublimit a group limit across rules: one
	// counter per value of this route parameter (e.g. "guild_id"), shared
	// by every rule with a sublimit of the same Name and Per, whatever
	// their buckets (a guild's role updates, over the add, remove and
	// edit-member routes). The rules' buckets still count the request, and
	// the 429 still carries the request's bucket headers. Empty: one
	// counter per bucket (hash and major parameters). Sublimits sharing a
	// Name and Per must agree on Limit and Window.
	Per string `json:"per,omitempty" yaml:"per,omitempty"`
}

// RuleSet is the complete configuration of the simulated API's limits.
// Zero fields take the defaults given on each field, so a RuleSet holding
// only Rules is valid.
type RuleSet struct {
	// GlobalLimit is the number of requests a token may make per
	// GlobalWindow across all routes that are not exempt. Default 50.
	GlobalLimit int `json:"global_limit,omitempty" yaml:"global_limit,omitempty"`
	// IPGlobalLimit is the same limit for requests without a token, counted
	// per client IP. Default 50.
	IPGlobalLimit int `json:"ip_global_limit,omitempty" yaml:"ip_global_limit,omitempty"`
	// GlobalWindow is the global limit's sliding window. Default 1s. The
	// simulator enforces it strictly: no window of this length, starting
	// anywhere, admits more than the limit.
	GlobalWindow Duration `json:"global_window,omitempty" yaml:"global_window,omitempty"`
	// InvalidLimit is the number of 401, 403 and 429 (except shared-scope
	// 429) answers an IP may receive per InvalidWindow; one more bans it.
	// Default 10000.
	InvalidLimit int `json:"invalid_limit,omitempty" yaml:"invalid_limit,omitempty"`
	// InvalidWindow is the invalid-request limit's sliding window. Default 10m.
	InvalidWindow Duration `json:"invalid_window,omitempty" yaml:"invalid_window,omitempty"`
	// BanDuration is how long a banned IP receives Cloudflare's answer.
	// Default 1h.
	BanDuration Duration `json:"ban_duration,omitempty" yaml:"ban_duration,omitempty"`
	// MajorParams are the template parameters that separate buckets.
	// Default: channel_id, guild_id, webhook_id, webhook_token,
	// interaction_id.
	MajorParams []string `json:"major_params,omitempty" yaml:"major_params,omitempty"`
	// Rules are the routes the simulator serves. A request that matches no
	// rule's route gets 404, one that matches a route with another method
	// gets 405.
	Rules []Rule `json:"rules" yaml:"rules"`
}

// DefaultMajorParams are the parameters Discord documents as top-level
// resources, plus interaction_id, because interaction callbacks are limited
// per interaction.
var defaultMajorParams = []string{"channel_id", "guild_id", "webhook_id", "webhook_token", "interaction_id"}

//go:embed rules/discord.yaml
var discordRules []byte

// DefaultRules returns the Discord-like rule set the simulator uses when
// given none: message, reaction, channel, member, role, user, webhook,
// interaction and gateway routes with realistic limits, two shared hashes,
// and the channel rename sublimit (2 per 10 minutes). The file it is read
// from is sluicetest/rules/discord.yaml; `sluice simulate -dump-rules`
// prints it.
func DefaultRules() RuleSet {
	rs, err := ParseRules(discordRules)
	if err != nil {
		// The embedded file is covered by TestDefaultRulesValid.
		panic("sluicetest: embedded default rules are invalid: " + err.Error())
	}
	return rs
}

// DefaultRulesYAML returns the YAML text of DefaultRules, comments included.
func DefaultRulesYAML() []byte { return bytes.Clone(discordRules) }

// ParseRules reads a RuleSet from JSON or YAML (JSON is detected by a
// leading '{'), fills defaults and validates it.
func ParseRules(data []byte) (RuleSet, error) {
	var rs RuleSet
	trimmed := bytes.TrimSpace(data)
	var err error
	if len(trimmed) > 0 && trimmed[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.DisallowUnknownFields()
		err = dec.Decode(&rs)
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(trimmed))
		dec.KnownFields(true)
		err = dec.Decode(&rs)
	}
	if err != nil {
		return RuleSet{}, fmt.Errorf("%w: %v", ErrInvalidRules, err)
	}
	rs = rs.withDefaults()
	if err := rs.Validate(); err != nil {
		return RuleSet{}, err
	}
	return rs, nil
}

// LoadRules reads a RuleSet from a .json, .yaml or .yml file.
func LoadRules(path string) (RuleSet, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return RuleSet{}, fmt.Errorf("sluicetest: reading rules: %w", err)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json", ".yaml", ".yml":
	default:
		return RuleSet{}, fmt.Errorf("%w: %s: rules file must end in .json, .yaml or .yml", ErrInvalidRules, path)
	}
	return ParseRules(data)
}

func (rs RuleSet) withDefaults() RuleSet {
	if rs.GlobalLimit == 0 {
		rs.GlobalLimit = 50
	}
	if rs.IPGlobalLimit == 0 {
		rs.IPGlobalLimit = 50
	}
	if rs.GlobalWindow == 0 {
		rs.GlobalWindow = Duration(time.Second)
	}
	if rs.InvalidLimit == 0 {
		rs.InvalidLimit = 10000
	}
	if rs.InvalidWindow == 0 {
		rs.InvalidWindow = Duration(10 * time.Minute)
	}
	if rs.BanDuration == 0 {
		rs.BanDuration = Duration(time.Hour)
	}
	if len(rs.MajorParams) == 0 {
		rs.MajorParams = append([]string(nil), defaultMajorParams...)
	}
	rules := make([]Rule, len(rs.Rules))
	for i, r := range rs.Rules {
		r.Method = strings.ToUpper(r.Method)
		if r.Auth == "" {
			r.Auth = AuthRequired
		}
		if r.Limit == 0 && len(r.LimitCycle) > 0 {
			r.Limit = r.LimitCycle[0]
		}
		r.LimitCycle = append([]int(nil), r.LimitCycle...)
		if len(r.LimitCycle) == 0 {
			r.LimitCycle = nil
		}
		if r.Status == 0 {
			r.Status = 200
			if r.Method == "DELETE" || r.Method == "PUT" {
				r.Status = 204
			}
		}
		rules[i] = r
	}
	rs.Rules = rules
	return rs
}

// Validate reports the first problem that would make the rule set ambiguous
// or unenforceable, wrapped in ErrInvalidRules.
func (rs RuleSet) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidRules, fmt.Sprintf(format, args...))
	}
	if rs.GlobalLimit < 0 || rs.IPGlobalLimit < 0 || rs.InvalidLimit < 0 {
		return bad("limits must not be negative")
	}
	if len(rs.Rules) == 0 {
		return bad("no rules")
	}
	seen := map[string]string{}
	hashes := map[string]Rule{}
	groups := map[string]Sublimit{}
	for i, r := range rs.Rules {
		id := r.Name
		if id == "" {
			id = fmt.Sprintf("rules[%d]", i)
		}
		switch r.Method {
		case "GET", "POST", "PUT", "PATCH", "DELETE":
		default:
			return bad("%s: method %q is not one of GET, POST, PUT, PATCH, DELETE", id, r.Method)
		}
		if _, err := compileTemplate(r.Route); err != nil {
			return bad("%s: %v", id, err)
		}
		if r.Bucket == "" {
			return bad("%s: no bucket hash", id)
		}
		if len(r.LimitCycle) > 0 {
			for j, l := range r.LimitCycle {
				if l < 1 {
					return bad("%s: limit_cycle[%d] = %d must be at least 1", id, j, l)
				}
			}
			if r.Limit != 0 && r.Limit != r.LimitCycle[0] {
				return bad("%s: limit %d disagrees with limit_cycle[0] = %d (leave limit out or make them equal)", id, r.Limit, r.LimitCycle[0])
			}
		} else if r.Limit < 1 {
			return bad("%s: limit %d must be at least 1", id, r.Limit)
		}
		if r.Window <= 0 {
			return bad("%s: window must be positive", id)
		}
		if r.Auth != AuthRequired && r.Auth != AuthOptional {
			return bad("%s: auth %q must be %q or %q", id, r.Auth, AuthRequired, AuthOptional)
		}
		if r.Status < 200 || r.Status > 299 {
			return bad("%s: success status %d is not 2xx", id, r.Status)
		}
		key := r.Method + " " + normalizeTemplate(r.Route)
		if prev, ok := seen[key]; ok {
			return bad("%s: %s %s is already served by %s", id, r.Method, r.Route, prev)
		}
		seen[key] = id
		if prev, ok := hashes[r.Bucket]; ok && (prev.effectiveLimit() != r.effectiveLimit() || prev.Window != r.Window ||
			!slices.Equal(prev.LimitCycle, r.LimitCycle)) {
			return bad("%s: bucket %s is shared with %s but has another limit, limit cycle or window", id, r.Bucket, prev.Name)
		}
		hashes[r.Bucket] = r
		for _, s := range r.Sublimits {
			if s.Limit < 1 || s.Window <= 0 {
				return bad("%s: sublimit %q needs a limit of at least 1 and a positive window", id, s.Name)
			}
			if s.Per == "" {
				continue
			}
			if !strings.Contains(r.Route, "{"+s.Per+"}") {
				return bad("%s: sublimit %q: per %q is not a parameter of %s", id, s.Name, s.Per, r.Route)
			}
			k := s.Name + "/" + s.Per
			if prev, ok := groups[k]; ok && (prev.Limit != s.Limit || prev.Window != s.Window) {
				return bad("%s: sublimit %q is shared per %s with another rule but has another limit or window", id, s.Name, s.Per)
			}
			groups[k] = s
		}
	}
	return nil
}

// Scaled returns a copy of rs with every bucket and sublimit window
// multiplied by f (0 < f). Tests use it to make ten-minute sublimits last
// a fraction of a second. The global window, the invalid-request window and
// the ban duration are left alone; set them directly.
func (rs RuleSet) Scaled(f float64) RuleSet {
	out := rs
	out.MajorParams = append([]string(nil), rs.MajorParams...)
	out.Rules = make([]Rule, len(rs.Rules))
	for i, r := range rs.Rules {
		r.Window = Duration(float64(r.Window) * f)
		if r.LimitCycle != nil {
			r.LimitCycle = append([]int(nil), r.LimitCycle...)
		}
		subs := make([]Sublimit, len(r.Sublimits))
		for j, s := range r.Sublimits {
			s.Window = Duration(float64(s.Window) * f)
			s.Fields = append([]string(nil), s.Fields...)
			subs[j] = s
		}
		r.Sublimits = subs
		out.Rules[i] = r
	}
	return out
}
