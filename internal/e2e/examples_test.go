package e2e

import (
	"bytes"
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
	cmd := exec.Command(bin, "-addr", srv.addr, "-topic", "events", "-count", "2000000000")
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed when the process has exited
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	// Wait until records are stored: the program is in its send loop.
	deadline := time.Now().Add(cliTimeout)
	for {
		r := runSQ(t, srv.addr, nil, "consume", "-t", "events", "-c", "1", "-f", "%v\n")
		if r.code == 0 && strings.HasPrefix(r.stdout, "event-") {
			break
		}
		select {
		case <-exited:
			t.Fatalf("exited before Ctrl-C (%v); stdout:\n%s\nstderr:\n%s", waitErr, stdout.String(), stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record stored within %v; stderr:\n%s", cliTimeout, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("exit after Ctrl-C: %v; stderr:\n%s", waitErr, stderr.String())
		}
	case <-time.After(cliTimeout):
		t.Fatalf("still running %v after Ctrl-C; stderr:\n%s", cliTimeout, stderr.String())
	}
	if !strings.Contains(stdout.String(), " acknowledged, ") || strings.HasPrefix(stdout.String(), "2000000000 acknowledged") {
		t.Fatalf("stdout %q, want the count acknowledged before the interrupt", stdout.String())
	}
	if strings.Contains(stderr.String(), "send: context canceled") {
		t.Fatalf("the interrupt is logged as a send failure:\n%s", stderr.String())
	}
}
