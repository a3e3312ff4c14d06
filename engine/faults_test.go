package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/internal/faultfs"
)

// faultOptions are testOptions on a faultfs over dir.
func faultOptions(dir string) (Options, *faultfs.FS) {
	fs := faultfs.New(dir, nil)
	opts := testOptions(dir)
	opts.FS, opts.Backend = fs, fs.Backend()
	opts.ScrubBytesPerSec = -1
	return opts, fs
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func appendValues(t *testing.T, e *Engine, topic string, p int, values ...string) AppendResult {
	t.Helper()
	res, err := e.Append(context.Background(), topic, p, mkBatch(t, values...))
	if err != nil {
		t.Fatalf("Append %v: %v", values, err)
	}
	return res
}

// TestDiskFloor: below the free-space floor publishes get DISK_FULL
// (retriable) while fetches, commits and topic creation work; once space
// returns (at the next refresh) publishes resume with the next offset.
func TestDiskFloor(t *testing.T) {
	var free atomic.Int64
	free.Store(1 << 30)
	var clock atomic.Int64
	clock.Store(time.Unix(1_700_000_000, 0).UnixNano())
	opts := testOptions(t.TempDir())
	opts.MinFreeBytes = 256 << 20
	opts.DiskFree = func(string) (int64, error) { return free.Load(), nil }
	opts.Now = func() time.Time { return time.Unix(0, clock.Load()) }
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	appendValues(t, e, "t", 0, "a", "b")
	free.Store(100 << 20)
	// Within the refresh interval the cached figure still admits.
	appendValues(t, e, "t", 0, "c")
	clock.Add(int64(diskFreeRefresh))
	// A batch that fits in the space the partition preallocated (16 KiB
	// steps here) takes nothing from the disk: accepted below the floor.
	if res := appendValues(t, e, "t", 0, "fits"); res.BaseOffset != 3 {
		t.Fatalf("batch into preallocated space: base offset %d, want 3", res.BaseOffset)
	}
	_, err := e.Append(context.Background(), "t", 0, mkBatch(t, strings.Repeat("r", 20000)))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeDiskFull || !ae.Retriable() {
		t.Fatalf("Append below the floor = %v, want retriable DISK_FULL", err)
	}
	if got := readAll(t, e, "t", 0); !equal(got, []string{"a", "b", "c", "fits"}) {
		t.Fatalf("fetch below the floor = %v", got)
	}
	if _, err := e.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "t", Partition: 0, Offset: 4}}); err != nil {
		t.Fatalf("commit below the floor: %v", err)
	}
	if _, err := e.CreateTopic("u", 1, TopicConfig{}); err != nil {
		t.Fatalf("create topic below the floor: %v", err)
	}
	free.Store(1 << 30)
	clock.Add(int64(diskFreeRefresh))
	if res := appendValues(t, e, "t", 0, "d"); res.BaseOffset != 4 {
		t.Fatalf("after space returned: base offset %d, want 4", res.BaseOffset)
	}
}

// TestDiskFloorBytes: bytes admitted between two statfs calls count
// against the last figure, so a burst cannot overshoot the floor by more
// than one batch.
func TestDiskFloorBytes(t *testing.T) {
	d := &diskFloor{min: 1000, free: func(string) (int64, error) { return 1500, nil },
		now: func() time.Time { return time.Unix(1, 0) }, log: slog.New(slog.DiscardHandler)}
	d.refresh(d.now())
	if err := d.admit(400, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.admit(200, nil); codeOf(err) != api.CodeDiskFull {
		t.Fatalf("admit past the floor = %v", err)
	}
	// Below the floor, a batch that fits in the space its partition has
	// preallocated takes nothing from the disk: admitted, not counted. A
	// larger one takes only its bytes past that space: 100 bytes are left
	// above the floor. Refused ones do not count, or the last would not
	// fit.
	for _, tc := range []struct {
		n, spare int64
		ok       bool
	}{{200, 200, true}, {200, 1 << 20, true}, {200, 0, false}, {200, 99, false}, {200, 100, true}} {
		err := d.admit(int(tc.n), func() int64 { return tc.spare })
		if (err == nil) != tc.ok || (err != nil && codeOf(err) != api.CodeDiskFull) {
			t.Fatalf("admit(%d) with %d spare = %v, want ok %v", tc.n, tc.spare, err, tc.ok)
		}
	}
	if err := d.admit(1, nil); codeOf(err) != api.CodeDiskFull {
		t.Fatalf("admit past the floor after 500 bytes = %v", err)
	}
	var nilFloor *diskFloor
	if err := nilFloor.admit(1<<40, nil); err != nil {
		t.Fatal(err)
	}
}

// TestENOSPCMidWrite: ENOSPC in the middle of a commit's write fails that
// commit with DISK_FULL, leaves the write position unchanged, and the next
// append gets the same offsets; the partition stays writable and a crash
// afterwards brings back no byte of the failed write.
func TestENOSPCMidWrite(t *testing.T) {
	dir := t.TempDir()
	opts, fs := faultOptions(dir)
	var logs syncBuffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateTopic("t", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	appendValues(t, e, "t", 0, "a", "b")
	remove := fs.Inject(faultfs.Rule{Ops: faultfs.OpWrite, Path: "*.log", Times: 1, Err: syscall.ENOSPC, Partial: true})
	_, err = e.Append(context.Background(), "t", 0, mkBatch(t, strings.Repeat("x", 300), strings.Repeat("y", 300)))
	if codeOf(err) != api.CodeDiskFull {
		t.Fatalf("Append with ENOSPC = %v, want DISK_FULL", err)
	}
	// The client hears which partition's write failed; the log line
	// counts the publishes its commit failed.
	if msg := err.Error(); !strings.Contains(msg, "write to partition t/0: ") || !strings.HasSuffix(msg, ": no space left on device") {
		t.Errorf("DISK_FULL message %q does not name the partition", err)
	}
	if !strings.Contains(logs.String(), `msg="append failed" topic=t partition=0 batches=1 err=`) {
		t.Errorf("log %q lacks the batches of the failed commit", logs.String())
	}
	remove()
	if res := appendValues(t, e, "t", 0, "c"); res.BaseOffset != 2 {
		t.Fatalf("next append at %d, want 2 (the failed write's offsets)", res.BaseOffset)
	}
	fs.Crash()
	e.Close()
	if err := fs.Restore(nil); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, opts)
	if got := readAll(t, e, "t", 0); !equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("after a crash: %v", got)
	}
}

// TestFailedFdatasync (docs/architecture.md §3.3): a failed fdatasync fails the acks of
// that commit and the partition (PARTITION_FAILED) until reopened; reads
// keep working; a reopen after the crash recovers exactly what was synced.
func TestFailedFdatasync(t *testing.T) {
	dir := t.TempDir()
	opts, fs := faultOptions(dir)
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateTopic("t", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	appendValues(t, e, "t", 0, "a", "b")
	fs.Inject(faultfs.Rule{Ops: faultfs.OpSync, Path: "*.log", Times: 1, Err: syscall.EIO})
	for i, v := range []string{"lost", "after"} {
		if _, err := e.Append(context.Background(), "t", 0, mkBatch(t, v)); codeOf(err) != api.CodePartitionFailed {
			t.Fatalf("append %d after the failed sync = %v, want PARTITION_FAILED", i, err)
		}
	}
	if got := readAll(t, e, "t", 0); !equal(got, []string{"a", "b"}) {
		t.Fatalf("reads of the failed partition: %v", got)
	}
	appendValues(t, e, "t", 1, "other partition")
	fs.Crash() // the kernel dropped the unsynced pages
	e.Close()
	if err := fs.Restore(nil); err != nil {
		t.Fatal(err)
	}
	e = openTest(t, opts)
	if got := readAll(t, e, "t", 0); !equal(got, []string{"a", "b"}) {
		t.Fatalf("after reopen: %v", got)
	}
	if res := appendValues(t, e, "t", 0, "c"); res.BaseOffset != 2 {
		t.Fatalf("append after reopen at %d, want 2", res.BaseOffset)
	}
	if got := readAll(t, e, "t", 1); !equal(got, []string{"other partition"}) {
		t.Fatalf("partition 1: %v", got)
	}
}

// TestClampCommittedOffsets (docs/architecture.md §3.6): a committed offset beyond the
// high watermark recovered after a crash under the none policy is clamped
// to it, with a warning.
func TestClampCommittedOffsets(t *testing.T) {
	dir := t.TempDir()
	opts, fs := faultOptions(dir)
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateTopic("t", 1, TopicConfig{SyncPolicy: "none"}); err != nil {
		t.Fatal(err)
	}
	appendValues(t, e, "t", 0, "a", "b", "c")
	// The offsets log is written with package os, so the commit survives
	// the crash while the unsynced records do not.
	if _, err := e.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "t", Partition: 0, Offset: 3}}); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	e.Close()
	if err := fs.Restore(nil); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	e = openTest(t, opts)
	if got := readAll(t, e, "t", 0); len(got) != 0 {
		t.Fatalf("unsynced records survived: %v", got)
	}
	got, err := e.FetchOffsets("g", "t")
	if err != nil || len(got) != 1 || got[0].Offset != 0 {
		t.Fatalf("FetchOffsets = %+v, %v; want offset 0 (clamped)", got, err)
	}
	if !strings.Contains(logs.String(), "clamped") || !strings.Contains(logs.String(), "committed=3") {
		t.Fatalf("no clamp warning in the log:\n%s", logs.String())
	}
}

// TestScrubFindsCorruptSealedSegment (case h): a bit flipped in the middle
// of a sealed segment is found by the background scrub after Open: the
// partition is failed with PARTITION_FAILED naming the file and position
// (and one log line), the file is not truncated, and the other partition
// keeps working.
func TestScrubFindsCorruptSealedSegment(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	opts.SegmentBytes = 8 << 10
	opts.MaxBatchBytes = 2 << 10
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateTopic("t", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		appendValues(t, e, "t", 0, fmt.Sprintf("%03d-%s", i, strings.Repeat("v", 200)))
	}
	appendValues(t, e, "t", 1, "ok")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, "topics", "t", "0", "00000000000000000000.log")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x01
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	e = openTest(t, opts)
	select {
	case <-e.scrubDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the scrub did not finish within 10s")
	}
	ti, err := e.DescribeTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	perr := ti.Partitions[0].Err
	if codeOf(perr) != api.CodePartitionFailed || !strings.Contains(perr.Error(), seg) || !strings.Contains(perr.Error(), "at byte") {
		t.Fatalf("partition error %v; want PARTITION_FAILED naming %s and a byte position", perr, seg)
	}
	if n := strings.Count(logs.String(), "partition failed"); n != 1 || !strings.Contains(logs.String(), seg) {
		t.Fatalf("want one log line naming %s, got %d:\n%s", seg, n, logs.String())
	}
	if fi, err := os.Stat(seg); err != nil || fi.Size() != int64(len(data)) {
		t.Fatalf("segment size after the scrub: %v, %v; want %d (not truncated)", fi, err, len(data))
	}
	if _, err := e.Append(context.Background(), "t", 0, mkBatch(t, "x")); codeOf(err) != api.CodePartitionFailed {
		t.Fatalf("append to the corrupt partition = %v", err)
	}
	appendValues(t, e, "t", 1, "still")
	if got := readAll(t, e, "t", 1); !equal(got, []string{"ok", "still"}) {
		t.Fatalf("partition 1: %v", got)
	}
}

// TestFailedSyncAtRoll: under a lax policy the only syncs are at segment
// rolls; one that fails puts the partition in the failed state (reported
// by DescribeTopic), not in a writable state whose log refuses appends.
func TestFailedSyncAtRoll(t *testing.T) {
	dir := t.TempDir()
	opts, fs := faultOptions(dir)
	e := openTest(t, opts)
	if _, err := e.CreateTopic("t", 1, TopicConfig{SyncPolicy: "none", SegmentBytes: opts.SegmentBytes}); err != nil {
		t.Fatal(err)
	}
	fs.Inject(faultfs.Rule{Ops: faultfs.OpSync, Path: "*.log", Times: 1, Err: syscall.EIO})
	var err error
	for i := 0; i < 10000 && err == nil; i++ {
		_, err = e.Append(context.Background(), "t", 0, mkBatch(t, strings.Repeat("x", 1000)))
	}
	if codeOf(err) != api.CodePartitionFailed {
		t.Fatalf("append after the failed sync at a roll = %v, want PARTITION_FAILED", err)
	}
	info, derr := e.DescribeTopic("t")
	if derr != nil || info.Partitions[0].Err == nil {
		t.Fatalf("describe after the failed sync: %+v %v; want the partition reported failed", info.Partitions, derr)
	}
}
