package segment

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestGrowSize(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name                            string
		alloc, need, prealloc, segBytes int64
		want                            int64
	}{
		{"fits", 2 * mib, mib, 16 * mib, 1 << 30, 2 * mib},
		{"first step 1 MiB", 0, 100, 16 * mib, 1 << 30, mib},
		{"first step the need", 0, 3 * mib, 16 * mib, 1 << 30, 3 * mib},
		{"first step at most prealloc", 0, 100, 1024, 1 << 30, 1024},
		{"doubles", mib, mib + 1, 16 * mib, 1 << 30, 2 * mib},
		{"doubles again", 4 * mib, 4*mib + 1, 16 * mib, 1 << 30, 8 * mib},
		{"step capped at prealloc", 32 * mib, 32*mib + 1, 16 * mib, 1 << 30, 48 * mib},
		{"step at least the need", mib, 5 * mib, 16 * mib, 1 << 30, 5 * mib},
		{"capped at the segment size", 6 * mib, 6*mib + 1, 16 * mib, 10 * mib, 10 * mib},
		{"need past the segment size", 6 * mib, 11 * mib, 16 * mib, 10 * mib, 12 * mib},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := growSize(tc.alloc, tc.need, tc.prealloc, tc.segBytes); got != tc.want {
				t.Fatalf("growSize(%d, %d, %d, %d) = %d, want %d", tc.alloc, tc.need, tc.prealloc, tc.segBytes, got, tc.want)
			}
		})
	}
}

// diskBytes returns the bytes allocated to path (st_blocks).
func diskBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// TestEmptySegmentTakesNoSpace: a new or empty active segment allocates no
// disk space, and the first append allocates about 1 MiB, not PreallocBytes.
func TestEmptySegmentTakesNoSpace(t *testing.T) {
	dir := t.TempDir()
	opts := Options{} // PreallocBytes 16 MiB
	l := openLog(t, dir, opts)
	path := filepath.Join(dir, baseName(0)+logSuffix)
	if size, disk := fileSize(t, path), diskBytes(t, path); size != 0 || disk != 0 {
		t.Fatalf("new segment: size %d, %d bytes on disk; want 0", size, disk)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, opts)
	defer l.Close()
	if size := fileSize(t, path); size != 0 {
		t.Fatalf("reopened empty segment: size %d, want 0", size)
	}
	appendBatches(t, l, 1, 1, 2, 50)
	if size := fileSize(t, path); size != minGrowBytes {
		t.Fatalf("after one small append: size %d, want %d", size, minGrowBytes)
	}
	readable(t, l)
}
