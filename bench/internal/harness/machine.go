package harness

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
)

// CPUModel is the machine's CPU as /proc/cpuinfo names it ("unknown CPU"
// elsewhere), for the reports of the bench commands.
func CPUModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// Revision names the commit of the repository the bench module replaces
// Sluice with (`../`, from the bench directory): "this repository at
// abc1234", with " with uncommitted changes" when there are; "this
// repository" when git cannot tell.
func Revision() string {
	rev, err := exec.Command("git", "-C", "..", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "this repository"
	}
	out := "this repository at " + strings.TrimSpace(string(rev))
	if st, err := exec.Command("git", "-C", "..", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && strings.TrimSpace(string(st)) != "" {
		out += " with uncommitted changes"
	}
	return out
}
