package e2e

import (
	"context"
	"fmt"
	"regexp"
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

	// The lag of a committed offset that retention overtook counts only the
	// records still stored: HW - log start, not HW - committed. A retention
	// pass may still move the log start (one that ran while the records
	// were produced left more to delete): the row is compared with the
	// topic's state read just before and just after it, until both agree.
	rowOK := false
	var desc string
	var wantRow []string
	for try := 0; try < 20 && !rowOK; try++ {
		before := describePartition(ctx, t, c, "ret")
		desc = sqOK(t, srv.addr, nil, "group", "describe", "old")
		after := describePartition(ctx, t, c, "ret")
		if before.LogStartOffset != after.LogStartOffset || before.HighWatermark != after.HighWatermark {
			continue
		}
		wantRow = []string{"ret", "0", "1", strconv.FormatUint(after.LogEndOffset, 10), strconv.FormatUint(after.HighWatermark-after.LogStartOffset, 10), "-"}
		for _, line := range strings.Split(desc, "\n") {
			if f := strings.Fields(line); len(f) == len(wantRow) && f[0] == "ret" {
				rowOK = strings.Join(f, " ") == strings.Join(wantRow, " ")
			}
		}
		if !rowOK {
			break
		}
	}
	if !rowOK {
		t.Errorf("sq group describe old:\n%s\nwant the row %q (lag = HW - log start)", desc, wantRow)
	}

	got := parseConsumed(t, sqOK(t, srv.addr, nil, "consume", "--topic", "ret", "--from", "earliest", "--count", "1", "--format", "json"))
	if recs := got[0]; len(recs) != 1 || recs[0].Offset < pi.LogStartOffset {
		t.Errorf("--from earliest read %+v, want one record at or after %d", recs, pi.LogStartOffset)
	}
	// The warning names the log start the command met (at or past the one
	// read above: retention only moves it up) and the count skipped from
	// the position asked for.
	warning := regexp.MustCompile(`no longer stored; starting at the log start offset (\d+) \((\d+) records lost to retention skipped\)`)
	for _, c := range []struct {
		args []string
		from uint64
	}{
		{[]string{"consume", "--topic", "ret", "--from", "0", "--count", "1", "--format", "json"}, 0},
		{[]string{"consume", "--topic", "ret", "--group", "old", "--count", "1", "--format", "json"}, 1},
	} {
		args := c.args
		r := runSQ(t, srv.addr, nil, args...)
		m := warning.FindStringSubmatch(r.stderr)
		if r.code != 0 || m == nil {
			t.Errorf("sq %v: status %d, stderr %q; want 0 and a warning naming the log start offset and the records skipped", args, r.code, r.stderr)
			continue
		}
		met, _ := strconv.ParseUint(m[1], 10, 64)
		skipped, _ := strconv.ParseUint(m[2], 10, 64)
		if met < pi.LogStartOffset || skipped != met-c.from {
			t.Errorf("sq %v: warning %q: want a log start at or past %d and %d-%d records skipped", args, m[0], pi.LogStartOffset, met, c.from)
		}
		if recs := parseConsumed(t, r.stdout)[0]; len(recs) != 1 || recs[0].Offset < met {
			t.Errorf("sq %v read %+v, want one record at or after %d", args, recs, met)
		}
	}
}

// describePartition returns partition 0 of topic.
func describePartition(ctx context.Context, t *testing.T, c *sdk.Client, topic string) sdk.PartitionInfo {
	t.Helper()
	info, err := c.DescribeTopic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	return info.PartitionInfos[0]
}
