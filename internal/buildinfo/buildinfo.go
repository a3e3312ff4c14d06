// Package buildinfo is the version line shared by the sq and sq-server
// binaries: `sq --version` and `sq-server --version` print
//
//	NAME VERSION (commit C, goX.Y)
//
// for example "sq 0.1.0-dev (commit 1a2b3c4, go1.26)". VERSION is set at
// link time (the Makefile's build target passes the output of
// `git describe --always --dirty`):
//
//	go build -ldflags "-X github.com/seedqueue/sq/internal/buildinfo.Version=v0.2.0" ./cmd/...
//
// C is the VCS revision the go command stamps into the binary
// (runtime/debug.ReadBuildInfo, setting vcs.revision), shortened to 7
// hex digits, with "-dirty" when the work tree had uncommitted changes
// (vcs.modified=true); "unknown" when the binary carries no revision (go
// run, go test, or a build outside a git checkout or with -buildvcs=false).
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version is the release version, set with -ldflags -X (see the package
// documentation); "0.1.0-dev" in builds that do not set it.
var Version = "0.1.0-dev"

// shortRevision is how many hex digits of the commit hash are shown, as
// `git log --oneline` does.
const shortRevision = 7

// String returns the version line of the binary called name:
// "NAME VERSION (commit C, goX.Y)".
func String(name string) string {
	var settings []debug.BuildSetting
	if bi, ok := debug.ReadBuildInfo(); ok {
		settings = bi.Settings
	}
	return format(name, Version, Commit(settings), GoVersion(runtime.Version()))
}

func format(name, version, commit, goVersion string) string {
	return fmt.Sprintf("%s %s (commit %s, %s)", name, version, commit, goVersion)
}

// Commit returns the short commit of the build settings (vcs.revision, 7
// hex digits, "-dirty" appended when vcs.modified is "true"), or "unknown"
// when they name no revision.
func Commit(settings []debug.BuildSetting) string {
	var rev string
	var dirty bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if len(rev) > shortRevision {
		rev = rev[:shortRevision]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// GoVersion reduces a Go toolchain version as runtime.Version reports it
// ("go1.26.8", "go1.27rc1", "go1.26.1 X:boringcrypto", "devel go1.27-abc")
// to its language version "goX.Y"; a string it cannot read is returned
// unchanged.
func GoVersion(v string) string {
	v = strings.TrimPrefix(v, "devel ")
	v, _, _ = strings.Cut(v, " ")
	rest, ok := strings.CutPrefix(v, "go")
	if !ok {
		return v
	}
	major, minor, ok := strings.Cut(rest, ".")
	if !ok || !digits(major) {
		return v
	}
	end := 0
	for end < len(minor) && minor[end] >= '0' && minor[end] <= '9' {
		end++
	}
	if end == 0 {
		return v
	}
	return "go" + major + "." + minor[:end]
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
