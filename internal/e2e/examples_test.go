package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildExample builds the example program in examples/<name> into the
// test's temporary directory and returns its path.
func buildExample(t *testing.T, name string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), filepath.Base(name))
	build := exec.Command(goBin, "build", "-o", out, "github.com/seedqueue/sq/examples/"+name)
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build examples/%s: %v\n%s", name, err, msg)
	}
	return out
}

// Ctrl-C stops examples/batch_producer while it publishes as fast as the
// server acknowledges: it prints what was acknowledged and exits. Before,
// Send noticed the interrupt only while waiting for buffer space, and the
// program ran on to its full -count.
func TestExampleBatchProducerStopsAtInterrupt(t *testing.T) {
	bin := buildExample(t, "batch_producer")
	srv := startServer(t, t.TempDir())
	c := startProcess(t, bin, nil, "-addr", srv.addr, "-topic", "events", "-count", "2000000000")
	// Wait until records are stored: the program is in its send loop.
	deadline := time.Now().Add(cliTimeout)
	for {
		r := runSQ(t, srv.addr, nil, "consume", "-t", "events", "-c", "1", "-f", "%v\n")
		if r.code == 0 && strings.HasPrefix(r.stdout, "event-") {
			break
		}
		if c.done() {
			t.Fatalf("exited before Ctrl-C (%v); stdout:\n%s\nstderr:\n%s", c.err, c.stdout, c.stderr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record stored within %v; stderr:\n%s", cliTimeout, c.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := c.interrupt(t); code != 0 {
		t.Fatalf("exit status %d after Ctrl-C; stderr:\n%s", code, c.stderr)
	}
	if out := c.stdout.String(); !strings.Contains(out, " acknowledged, ") || strings.HasPrefix(out, "2000000000 acknowledged") {
		t.Fatalf("stdout %q, want the count acknowledged before the interrupt", out)
	}
	if strings.Contains(c.stderr.String(), "send: context canceled") {
		t.Fatalf("the interrupt is logged as a send failure:\n%s", c.stderr)
	}
}
