package benchmarks

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/seedqueue/sq/ring"
)

// writeSyncCase is one way to make a write durable: the backend variant
// and the calls.
type writeSyncCase struct {
	backend string // a name openBackend knows
	call    string // "separate": WriteAt then Sync; "linked": WriteAndSync; "dsync": WriteAtDsync
}

// writeSyncCases lists the calls each backend variant offers.
var writeSyncCases = []writeSyncCase{
	{ring.ModePortable, "separate"}, {ring.ModePortable, "dsync"},
	{ring.ModeUring, "separate"}, {ring.ModeUring, "linked"}, {ring.ModeUring, "dsync"},
	{uringDefer, "separate"}, {uringDefer, "linked"}, {uringDefer, "dsync"},
	{uringSQPoll, "separate"}, {uringSQPoll, "dsync"},
}

// BenchmarkWriteSync measures the backend calls alone: one 1 KiB write
// made durable, per op, from 1 and 8 goroutines each on its own file, for
// every backend variant and call (writeSyncCases). The file is prepared
// as "fallocate" (fallocate(2) mode 0, as segments are preallocated: the
// blocks are unwritten extents, and each sync also commits their
// conversion in the file system's journal) or "zeroed" (zeros written and
// fdatasynced first: a sync then has only data to flush). Besides ns/op it
// reports the latency of one op (write and sync) at the 50th, 99th and
// 99.9th percentiles in µs.
func BenchmarkWriteSync(b *testing.B) {
	for _, c := range writeSyncCases {
		for _, file := range []string{"fallocate", "zeroed"} {
			for _, par := range []int{1, 8} {
				b.Run(fmt.Sprintf("backend=%s/call=%s/file=%s/goroutines=%d", c.backend, c.call, file, par), func(b *testing.B) {
					benchWriteSync(b, c, file, par)
				})
			}
		}
	}
}

func benchWriteSync(b *testing.B, c writeSyncCase, file string, par int) {
	be := openBackend(b, c.backend)
	defer be.Close()
	buf := make([]byte, 1024)
	dir := b.TempDir()
	files := make([]*os.File, par)
	counts := make([]int, par)
	for g := range par {
		counts[g] = b.N / par
		if g < b.N%par {
			counts[g]++
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprint(g)))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		size := int64(counts[g]+1) * int64(len(buf))
		if file == "zeroed" {
			_, err = f.WriteAt(make([]byte, size), 0)
			if err == nil {
				err = f.Sync()
			}
		} else {
			err = be.Allocate(f, 0, size)
		}
		if err != nil {
			b.Fatal(err)
		}
		files[g] = f
	}
	hists := make([]*hdrhistogram.Histogram, par)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range par {
		hists[g] = hdrhistogram.New(1, int64(10*time.Second/time.Microsecond), 3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := writeSyncLoop(be, c.call, files[g], buf, counts[g], hists[g]); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	h := hists[0]
	for _, o := range hists[1:] {
		h.Merge(o)
	}
	b.ReportMetric(float64(h.ValueAtQuantile(50)), "p50-µs")
	b.ReportMetric(float64(h.ValueAtQuantile(99)), "p99-µs")
	b.ReportMetric(float64(h.ValueAtQuantile(99.9)), "p99.9-µs")
}

// writeSyncLoop writes buf n times, one after the other in f, each made
// durable as call says, and records each op's latency in h (µs).
func writeSyncLoop(be ring.Backend, call string, f *os.File, buf []byte, n int, h *hdrhistogram.Histogram) error {
	ws, _ := be.(ring.WriteSyncer)
	ds, _ := be.(ring.DsyncWriter)
	if (call == "linked" && ws == nil) || (call == "dsync" && ds == nil) {
		return fmt.Errorf("backend %s has no %s call", be.Name(), call)
	}
	for i := range n {
		off := int64(i) * int64(len(buf))
		start := time.Now()
		var err error
		switch call {
		case "linked":
			_, err = ws.WriteAndSync(f, [][]byte{buf}, off)
		case "dsync":
			_, err = ds.WriteAtDsync(f, [][]byte{buf}, off)
		default:
			if _, err = be.WriteAt(f, [][]byte{buf}, off); err == nil {
				err = be.Sync(f)
			}
		}
		if err != nil {
			return err
		}
		_ = h.RecordValue(time.Since(start).Microseconds())
	}
	return nil
}
