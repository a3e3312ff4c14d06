package benchmarks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"
)

// directBlock is the alignment used for O_DIRECT: offsets, lengths and
// buffer addresses are multiples of it (open(2), O_DIRECT: the logical
// block size of the device, 512 or 4096 bytes; 4096 suits both).
const directBlock = 4096

// BenchmarkDirectWrite measures what O_DIRECT writes would cost an
// every-batch log, without a segment: 1 KiB records appended one after the
// other to a zero-filled, fdatasynced file, each made durable before the
// next, from 1 and 8 goroutines each on its own file. "buffered" is
// pwritev + fdatasync (the portable backend's calls); "direct" rewrites the
// record's block (or blocks), from the block start holding the records
// before it, with one aligned pwrite on an O_DIRECT descriptor, then
// fdatasyncs (the device cache flush); "direct-dsync" makes that pwrite
// RWF_DSYNC instead of syncing after it (on a device with FUA the write
// needs no separate flush). It skips where the file system refuses
// O_DIRECT (EINVAL: tmpfs). Reports the per-op latency percentiles in µs as
// BenchmarkWriteSync does.
func BenchmarkDirectWrite(b *testing.B) {
	for _, mode := range []string{"buffered", "direct", "direct-dsync"} {
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("write=%s/goroutines=%d", mode, par), func(b *testing.B) { benchDirect(b, mode, par) })
		}
	}
}

func benchDirect(b *testing.B, mode string, par int) {
	const rec = 1024
	dir := b.TempDir()
	type job struct {
		f, d *os.File
		n    int
	}
	jobs := make([]job, par)
	for g := range par {
		n := b.N / par
		if g < b.N%par {
			n++
		}
		name := filepath.Join(dir, fmt.Sprint(g))
		f, err := os.Create(name)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		size := (int64(n)*rec/directBlock + 2) * directBlock
		if _, err := f.WriteAt(make([]byte, size), 0); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		jobs[g] = job{f: f, n: n}
		if mode != "buffered" {
			d, err := os.OpenFile(name, os.O_RDWR|unix.O_DIRECT, 0)
			if errors.Is(err, unix.EINVAL) {
				b.Skip("O_DIRECT refused by the file system: " + err.Error())
			}
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			jobs[g].d = d
		}
	}
	hists := make([]*hdrhistogram.Histogram, par)
	b.SetBytes(rec)
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range par {
		hists[g] = hdrhistogram.New(1, int64(10*time.Second/time.Microsecond), 3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := directLoop(mode, jobs[g].f, jobs[g].d, jobs[g].n, rec, hists[g]); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	// What was appended reads back through the buffered descriptor (the
	// page cache, which O_DIRECT writes invalidate).
	want := make([]byte, rec)
	for i := range want {
		want[i] = byte('a' + i%26)
	}
	for _, j := range jobs {
		got := make([]byte, rec)
		for i := range j.n {
			if _, err := j.f.ReadAt(got, int64(i)*rec); err != nil || string(got) != string(want) {
				b.Fatalf("%s: record %d reads back wrong (%v)", j.f.Name(), i, err)
			}
		}
	}
	h := hists[0]
	for _, o := range hists[1:] {
		h.Merge(o)
	}
	b.ReportMetric(float64(h.ValueAtQuantile(50)), "p50-µs")
	b.ReportMetric(float64(h.ValueAtQuantile(99)), "p99-µs")
	b.ReportMetric(float64(h.ValueAtQuantile(99.9)), "p99.9-µs")
}

// directLoop appends n records of rec bytes to f (buffered) or through d
// (O_DIRECT), each durable before the next, recording latencies in h.
func directLoop(mode string, f, d *os.File, n, rec int, h *hdrhistogram.Histogram) error {
	data := make([]byte, rec)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	// An aligned copy of the blocks around the end of the file: anonymous
	// mappings are page-aligned.
	tail, err := unix.Mmap(-1, 0, 2*directBlock+rec, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Munmap(tail) }()
	var end int64
	for range n {
		start := time.Now()
		if mode == "buffered" {
			if _, err := unix.Pwritev(int(f.Fd()), [][]byte{data}, end); err != nil {
				return err
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				return err
			}
		} else {
			// The block holding end keeps the records before it in
			// tail[:end-blockStart]; add the record and write whole blocks.
			blockStart := end &^ (directBlock - 1)
			in := int(end - blockStart)
			copy(tail[in:], data)
			length := (in + rec + directBlock - 1) &^ (directBlock - 1)
			flags := 0
			if mode == "direct-dsync" {
				flags = unix.RWF_DSYNC
			}
			if _, err := unix.Pwritev2(int(d.Fd()), [][]byte{tail[:length]}, blockStart, flags); err != nil {
				return err
			}
			if mode == "direct" {
				if err := unix.Fdatasync(int(d.Fd())); err != nil {
					return err
				}
			}
			// Keep the partial last block for the next record.
			next := end + int64(rec)
			if full := int((next &^ (directBlock - 1)) - blockStart); full > 0 {
				copy(tail, tail[full:in+rec])
			}
		}
		end += int64(rec)
		_ = h.RecordValue(time.Since(start).Microseconds())
	}
	return nil
}
