package actors

import "testing"

func TestMountPath(t *testing.T) {
	for base, want := range map[string]string{
		"":                   "",
		"/api":               "",
		"/api/v10":           "",
		"/api/v10/":          "",
		"/discord/api/v10":   "/discord",
		"/a/b/api":           "/a/b",
		"/discord":           "/discord",
		"/apis":              "/apis",
		"/api/vx":            "/api/vx",
		"/api/v":             "/api/v",
		"/x/api/v9/channels": "/x/api/v9/channels",
	} {
		if got := mountPath(base); got != want {
			t.Errorf("mountPath(%q) = %q, want %q", base, got, want)
		}
	}
}
