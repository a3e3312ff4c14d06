package e2e

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// TestLowerBatchLimitAfterKill: records published in batches of about
// 400 KiB, the server killed with SIGKILL (the recovery point is behind)
// or stopped cleanly, then started with --max-batch-bytes 65536: every
// acknowledged record is still there (the batches are legitimate, not a
// torn tail or corruption), for each sync policy.
func TestLowerBatchLimitAfterKill(t *testing.T) {
	t.Parallel()
	var in bytes.Buffer
	const n = 6000
	for i := range n {
		fmt.Fprintf(&in, "%06d %s\n", i, strings.Repeat("y", 93))
	}
	for _, kill := range []bool{true, false} {
		dir := t.TempDir()
		srv := startServer(t, dir)
		for _, pol := range []string{"every-batch", "none", "100ms"} {
			topic := "t" + strings.ReplaceAll(pol, "-", "")
			sqOK(t, srv.addr, nil, "topic", "create", topic, "--partitions", "1", "--sync-policy", pol)
			sqOK(t, srv.addr, in.Bytes(), "produce", "--topic", topic)
		}
		if kill {
			srv.kill()
		} else if code := srv.stop(); code != 0 {
			t.Fatalf("sq-server exited with status %d", code)
		}
		srv = startServer(t, dir, "--max-batch-bytes", "65536", "--max-record-bytes", "32768")
		for _, pol := range []string{"every-batch", "none", "100ms"} {
			topic := "t" + strings.ReplaceAll(pol, "-", "")
			out := sqOK(t, srv.addr, nil, "consume", "--topic", topic, "--from", "earliest")
			if out != in.String() {
				t.Fatalf("kill %v, %s: read %d bytes back, want the %d published; log:\n%s", kill, pol, len(out), in.Len(), srv.log)
			}
		}
		srv.stop()
	}
}
