package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/sluicehq/sluice"
)

// versionText is what "sluice version" and "sluice --version" print, read
// from info, the build information the Go toolchain records in the binary
// (ok false: none was recorded):
//
//	sluice 0.1.0
//	module github.com/sluicehq/sluice v0.1.0
//	commit 0123456789abcdef0123456789abcdef01234567 (2026-11-27T18:00:00Z, modified)
//	go1.26.8 linux/amd64
//
// The first line is the library's version (sluice.Version, also in its
// User-Agent). The module line is the version the toolchain stamped: the
// release tag with "go install github.com/sluicehq/sluice/cmd/sluice@v0.1.0",
// a pseudo-version or "(devel)" when built in a checkout. The commit line
// is the VCS revision and time the build recorded, "modified" when the
// work tree had changes; it is missing when the build recorded none
// (-buildvcs=false, a module download, or no VCS). The last line is the
// Go toolchain and the platform.
func versionText(info *debug.BuildInfo, ok bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sluice %s\n", sluice.Version)
	goVersion := runtime.Version()
	if ok && info != nil {
		if info.Main.Path != "" {
			v := info.Main.Version
			if v == "" {
				v = "(devel)"
			}
			fmt.Fprintf(&b, "module %s %s\n", info.Main.Path, v)
		}
		var rev, at string
		modified := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" {
			var notes []string
			if at != "" {
				notes = append(notes, at)
			}
			if modified {
				notes = append(notes, "modified")
			}
			b.WriteString("commit " + rev)
			if len(notes) > 0 {
				b.WriteString(" (" + strings.Join(notes, ", ") + ")")
			}
			b.WriteString("\n")
		}
		if info.GoVersion != "" {
			goVersion = info.GoVersion
		}
	}
	fmt.Fprintf(&b, "%s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}

// printVersion writes this binary's versionText to w.
func printVersion(w interface{ Write([]byte) (int, error) }) error {
	info, ok := debug.ReadBuildInfo()
	_, err := fmt.Fprint(w, versionText(info, ok))
	return err
}
