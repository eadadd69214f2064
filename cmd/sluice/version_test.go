package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
)

// versionText names the library's version, the module version the
// toolchain stamped, the commit and its time (and "modified"), and the Go
// toolchain; lines the build did not record are left out.
func TestVersionText(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"a release installed with go install", &debug.BuildInfo{GoVersion: "go1.26.8",
			Main:     debug.Module{Path: "github.com/sluicehq/sluice", Version: "v0.2.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-11-27T18:00:00Z"}, {Key: "vcs.modified", Value: "false"}}},
			true, "sluice " + sluice.Version + "\nmodule github.com/sluicehq/sluice v0.2.0\ncommit abc123 (2026-11-27T18:00:00Z)\ngo1.26.8 " + platform + "\n"},
		{"a checkout with changes", &debug.BuildInfo{GoVersion: "go1.26.8",
			Main:     debug.Module{Path: "github.com/sluicehq/sluice", Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}},
			true, "sluice " + sluice.Version + "\nmodule github.com/sluicehq/sluice (devel)\ncommit abc123 (modified)\ngo1.26.8 " + platform + "\n"},
		{"no VCS recorded", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sluicehq/sluice"}},
			true, "sluice " + sluice.Version + "\nmodule github.com/sluicehq/sluice (devel)\ngo1.26.8 " + platform + "\n"},
		{"no build information", nil, false, "sluice " + sluice.Version + "\n" + runtime.Version() + " " + platform + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, versionText(tc.info, tc.ok))
		})
	}
}

// A binary built in a git checkout names the commit it was built from, with
// "sluice version" and "sluice --version" alike.
func TestVersionNamesTheCommit(t *testing.T) {
	rev, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): no commit to name", err)
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	// -buildvcs=true: a machine may turn stamping off in GOFLAGS.
	out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput()
	if err != nil && strings.Contains(string(out), "error obtaining VCS status") {
		t.Skipf("the toolchain cannot read this checkout's VCS status: %s", out)
	}
	require.NoError(t, err, "go build: %s", out)
	for _, args := range [][]string{{"--version"}, {"version"}} {
		got, err := exec.Command(bin, args...).Output()
		require.NoError(t, err)
		assert.Contains(t, string(got), "sluice "+sluice.Version+"\nmodule github.com/sluicehq/sluice ", args)
		assert.Contains(t, string(got), "\ncommit "+strings.TrimSpace(string(rev)), args)
	}
}
