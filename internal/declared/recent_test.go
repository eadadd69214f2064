package declared

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The shared groups a process remembers for its snapshot: each while one
// of its requests has a place there, then for its Window plus
// recentKeep; never more than maxRecent, the groups without a
// request here forgotten first, the least recently used of them first.
func TestRecentBoundedAndExpiring(t *testing.T) {
	now := time.Unix(1000, 0)
	lim := &Limit{Name: "member_roles", Count: 5, Window: 10 * time.Second}
	ref := func(i int) []Ref { return []Ref{{Limit: lim, Group: "guild_id=" + strconv.Itoa(i)}} }
	var r Recent[string]
	groups := func(w string, at time.Time) map[string]bool {
		out := map[string]bool{}
		for _, k := range r.Of(w, at) {
			out[k.Group] = true
		}
		return out
	}

	r.Add("bot", ref(1), now)
	r.Add("bot", ref(1), now)
	r.Add("ip", ref(2), now)
	assert.Equal(t, map[string]bool{"guild_id=1": true}, groups("bot", now))
	assert.Equal(t, map[string]bool{"guild_id=2": true}, groups("ip", now))

	// Kept while a request waits there, however long.
	later := now.Add(time.Hour)
	assert.Len(t, groups("bot", later), 1)
	r.Done("bot", ref(1), later)
	r.Done("bot", ref(1), later)
	r.Done("bot", ref(1), later) // one end too many (forgotten and added again): no harm
	keep := lim.Window + recentKeep
	assert.Len(t, groups("bot", later.Add(keep)), 1, "kept a window and recentKeep after the last end")
	assert.Empty(t, groups("bot", later.Add(keep+time.Millisecond)), "then forgotten")

	// Bounded: past maxRecent, one without a request here goes
	// first, the least recently used of them.
	r = Recent[string]{}
	for i := range maxRecent {
		r.Add("bot", ref(i), now.Add(time.Duration(i)*time.Millisecond))
		if i%2 == 1 {
			r.Done("bot", ref(i), now.Add(time.Duration(i)*time.Millisecond))
		}
	}
	r.Add("bot", ref(maxRecent), now.Add(time.Second))
	got := groups("bot", now.Add(time.Second))
	assert.Len(t, got, maxRecent)
	assert.False(t, got["guild_id=1"], "the oldest without a request here is forgotten")
	assert.True(t, got["guild_id=0"], "an older one with a request waiting is kept")
	assert.True(t, got["guild_id="+strconv.Itoa(maxRecent)])
}
