package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/sdk"
)

// cliRetentionTimeout bounds the wait for the server's retention pass (every
// 5s by default) to move the log start offset.
const cliRetentionTimeout = 60 * time.Second

// TestRetentionCLI fills a topic with a small retention.bytes and checks
// that after the server deletes old segments the CLI starts at the log
// start offset: for --from earliest, for an --from offset that is gone
// (with a warning), and for a group whose committed offset is gone.
func TestRetentionCLI(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*cliRetentionTimeout)
	defer cancel()
	srv := startServer(t, t.TempDir(), "--segment-bytes", "65536", "--max-batch-bytes", "32768", "--max-record-bytes", "1024")
	sqOK(t, srv.addr, nil, "topic", "create", "ret", "--partitions", "1", "--segment-bytes", "65536", "--retention-bytes", "131072")
	sqOK(t, srv.addr, []byte("first\nsecond\n"), "produce", "--topic", "ret")
	if out := sqOK(t, srv.addr, nil, "consume", "--topic", "ret", "--group", "old", "--count", "1"); out != "first\n" {
		t.Fatalf("group read %q", out)
	}
	var in strings.Builder
	for i := range 50_000 {
		fmt.Fprintf(&in, "record %06d\n", i)
	}
	sqOK(t, srv.addr, []byte(in.String()), "produce", "--topic", "ret")

	c, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: srv.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var pi sdk.PartitionInfo
	deadline := time.Now().Add(cliRetentionTimeout)
	for {
		info, err := c.DescribeTopic(ctx, "ret")
		if err != nil {
			t.Fatal(err)
		}
		pi = info.PartitionInfos[0]
		if pi.LogStartOffset > 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log start offset still %d after %v (size %d bytes, %d segments): retention.bytes not enforced", pi.LogStartOffset, cliRetentionTimeout, pi.SizeBytes, pi.SegmentCount)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond): // polling the server's state, with the deadline above
		}
	}
	t.Logf("retention moved the log start offset to %d (%d segments, %d bytes left)", pi.LogStartOffset, pi.SegmentCount, pi.SizeBytes)
	start := strconv.FormatUint(pi.LogStartOffset, 10)

	// The lag of a committed offset that retention overtook counts only the
	// records still stored: HW - log start, not HW - committed.
	desc := sqOK(t, srv.addr, nil, "group", "describe", "old")
	wantRow := []string{"ret", "0", "1", strconv.FormatUint(pi.LogEndOffset, 10), strconv.FormatUint(pi.HighWatermark-pi.LogStartOffset, 10), "-"}
	found := false
	for _, line := range strings.Split(desc, "\n") {
		if f := strings.Fields(line); len(f) == len(wantRow) && f[0] == "ret" {
			found = strings.Join(f, " ") == strings.Join(wantRow, " ")
		}
	}
	if !found {
		t.Errorf("sq group describe old:\n%s\nwant the row %q (lag = HW %d - log start %d)", desc, wantRow, pi.HighWatermark, pi.LogStartOffset)
	}

	got := parseConsumed(t, sqOK(t, srv.addr, nil, "consume", "--topic", "ret", "--from", "earliest", "--count", "1", "--format", "json"))
	if recs := got[0]; len(recs) != 1 || recs[0].Offset < pi.LogStartOffset {
		t.Errorf("--from earliest read %+v, want one record at or after %d", recs, pi.LogStartOffset)
	}
	for _, c := range []struct {
		args []string
		from uint64
	}{
		{[]string{"consume", "--topic", "ret", "--from", "0", "--count", "1", "--format", "json"}, 0},
		{[]string{"consume", "--topic", "ret", "--group", "old", "--count", "1", "--format", "json"}, 1},
	} {
		args := c.args
		r := runSQ(t, srv.addr, nil, args...)
		skipped := fmt.Sprintf("(%d records lost to retention skipped)", pi.LogStartOffset-c.from)
		if r.code != 0 || !strings.Contains(r.stderr, "no longer stored") || !strings.Contains(r.stderr, start) || !strings.Contains(r.stderr, skipped) {
			t.Errorf("sq %v: status %d, stderr %q; want 0 and a warning naming the log start offset %s and %q", args, r.code, r.stderr, start, skipped)
			continue
		}
		if recs := parseConsumed(t, r.stdout)[0]; len(recs) != 1 || recs[0].Offset < pi.LogStartOffset {
			t.Errorf("sq %v read %+v, want one record at or after %d", args, recs, pi.LogStartOffset)
		}
	}
}
