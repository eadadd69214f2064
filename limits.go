package sluice

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	decl "github.com/sluicehq/sluice/internal/declared"
	"github.com/sluicehq/sluice/ratelimit"
	"github.com/sluicehq/sluice/routes"
)

// Limit declares a rate limit the API enforces without announcing it in
// headers: a limit that shows up only as a 429 once it bites (a guild's
// role updates, a channel's renames), or a rule of your own ("at most 100
// DMs a minute"). Sluice enforces it in the bucket actors, together with
// the limits Discord announces (the stricter wins), so no 429 is needed to
// learn it. With Options.Redis, the processes sharing the token count each
// limit together: each group's windows and places live in Redis
// (docs/declared-limits.md).
//
// Requests under a limit are counted per group: all requests of its
// routes whose Per parameter has the same value (one guild's role
// updates), or whose Group function returns the same key. In each group at
// most Count requests go per Window, however the API aligns its windows:
// a request holds its place from its send until its answer arrives, and
// one more Window after that (the API counted it somewhere in between).
// Each request reserves a window and a place in line when it is
// submitted, in order, which gives its ETA (see Options.MaxWait).
//
// Limits are given in Options.Limits; DefaultLimits are added unless
// Options.NoDefaultLimits is set. A Limit is plain data apart from Group,
// and may be shared by several Limiters.
type Limit struct {
	// Name identifies the limit in errors (WaitError.Declared), Snapshot
	// and the docs, e.g. "member_roles". Several Limits with one Name are
	// one limit: their routes count together, and their Count, Window and
	// Per must agree. A Limit named like one of DefaultLimits replaces it.
	Name string
	// Routes are the requests it covers, each "METHOD /template" with the
	// template as Sluice names it (routes.Route.Template: ids replaced by
	// {channel_id}, {guild_id}, {user_id}, …), e.g.
	// "PUT /guilds/{guild_id}/members/{user_id}/roles/{role_id}". The
	// method "*" covers every method. At least one.
	Routes []string
	// Fields, when set, narrows the limit to requests whose JSON body sets
	// at least one of these top-level fields (a channel edit that renames
	// it: "name", "topic"). Empty: every request of Routes.
	Fields []string
	// Per is the major parameter whose value separates groups: "guild_id",
	// "channel_id" or "webhook_id". It must appear in every route. Empty
	// (and no Group): one group for every request of the limit, e.g. a
	// bot-wide rule.
	Per string
	// Group, when set, gives a request's group instead of Per: requests
	// with the same key count together; "" leaves the request out of the
	// limit. It is called on the caller's goroutine when the request is
	// submitted, with a request whose body is not available (use Fields);
	// a panic in it, or a key longer than MaxGroupKey bytes (a key is
	// kept per group, in Redis too), fails that request with
	// ErrBadRequest.
	Group func(*http.Request) string
	// Count is the number of requests each group admits per Window, at
	// least 1.
	Count int
	// Window is the limit's window, positive and at most an hour.
	Window time.Duration
	// Source says where the figures come from (a URL or an issue), for
	// whoever reads the configuration; Sluice does not use it.
	Source string
}

// DefaultLimits returns the limits Discord enforces without announcing
// them that Sluice applies unless Options.NoDefaultLimits is set (each
// with its Source; docs/declared-limits.md discusses them):
//
//   - "channel_name_topic": 2 renames or topic changes per 10 minutes per
//     channel (PATCH /channels/{channel_id} setting "name" or "topic"),
//     answered by a shared 429 while the headers still show calls left.
//   - "member_roles": 10 role updates per 10 seconds per guild (adding or
//     removing a member's role, or editing a member's "roles").
//
// The slice is new on every call: change it freely.
func DefaultLimits() []Limit {
	const roles = "community figure: 10 member role updates per 10 s per guild, what bots' job queues schedule by (Discord documents none)"
	return []Limit{
		{
			Name: "channel_name_topic", Routes: []string{"PATCH /channels/{channel_id}"}, Fields: []string{"name", "topic"},
			Per: "channel_id", Count: 2, Window: 10 * time.Minute,
			Source: "https://github.com/discord/discord-api-docs/issues/1900 (2 per 10 minutes, a shared 429 while the headers show calls remaining)",
		},
		{
			Name: "member_roles", Routes: []string{
				"PUT /guilds/{guild_id}/members/{user_id}/roles/{role_id}",
				"DELETE /guilds/{guild_id}/members/{user_id}/roles/{role_id}",
			},
			Per: "guild_id", Count: 10, Window: 10 * time.Second, Source: roles,
		},
		{
			Name: "member_roles", Routes: []string{"PATCH /guilds/{guild_id}/members/{user_id}"}, Fields: []string{"roles"},
			Per: "guild_id", Count: 10, Window: 10 * time.Second, Source: roles,
		},
	}
}

// limitTable finds the declared limits a request is under.
type limitTable struct {
	// byRoute maps a template, then a method ("*" for any), to the
	// limits covering it: looked up per request without building a key.
	byRoute map[string]map[string][]*declared
}

type declared struct {
	limit  *decl.Limit
	fields []string
	per    string
	group  func(*http.Request) string
}

var paramRE = regexp.MustCompile(`\{[a-z_]+\}`)

// compileLimits checks the limits (defaults first, then opts.Limits, a
// name given there replacing the default of that name) and indexes them.
func compileLimits(opts Options) (*limitTable, error) {
	var all []Limit
	mine := map[string]bool{}
	for _, l := range opts.Limits {
		mine[l.Name] = true
	}
	if !opts.NoDefaultLimits {
		for _, l := range DefaultLimits() {
			if !mine[l.Name] {
				all = append(all, l)
			}
		}
	}
	all = append(all, opts.Limits...)
	t := &limitTable{byRoute: map[string]map[string][]*declared{}}
	byName := map[string]*Limit{}
	compiled := map[string]*decl.Limit{}
	for i := range all {
		l := &all[i]
		bad := func(reason string) error {
			return &OptionError{Option: "Limits", Value: fmt.Sprintf("%q", l.Name), Reason: reason}
		}
		switch {
		case l.Name == "":
			return nil, &OptionError{Option: "Limits", Reason: "a limit has no Name"}
		case strings.Contains(l.Name, "|"):
			return nil, bad(`Name must not contain "|" (it ends the name in a group's shared key)`)
		case l.Count < 1 || l.Count > ratelimit.MaxGroupLimit:
			return nil, bad(fmt.Sprintf("Count must be in [1, %d], not %d", ratelimit.MaxGroupLimit, l.Count))
		case l.Window <= 0 || l.Window > ratelimit.MaxWait:
			return nil, bad(fmt.Sprintf("Window must be in (0, %s], not %s", ratelimit.MaxWait, l.Window))
		case len(l.Routes) == 0:
			return nil, bad("no Routes")
		}
		if prev := byName[l.Name]; prev != nil && (prev.Count != l.Count || prev.Window != l.Window || prev.Per != l.Per) {
			return nil, bad("limits with one Name must agree on Count, Window and Per")
		}
		byName[l.Name] = l
		dl := compiled[l.Name]
		if dl == nil {
			dl = &decl.Limit{Name: l.Name, Count: l.Count, Window: l.Window}
			compiled[l.Name] = dl
		}
		d := &declared{limit: dl, fields: slices.Clone(l.Fields), per: l.Per, group: l.Group}
		for _, spec := range l.Routes {
			key, err := limitRoute(spec, l.Per)
			if err != nil {
				return nil, bad(err.Error())
			}
			method, template, _ := strings.Cut(key, " ")
			if t.byRoute[template] == nil {
				t.byRoute[template] = map[string][]*declared{}
			}
			t.byRoute[template][method] = append(t.byRoute[template][method], d)
		}
	}
	return t, nil
}

// limitRoute checks one "METHOD /template" of a Limit: the template must
// be the one Sluice gives such requests, and name per (a major parameter)
// when per is set. It returns the table key.
func limitRoute(spec, per string) (string, error) {
	method, template, ok := strings.Cut(strings.TrimSpace(spec), " ")
	template = strings.TrimSpace(template)
	if !ok || method == "" || !strings.HasPrefix(template, "/") {
		return "", fmt.Errorf("route %q is not \"METHOD /template\"", spec)
	}
	method = strings.ToUpper(method)
	// A sample path of the template must parse back to it.
	sample := paramRE.ReplaceAllStringFunc(template, func(p string) string {
		if strings.HasSuffix(p, "_token}") {
			return "token"
		}
		return "1"
	})
	m := method
	if m == "*" {
		m = http.MethodGet
	}
	r, err := routes.Parse(m, sample)
	if err != nil {
		return "", fmt.Errorf("route %q: %v", spec, err)
	}
	if r.Template != template {
		return "", fmt.Errorf("route %q: Sluice names this route %q", spec, r.Template)
	}
	if per != "" && !strings.Contains(r.Major, per+"=") {
		return "", fmt.Errorf("Per %q is not a major parameter of %q (major parameters: %q)", per, template, majorNames(r.Major))
	}
	return method + " " + template, nil
}

func majorNames(major string) string {
	var names []string
	for _, kv := range strings.Split(major, ";") {
		if k, _, ok := strings.Cut(kv, "="); ok {
			names = append(names, k)
		}
	}
	return strings.Join(names, ", ")
}

// needsBody reports whether a request of route must have its body read to
// know its limits (a limit with Fields covers it).
func (t *limitTable) needsBody(r routes.Route) bool {
	for _, d := range t.lookup(r) {
		if len(d.fields) > 0 {
			return true
		}
	}
	return false
}

func (t *limitTable) lookup(r routes.Route) []*declared {
	if t == nil || len(t.byRoute) == 0 {
		return nil
	}
	m := t.byRoute[r.Template]
	a, b := m[r.Method], m["*"]
	if len(b) == 0 {
		return a
	}
	return append(slices.Clip(a), b...)
}

// match returns the limits req (of route, with body read when needsBody)
// is under, each with its group. A panicking Group fails the request.
func (t *limitTable) match(r routes.Route, req *http.Request, body []byte) (refs []decl.Ref, err error) {
	ds := t.lookup(r)
	if len(ds) == 0 {
		return nil, nil
	}
	var fields map[string]json.RawMessage
	parsed := false
	seen := map[*decl.Limit]bool{}
	for _, d := range ds {
		if seen[d.limit] {
			continue // one limit's routes and field sets overlap: count once
		}
		if len(d.fields) > 0 {
			if !parsed {
				parsed = true
				_ = json.Unmarshal(body, &fields) // not a JSON object: no field set
			}
			if !slices.ContainsFunc(d.fields, func(f string) bool { _, ok := fields[f]; return ok }) {
				continue
			}
		}
		group := ""
		switch {
		case d.group != nil:
			if group, err = callGroup(d, req); err != nil {
				return nil, err
			}
			if group == "" {
				continue
			}
		case d.per != "":
			group = majorValue(r.Major, d.per)
		}
		seen[d.limit] = true
		refs = append(refs, decl.Ref{Limit: d.limit, Group: group})
	}
	return refs, nil
}

func callGroup(d *declared, req *http.Request) (group string, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: Limit %q: Group panicked: %v", ErrBadRequest, d.limit.Name, p)
		}
	}()
	r := req.Clone(req.Context())
	r.Body, r.GetBody = http.NoBody, nil
	if group = d.group(r); len(group) > MaxGroupKey {
		return "", fmt.Errorf("%w: Limit %q: Group returned a key of %d bytes, more than %d", ErrBadRequest, d.limit.Name, len(group), MaxGroupKey)
	}
	return group, nil
}

// MaxGroupKey bounds the key a Limit's Group function returns, in bytes.
const MaxGroupKey = 256

// majorValue is name's part of a route's major parameters ("guild_id=9").
func majorValue(major, name string) string {
	for _, kv := range strings.Split(major, ";") {
		if strings.HasPrefix(kv, name+"=") {
			return kv
		}
	}
	return ""
}

// LimitSnapshot is one live group of a declared limit (Options.Limits)
// in a Snapshot.
//
// Without Options.Redis, Waiting and Held count this process's requests,
// the only ones in the group. With it, the group is counted in Redis, and
// both count the requests of every process sharing it there (one token,
// one Redis), as Redis holds them when Snapshot reads it; Snapshot.Limits
// says which groups are listed then, and what it holds when Redis cannot
// be read.
type LimitSnapshot struct {
	// Limit is the limit's Name; Group the group's key ("guild_id=9", or
	// what Limit.Group returned; "" for a limit with one group).
	Limit, Group string
	// Count and Window are the limit's.
	Count  int
	Window time.Duration
	// Waiting requests have a place in the group's schedule and have not
	// been sent (with Redis: have not taken a slot of the group's guard;
	// a place whose window was missed counts until it is placed again,
	// or, its process gone, until Options.AttemptTimeout plus 10 s after
	// that window).
	Waiting int
	// Held is the number of the group's places taken now: requests in
	// flight, and answered within the last Window (with Redis: the
	// guard's slots, every process's; a request whose process died in
	// flight holds its slot for Options.AttemptTimeout plus 10 s).
	Held int
}
