package routes

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics, is deterministic, produces keys
// of the documented shape, and never lets a webhook or interaction token into
// Key, Redacted or String.
func FuzzParse(f *testing.F) {
	f.Add("GET", "/api/v10/channels/81/messages/99")
	f.Add("POST", "/webhooks/1/"+webhookToken+"?wait=true")
	f.Add("POST", "/interactions/5/"+interactionToken+"/callback")
	f.Add("PUT", "/channels/1/messages/2/reactions/%F0%9F%91%8D/@me")
	f.Add("", "//api/v9//guilds/9/members/1/")
	f.Fuzz(func(t *testing.T, method, path string) {
		r1, err1 := Parse(method, path)
		r2, err2 := Parse(method, path)
		if r1 != r2 || (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
			t.Fatalf("Parse is not deterministic: %#v %v / %#v %v", r1, err1, r2, err2)
		}
		if err1 != nil {
			return
		}
		r := r1
		checkCanonical(t, method, path, r)
		key := r.Key()
		if strings.Count(key, " ") != 2 {
			t.Fatalf("key %q does not have three space-separated fields", key)
		}
		if !strings.HasPrefix(r.Template, "/") || !strings.HasPrefix(r.Redacted(), "/") {
			t.Fatalf("template %q or redacted %q does not start with /", r.Template, r.Redacted())
		}
		raw, tok, others, ok := tokenOf(path)
		if !ok {
			return
		}
		if !r.PerToken {
			t.Fatalf("token path %q not marked PerToken", path)
		}
		// The template and the major's non-hash part must not depend on the
		// token: swapping it for another one changes nothing else.
		if strings.Count(path, raw) == 1 && !strings.Contains(path, "SWAPPEDTOKEN") {
			swapped := strings.Replace(path, raw, "SWAPPEDTOKEN", 1)
			if rs, err := Parse(method, swapped); err == nil {
				if rs.Template != r.Template || majorWithoutHash(rs.Major) != majorWithoutHash(r.Major) {
					t.Fatalf("template depends on the token: %q vs %q, %q vs %q", r.Template, rs.Template, r.Major, rs.Major)
				}
			}
		}
		if len(tok) <= TokenHashLength || strings.ContainsAny(tok, "{}=; /") ||
			strings.Contains(strings.ToUpper(method), tok) || containsAny(others, tok) || containsAny(others, raw) {
			return
		}
		for _, s := range []string{key, r.Redacted(), r.String()} {
			if strings.Contains(s, tok) || strings.Contains(s, raw) {
				t.Fatalf("token %q leaked into %q", tok, s)
			}
		}
	})
}

// checkCanonical: a path Parse accepts has no dot segment once fully
// decoded (an oracle independent of CanonicalPath), its canonical form
// parses to the same route, and its label is bounded.
func checkCanonical(t *testing.T, method, path string, r Route) {
	t.Helper()
	p := path
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if dec, err := url.PathUnescape(p); err == nil {
		for _, s := range strings.FieldsFunc(dec, func(c rune) bool { return c == '/' || c == '\\' }) {
			if name, _, _ := strings.Cut(s, ";"); name == "." || name == ".." {
				t.Fatalf("%q accepted with a dot segment", path)
			}
		}
	}
	c, err := CanonicalPath(path)
	if err != nil {
		t.Fatalf("Parse accepts %q, CanonicalPath refuses it: %v", path, err)
	}
	if rc, err := Parse(method, c.String()); err != nil || rc != r {
		t.Fatalf("the canonical form %q of %q parses otherwise: %#v %v", c.String(), path, rc, err)
	}
	if l := r.Label(); l != OtherLabel {
		for _, s := range strings.Split(strings.TrimPrefix(l, "/"), "/") {
			if !knownWords[s] && !(len(s) > 2 && s[0] == '{' && s[len(s)-1] == '}' && strings.Trim(s[1:len(s)-1], "abcdefghijklmnopqrstuvwxyz_") == "") {
				t.Fatalf("label %q of %q has the segment %q", l, path, s)
			}
		}
	}
}

// tokenOf is an oracle independent of Parse: it returns the raw and decoded
// token segment of a webhook or interaction path, and the other segments
// (raw and decoded).
func tokenOf(path string) (raw, tok string, others []string, ok bool) {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	var segs []string
	for _, s := range strings.Split(path, "/") {
		if s != "" {
			segs = append(segs, s)
		}
	}
	if len(segs) > 0 && segs[0] == "api" {
		segs = segs[1:]
		if len(segs) > 0 && isVersion(segs[0]) {
			segs = segs[1:]
		}
	}
	if len(segs) < 3 {
		return "", "", nil, false
	}
	first, _ := url.PathUnescape(segs[0])
	if first != "webhooks" && first != "interactions" {
		return "", "", nil, false
	}
	tok, err := url.PathUnescape(segs[2])
	if err != nil {
		return "", "", nil, false
	}
	for i, s := range segs {
		if i == 2 {
			continue
		}
		others = append(others, s)
		if d, err := url.PathUnescape(s); err == nil {
			others = append(others, d)
		}
	}
	return segs[2], tok, others, true
}

func containsAny(haystacks []string, needle string) bool {
	for _, h := range haystacks {
		if strings.Contains(h, needle) {
			return true
		}
	}
	return false
}

func majorWithoutHash(major string) string {
	if i := strings.Index(major, ";webhook_token="); i >= 0 {
		return major[:i]
	}
	return major
}

// FuzzJoinedIn checks that joinedIn, which takes a route's redacted path
// out of the raw path when it reads so, always returns what slashJoin
// builds: "/" and the segments joined by "/".
func FuzzJoinedIn(f *testing.F) {
	f.Add("/api/v10/channels/1/messages?x=1", "channels/1/messages")
	f.Add("/channels//1/messages/", "channels/1/messages")
	f.Add("/webhooks/1/tok", "webhooks/1/{webhook_token}")
	f.Add("/a/bc", "b/c")
	f.Add("", "a")
	f.Fuzz(func(t *testing.T, raw, joined string) {
		var segs []string
		for s := range strings.SplitSeq(joined, "/") {
			if s != "" {
				segs = append(segs, s)
			}
		}
		if len(segs) == 0 {
			return
		}
		if got, want := joinedIn(raw, segs), slashJoin("", segs); got != want {
			t.Fatalf("joinedIn(%q, %q) = %q, want %q", raw, segs, got, want)
		}
	})
}
