package buildinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestBinariesPrintStampedVersion builds sq-server and sq with the
// Makefile's -ldflags -X of Version and checks that `--version` of both
// prints it, and that the Makefile's build target passes the output of
// `git describe` that way.
func TestBinariesPrintStampedVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries")
	}
	const stamp = "v9.8.7-stamp-test"
	dir := t.TempDir()
	ldflags := "-X github.com/seedqueue/sq/internal/buildinfo.Version=" + stamp
	out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", dir+string(filepath.Separator),
		"github.com/seedqueue/sq/cmd/sq-server", "github.com/seedqueue/sq/cmd/sq").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, name := range []string{"sq-server", "sq"} {
		out, err := exec.Command(filepath.Join(dir, name), "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --version: %v\n%s", name, err, out)
		}
		re := regexp.MustCompile(`^` + regexp.QuoteMeta(name+" "+stamp) + ` \(commit \S+, go\d+\.\d+\)\n$`)
		if !re.Match(out) {
			t.Errorf("%s --version = %q, want a match of %v", name, out, re)
		}
	}

	makeBin, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make not found: the Makefile's build target is not checked")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skipf("not a git checkout (%v): make build stamps no git describe", err)
	}
	describe, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output()
	if err != nil {
		t.Skipf("git describe: %v", err)
	}
	cmd := exec.Command(makeBin, "-n", "build")
	cmd.Dir = root
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VERSION=") { // the Makefile's own default, not a caller's
			cmd.Env = append(cmd.Env, kv)
		}
	}
	plan, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n build: %v\n%s", err, plan)
	}
	want := "buildinfo.Version=" + strings.TrimSpace(string(describe))
	if !strings.Contains(string(plan), want) || !strings.Contains(string(plan), "./cmd/sq-server") || !strings.Contains(string(plan), "./cmd/sq") {
		t.Errorf("make -n build:\n%s\nwant both binaries built with -X ...%s", plan, want)
	}
}
