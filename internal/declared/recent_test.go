package declared

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/ratelimit"
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

// shared is a shared store for Recent.Snapshot: it counts declared groups
// (store) and reads their states from states, by key, recording the keys
// it was asked for (each read's, sorted and joined); short answers fewer
// states than asked, err fails.
type shared struct {
	store
	states map[string]ratelimit.SharedGroupState
	asked  []string
	short  bool
	err    error
}

func (*shared) Reserve(context.Context, ratelimit.SharedRequest) ratelimit.SharedGrant {
	return ratelimit.SharedGrant{OK: true}
}

func (*shared) Report(context.Context, ratelimit.SharedGrant, ratelimit.SharedAnswer) {}

func (s *shared) GroupStates(_ context.Context, gs []ratelimit.SharedGroup) ([]ratelimit.SharedGroupState, error) {
	if s.err != nil {
		return nil, s.err
	}
	var out []ratelimit.SharedGroupState
	var keys []string
	for _, g := range gs {
		keys = append(keys, g.Key)
		out = append(out, s.states[g.Key])
	}
	slices.Sort(keys)
	s.asked = append(s.asked, strings.Join(keys, ","))
	if s.short {
		out = out[:0]
	}
	return out, nil
}

// counting counts declared groups but cannot read them; reading reads
// them but does not count them: neither is read.
type (
	counting struct{ shared }
	reading  struct {
		ratelimit.Shared
		ratelimit.SharedGroupStates
	}
)

func (*counting) GroupStates() {} // hides shared's: not a SharedGroupStates

var (
	_ ratelimit.SharedGroups      = (*shared)(nil)
	_ ratelimit.SharedGroupStates = (*shared)(nil)
)

// Recent.Snapshot adds to the local groups the live groups each store
// counts among those remembered for it, read from that store, and sums a
// group counted in several places; a store that cannot count or read
// groups, or has none remembered, is not read; a failed read returns the
// local groups as they were.
func TestRecentSnapshot(t *testing.T) {
	now := time.Unix(1000, 0)
	roles := &Limit{Name: "roles", Count: 5, Window: 10 * time.Second}
	dms := &Limit{Name: "dms", Count: 100, Window: time.Minute}
	g9 := Ref{Limit: roles, Group: "guild_id=9"}
	g8 := Ref{Limit: roles, Group: "guild_id=8"}
	g6 := Ref{Limit: roles, Group: "guild_id=6"}
	dm := Ref{Limit: dms}
	local := []Snapshot{
		{Limit: "roles", Group: "guild_id=9", Count: 5, Window: 10 * time.Second, Waiting: 1},
		{Limit: "dms", Count: 100, Window: time.Minute, Held: 1},
	}
	sorted := Sum(local) // dms, then roles
	states := map[string]ratelimit.SharedGroupState{
		"roles|guild_id=9": {Waiting: 2, Held: 3},
		"roles|guild_id=8": {Held: 1},
		"dms|":             {}, // idle: here only
		"roles|guild_id=6": {}, // idle
	}
	remember := func(r *Recent[string]) {
		r.Add("bot", []Ref{g9, dm, g6}, now)
		r.Add("ip", []Ref{g8}, now)
		old := Ref{Limit: roles, Group: "guild_id=7"}
		r.Add("bot", []Ref{old}, now.Add(-time.Hour))
		r.Done("bot", []Ref{old}, now.Add(-time.Hour)) // expired by now
	}
	bot9 := Snapshot{Limit: "roles", Group: "guild_id=9", Count: 5, Window: 10 * time.Second, Waiting: 3, Held: 3}
	ip8 := Snapshot{Limit: "roles", Group: "guild_id=8", Count: 5, Window: 10 * time.Second, Held: 1}
	errRead := errors.New("store down")

	for _, c := range []struct {
		name   string
		stores func() []Store[string]
		want   []Snapshot
		asked  [][]string // per store given: its reads
		err    error
	}{
		{name: "no stores", stores: func() []Store[string] { return nil }, want: sorted},
		{name: "nil store", stores: func() []Store[string] { return []Store[string]{{W: "bot"}} }, want: sorted},
		{
			name:   "bot store: its live groups, summed with the local ones",
			stores: func() []Store[string] { return []Store[string]{{W: "bot", Shared: &shared{states: states}}} },
			want:   []Snapshot{sorted[0], bot9},
			asked:  [][]string{{"dms|,roles|guild_id=6,roles|guild_id=9"}},
		},
		{
			name: "both windows' stores",
			stores: func() []Store[string] {
				return []Store[string]{{W: "bot", Shared: &shared{states: states}}, {W: "ip", Shared: &shared{states: states}}}
			},
			want:  []Snapshot{sorted[0], ip8, bot9},
			asked: [][]string{{"dms|,roles|guild_id=6,roles|guild_id=9"}, {"roles|guild_id=8"}},
		},
		{
			name: "one store for both windows: read for each window's groups",
			stores: func() []Store[string] {
				st := &shared{states: map[string]ratelimit.SharedGroupState{"roles|guild_id=9": {Held: 1}, "roles|guild_id=8": {Held: 1}}}
				return []Store[string]{{W: "bot", Shared: st}, {W: "ip", Shared: st}}
			},
			want:  []Snapshot{sorted[0], ip8, {Limit: "roles", Group: "guild_id=9", Count: 5, Window: 10 * time.Second, Waiting: 1, Held: 1}},
			asked: [][]string{{"dms|,roles|guild_id=6,roles|guild_id=9", "roles|guild_id=8"}},
		},
		{
			name:   "a store with no group remembered is not read",
			stores: func() []Store[string] { return []Store[string]{{W: "other", Shared: &shared{states: states}}} },
			want:   sorted,
			asked:  [][]string{nil},
		},
		{
			name: "a short answer: the groups it left out are left out",
			stores: func() []Store[string] {
				return []Store[string]{{W: "bot", Shared: &shared{states: states, short: true}}}
			},
			want:  sorted,
			asked: [][]string{{"dms|,roles|guild_id=6,roles|guild_id=9"}},
		},
		{
			name:   "a store that cannot read groups",
			stores: func() []Store[string] { return []Store[string]{{W: "bot", Shared: &counting{shared{states: states}}}} },
			want:   sorted,
		},
		{
			name: "a store that does not count groups",
			stores: func() []Store[string] {
				st := &shared{states: states}
				return []Store[string]{{W: "bot", Shared: reading{st, st}}}
			},
			want: sorted,
		},
		{
			name: "a failed read: the local groups as they were",
			stores: func() []Store[string] {
				return []Store[string]{{W: "ip", Shared: &shared{states: states}}, {W: "bot", Shared: &shared{err: errRead}}}
			},
			want: local,
			err:  errRead,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var r Recent[string]
			remember(&r)
			stores := c.stores()
			in := slices.Clone(local)
			got, err := r.Snapshot(context.Background(), now, in, stores)
			assert.Equal(t, local, in, "local unchanged")
			assert.ErrorIs(t, err, c.err)
			if c.err == nil {
				assert.NoError(t, err)
			}
			assert.Equal(t, c.want, got)
			for i, want := range c.asked {
				st := stores[i].Shared.(*shared)
				assert.Equal(t, want, st.asked, "store %d read", i)
			}
		})
	}
}
