package sluicetest

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// The simulator's own route matching. It deliberately shares no code with
// the limiter's routes package: the simulator is the referee, and a
// misunderstanding of Discord's routes must not be able to hide in both.

type segment struct {
	literal string // matched exactly when param is empty
	param   string // parameter name, without braces
}

type template []segment

func compileTemplate(route string) (template, error) {
	if !strings.HasPrefix(route, "/") {
		return nil, fmt.Errorf("route %q must start with /", route)
	}
	parts := strings.Split(strings.Trim(route, "/"), "/")
	t := make(template, 0, len(parts))
	names := map[string]bool{}
	for _, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("route %q has an empty segment", route)
		}
		if strings.HasPrefix(p, "{") || strings.HasSuffix(p, "}") {
			if len(p) < 3 || !strings.HasPrefix(p, "{") || !strings.HasSuffix(p, "}") {
				return nil, fmt.Errorf("route %q: malformed parameter %q", route, p)
			}
			name := p[1 : len(p)-1]
			if names[name] {
				return nil, fmt.Errorf("route %q repeats parameter %q", route, name)
			}
			names[name] = true
			t = append(t, segment{param: name})
			continue
		}
		t = append(t, segment{literal: p})
	}
	return t, nil
}

func normalizeTemplate(route string) string {
	t, err := compileTemplate(route)
	if err != nil {
		return route
	}
	var b strings.Builder
	for _, s := range t {
		b.WriteByte('/')
		if s.param != "" {
			b.WriteString("{}")
		} else {
			b.WriteString(s.literal)
		}
	}
	return b.String()
}

// compiledRule is a Rule ready for matching.
type compiledRule struct {
	Rule
	index    int
	tmpl     template
	literals int // literal segments: more literals win over parameters
}

// router finds the rule for a method and path.
type router struct {
	bySegments map[int][]*compiledRule // sorted: most literals first
}

func newRouter(rules []Rule) (*router, error) {
	r := &router{bySegments: map[int][]*compiledRule{}}
	for i, rule := range rules {
		t, err := compileTemplate(rule.Route)
		if err != nil {
			return nil, err
		}
		c := &compiledRule{Rule: rule, index: i, tmpl: t}
		for _, s := range t {
			if s.param == "" {
				c.literals++
			}
		}
		r.bySegments[len(t)] = append(r.bySegments[len(t)], c)
	}
	for _, list := range r.bySegments {
		sort.SliceStable(list, func(i, j int) bool { return list[i].literals > list[j].literals })
	}
	return r, nil
}

// apiPath strips the API prefix: /api/v10/..., /api/v9/... and /api/...
// are served; other versions are not. ok is false when the path is not an
// API path at all.
func apiPath(escapedPath string) (rest string, ok bool) {
	if !strings.HasPrefix(escapedPath, "/api/") && escapedPath != "/api" {
		return "", false
	}
	rest = strings.TrimPrefix(escapedPath, "/api")
	for _, v := range []string{"/v10/", "/v9/"} {
		if strings.HasPrefix(rest, v) {
			return rest[len(v)-1:], true
		}
	}
	if strings.HasPrefix(rest, "/v") && len(rest) > 2 && rest[2] >= '0' && rest[2] <= '9' {
		return "", false // an unsupported version
	}
	return rest, true
}

// match returns the rule for method and the API-relative escaped path, the
// decoded parameter values, and whether some rule matched the path with
// another method (405 rather than 404).
func (r *router) match(method, path string) (rule *compiledRule, params map[string]string, otherMethod bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for _, c := range r.bySegments[len(parts)] {
		p, ok := c.tmpl.bind(parts)
		if !ok {
			continue
		}
		if c.Method != method {
			otherMethod = true
			continue
		}
		return c, p, false
	}
	return nil, nil, otherMethod
}

func (t template) bind(parts []string) (map[string]string, bool) {
	var params map[string]string
	for i, s := range t {
		if s.param == "" {
			if parts[i] != s.literal {
				return nil, false
			}
			continue
		}
		if parts[i] == "" {
			return nil, false
		}
		v, err := url.PathUnescape(parts[i])
		if err != nil {
			return nil, false
		}
		if params == nil {
			params = make(map[string]string, 4)
		}
		params[s.param] = v
	}
	return params, true
}
