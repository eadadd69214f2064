package sluicetest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Around429s shows each user 429's neighbourhood with the drops among the
// answers, and nothing for a bucket without a 429 or for a global one.
func TestAround429sShowsDropsBesideTheFirst429(t *testing.T) {
	ev := func(at time.Duration, status, remaining int, scope string) Event {
		return Event{At: at, Status: status, Remaining: remaining, Scope: scope}
	}
	s := Stats{
		DropTimes: []Duration{Duration(5 * time.Millisecond), Duration(25 * time.Millisecond), Duration(10 * time.Second)},
		Buckets: []BucketStats{
			{Key: "quiet", Limit: 2, Timeline: []Event{ev(time.Millisecond, 200, 1, "")}},
			{Key: "global only", Limit: 2, Timeline: []Event{ev(time.Millisecond, 429, 0, "global")}},
			{Key: "hot", Limit: 2, RateLimited: 1, Timeline: []Event{
				ev(10*time.Millisecond, 200, 1, ""),
				ev(20*time.Millisecond, 200, 0, ""),
				ev(30*time.Millisecond, 429, 0, "user"),
				ev(40*time.Millisecond, 200, 1, ""),
			}},
		},
	}
	got := s.Around429s()
	t.Log(got)
	assert.NotContains(t, got, "quiet")
	assert.NotContains(t, got, "global only")
	lines := strings.Split(strings.TrimSpace(got), "\n")
	want := []string{
		"bucket hot (limit 2, 1 429s), answers 0-4 of 4:",
		"10.000ms 200 remaining=1",
		"20.000ms 200 remaining=0",
		"25.000ms connection dropped",
		"30.000ms 429 remaining=0 user",
		"40.000ms 200 remaining=1",
	}
	if assert.Len(t, lines, len(want)) {
		for i, w := range want {
			assert.Equal(t, w, strings.TrimSpace(lines[i]))
		}
	}
	assert.Empty(t, Stats{}.Around429s())
}
