package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/sdk"
)

// Storage damage tests (issue 3, cases a, b, c, h): produce, stop the
// server, change the files, start again, then read and produce. The
// torn-tail cases produce under the none policy and stop with SIGKILL, so
// the damaged tail lies above the recovery point.

const faultTimeout = time.Minute

func dialT(ctx context.Context, t *testing.T, addr string) *sdk.Client {
	t.Helper()
	c, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// publishValues publishes values as one batch to partition p.
func publishValues(ctx context.Context, c *sdk.Client, topic string, p uint32, values ...string) (sdk.PublishResult, error) {
	var b batch.Builder
	for _, v := range values {
		b.Add(nil, []byte(v), nil, time.Now().UnixMilli())
	}
	buf, err := b.Build()
	if err != nil {
		return sdk.PublishResult{}, err
	}
	return c.Publish(ctx, topic, p, buf)
}

func mustPublish(ctx context.Context, t *testing.T, c *sdk.Client, topic string, p uint32, values ...string) sdk.PublishResult {
	t.Helper()
	res, err := publishValues(ctx, c, topic, p, values...)
	if err != nil {
		t.Fatalf("publish to %s/%d: %v", topic, p, err)
	}
	return res
}

// fetchValues reads partition p from 0 to its high watermark, checking
// that offsets are dense, and returns the values by offset.
func fetchValues(ctx context.Context, t *testing.T, c *sdk.Client, topic string, p uint32) []string {
	t.Helper()
	var out []string
	for {
		res, err := c.Fetch(ctx, sdk.FetchRequest{Topic: topic, Partition: p, Offset: uint64(len(out))})
		if err != nil {
			t.Fatalf("fetch %s/%d at %d: %v", topic, p, len(out), err)
		}
		for _, m := range res.Messages {
			if m.Offset != uint64(len(out)) {
				t.Fatalf("%s/%d: offset %d where %d was expected", topic, p, m.Offset, len(out))
			}
			out = append(out, string(m.Value))
		}
		if uint64(len(out)) >= res.HighWatermark {
			return out
		}
		if len(res.Messages) == 0 {
			t.Fatalf("%s/%d: empty fetch at %d below the high watermark %d", topic, p, len(out), res.HighWatermark)
		}
	}
}

// numbered returns n values "<prefix>-<i>" for i in [from, from+n).
func numbered(prefix string, from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, from+i)
	}
	return out
}

// batchStarts returns the byte positions of the batches in a .log file:
// it walks the length fields (docs/architecture.md §3.2) up to the first zero magic.
func batchStarts(t *testing.T, path string) (starts []int64, data []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for pos := int64(0); pos+batch.HeaderSize <= int64(len(data)) && data[pos+16] != 0; {
		starts = append(starts, pos)
		pos += 12 + int64(binary.LittleEndian.Uint32(data[pos+8:]))
	}
	return starts, data
}

func segmentPath(dataDir, topic string, p int, base uint64) string {
	return filepath.Join(dataDir, "topics", topic, strconv.Itoa(p), fmt.Sprintf("%020d.log", base))
}

// tornTail produces 1,000 records in 100 batches under the none policy,
// SIGKILLs the server, lets damage change the active segment (given the
// batch positions and the file's bytes), restarts, and returns the new
// server, a client and the base offset of the last batch written.
func tornTail(ctx context.Context, t *testing.T, damage func(path string, starts []int64, data []byte)) (*server, *sdk.Client, uint64) {
	t.Helper()
	dir := t.TempDir()
	srv := startServer(t, dir, "--sync-policy", "none")
	c := dialT(ctx, t, srv.addr)
	if _, err := c.CreateTopic(ctx, "torn", 1, sdk.TopicConfig{SyncPolicy: "none"}); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := 0; i < 100; i++ {
		last = mustPublish(ctx, t, c, "torn", 0, numbered("r", i*10, 10)...).BaseOffset
	}
	c.Close()
	srv.kill()
	path := segmentPath(dir, "torn", 0, 0)
	starts, data := batchStarts(t, path)
	if len(starts) != 100 {
		t.Fatalf("%d batches in %s, want 100", len(starts), path)
	}
	damage(path, starts, data)
	srv = startServer(t, dir, "--sync-policy", "none")
	return srv, dialT(ctx, t, srv.addr), last
}

// TestTornTailCut (case a): the active segment cut 7 bytes into its last
// batch: every record before it is readable, the next record gets the torn
// batch's base offset, and that survives another restart.
func TestTornTailCut(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	srv, c, last := tornTail(ctx, t, func(path string, starts []int64, _ []byte) {
		if err := os.Truncate(path, starts[len(starts)-1]+7); err != nil {
			t.Fatal(err)
		}
	})
	want := numbered("r", 0, int(last))
	if got := fetchValues(ctx, t, c, "torn", 0); !slicesEqual(got, want) {
		t.Fatalf("after the cut: %d records, want the %d before the torn batch", len(got), len(want))
	}
	if res := mustPublish(ctx, t, c, "torn", 0, "after"); res.BaseOffset != last {
		t.Fatalf("next record at %d, want the torn batch's base offset %d", res.BaseOffset, last)
	}
	c.Close()
	srv = srv.restart(t)
	c = dialT(ctx, t, srv.addr)
	if got := fetchValues(ctx, t, c, "torn", 0); !slicesEqual(got, append(want, "after")) {
		t.Fatalf("after another restart: %d records, last %q", len(got), got[len(got)-1])
	}
}

// TestTornTailLength (case c): the last batch's length field overwritten
// with 0xFFFFFFFF: the server starts without a large allocation and drops
// that batch as torn.
func TestTornTailLength(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	srv, c, last := tornTail(ctx, t, func(path string, starts []int64, data []byte) {
		binary.LittleEndian.PutUint32(data[starts[len(starts)-1]+8:], 0xFFFFFFFF)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if hwm := peakRSS(t, srv.cmd.Process.Pid); hwm > 512<<20 {
		t.Fatalf("server peak RSS %d bytes after recovery: a 4 GiB length was allocated", hwm)
	}
	if got := fetchValues(ctx, t, c, "torn", 0); !slicesEqual(got, numbered("r", 0, int(last))) {
		t.Fatalf("after recovery: %d records, want %d", len(got), last)
	}
	if res := mustPublish(ctx, t, c, "torn", 0, "after"); res.BaseOffset != last {
		t.Fatalf("next record at %d, want %d", res.BaseOffset, last)
	}
}

// peakRSS returns the peak resident set size of process pid (VmHWM in
// /proc/<pid>/status), or 0 where /proc is missing.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestZeroTail (case b): 4,096 zero bytes appended to the active segment
// after a clean stop: no phantom record, offsets continue.
func TestZeroTail(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	dir := t.TempDir()
	srv := startServer(t, dir)
	c := dialT(ctx, t, srv.addr)
	if _, err := c.CreateTopic(ctx, "zero", 1, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		mustPublish(ctx, t, c, "zero", 0, numbered("z", i*5, 5)...)
	}
	c.Close()
	if code := srv.stop(); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	path := segmentPath(dir, "zero", 0, 0)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	srv = startServer(t, dir)
	c = dialT(ctx, t, srv.addr)
	if got := fetchValues(ctx, t, c, "zero", 0); !slicesEqual(got, numbered("z", 0, 100)) {
		t.Fatalf("after the zero tail: %d records, want 100", len(got))
	}
	if res := mustPublish(ctx, t, c, "zero", 0, "after"); res.BaseOffset != 100 {
		t.Fatalf("next record at %d, want 100", res.BaseOffset)
	}
	c.Close()
	srv = srv.restart(t)
	c = dialT(ctx, t, srv.addr)
	if got := fetchValues(ctx, t, c, "zero", 0); len(got) != 101 || got[100] != "after" {
		t.Fatalf("after another restart: %d records", len(got))
	}
}

// TestSealedBitFlip (case h): one bit flipped in the middle of a sealed
// segment: the partition is reported corrupt (PARTITION_FAILED, an error
// and one log line naming the file and position), the file keeps its
// size, and the other partition keeps working.
func TestSealedBitFlip(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), faultTimeout)
	defer cancel()
	dir := t.TempDir()
	flags := []string{"--max-batch-bytes", "65536", "--max-record-bytes", "4096"}
	srv := startServer(t, dir, flags...)
	c := dialT(ctx, t, srv.addr)
	if _, err := c.CreateTopic(ctx, "flip", 2, sdk.TopicConfig{SegmentBytes: 128 << 10}); err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("p", 200)
	for i := 0; i < 80; i++ {
		vals := numbered("f", i*20, 20)
		for j := range vals {
			vals[j] += pad
		}
		mustPublish(ctx, t, c, "flip", 0, vals...)
	}
	mustPublish(ctx, t, c, "flip", 1, "one", "two")
	c.Close()
	if code := srv.stop(); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	path := segmentPath(dir, "flip", 0, 0)
	starts, data := batchStarts(t, path)
	if len(starts) < 4 {
		t.Fatalf("%d batches in the first segment", len(starts))
	}
	// Inside the records of a batch in the middle of the data (a sealed
	// segment may keep a zero tail when a reader had it mapped at the roll).
	data[starts[len(starts)/2]+batch.HeaderSize+100] ^= 0x04
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	srv = startServer(t, dir, flags...)
	line := srv.waitLogLine(t, "partition failed", path)
	if !strings.Contains(line, "at byte") {
		t.Fatalf("log line does not give the position: %s", line)
	}
	c = dialT(ctx, t, srv.addr)
	ti, err := c.DescribeTopic(ctx, "flip")
	if err != nil {
		t.Fatal(err)
	}
	perr := ti.PartitionInfos[0].Err
	if !errors.Is(perr, api.ErrPartitionFailed) || !strings.Contains(perr.Error(), path) || !strings.Contains(perr.Error(), "at byte") {
		t.Fatalf("partition 0 error %v; want PARTITION_FAILED naming %s and a position", perr, path)
	}
	if ti.PartitionInfos[1].Err != nil {
		t.Fatalf("partition 1 failed too: %v", ti.PartitionInfos[1].Err)
	}
	if n := strings.Count(srv.log.String(), "partition failed"); n != 1 {
		t.Fatalf("%d \"partition failed\" log lines, want 1", n)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != int64(len(data)) {
		t.Fatalf("segment after start: %v %v; want %d bytes (not truncated)", fi, err, len(data))
	}
	if _, err := publishValues(ctx, c, "flip", 0, "x"); !errors.Is(err, api.ErrPartitionFailed) {
		t.Fatalf("publish to the corrupt partition = %v, want PARTITION_FAILED", err)
	}
	mustPublish(ctx, t, c, "flip", 1, "three")
	if got := fetchValues(ctx, t, c, "flip", 1); !slicesEqual(got, []string{"one", "two", "three"}) {
		t.Fatalf("partition 1: %v", got)
	}
}

// waitLogLine waits until a log line contains every one of parts and
// returns it.
func (s *server) waitLogLine(t *testing.T, parts ...string) string {
	t.Helper()
	deadline := time.After(startTimeout)
	for {
		text, changed := s.log.Snapshot()
		for line := range strings.SplitSeq(text, "\n") {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				return line
			}
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no log line with %q within %v; log:\n%s", parts, startTimeout, text)
		}
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
