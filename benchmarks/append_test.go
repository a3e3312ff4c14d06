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

// The io_uring variants besides ring.ModeUring (the shared ring) that
// openBackend knows.
const (
	uringDefer  = "uring-defer"  // ring.UringOptions{DeferTaskrun: true}
	uringSQPoll = "uring-sqpoll" // ring.UringOptions{SQPoll: true}
)

// backends returns the backends to compare: portable always, the io_uring
// variants when the probe passes (otherwise their sub-benchmarks skip with
// the reason).
func backends() []string {
	return []string{ring.ModePortable, ring.ModeUring, uringDefer, uringSQPoll}
}

// openBackend returns the backend named mode (ring.ModePortable,
// ring.ModeUring, uringDefer, uringSQPoll), or skips b.
func openBackend(b *testing.B, mode string) ring.Backend {
	b.Helper()
	var o ring.UringOptions
	switch mode {
	case ring.ModePortable:
		return ring.NewPortable()
	case uringDefer:
		o.DeferTaskrun = true
	case uringSQPoll:
		o.SQPoll = true
	}
	if ok, why := ring.Probe(); !ok {
		b.Skip("io_uring unavailable: " + why)
	}
	be, err := ring.NewUringWith(o)
	if err != nil {
		b.Skipf("io_uring %s: %v", mode, err)
	}
	return be
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
// backend but SQPOLL (which BenchmarkWriteSync shows behind on 2 vCPUs),
// with the data made durable by Sync's fdatasync ("write=fdatasync") or
// by the append's own RWF_DSYNC write (segment.Options.DsyncWrites,
// "write=dsync"). One op is one commit; recs/s counts records
// acknowledged per second across all partitions.
func BenchmarkAppendEveryBatch(b *testing.B) {
	for _, mode := range backends() {
		if mode == uringSQPoll {
			continue
		}
		for _, write := range []string{"fdatasync", "dsync"} {
			for _, parts := range []int{1, 8, 64} {
				for _, size := range []int{100, 1024} {
					name := fmt.Sprintf("backend=%s/write=%s/partitions=%d/record=%dB", mode, write, parts, size)
					b.Run(name, func(b *testing.B) { benchAppend(b, mode, write == "dsync", parts, size) })
				}
			}
		}
	}
}

func benchAppend(b *testing.B, mode string, dsync bool, parts, size int) {
	be := openBackend(b, mode)
	defer be.Close()
	dir := b.TempDir()
	logs := make([]*segment.Log, parts)
	for i := range logs {
		l, err := segment.Open(filepath.Join(dir, fmt.Sprint(i)), ring.OS, be, segment.Options{SegmentBytes: 256 << 20, PreallocBytes: 16 << 20, DsyncWrites: dsync})
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
