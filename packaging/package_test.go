// Package packaging holds the .deb and .rpm description of SQ (nfpm.yaml,
// the maintainer scripts, the default /etc/sq/sq-server.toml) and the
// tests of what `make package` builds.
package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// run runs a command and fails the test with its output when it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// verifyUnit runs systemd-analyze verify on unit and fails on any line it
// prints about the file (verify exits 0 on settings it ignores).
func verifyUnit(t *testing.T, unit string) {
	t.Helper()
	out, _ := exec.Command("systemd-analyze", "verify", unit).CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, filepath.Base(unit)) {
			t.Errorf("systemd-analyze verify %s:\n%s", unit, out)
			return
		}
	}
}

// TestUnitVerifies: systemd-analyze accepts the unit, every setting
// understood, with ExecStart pointing at a built sq-server.
func TestUnitVerifies(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("no systemd-analyze on this host")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "sq-server")
	run(t, "go", "build", "-o", bin, "../cmd/sq-server")
	b, err := os.ReadFile("../templates/sq-server.service")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "ExecStart=/usr/bin/sq-server ") || !strings.Contains(string(b), "Type=notify") {
		t.Fatalf("the unit does not start /usr/bin/sq-server as Type=notify:\n%s", b)
	}
	unit := filepath.Join(dir, "sq-server.service")
	if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(b), "/usr/bin/sq-server", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	verifyUnit(t, unit)
}

// TestDebInstall (CI only, as root: it changes the host) builds the
// packages with make package, installs the .deb with dpkg -i, checks the
// binaries, the sq user, /var/lib/sq, the config and the unit, runs
// sq-server check and --version, and purges the package.
func TestDebInstall(t *testing.T) {
	if os.Getenv("CI") != "true" || os.Getuid() != 0 {
		t.Skip("installs a package on the host: only with CI=true, as root")
	}
	for _, tool := range []string{"dpkg", "make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s missing (.ci/run installs it)", tool)
		}
	}
	dist := t.TempDir()
	const version = "0.1.0~citest"
	run(t, "make", "-C", "..", "package", "DIST="+dist, "PKG_VERSION="+version)
	debs, _ := filepath.Glob(filepath.Join(dist, "seedqueue_*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(dist, "seedqueue-*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("make package built %v and %v, want one .deb and one .rpm", debs, rpms)
	}
	run(t, "dpkg", "-i", debs[0])
	t.Cleanup(func() { _ = exec.Command("dpkg", "--purge", "seedqueue").Run() })

	if out := run(t, "/usr/bin/sq-server", "--version"); !strings.Contains(out, version) {
		t.Errorf("sq-server --version = %q, want %s", out, version)
	}
	run(t, "/usr/bin/sq", "--help")
	if out := run(t, "id", "-un", "sq"); strings.TrimSpace(out) != "sq" {
		t.Errorf("id sq = %q", out)
	}
	if out := run(t, "stat", "-c", "%U:%G %a", "/var/lib/sq"); strings.TrimSpace(out) != "sq:sq 750" {
		t.Errorf("/var/lib/sq is %q, want sq:sq 750", out)
	}
	if out := run(t, "stat", "-c", "%U:%G %a", "/etc/sq/sq-server.toml"); strings.TrimSpace(out) != "root:sq 640" {
		t.Errorf("/etc/sq/sq-server.toml is %q, want root:sq 640", out)
	}
	out := run(t, "/usr/bin/sq-server", "--config", "/etc/sq/sq-server.toml", "check")
	for _, want := range []string{"open files", "file system", "free space"} {
		if !strings.Contains(out, want) {
			t.Errorf("sq-server check without %q:\n%s", want, out)
		}
	}
	if out := run(t, "/usr/bin/sq-server", "--config", "/etc/sq/sq-server.toml", "config", "print"); !strings.Contains(out, `data-dir = "/var/lib/sq"`) {
		t.Errorf("config print of the default config:\n%s", out)
	}
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		verifyUnit(t, "/usr/lib/systemd/system/sq-server.service")
	}

	run(t, "dpkg", "--purge", "seedqueue")
	for _, gone := range []string{"/usr/bin/sq-server", "/usr/bin/sq", "/usr/lib/systemd/system/sq-server.service", "/etc/sq/sq-server.toml"} {
		if _, err := os.Stat(gone); err == nil {
			t.Errorf("%s still there after dpkg --purge", gone)
		}
	}
}
