package benchmarks

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/ring"
	"github.com/seedqueue/sq/segment"
)

// recordsPerBatch is the number of records in each committed batch.
const recordsPerBatch = 10

// backends returns the backends to compare: portable always, io_uring
// when the probe passes (otherwise its sub-benchmarks skip with the
// reason).
func backends() []string { return []string{ring.ModePortable, ring.ModeUring} }

// openBackend returns the backend of mode, or skips b.
func openBackend(b *testing.B, mode string) ring.Backend {
	b.Helper()
	if mode == ring.ModeUring {
		if ok, why := ring.Probe(); !ok {
			b.Skip("io_uring unavailable: " + why)
		}
		be, err := ring.NewUring()
		if err != nil {
			b.Fatal(err)
		}
		return be
	}
	return ring.NewPortable()
}

// makeBatch builds one batch of n records with values of size bytes.
func makeBatch(b *testing.B, n, size int) []byte {
	b.Helper()
	var bb batch.Builder
	for i := range n {
		v := make([]byte, size)
		for j := range v {
			v[j] = byte('a' + (i+j)%26)
		}
		bb.Add(nil, v, nil, int64(1000+i))
	}
	out, err := bb.Build()
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkAppendEveryBatch measures commits (Append of one batch of 10
// records, then Sync) on 1, 8 and 64 partitions written concurrently, one
// goroutine per partition, with 100 B and 1 KiB record values, on each
// backend. One op is one commit; recs/s counts records acknowledged per
// second across all partitions.
func BenchmarkAppendEveryBatch(b *testing.B) {
	for _, mode := range backends() {
		for _, parts := range []int{1, 8, 64} {
			for _, size := range []int{100, 1024} {
				name := fmt.Sprintf("backend=%s/partitions=%d/record=%dB", mode, parts, size)
				b.Run(name, func(b *testing.B) { benchAppend(b, mode, parts, size) })
			}
		}
	}
}

func benchAppend(b *testing.B, mode string, parts, size int) {
	be := openBackend(b, mode)
	defer be.Close()
	dir := b.TempDir()
	logs := make([]*segment.Log, parts)
	for i := range logs {
		l, err := segment.Open(filepath.Join(dir, fmt.Sprint(i)), ring.OS, be, segment.Options{SegmentBytes: 256 << 20, PreallocBytes: 16 << 20})
		if err != nil {
			b.Fatal(err)
		}
		logs[i] = l
	}
	defer func() {
		for _, l := range logs {
			if err := l.Close(); err != nil {
				b.Error(err)
			}
		}
	}()
	proto := makeBatch(b, recordsPerBatch, size)
	b.SetBytes(int64(len(proto)))
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, parts)
	for p, l := range logs {
		n := b.N / parts
		if p < b.N%parts {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, len(proto))
			for range n {
				copy(buf, proto)
				if _, err := l.Append([][]byte{buf}); err != nil {
					errs <- err
					return
				}
				if err := l.Sync(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*recordsPerBatch)/b.Elapsed().Seconds(), "recs/s")
}
