package sluice_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice"
)

// The release script (.ci/release), run in a scratch clone of this
// repository, sets one version everywhere and tags every module at once:
// sluice.Version, every module's require line for the library and the
// integrations (so that outside this repository, where replace directives
// do not apply, they resolve the tag), the changelog, and the tags vX.Y.Z
// and integrations/<name>/vX.Y.Z on one commit. A dry run changes nothing;
// a bad version, or one tagged already, is refused.
func TestReleaseSetsOneVersionEverywhere(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v)", err)
	}
	repo := filepath.Join(t.TempDir(), "repo")
	env := append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=release test", "GIT_AUTHOR_EMAIL=release@test.invalid",
		"GIT_COMMITTER_NAME=release test", "GIT_COMMITTER_EMAIL=release@test.invalid")
	sh := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir, cmd.Env = repo, env
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		require.NoError(t, err, "%v: %s", args, out)
		return string(out), 0
	}
	// (with the machine's git configuration: it may be what lets this
	// user read the checkout, safe.directory)
	out, err := exec.Command("git", "clone", "-q", "--no-hardlinks", strings.TrimSpace(string(top)), repo).CombinedOutput()
	if err != nil {
		t.Skipf("cannot clone this checkout: %v: %s", err, out)
	}
	head, _ := sh("git", "rev-parse", "HEAD")

	got, code := sh(".ci/release", "-n", "v0.98.7")
	require.Zero(t, code, got)
	assert.Contains(t, got, "dry run, nothing changed")
	status, _ := sh("git", "status", "--porcelain")
	assert.Empty(t, status, "a dry run changes nothing")
	tags, _ := sh("git", "tag")
	assert.Empty(t, tags)

	got, code = sh(".ci/release", "v0.98.7")
	require.Zero(t, code, got)
	tags, _ = sh("git", "tag", "--points-at", "HEAD")
	assert.ElementsMatch(t, []string{"v0.98.7", "integrations/discordgo/v0.98.7", "integrations/disgo/v0.98.7", "integrations/arikawa/v0.98.7"},
		strings.Fields(tags))
	parent, _ := sh("git", "rev-parse", "HEAD^")
	assert.Equal(t, head, parent, "one commit")
	read := func(path string) string {
		b, err := os.ReadFile(filepath.Join(repo, path))
		require.NoError(t, err)
		return string(b)
	}
	assert.Contains(t, read("options.go"), "\nconst Version = \"0.98.7\"\n")
	for _, m := range []string{"integrations/discordgo", "integrations/disgo", "integrations/arikawa", "examples/discordgo", "bench"} {
		mod := read(m + "/go.mod")
		assert.Contains(t, mod, "\tgithub.com/sluicehq/sluice v0.98.7\n", m)
		assert.NotRegexp(t, `github\.com/sluicehq/sluice(/[a-z/]+)? v0\.0\.0`, mod, m)
	}
	assert.Contains(t, read("examples/discordgo/go.mod"), "\tgithub.com/sluicehq/sluice/integrations/discordgo v0.98.7\n")
	changelog := read("CHANGELOG.md")
	assert.Contains(t, changelog, "\n## Unreleased\n\n## v0.98.7 (")

	got, code = sh(".ci/release", "v0.98.7")
	assert.Equal(t, 1, code, "tagged already: %s", got)
	got, code = sh(".ci/release", "9.8")
	assert.Equal(t, 2, code, "not a version: %s", got)
	got, code = sh(".ci/release", "v2.0.0")
	assert.Equal(t, 2, code, "a v2 needs /v2 module paths: %s", got)
}

// No module of this repository requires the library (or an integration)
// at v0.0.0, a version that never exists outside it: each requires
// sluice.Version's tag (the release script keeps them so).
func TestModulesRequireTheReleasedVersion(t *testing.T) {
	for _, m := range []string{"integrations/discordgo", "integrations/disgo", "integrations/arikawa", "examples/discordgo", "bench"} {
		b, err := os.ReadFile(filepath.Join(m, "go.mod"))
		require.NoError(t, err)
		assert.Contains(t, string(b), "\tgithub.com/sluicehq/sluice v"+sluice.Version+"\n", m)
		assert.NotRegexp(t, `github\.com/sluicehq/sluice(/[a-z/]+)? v0\.0\.0`, string(b), m)
	}
}
