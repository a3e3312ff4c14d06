package e2e

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
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

	c := startProcess(t, sub, nil, "-addr", srv.addr, "-topic", "orders", "-group", "g", "-close-timeout", "1s")
	c.waitFor(t, c.stdout, `"hello" and 5 records`, func(s string) bool { return strings.Count(s, "offset=") >= 6 })

	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.cmd.Process.Signal(syscall.SIGCONT) })
	if code := c.interrupt(t); code != 0 {
		t.Fatalf("exit status %d after Ctrl-C; stderr:\n%s", code, c.stderr)
	}
	log := c.stderr.String()
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
