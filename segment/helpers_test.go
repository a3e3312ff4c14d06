package segment

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/ring"
)

// smallOptions make segments roll after a few batches.
func smallOptions() Options {
	return Options{SegmentBytes: 2048, IndexIntervalBytes: 256, PreallocBytes: 1024, MaxBatchBytes: 1 << 16}
}

func openLog(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, ring.OS, ring.NewPortable(), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

// abandon simulates a crash: the Log is dropped without Close (its files
// are closed only to release descriptors; nothing is synced or trimmed).
func abandon(t testing.TB, l *Log) {
	t.Helper()
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.closeFiles()
}

// makeBatch builds a batch of n records whose values name the offsets they
// will get when appended at first: "rec-<offset>".
func makeBatch(t testing.TB, first uint64, n, valueBytes int) []byte {
	t.Helper()
	var b batch.Builder
	for i := 0; i < n; i++ {
		v := fmt.Appendf(nil, "rec-%d-", first+uint64(i))
		for len(v) < valueBytes {
			v = append(v, 'x')
		}
		b.Add(nil, v, nil, 1000+int64(i))
	}
	out, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// appendBatches appends count appends of perAppend batches of recs records
// each and returns the AppendInfos.
func appendBatches(t testing.TB, l *Log, count, perAppend, recs, valueBytes int) []AppendInfo {
	t.Helper()
	var infos []AppendInfo
	for i := 0; i < count; i++ {
		next := l.NextOffset()
		var bs [][]byte
		for j := 0; j < perAppend; j++ {
			bs = append(bs, makeBatch(t, next, recs, valueBytes))
			next += uint64(recs)
		}
		info, err := l.Append(bs)
		if err != nil {
			t.Fatalf("Append: %v", err)
		}
		infos = append(infos, info)
	}
	return infos
}

// checkBufs walks the batches of bufs, checking each one (header, CRC,
// records) and that each record's value names its offset. It returns the
// batch headers.
func checkBufs(t testing.TB, bufs [][]byte) []batch.Header {
	t.Helper()
	hs, err := walkBufs(bufs)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// walkBufs is checkBufs for goroutines other than the test's.
func walkBufs(bufs [][]byte) ([]batch.Header, error) {
	var hs []batch.Header
	for _, buf := range bufs {
		for len(buf) > 0 {
			b, rest, h, err := batch.Split(buf, 0)
			if err != nil {
				return nil, fmt.Errorf("split: %w", err)
			}
			if _, err := batch.Validate(b, batch.Limits{}); err != nil {
				return nil, fmt.Errorf("batch at offset %d: %w", h.BaseOffset, err)
			}
			it, err := batch.NewIter(b)
			if err != nil {
				return nil, err
			}
			for it.Next() {
				r := it.Record()
				if want := fmt.Sprintf("rec-%d-", r.Offset); string(r.Value[:min(len(want), len(r.Value))]) != want {
					return nil, fmt.Errorf("record at offset %d has value %q", r.Offset, r.Value)
				}
			}
			if err := it.Err(); err != nil {
				return nil, err
			}
			hs = append(hs, h)
			buf = rest
		}
	}
	return hs, nil
}

// readable returns the offsets readable from the log start up to the log
// end, checking that they are contiguous and every batch is intact.
func readable(t testing.TB, l *Log) (start, end uint64) {
	t.Helper()
	start = l.LogStartOffset()
	v, err := l.Read(start, 1<<30, l.NextOffset())
	if err != nil {
		t.Fatalf("Read(%d): %v", start, err)
	}
	defer v.Release()
	end = start
	for _, h := range checkBufs(t, v.Bufs) {
		if h.BaseOffset != end {
			t.Fatalf("batch at offset %d, want %d", h.BaseOffset, end)
		}
		end = h.NextOffset()
	}
	if end != l.NextOffset() || v.NextOffset != end {
		t.Fatalf("read up to %d (View says %d), NextOffset %d", end, v.NextOffset, l.NextOffset())
	}
	return start, end
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

func osFS() ring.FS { return ring.OS }
