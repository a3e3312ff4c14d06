package buildinfo

import (
	"regexp"
	"runtime/debug"
	"testing"
)

func TestCommit(t *testing.T) {
	rev := "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
	for _, tc := range []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"none", nil, "unknown"},
		{"no revision", []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, "unknown"},
		{"clean", []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}, "1a2b3c4"},
		{"dirty", []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: rev}}, "1a2b3c4-dirty"},
		{"short", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}, "abc"},
	} {
		if got := Commit(tc.settings); got != tc.want {
			t.Errorf("%s: Commit = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestGoVersion(t *testing.T) {
	for in, want := range map[string]string{
		"go1.26.8":                 "go1.26",
		"go1.26":                   "go1.26",
		"go1.27rc1":                "go1.27",
		"go1.26.1 X:boringcrypto":  "go1.26",
		"devel go1.27-0123abc Tue": "go1.27",
		"weird":                    "weird",
		"go":                       "go",
		"gox.1":                    "gox.1",
	} {
		if got := GoVersion(in); got != want {
			t.Errorf("GoVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestString(t *testing.T) {
	re := regexp.MustCompile(`^sq \S+ \(commit ([0-9a-f]{1,7}(-dirty)?|unknown), go\d+\.\d+\)$`)
	if got := String("sq"); !re.MatchString(got) {
		t.Errorf("String = %q, want a match of %v", got, re)
	}
	if got, want := format("sq-server", "v1", "abc1234", "go1.26"), "sq-server v1 (commit abc1234, go1.26)"; got != want {
		t.Errorf("format = %q, want %q", got, want)
	}
}
