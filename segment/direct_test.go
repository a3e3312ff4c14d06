package segment

import (
	"bytes"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/seedqueue/sq/internal/faultfs"
	"github.com/seedqueue/sq/ring"
)

// directOptions roll segments every few dozen appends, so that direct
// writes start new files, and index often.
func directOptions() Options {
	return Options{SegmentBytes: 96 << 10, IndexIntervalBytes: 1024, PreallocBytes: 16 << 10, MaxBatchBytes: 1 << 20, DirectWrites: true}
}

// directSupported reports whether dir's file system takes an aligned
// O_DIRECT write, as the Log's would be.
func directSupported(t *testing.T, dir string) bool {
	t.Helper()
	name := filepath.Join(dir, "probe")
	if err := os.WriteFile(name, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(name)
	f, err := ring.OS.(ring.DirectOpener).OpenDirect(name)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = f.WriteAt(ring.AlignedBuffer(ring.DirectAlign), 0)
	return err == nil
}

// appendVaried appends count appends of 1 to 3 batches of 1 to 20
// records of 1 to 300 bytes (ends fall anywhere in a block), syncing
// every few appends, and returns the log end offset.
func appendVaried(t *testing.T, l *Log, rng *rand.Rand, count int) uint64 {
	t.Helper()
	for i := range count {
		next := l.NextOffset()
		var bs [][]byte
		for range 1 + rng.IntN(3) {
			n := 1 + rng.IntN(20)
			bs = append(bs, makeBatch(t, next, n, 1+rng.IntN(300)))
			next += uint64(n)
		}
		if _, err := l.Append(bs); err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		if i%5 == 4 {
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return l.NextOffset()
}

// readAll reads l from its start to its end, checking every batch and
// that each record's value names its offset, and returns the end.
func readAll(t *testing.T, l *Log) uint64 {
	t.Helper()
	start, end := readable(t, l)
	if start != 0 {
		t.Fatalf("log starts at %d", start)
	}
	return end
}

// TestDirectWrites: under Options.DirectWrites, on each backend, appends
// of any length go down through the O_DIRECT descriptor, readers reading
// the log through its mappings while it is written see every batch
// whole and right, the log rolls across segments, and a reopen (with or
// without direct writes) reads back everything; no descriptor is left
// open after Close.
func TestDirectWrites(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		dir := t.TempDir()
		supported := directSupported(t, dir)
		files := NewFileCache(0)
		opts := directOptions()
		opts.Files = files
		l := openLogOn(t, dir, be, opts)
		rng := rand.New(rand.NewPCG(1, 2))

		var stop atomic.Bool
		var wg sync.WaitGroup
		var reads atomic.Int64
		readErr := make(chan error, 4)
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					next := l.NextOffset()
					for off := uint64(0); off < next; {
						v, err := l.Read(off, 16<<10, next)
						if err != nil {
							readErr <- err
							return
						}
						hs, werr := walkBufs(v.Bufs)
						v.Release()
						if werr != nil {
							readErr <- werr
							return
						}
						if len(hs) == 0 {
							readErr <- errors.New("empty read below the log end")
							return
						}
						off = hs[len(hs)-1].NextOffset()
						reads.Add(1)
					}
				}
			}()
		}
		end := appendVaried(t, l, rng, 400)
		stop.Store(true)
		wg.Wait()
		select {
		case err := <-readErr:
			t.Fatalf("a concurrent reader: %v", err)
		default:
		}
		if reads.Load() == 0 {
			t.Fatal("the readers read nothing")
		}
		if l.SegmentCount() < 3 {
			t.Fatalf("%d segments: the test wants rolls", l.SegmentCount())
		}
		l.direct.mu.Lock()
		used, off := l.direct.f != nil, l.direct.off
		l.direct.mu.Unlock()
		if supported && (!used || off) {
			t.Fatalf("the file system takes O_DIRECT but the Log does not use it (open %v, off %v)", used, off)
		}
		if !supported && !off {
			t.Fatal("the file system refuses O_DIRECT but the Log did not fall back")
		}
		if got := readAll(t, l); got != end {
			t.Fatalf("readable to %d, want %d", got, end)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if st := files.Stats(); st.Files != 0 {
			t.Fatalf("%d descriptors open after Close", st.Files)
		}
		for _, direct := range []bool{false, true} {
			o := directOptions()
			o.DirectWrites = direct
			l := openLogOn(t, dir, be, o)
			if got := readAll(t, l); got != end {
				t.Fatalf("reopened (direct %v): readable to %d, want %d", direct, got, end)
			}
			end = appendVaried(t, l, rng, 20)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestDirectWritesCrash: a Log written with direct writes and dropped
// without Close (a crash of the process: nothing trimmed, the zeros past
// the last batch's block left in place) recovers every synced batch, and
// everything it reads back is whole; appends then go on from there.
func TestDirectWritesCrash(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		dir := t.TempDir()
		rng := rand.New(rand.NewPCG(3, 4))
		l := openLogOn(t, dir, be, directOptions())
		appendVaried(t, l, rng, 60)
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		synced := l.NextOffset()
		end := appendVaried(t, l, rng, 3) // not all synced
		abandon(t, l)
		l = openLogOn(t, dir, be, directOptions())
		got := readAll(t, l)
		if got < synced || got > end {
			t.Fatalf("after a crash: readable to %d, want %d to %d", got, synced, end)
		}
		end = appendVaried(t, l, rng, 10)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = openLogOn(t, dir, be, directOptions())
		defer l.Close()
		if got := readAll(t, l); got != end {
			t.Fatalf("after the appends that followed the crash: readable to %d, want %d", got, end)
		}
	})
}

// TestDirectWritesTruncate: a truncation (a follower cutting its log to
// the leader's) moves the end under the direct writer, which reads the
// new partial block back before its next write.
func TestDirectWritesTruncate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		dir := t.TempDir()
		rng := rand.New(rand.NewPCG(5, 6))
		l := openLogOn(t, dir, be, directOptions())
		defer l.Close()
		for _, cut := range []uint64{3, 2, 7} {
			end := appendVaried(t, l, rng, 30)
			h := batchesFrom(t, l, end/cut)
			if err := l.TruncateTo(h); err != nil {
				t.Fatalf("TruncateTo(%d): %v", h, err)
			}
			if got := readAll(t, l); got != h {
				t.Fatalf("after TruncateTo(%d): readable to %d", h, got)
			}
		}
		end := appendVaried(t, l, rng, 30)
		if got := readAll(t, l); got != end {
			t.Fatalf("readable to %d, want %d", got, end)
		}
	})
}

// batchesFrom returns the base offset of the batch holding offset off: a
// batch boundary to truncate at.
func batchesFrom(t *testing.T, l *Log, off uint64) uint64 {
	t.Helper()
	v, err := l.Read(off, 1, l.NextOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer v.Release()
	hs := checkBufs(t, v.Bufs)
	return hs[0].BaseOffset
}

// TestDirectWritesFallback: where O_DIRECT is not to be had, the Log
// writes through the page cache and says so once: a FS seam without a
// direct opener (the fault-injecting FS), and a file system that refuses
// it (tmpfs before Linux 6.6, when /dev/shm is one).
func TestDirectWritesFallback(t *testing.T) {
	type place struct {
		name string
		fs   func(t *testing.T, dir string) ring.FS
		dir  func(t *testing.T) string
	}
	places := []place{
		{"faultfs", func(t *testing.T, dir string) ring.FS { return faultfs.New(dir, ring.NewPortable()) }, func(t *testing.T) string { return t.TempDir() }},
		{"shm", func(t *testing.T, dir string) ring.FS { return ring.OS }, func(t *testing.T) string {
			if _, err := os.Stat("/dev/shm"); err != nil {
				t.Skip("no /dev/shm")
			}
			d, err := os.MkdirTemp("/dev/shm", "sq-direct-")
			if err != nil {
				t.Skip(err)
			}
			t.Cleanup(func() { os.RemoveAll(d) })
			return d
		}},
	}
	for _, p := range places {
		t.Run(p.name, func(t *testing.T) {
			dir := p.dir(t)
			fsys := p.fs(t, dir)
			var logs bytes.Buffer
			opts := directOptions()
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			l, err := Open(filepath.Join(dir, "log"), fsys, ring.NewPortable(), opts)
			if err != nil {
				t.Fatal(err)
			}
			end := appendVaried(t, l, rand.New(rand.NewPCG(7, 8)), 50)
			if got := readAll(t, l); got != end {
				t.Fatalf("readable to %d, want %d", got, end)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			refused := p.name == "faultfs" || !directSupported(t, dir)
			if n := strings.Count(logs.String(), "direct writes (O_DIRECT) are not available"); refused && n != 1 {
				t.Fatalf("%d warnings about the fallback, want 1:\n%s", n, logs.String())
			} else if !refused && n != 0 {
				t.Fatalf("a fallback where O_DIRECT works:\n%s", logs.String())
			}
		})
	}
}

// einvalBackend refuses writes to files opened for direct writes with
// EINVAL, as a device whose logical block is larger than
// ring.DirectAlign would, writing nothing.
type einvalBackend struct {
	ring.Backend
}

func (b *einvalBackend) WriteAt(f ring.File, bufs [][]byte, off int64) (int64, error) {
	if of, ok := f.(*os.File); ok {
		if fl, err := unixFcntlFlags(of); err == nil && fl&syscall.O_DIRECT != 0 {
			return 0, syscall.EINVAL
		}
	}
	return b.Backend.WriteAt(f, bufs, off)
}

// TestDirectWritesRefusedWrite: a direct write refused with EINVAL
// (opened, but the device wants another alignment) writes nothing; the
// Log writes that append and the later ones through the page cache.
func TestDirectWritesRefusedWrite(t *testing.T) {
	dir := t.TempDir()
	if !directSupported(t, dir) {
		t.Skip("the file system refuses O_DIRECT at open")
	}
	var logs bytes.Buffer
	opts := directOptions()
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	l := openLogOn(t, dir, &einvalBackend{Backend: ring.NewPortable()}, opts)
	end := appendVaried(t, l, rand.New(rand.NewPCG(9, 10)), 40)
	if got := readAll(t, l); got != end {
		t.Fatalf("readable to %d, want %d", got, end)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "direct writes (O_DIRECT) are not available"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, logs.String())
	}
	l = openLog(t, dir, directOptions())
	defer l.Close()
	if got := readAll(t, l); got != end {
		t.Fatalf("reopened: readable to %d, want %d", got, end)
	}
}

// unixFcntlFlags returns f's status flags (fcntl(2) F_GETFL).
func unixFcntlFlags(f *os.File) (int, error) {
	return unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
}
