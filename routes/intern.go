package routes

import (
	"slices"
	"sync"
	"sync/atomic"
)

// maxTemplates bounds the templates Parse shares (templates): Discord has
// a few hundred routes, each with a method or two; a client sending made-up
// paths of Discord's words fills the table and costs only what sharing
// would have saved.
const maxTemplates = 1024

// templates holds the method-templates ("POST /channels/{channel_id}/messages")
// of the routes Parse has seen whose literal segments are all Discord's
// words, so that the requests of a route, and the lanes, keys and aliases
// that keep its template as long as a bucket lives, share one string: a
// template built per request would be kept once per live bucket. The map
// is never written once published (a new one replaces it), so a lookup
// takes no lock.
var templates struct {
	mu sync.Mutex // held by the writers
	m  atomic.Pointer[map[string]string]
}

// methodTemplate returns method, a space and "/" followed by tmpl joined by
// "/": the shared string if the route's words are all Discord's (known)
// and method is one of Methods, else a new one.
func methodTemplate(method string, tmpl []string, known bool) string {
	if !known || !slices.Contains(Methods, method) {
		return slashJoin(method, tmpl)
	}
	var buf [192]byte
	b := appendSlashJoin(buf[:0], method, tmpl)
	m := templates.m.Load()
	if m != nil {
		if s, ok := (*m)[string(b)]; ok { // a lookup by bytes: no string is made
			return s
		}
	}
	s := string(b)
	if m == nil || len(*m) < maxTemplates { // full: no lock to take for nothing
		shareTemplate(s)
	}
	return s
}

// shareTemplate adds s to templates, unless they are full.
func shareTemplate(s string) {
	templates.mu.Lock()
	defer templates.mu.Unlock()
	old := templates.m.Load()
	var n int
	if old != nil {
		if _, ok := (*old)[s]; ok {
			return
		}
		n = len(*old)
	}
	if n >= maxTemplates {
		return
	}
	m := make(map[string]string, n+1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[s] = s
	templates.m.Store(&m)
}
