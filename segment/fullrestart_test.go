package segment

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seedqueue/sq/internal/faultfs"
)

// fullDisk makes fsys behave like a file system without a free block (err
// ENOSPC or EDQUOT): no file can be written by temp file and rename, no
// space preallocated, and with newFiles, no new file created. It returns
// the function that frees the disk.
func fullDisk(fsys *faultfs.FS, err error, newFiles bool) (free func()) {
	var removes []func()
	removes = append(removes,
		fsys.Inject(faultfs.Rule{Ops: faultfs.OpCreate | faultfs.OpWrite, Path: "*" + tmpSuffix, Err: err}),
		fsys.Inject(faultfs.Rule{Ops: faultfs.OpAllocate, Err: err}))
	if newFiles {
		removes = append(removes, fsys.Inject(faultfs.Rule{Ops: faultfs.OpCreate, Err: err}))
	}
	return func() {
		for _, r := range removes {
			r()
		}
	}
}

// TestOpenOnFullDiskRebuildsIndexesInMemory: a restart on a full disk
// (ENOSPC, EDQUOT) with a sealed or active segment's .index or .timeindex
// missing or damaged, after a clean stop or a crash, opens the log with
// the index rebuilt in memory: every record reads back, lookups by time
// answer, a WARN names the file, and once space is back the next
// checkpoint writes the files (a later Open finds them intact).
func TestOpenOnFullDiskRebuildsIndexesInMemory(t *testing.T) {
	type damage struct {
		name  string
		seg   int // segment index from the start; -1: the active one
		file  string
		trunc bool // cut to 5 bytes instead of removing
	}
	damages := []damage{
		{"sealed index removed", 0, indexSuffix, false},
		{"sealed index torn", 1, indexSuffix, true},
		{"sealed time index removed", 0, timeIndexSuffix, false},
		{"sealed time index torn", 2, timeIndexSuffix, true},
		{"active index removed", -1, indexSuffix, false},
		{"active time index removed", -1, timeIndexSuffix, false},
		{"active index torn", -1, indexSuffix, true},
	}
	for _, d := range damages {
		for _, crash := range []bool{false, true} {
			for _, cause := range []error{syscall.ENOSPC, syscall.EDQUOT} {
				name := d.name + "/clean"
				if crash {
					name = d.name + "/crash"
				}
				name += "/" + cause.(syscall.Errno).Error()
				t.Run(name, func(t *testing.T) {
					testOpenOnFullDisk(t, d.seg, d.file, d.trunc, crash, cause)
				})
			}
		}
	}
}

func testOpenOnFullDisk(t *testing.T, seg int, suffix string, trunc, crash bool, cause error) {
	root := t.TempDir()
	dir := filepath.Join(root, "p")
	fsys := faultfs.New(root, nil)
	opts := smallOptions()
	l, err := Open(dir, fsys, fsys.Backend(), opts)
	if err != nil {
		t.Fatal(err)
	}
	appendBatches(t, l, 40, 1, 3, 60)
	if l.SegmentCount() < 4 {
		t.Fatalf("%d segments, want at least 4", l.SegmentCount())
	}
	_, wantEnd := readable(t, l)
	bases := l.Segments()
	if crash {
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		abandon(t, l)
	} else if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if seg < 0 {
		seg = len(bases) - 1
	}
	path := filepath.Join(dir, baseName(bases[seg].BaseOffset)+suffix)
	if trunc {
		if err := os.Truncate(path, 5); err != nil {
			t.Fatal(err)
		}
	} else if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}

	free := fullDisk(fsys, cause, true)
	var logs bytes.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	l, err = Open(dir, fsys, fsys.Backend(), opts)
	if err != nil {
		t.Fatalf("Open on a full disk: %v\nlog:\n%s", err, logs.String())
	}
	if start, end := readable(t, l); start != 0 || end != wantEnd {
		t.Fatalf("readable [%d, %d), want [0, %d)", start, end, wantEnd)
	}
	if !strings.Contains(logs.String(), "could not write an index file") || !strings.Contains(logs.String(), filepath.Base(path)) {
		t.Fatalf("no WARN naming %s:\n%s", path, logs.String())
	}
	// Every record has an append time: the lookup of time 0 is the log start.
	if off, ts := l.OffsetForTime(0); off != 0 || ts <= 0 {
		t.Fatalf("OffsetForTime(0) = %d, %d; want 0 and a time", off, ts)
	}
	// The disk is still full: a checkpoint retries, and at most its
	// recovery point fails, with the cause.
	if err := l.Checkpoint(); err != nil && !isNoSpace(err) {
		t.Fatalf("Checkpoint on a full disk: %v", err)
	}

	free()
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if seg < len(bases)-1 {
		// Sealed: written by the checkpoint.
		checkIndexFiles(t, fsys, dir, bases[seg].BaseOffset, bases[seg].NextOffset-bases[seg].BaseOffset)
	}
	appendBatches(t, l, 40, 1, 3, 60) // rolls: the active segment's files are written then
	_, wantEnd = readable(t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	logs.Reset()
	l, err = Open(dir, fsys, fsys.Backend(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, end := readable(t, l); end != wantEnd {
		t.Fatalf("after reopening, readable up to %d, want %d", end, wantEnd)
	}
	// A time index dated again is never later than the next segment's
	// first time, so no file looks implausible now.
	for _, msg := range []string{"rebuilding index", "index disagrees", "could not write", "implausible", "dating"} {
		if strings.Contains(logs.String(), msg) {
			t.Errorf("reopening with space found index files still damaged (%q):\n%s", msg, logs.String())
		}
	}
}

// checkIndexFiles fails t unless the .index and .timeindex of the segment
// at base, holding count offsets, are whole.
func checkIndexFiles(t *testing.T, fsys *faultfs.FS, dir string, base, count uint64) {
	t.Helper()
	logSize := fileSize(t, logPath(dir, base))
	if _, ok, why := readIndex(fsys, indexPath(dir, base), logSize); !ok {
		t.Errorf("index of segment %d not written: %s", base, why)
	}
	if _, whole, why, err := readTimeIndexFile(fsys, timeIndexPath(dir, base), count, anyTime); err != nil || !whole {
		t.Errorf("time index of segment %d not written: %v %s", base, err, why)
	}
}

// TestOpenOnFullDiskWithoutRecoveryPointWrite: after a crash the recovery
// point Open writes does not fit; Open still succeeds (the recovered data
// is synced; the old recovery point stays), and so does the next Open.
func TestOpenOnFullDiskWithoutRecoveryPointWrite(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "p")
	fsys := faultfs.New(root, nil)
	opts := smallOptions()
	l, err := Open(dir, fsys, fsys.Backend(), opts)
	if err != nil {
		t.Fatal(err)
	}
	appendBatches(t, l, 30, 1, 3, 60)
	_, want := readable(t, l)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	abandon(t, l)
	free := fullDisk(fsys, syscall.ENOSPC, false)
	defer free()
	for range 2 {
		l, err = Open(dir, fsys, fsys.Backend(), opts)
		if err != nil {
			t.Fatalf("Open on a full disk: %v", err)
		}
		if _, end := readable(t, l); end != want {
			t.Fatalf("readable up to %d, want %d", end, want)
		}
		abandon(t, l)
	}
}

// TestRetentionOnFullDisk: retention frees space on a full disk even when
// the new recovery point does not fit: the old one, which names a segment
// about to be deleted, is removed instead, and Open then scans the log.
func TestRetentionOnFullDisk(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "p")
	fsys := faultfs.New(root, nil)
	opts := smallOptions()
	l, err := Open(dir, fsys, fsys.Backend(), opts)
	if err != nil {
		t.Fatal(err)
	}
	appendBatches(t, l, 30, 1, 3, 60)
	segs := l.Segments()
	if len(segs) < 3 {
		t.Fatalf("%d segments, want at least 3", len(segs))
	}
	_, want := readable(t, l)
	// The recovery point was written at the last roll: it names the
	// last sealed segment, which is deleted below.
	free := fullDisk(fsys, syscall.ENOSPC, false)
	defer free()
	cut := segs[len(segs)-2].NextOffset
	n, err := l.DeleteSegmentsBefore(cut)
	if err != nil || n != len(segs)-1 {
		t.Fatalf("DeleteSegmentsBefore(%d) = %d, %v; want %d, nil", cut, n, err, len(segs)-1)
	}
	abandon(t, l)
	if exists(filepath.Join(dir, recoveryPointName)) {
		t.Fatal("recovery point naming a deleted segment kept")
	}
	l, err = Open(dir, fsys, fsys.Backend(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer abandon(t, l)
	if start, end := readable(t, l); start != cut || end != want {
		t.Fatalf("readable [%d, %d), want [%d, %d)", start, end, cut, want)
	}
}

// TestUnwrittenWarnRateLimited: on a full disk every checkpoint retries
// the pending index files, but the WARN saying they could not be written
// comes at most once a minute (by Options.Now), counting those left out.
func TestUnwrittenWarnRateLimited(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "p")
	fsys := faultfs.New(root, nil)
	opts := smallOptions()
	now := time.Now()
	opts.Now = func() time.Time { return now }
	l, err := Open(dir, fsys, fsys.Backend(), opts)
	if err != nil {
		t.Fatal(err)
	}
	appendBatches(t, l, 20, 1, 3, 60)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(indexPath(dir, 0)); err != nil {
		t.Fatal(err)
	}
	free := fullDisk(fsys, syscall.ENOSPC, false)
	var logs bytes.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	if l, err = Open(dir, fsys, fsys.Backend(), opts); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	count := func() int { return strings.Count(logs.String(), "could not write an index file") }
	for range 5 {
		if err := l.Checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	if got := count(); got != 1 {
		t.Fatalf("%d WARNs within a minute, want 1:\n%s", got, logs.String())
	}
	if got := l.PendingIndexWrites(); got != 1 {
		t.Fatalf("PendingIndexWrites = %d, want 1", got)
	}
	now = now.Add(unwrittenWarnEvery)
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if got := count(); got != 2 || !strings.Contains(logs.String(), "suppressed=5") {
		t.Fatalf("after a minute: %d WARNs, want 2, the second counting 5 left out:\n%s", got, logs.String())
	}
	free()
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if got := l.PendingIndexWrites(); got != 0 {
		t.Fatalf("PendingIndexWrites = %d after space came back, want 0", got)
	}
}

// TestClampAppendTimesOnFullDisk: append times in the future are clamped
// on a full disk too: in memory at once (segments and lookups by time say
// the clock's time), in the files once space is back.
func TestClampAppendTimesOnFullDisk(t *testing.T) {
	const t0 = 1_700_000_000_000
	root := t.TempDir()
	dir := filepath.Join(root, "p")
	fsys := faultfs.New(root, nil)
	now := int64(t0 + 10*365*24*3600*1000)
	opts := smallOptions()
	opts.Now = fixedClock(&now)
	l, err := Open(dir, fsys, fsys.Backend(), opts)
	if err != nil {
		t.Fatal(err)
	}
	timedLog(t, l, 30, now) // appended while the clock was ahead; several segments
	segs := l.Segments()
	if len(segs) < 3 {
		t.Fatalf("%d segments; the test wants several", len(segs))
	}
	now = t0
	free := fullDisk(fsys, syscall.ENOSPC, false)
	if changed, err := l.ClampAppendTimes(now); err != nil || !changed {
		t.Fatalf("ClampAppendTimes on a full disk = %v, %v; want true, nil", changed, err)
	}
	for _, s := range l.Segments() {
		if s.MaxAppendTime != now {
			t.Fatalf("segment %d dated up to %d; want %d", s.BaseOffset, s.MaxAppendTime, now)
		}
	}
	if off, ts := l.OffsetForTime(now); off != 0 || ts != now {
		t.Fatalf("OffsetForTime(now) = %d, %d; want 0, %d", off, ts, now)
	}
	free()
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if n := l.PendingIndexWrites(); n != 0 {
		t.Fatalf("PendingIndexWrites = %d after space came back", n)
	}
	for _, s := range segs[:len(segs)-1] {
		entries, _, _, err := readTimeIndexFile(fsys, timeIndexPath(dir, s.BaseOffset), s.NextOffset-s.BaseOffset, anyTime)
		if err != nil || len(entries) == 0 || entries[len(entries)-1].ts != now {
			t.Fatalf("time index of segment %d: %v, %v; want clamped to %d", s.BaseOffset, entries, err, now)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
