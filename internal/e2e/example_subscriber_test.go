package e2e

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Ctrl-C stops examples/publish_subscribe/subscriber within its
// -close-timeout when the server froze (SIGSTOP: connections open,
// nothing answered) after the subscriber printed records it had not
// committed yet: the final commit is reported as not stored, with the
// count of partitions, and leaving the group is skipped, rather than
// each waiting out the 30 s request timeout.
func TestExampleSubscriberCloseBoundedOnFrozenServer(t *testing.T) {
	pub := buildExample(t, "publish_subscribe/publisher")
	sub := buildExample(t, "publish_subscribe/subscriber")
	srv := startServer(t, t.TempDir())
	publish := exec.Command(pub, "-addr", srv.addr, "-topic", "orders", "-count", "5")
	publish.Env = cleanEnv()
	if out, err := publish.CombinedOutput(); err != nil {
		t.Fatalf("publisher: %v\n%s", err, out)
	}

	cmd := exec.Command(sub, "-addr", srv.addr, "-topic", "orders", "-group", "g", "-close-timeout", "1s")
	cmd.Env = cleanEnv()
	stdout, stderr := newLogBuffer(), newLogBuffer()
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
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
	deadline := time.Now().Add(cliTimeout)
	for strings.Count(stdout.String(), "offset=") < 6 { // "hello" and 5 records
		select {
		case <-exited:
			t.Fatalf("exited before Ctrl-C (%v); stdout:\n%s\nstderr:\n%s", waitErr, stdout.String(), stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("records not printed within %v; stdout:\n%s\nstderr:\n%s", cliTimeout, stdout.String(), stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.cmd.Process.Signal(syscall.SIGCONT) })
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
	log := stderr.String()
	// An automatic commit (every 5 s at Poll) may have stored every
	// position before the freeze on a slow machine: then the commit at
	// Close has nothing to send and the leave is what the budget ends.
	notCommitted := strings.Contains(log, "partitions not committed, their records will be read again") &&
		strings.Contains(log, "close budget spent; not leaving the group")
	leaveTimedOut := !strings.Contains(log, "final commit:") && strings.Contains(log, "leave group failed")
	if !notCommitted && !leaveTimedOut {
		t.Fatalf("stderr does not report the commit not stored (or the leave that timed out):\n%s", log)
	}
	_ = srv.cmd.Process.Signal(syscall.SIGCONT)
}
