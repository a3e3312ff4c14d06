package segment

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestReleaseSpare: ReleaseSpare cuts the active segment's .log to its
// end and reports the bytes that were preallocated beyond it; a View
// taken before keeps reading its batches, later appends preallocate
// again, and every record reads back, also after a crash and Open. A
// second call releases nothing; on a closed Log it returns ErrClosed.
func TestReleaseSpare(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentBytes: 1 << 20, PreallocBytes: 256 << 10, MaxBatchBytes: 1 << 16}
	l := openLog(t, dir, opts)
	appendBatches(t, l, 10, 1, 3, 100)
	spare := l.Spare()
	if spare <= 0 {
		t.Fatalf("Spare = %d after appends, want preallocated bytes", spare)
	}
	v, err := l.Read(0, 1<<20, l.NextOffset())
	if err != nil {
		t.Fatal(err)
	}
	n, err := l.ReleaseSpare()
	if err != nil || n != spare {
		t.Fatalf("ReleaseSpare = %d, %v; want %d, nil", n, err, spare)
	}
	path := logPath(dir, 0)
	if size := fileSize(t, path); size != int64(l.SizeBytes()) {
		t.Fatalf(".log is %d bytes after ReleaseSpare, want its end %d", size, l.SizeBytes())
	}
	if l.Spare() != 0 {
		t.Fatalf("Spare = %d after ReleaseSpare", l.Spare())
	}
	checkBufs(t, v.Bufs) // the View taken before still reads
	v.Release()
	if n, err := l.ReleaseSpare(); n != 0 || err != nil {
		t.Fatalf("second ReleaseSpare = %d, %v; want 0, nil", n, err)
	}
	appendBatches(t, l, 5, 1, 3, 100)
	if l.Spare() <= 0 {
		t.Fatal("no preallocation after ReleaseSpare")
	}
	_, end := readable(t, l)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	abandon(t, l)
	l = openLog(t, filepath.Clean(dir), opts)
	if _, got := readable(t, l); got != end {
		t.Fatalf("after a crash, readable up to %d, want %d", got, end)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReleaseSpare(); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReleaseSpare after Close = %v, want ErrClosed", err)
	}
}
