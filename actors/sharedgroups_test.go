package actors

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The shared groups a process remembers for its snapshot: each while one
// of its requests has a place there, then for its Window plus
// recentGroupKeep; never more than maxRecentGroups, the groups without a
// request here forgotten first, the least recently used of them first.
func TestRecentGroupsBoundedAndExpiring(t *testing.T) {
	now := time.Unix(1000, 0)
	lim := &DeclaredLimit{Name: "member_roles", Count: 5, Window: 10 * time.Second}
	ref := func(i int) []LimitRef { return []LimitRef{{Limit: lim, Group: "guild_id=" + strconv.Itoa(i)}} }
	var r recentGroups
	groups := func(w Window, at time.Time) map[string]bool {
		out := map[string]bool{}
		for _, k := range r.of(w, at) {
			out[k.group] = true
		}
		return out
	}

	r.add(BotWindow, ref(1), now)
	r.add(BotWindow, ref(1), now)
	r.add(IPWindow, ref(2), now)
	assert.Equal(t, map[string]bool{"guild_id=1": true}, groups(BotWindow, now))
	assert.Equal(t, map[string]bool{"guild_id=2": true}, groups(IPWindow, now))

	// Kept while a request waits there, however long.
	later := now.Add(time.Hour)
	assert.Len(t, groups(BotWindow, later), 1)
	r.done(BotWindow, ref(1), later)
	r.done(BotWindow, ref(1), later)
	r.done(BotWindow, ref(1), later) // one end too many (forgotten and added again): no harm
	keep := lim.Window + recentGroupKeep
	assert.Len(t, groups(BotWindow, later.Add(keep)), 1, "kept a window and recentGroupKeep after the last end")
	assert.Empty(t, groups(BotWindow, later.Add(keep+time.Millisecond)), "then forgotten")

	// Bounded: past maxRecentGroups, one without a request here goes
	// first, the least recently used of them.
	r = recentGroups{}
	for i := range maxRecentGroups {
		r.add(BotWindow, ref(i), now.Add(time.Duration(i)*time.Millisecond))
		if i%2 == 1 {
			r.done(BotWindow, ref(i), now.Add(time.Duration(i)*time.Millisecond))
		}
	}
	r.add(BotWindow, ref(maxRecentGroups), now.Add(time.Second))
	got := groups(BotWindow, now.Add(time.Second))
	assert.Len(t, got, maxRecentGroups)
	assert.False(t, got["guild_id=1"], "the oldest without a request here is forgotten")
	assert.True(t, got["guild_id=0"], "an older one with a request waiting is kept")
	assert.True(t, got["guild_id="+strconv.Itoa(maxRecentGroups)])
}
