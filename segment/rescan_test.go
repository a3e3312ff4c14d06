package segment

import (
	"path/filepath"
	"testing"

	"github.com/seedqueue/sq/internal/faultfs"
)

// TestCleanRestartDoesNotRescan: after a clean stop the recovery point
// lets Open skip the sealed segments (it reads at most their tails from
// the last index entry), while without a recovery point it reads them
// all. The bytes read are counted by faultfs.
func TestCleanRestartDoesNotRescan(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "p")
	fs := faultfs.New(root, nil)
	opts := smallOptions()
	opts.SegmentBytes = 64 << 10
	opts.IndexIntervalBytes = 1024
	l, err := Open(dir, fs, fs.Backend(), opts)
	if err != nil {
		t.Fatal(err)
	}
	appendBatches(t, l, 400, 1, 4, 100) // about 8 segments of 64 KiB
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sealed := func(l *Log) (paths []string, bytes int64) {
		for _, s := range l.Segments() {
			if !s.Active {
				paths = append(paths, logPath(dir, s.BaseOffset))
				bytes += s.Bytes
			}
		}
		return paths, bytes
	}
	readSealed := func() (int64, int64) {
		fs.ResetStats()
		l, err := Open(dir, fs, fs.Backend(), opts)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		paths, total := sealed(l)
		if len(paths) < 4 {
			t.Fatalf("only %d sealed segments", len(paths))
		}
		st := fs.Stats()
		var read int64
		for _, p := range paths {
			read += st.ReadBytes[p]
		}
		return read, total
	}
	read, total := readSealed()
	t.Logf("clean restart: read %d of %d sealed bytes", read, total)
	// Per sealed segment: from its last index entry to its end, at most
	// an index interval plus one batch.
	if limit := int64(8) * int64(opts.IndexIntervalBytes+1024); read > limit {
		t.Fatalf("clean restart read %d bytes of %d in sealed segments, want at most %d", read, total, limit)
	}
	if err := fs.Remove(filepath.Join(dir, recoveryPointName)); err != nil {
		t.Fatal(err)
	}
	if read, total = readSealed(); read < total {
		t.Fatalf("without a recovery point Open read %d of %d sealed bytes; want a full scan", read, total)
	}
}
