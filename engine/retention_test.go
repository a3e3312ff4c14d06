package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// retClock is an injected Options.Now.
type retClock struct {
	mu sync.Mutex
	t  time.Time
}

func newRetClock() *retClock { return &retClock{t: time.UnixMilli(1_700_000_000_000)} }

func (c *retClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *retClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// retentionOptions: small segments, no retention goroutine, the clock c.
func retentionOptions(dir string, c *retClock) Options {
	o := testOptions(dir)
	o.SegmentBytes = 8 << 10
	o.MaxBatchBytes = 4 << 10
	o.PreallocBytes = 4 << 10
	o.IndexIntervalBytes = 512
	o.SyncPolicy = "none"
	o.Now = c.Now
	o.RetentionCheckInterval = -1
	return o
}

// appendValues appends one batch per value group and returns the base
// offset of each batch. Values are "v<offset>".
func appendN(t *testing.T, e *Engine, topic string, batches, perBatch int) []uint64 {
	t.Helper()
	var bases []uint64
	for i := 0; i < batches; i++ {
		info, err := e.DescribeTopic(topic)
		if err != nil {
			t.Fatal(err)
		}
		next := info.Partitions[0].LogEndOffset
		vals := make([]string, perBatch)
		for j := range vals {
			vals[j] = fmt.Sprintf("v%d", next+uint64(j))
		}
		res, err := e.Append(context.Background(), topic, 0, mkBatch(t, vals...))
		if err != nil {
			t.Fatal(err)
		}
		bases = append(bases, res.BaseOffset)
	}
	return bases
}

// readRange fetches [from, hw) of partition 0 and checks that each record's
// value names its offset; it returns the number of records read.
func readRange(t *testing.T, e *Engine, topic string, from uint64) int {
	t.Helper()
	off, n := from, 0
	walkRecords(t, e, topic, 0, from, func(rec *batch.Record) {
		if rec.Offset != off || string(rec.Value) != fmt.Sprintf("v%d", rec.Offset) {
			t.Fatalf("record at offset %d (want %d) has value %q", rec.Offset, off, rec.Value)
		}
		off++
		n++
	})
	return n
}

func partInfo(t *testing.T, e *Engine, topic string) PartitionInfo {
	t.Helper()
	info, err := e.DescribeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	return info.Partitions[0]
}

func TestRetention(t *testing.T) {
	const day = 24 * time.Hour
	cases := []struct {
		name string
		cfg  TopicConfig
		// between the two halves of the appends, and before enforcing
		gap, wait time.Duration
		wantGone  bool // the first half is deleted
		wantSmall bool // at most retention.bytes + one segment left
	}{
		{"time", TopicConfig{RetentionMs: 1000}, 2 * time.Second, 0, true, false},
		{"time not yet", TopicConfig{RetentionMs: 10_000}, 2 * time.Second, 0, false, false},
		{"time unlimited", TopicConfig{RetentionMs: -1}, 30 * day, 30 * day, false, false},
		{"size", TopicConfig{RetentionBytes: 20 << 10, RetentionMs: -1}, 0, 0, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newRetClock()
			e := openTest(t, retentionOptions(t.TempDir(), clk))
			if _, err := e.CreateTopic("r", 1, tc.cfg); err != nil {
				t.Fatal(err)
			}
			first := appendN(t, e, "r", 40, 20)
			clk.Advance(tc.gap)
			appendN(t, e, "r", 40, 20)
			clk.Advance(tc.wait)
			before := partInfo(t, e, "r")
			if err := e.EnforceRetention(); err != nil {
				t.Fatal(err)
			}
			after := partInfo(t, e, "r")
			if after.HighWatermark != before.HighWatermark || after.LogEndOffset != before.LogEndOffset {
				t.Fatalf("retention moved the end: %+v -> %+v", before, after)
			}
			// Whole segments go: the one holding the end of the first half
			// may also hold newer records and stay.
			secondHalf := first[len(first)-1] + 20
			gone := after.LogStartOffset > 0 && (tc.wantSmall || after.LogStartOffset <= secondHalf)
			if !tc.wantSmall && after.LogStartOffset+(8<<10)/20 < first[len(first)-1] {
				gone = false // less than the first half went
			}
			if gone != tc.wantGone || (!tc.wantGone && after.LogStartOffset != 0) {
				t.Fatalf("log start %d after retention (first half ends at %d); want gone=%v", after.LogStartOffset, first[len(first)-1], tc.wantGone)
			}
			if tc.wantSmall && (after.SizeBytes < tc.cfg.RetentionBytes || after.SizeBytes > tc.cfg.RetentionBytes+(8<<10)) {
				t.Fatalf("size %d after size retention of %d", after.SizeBytes, tc.cfg.RetentionBytes)
			}
			if n := readRange(t, e, "r", after.LogStartOffset); uint64(n) != after.HighWatermark-after.LogStartOffset {
				t.Fatalf("read %d records from %d to %d", n, after.LogStartOffset, after.HighWatermark)
			}
		})
	}
}

// TestRetentionRollsQuietPartition: segment.ms rolls the active segment of
// a partition that gets no appends, so retention.ms can delete it.
func TestRetentionRollsQuietPartition(t *testing.T) {
	clk := newRetClock()
	dir := t.TempDir()
	e := openTest(t, retentionOptions(dir, clk))
	if _, err := e.CreateTopic("quiet", 1, TopicConfig{RetentionMs: 5000, SegmentMs: 60_000, SegmentBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, "quiet", 3, 10)
	clk.Advance(59 * time.Second)
	if err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if pi := partInfo(t, e, "quiet"); pi.SegmentCount != 1 || pi.LogStartOffset != 0 {
		t.Fatalf("rolled or deleted before segment.ms: %+v", pi)
	}
	clk.Advance(time.Second)
	if err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	pi := partInfo(t, e, "quiet")
	if pi.SegmentCount != 1 || pi.LogStartOffset != 30 || pi.HighWatermark != 30 || pi.SizeBytes != 0 {
		t.Fatalf("after segment.ms and retention.ms: %+v", pi)
	}
	// Appends continue from the old log end.
	if res, err := e.Append(context.Background(), "quiet", 0, mkBatch(t, "v30")); err != nil || res.BaseOffset != 30 {
		t.Fatalf("append after retention = %+v, %v", res, err)
	}
	if n := readRange(t, e, "quiet", 30); n != 1 {
		t.Fatalf("read %d records", n)
	}
	// A partition whose sealed segments are all gone restarts cleanly.
	clk.Advance(time.Minute)
	if err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, retentionOptions(dir, clk))
	if pi := partInfo(t, e, "quiet"); pi.LogStartOffset != 31 || pi.HighWatermark != 31 {
		t.Fatalf("after restart: %+v", pi)
	}
	if res, err := e.Append(context.Background(), "quiet", 0, mkBatch(t, "v31")); err != nil || res.BaseOffset != 31 {
		t.Fatalf("append after restart = %+v, %v", res, err)
	}
}

// TestRetentionLargePartition is case f: retention removes the oldest
// segments of a 250,000-record partition; every surviving record keeps its
// offset and value, the HW does not move, and new records continue from
// the old LEO, also after a restart.
func TestRetentionLargePartition(t *testing.T) {
	clk := newRetClock()
	dir := t.TempDir()
	opts := retentionOptions(dir, clk)
	opts.SegmentBytes = 64 << 10
	opts.MaxBatchBytes = 32 << 10
	e := openTest(t, opts)
	if _, err := e.CreateTopic("big", 1, TopicConfig{RetentionMs: 60_000}); err != nil {
		t.Fatal(err)
	}
	const total, perBatch = 250_000, 500
	vals := make([]string, perBatch)
	for i := 0; i < total/perBatch; i++ {
		if i == total/perBatch/2 {
			clk.Advance(2 * time.Minute) // the first half ages out
		}
		for j := range vals {
			vals[j] = fmt.Sprintf("v%d", i*perBatch+j)
		}
		if _, err := e.Append(context.Background(), "big", 0, mkBatch(t, vals...)); err != nil {
			t.Fatal(err)
		}
	}
	before := partInfo(t, e, "big")
	if before.HighWatermark != total || before.SegmentCount < 20 {
		t.Fatalf("before retention: %+v", before)
	}
	if err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	after := partInfo(t, e, "big")
	if after.HighWatermark != total || after.LogEndOffset != total || after.LogStartOffset == 0 ||
		after.LogStartOffset > total/2 || after.SegmentCount >= before.SegmentCount {
		t.Fatalf("after retention: %+v (before %+v)", after, before)
	}
	if n := readRange(t, e, "big", after.LogStartOffset); n != total-int(after.LogStartOffset) {
		t.Fatalf("read %d surviving records, want %d", n, total-after.LogStartOffset)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, opts)
	if pi := partInfo(t, e, "big"); pi.LogStartOffset != after.LogStartOffset || pi.HighWatermark != total {
		t.Fatalf("after restart: %+v", pi)
	}
	if res, err := e.Append(context.Background(), "big", 0, mkBatch(t, fmt.Sprintf("v%d", total))); err != nil || res.BaseOffset != total {
		t.Fatalf("append after retention = %+v, %v", res, err)
	}
	if n := readRange(t, e, "big", total-5); n != 6 {
		t.Fatalf("read %d records at the end", n)
	}
}

// TestFetchBelowLogStart is case g at the engine: a fetch below the log
// start gets OFFSET_OUT_OF_RANGE with the valid range, and a committed
// offset that retention deleted stays readable as a number.
func TestFetchBelowLogStart(t *testing.T) {
	clk := newRetClock()
	e := openTest(t, retentionOptions(t.TempDir(), clk))
	if _, err := e.CreateTopic("g", 1, TopicConfig{RetentionMs: 1000}); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, "g", 30, 20)
	if _, err := e.CommitOffsets("grp", "", -1, []OffsetCommit{{Topic: "g", Partition: 0, Offset: 5}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Second)
	appendN(t, e, "g", 30, 20)
	if err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	pi := partInfo(t, e, "g")
	if pi.LogStartOffset == 0 {
		t.Fatalf("nothing deleted: %+v", pi)
	}
	for _, off := range []uint64{0, 5, pi.LogStartOffset - 1} {
		_, err := e.Fetch(context.Background(), "g", 0, off, 1<<20, 0)
		var ae *api.Error
		if !asAPI(err, &ae) || ae.Code != api.CodeOffsetOutOfRange || !ae.HasRange ||
			ae.RangeStart != pi.LogStartOffset || ae.RangeEnd != pi.HighWatermark {
			t.Fatalf("Fetch(%d) below log start %d = %v", off, pi.LogStartOffset, err)
		}
	}
	offs, err := e.FetchOffsets("grp", "g")
	if err != nil || len(offs) != 1 || offs[0].Offset != 5 {
		t.Fatalf("FetchOffsets = %+v, %v", offs, err)
	}
}

// TestRetentionLeavesStrays is case e at the engine: stray files in a
// partition directory are logged at start and left alone, and retention
// deletes every segment the server owns.
func TestRetentionLeavesStrays(t *testing.T) {
	clk := newRetClock()
	dir := t.TempDir()
	opts := retentionOptions(dir, clk)
	var logs retLogs
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	e := openTest(t, opts)
	if _, err := e.CreateTopic("s", 1, TopicConfig{RetentionMs: 1000, SegmentMs: 1000}); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, "s", 40, 20)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	pdir := filepath.Join(dir, "topics", "s", "0")
	strays := []string{"README", "00000000000000000123.log.tmp", ".nfs000001"}
	for _, s := range strays {
		if err := os.WriteFile(filepath.Join(pdir, s), []byte("not the server's"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e = openTest(t, opts)
	for _, s := range strays {
		if !strings.Contains(logs.String(), s) {
			t.Errorf("stray %s not logged", s)
		}
	}
	clk.Advance(time.Hour)
	if err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	pi := partInfo(t, e, "s")
	if pi.LogStartOffset != 800 || pi.SizeBytes != 0 || pi.SegmentCount != 1 {
		t.Fatalf("after retention: %+v", pi)
	}
	ents, err := os.ReadDir(pdir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, ent := range ents {
		left = append(left, ent.Name())
	}
	want := []string{".nfs000001", "00000000000000000123.log.tmp", "00000000000000000800.index",
		"00000000000000000800.log", "00000000000000000800.timeindex", "README", "producer-state", "recovery-point"}
	if fmt.Sprint(left) != fmt.Sprint(want) {
		t.Fatalf("partition directory holds %v, want %v", left, want)
	}
}

// TestListOffsets: -1 latest, -2 earliest, and lookups by broker append
// time (the producer's timestamps play no part), also after a restart.
func TestListOffsets(t *testing.T) {
	clk := newRetClock()
	dir := t.TempDir()
	opts := retentionOptions(dir, clk)
	e := openTest(t, opts)
	if _, err := e.CreateTopic("lo", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	t0 := clk.Now().UnixMilli()
	var bases []uint64
	for i := 0; i < 30; i++ {
		bases = append(bases, appendN(t, e, "lo", 1, 7)...)
		clk.Advance(time.Second)
	}
	check := func() {
		t.Helper()
		cases := []struct {
			ts     int64
			off    uint64
			wantTs int64
		}{
			{OffsetLatest, 210, -1},
			{OffsetEarliest, 0, -1},
			{0, 0, t0},
			{t0, 0, t0},
			{t0 + 1, bases[1], t0 + 1000},
			{t0 + 15_000, bases[15], t0 + 15_000},
			{t0 + 29_000, bases[29], t0 + 29_000},
			{t0 + 29_001, 210, -1},
		}
		for _, tc := range cases {
			off, ts, err := e.ListOffsets("lo", 0, tc.ts)
			if err != nil || off != tc.off || ts != tc.wantTs {
				t.Errorf("ListOffsets(%d) = %d, %d, %v; want %d, %d", tc.ts, off, ts, err, tc.off, tc.wantTs)
			}
		}
	}
	check()
	if _, _, err := e.ListOffsets("lo", 0, -3); codeOf(err) != api.CodeInvalidRequest {
		t.Errorf("ListOffsets(-3) = %v", err)
	}
	if _, _, err := e.ListOffsets("nope", 0, 0); codeOf(err) != api.CodeUnknownTopic {
		t.Errorf("ListOffsets of an unknown topic = %v", err)
	}
	if _, _, err := e.ListOffsets("lo", 1, 0); codeOf(err) != api.CodeUnknownPartition {
		t.Errorf("ListOffsets of an unknown partition = %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, opts)
	check()
}

// retLogs is a bytes.Buffer safe for the logger's goroutines.
type retLogs struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *retLogs) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *retLogs) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func asAPI(err error, target **api.Error) bool {
	e, ok := err.(*api.Error)
	if ok {
		*target = e
	}
	return ok
}

// TestActiveIndexRebuilt is case d at the engine: after a clean stop the
// active segment's .index is deleted, or truncated to 0 bytes; at the next
// start it is rebuilt, reads by offset and by time are right, and appends
// continue.
func TestActiveIndexRebuilt(t *testing.T) {
	for _, damage := range []string{"deleted", "truncated"} {
		t.Run(damage, func(t *testing.T) {
			clk := newRetClock()
			dir := t.TempDir()
			opts := retentionOptions(dir, clk)
			e := openTest(t, opts)
			if _, err := e.CreateTopic("d", 1, TopicConfig{}); err != nil {
				t.Fatal(err)
			}
			t0 := clk.Now().UnixMilli()
			var bases []uint64
			for i := 0; i < 60; i++ {
				bases = append(bases, appendN(t, e, "d", 1, 20)...)
				clk.Advance(time.Second)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			pdir := filepath.Join(dir, "topics", "d", "0")
			ents, err := os.ReadDir(pdir)
			if err != nil {
				t.Fatal(err)
			}
			var active string
			for _, ent := range ents {
				if strings.HasSuffix(ent.Name(), ".index") {
					active = filepath.Join(pdir, ent.Name()) // sorted: the last is the active one
				}
			}
			if damage == "deleted" {
				err = os.Remove(active)
			} else {
				err = os.Truncate(active, 0)
			}
			if err != nil {
				t.Fatal(err)
			}
			e = openTest(t, opts)
			if fi, err := os.Stat(active); err != nil || fi.Size() == 0 {
				t.Fatalf("index not rebuilt: %v", err)
			}
			if n := readRange(t, e, "d", 0); n != 1200 {
				t.Fatalf("read %d records", n)
			}
			for _, off := range []uint64{0, 599, 1199} {
				if n := readRange(t, e, "d", off); n != 1200-int(off) {
					t.Fatalf("read %d records from %d", n, off)
				}
			}
			for i, base := range bases {
				ts := t0 + int64(i)*1000
				if off, got, err := e.ListOffsets("d", 0, ts); err != nil || off != base || got != ts {
					t.Fatalf("ListOffsets(%d) = %d, %d, %v; want %d", ts, off, got, err, base)
				}
			}
			if res, err := e.Append(context.Background(), "d", 0, mkBatch(t, "v1200")); err != nil || res.BaseOffset != 1200 {
				t.Fatalf("append after rebuild = %+v, %v", res, err)
			}
		})
	}
}

// TestRetentionGoroutine: with a positive RetentionCheckInterval the
// engine enforces retention by itself, and Close stops the goroutine.
func TestRetentionGoroutine(t *testing.T) {
	clk := newRetClock()
	opts := retentionOptions(t.TempDir(), clk)
	opts.RetentionCheckInterval = 5 * time.Millisecond
	e := openTest(t, opts)
	if _, err := e.CreateTopic("auto", 1, TopicConfig{RetentionMs: 1000}); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, "auto", 40, 20)
	clk.Advance(time.Hour)
	for deadline := time.Now().Add(10 * time.Second); partInfo(t, e, "auto").LogStartOffset == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the retention goroutine deleted nothing")
		}
		runtime.Gosched()
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}
