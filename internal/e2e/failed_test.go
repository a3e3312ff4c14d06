package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// failedRow matches partition 1's row in `sq topic describe` when failed
// (its placement columns follow STATUS).
var failedRow = regexp.MustCompile(`(?m)^\s*1\s+-.*\sFAILED(\s|$)`)

// TestFailedPartition shortens one partition's log below its recovery point
// while the server is stopped, and checks that after the restart that
// partition is reported failed (describe, consume, produce) while the other
// keeps serving.
func TestFailedPartition(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	sqOK(t, srv.addr, nil, "topic", "create", "half", "--partitions", "2")
	sqOK(t, srv.addr, []byte("a\nb\nc\n"), "produce", "--topic", "half", "--partition", "0")
	sqOK(t, srv.addr, []byte("x\ny\nz\n"), "produce", "--topic", "half", "--partition", "1")
	if code := srv.stop(); code != 0 {
		t.Fatalf("sq-server exited with status %d after SIGTERM; log:\n%s", code, srv.log)
	}
	logs, err := filepath.Glob(filepath.Join(srv.dataDir, "topics", "half", "1", "*.log"))
	if err != nil || len(logs) != 1 {
		t.Fatalf("segment files of partition 1: %v, %v", logs, err)
	}
	if err := os.Truncate(logs[0], 10); err != nil {
		t.Fatal(err)
	}
	srv = startServer(t, srv.dataDir)

	desc := sqOK(t, srv.addr, nil, "topic", "describe", "half")
	if !strings.Contains(desc, "partition 1: PARTITION_FAILED") || !failedRow.MatchString(desc) {
		t.Errorf("describe does not show partition 1's error:\n%s", desc)
	}
	if out := sqOK(t, srv.addr, nil, "consume", "--topic", "half", "--partition", "0"); out != "a\nb\nc\n" {
		t.Errorf("partition 0 reads %q", out)
	}
	r := runSQ(t, srv.addr, nil, "consume", "--topic", "half")
	if r.code != 1 || r.stdout != "a\nb\nc\n" || !strings.Contains(r.stderr, "PARTITION_FAILED") {
		t.Errorf("consume of the whole topic: status %d, stdout %q, stderr %q; want partition 0's records and a PARTITION_FAILED error", r.code, r.stdout, r.stderr)
	}
	r = runSQ(t, srv.addr, []byte("w\n"), "produce", "--topic", "half", "--partition", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "1 of 1 record not acknowledged (line 1): PARTITION_FAILED") {
		t.Errorf("produce to the failed partition: status %d, stderr %q", r.code, r.stderr)
	}
	sqOK(t, srv.addr, []byte("d\n"), "produce", "--topic", "half", "--partition", "0")
	if out := sqOK(t, srv.addr, nil, "consume", "--topic", "half", "--partition", "0"); out != "a\nb\nc\nd\n" {
		t.Errorf("partition 0 after another produce reads %q", out)
	}
}
