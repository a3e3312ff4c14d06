package segment

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/internal/testutil"
	"github.com/seedqueue/sq/ring"
)

// tinyOptions roll a segment at every Append of one batch of 100-byte
// values (appendBatches(t, l, n, 1, 1, 100)).
func tinyOptions(c *FileCache) Options {
	return Options{SegmentBytes: 256, IndexIntervalBytes: 64, PreallocBytes: 4096, MaxBatchBytes: 1 << 16, Files: c}
}

// mapsUnder returns the number of memory mappings of this process of files
// under dir (/proc/self/maps).
func mapsUnder(t testing.TB, dir string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, dir+string(filepath.Separator)) {
			n++
		}
	}
	return n
}

// TestRollsCloseSealedFiles: under a policy that never calls Sync (the
// engine's sync-policy none), rolls across several logs sharing one
// FileCache leave only the active segments' files open, so appends keep
// working under an RLIMIT_NOFILE that leaves room for 40 more descriptors;
// before, each sealed segment kept its .log and .timeindex open until a
// Sync that never came.
func TestRollsCloseSealedFiles(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		const logs, rolls = 3, 60
		c := NewFileCache(16)
		root := t.TempDir()
		var ls []*Log
		for i := range logs {
			l := openLogOn(t, filepath.Join(root, fmt.Sprint(i)), be, tinyOptions(c))
			defer l.Close()
			ls = append(ls, l)
		}
		before := testutil.OpenFDs(t)
		// Two descriptors kept per roll would pass this limit 9 times over.
		restore := testutil.LimitOpenFiles(t, before+40)
		for range rolls {
			for _, l := range ls {
				appendBatches(t, l, 1, 1, 1, 100)
			}
		}
		restore()
		for _, l := range ls {
			if n := l.SegmentCount(); n < rolls {
				t.Fatalf("%d segments after %d appends, want a roll at each", n, rolls)
			}
		}
		st := c.Stats()
		// Each active segment: .log, .index, .timeindex.
		if st.Files != 3*logs {
			t.Fatalf("FileCache counts %d open files after %d rolls, want %d (the active segments')", st.Files, rolls*logs, 3*logs)
		}
		if after := testutil.OpenFDs(t); after > before+2 {
			t.Fatalf("/proc/self/fd: %d descriptors before %d rolls, %d after", before, rolls*logs, after)
		}
		for _, l := range ls {
			readable(t, l)
		}
		if st := c.Stats(); st.Mappings > st.Max {
			t.Fatalf("%d mappings after the reads were released, bound %d", st.Mappings, st.Max)
		}
	})
}

// TestReadEverySegmentBoundsMappings: reading each sealed segment once maps
// it; the FileCache unmaps the least recently read idle ones, so the
// process's mappings of the log stay within the bound (checked in
// /proc/self/maps), and a segment read again after its eviction is mapped
// again and reads the same.
func TestReadEverySegmentBoundsMappings(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		const bound, segs = 16, 120
		c := NewFileCache(bound)
		dir := t.TempDir()
		l := openLogOn(t, dir, be, tinyOptions(c))
		defer l.Close()
		infos := appendBatches(t, l, segs, 1, 1, 100)
		for pass := range 2 {
			for _, info := range infos {
				v, err := l.Read(info.BaseOffset, 1, l.NextOffset())
				if err != nil {
					t.Fatalf("pass %d: Read(%d): %v", pass, info.BaseOffset, err)
				}
				if hs := checkBufs(t, v.Bufs); len(hs) != 1 || hs[0].BaseOffset != info.BaseOffset {
					t.Fatalf("pass %d: Read(%d) returned %+v", pass, info.BaseOffset, hs)
				}
				v.Release()
				if st := c.Stats(); st.Files+st.Mappings > bound {
					t.Fatalf("pass %d, after reading offset %d: %d files + %d mappings, bound %d", pass, info.BaseOffset, st.Files, st.Mappings, bound)
				}
				if n := mapsUnder(t, dir); n > bound {
					t.Fatalf("pass %d: %d mappings of the log in /proc/self/maps, bound %d", pass, n, bound)
				}
			}
		}
		if st := c.Stats(); st.Evictions < 2*segs-bound || st.Err != nil {
			t.Fatalf("stats %+v: want at least %d evictions and no error", st, 2*segs-bound)
		}
	})
}

// writeSegments writes a partition directory of n sealed segments and an
// active one, one batch of one record each, with their index and time
// index files and a recovery point at the end, as a roll-by-roll history
// would leave them, without n fsyncs.
func writeSegments(t *testing.T, dir string, n int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Every segment's index and time index are alike: hard links to one
	// file each, which are much cheaper to make than files.
	idx, tidx := filepath.Join(t.TempDir(), "index"), filepath.Join(t.TempDir(), "timeindex")
	if err := os.WriteFile(idx, make([]byte, indexEntrySize), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tidx, encodeTimeIndex([]timeEntry{{ts: 1_700_000_000_000, rel: 0}}), 0o644); err != nil {
		t.Fatal(err)
	}
	var rp recoveryPoint
	for i := range n + 1 {
		base := uint64(i)
		b := makeBatch(t, base, 1, 100)
		batch.SetBaseOffset(b, base)
		if err := os.WriteFile(logPath(dir, base), b, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, link := range [][2]string{{idx, indexPath(dir, base)}, {tidx, timeIndexPath(dir, base)}} {
			var err error
			if i < n {
				err = os.Link(link[0], link[1])
			} else {
				// The active segment's files are written to: not shared.
				var data []byte
				if data, err = os.ReadFile(link[0]); err == nil {
					err = os.WriteFile(link[1], data, 0o644)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		rp = recoveryPoint{next: base + 1, base: base, pos: int64(len(b))}
	}
	if err := writeRecoveryPoint(ring.OS, dir, rp); err != nil {
		t.Fatal(err)
	}
}

// peakFS counts the files open through it at once and their peak.
type peakFS struct {
	ring.FS
	open, peak atomic.Int64
}

type peakFile struct {
	ring.File
	fs     *peakFS
	closed atomic.Bool
}

func (f *peakFile) Close() error {
	if f.closed.CompareAndSwap(false, true) {
		f.fs.open.Add(-1)
	}
	return f.File.Close()
}

func (p *peakFS) wrap(f ring.File, err error) (ring.File, error) {
	if err != nil {
		return nil, err
	}
	n := p.open.Add(1)
	for {
		old := p.peak.Load()
		if n <= old || p.peak.CompareAndSwap(old, n) {
			break
		}
	}
	return &peakFile{File: f, fs: p}, nil
}

func (p *peakFS) Create(name string) (ring.File, error) { return p.wrap(p.FS.Create(name)) }
func (p *peakFS) Open(name string) (ring.File, error)   { return p.wrap(p.FS.Open(name)) }
func (p *peakFS) OpenReadWrite(name string) (ring.File, error) {
	return p.wrap(p.FS.OpenReadWrite(name))
}

// TestRecoverManySegmentsWithinBound: Open of a partition of 2,000
// segments holds a handful of files at once (the active segment's and the
// one being checked), not one per segment, and leaves only the active
// segment's open: it succeeds with RLIMIT_NOFILE lowered to 32 descriptors
// above those already open, where opening every segment would fail with
// EMFILE. Reads then map segments lazily within the bound. (2,000, not
// more: creating a file costs milliseconds on a loaded disk; the peak
// does not depend on the count.) Both backends open the same directory in
// turn.
func TestRecoverManySegmentsWithinBound(t *testing.T) {
	const n, bound = 2000, 16
	dir := t.TempDir()
	writeSegments(t, dir, n)
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		fsys := &peakFS{FS: ring.OS}
		c := NewFileCache(bound)
		before := testutil.OpenFDs(t)
		restore := testutil.LimitOpenFiles(t, before+32)
		l, err := Open(dir, fsys, be, tinyOptions(c))
		restore()
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer l.Close()
		if got := l.SegmentCount(); got != n+1 {
			t.Fatalf("%d segments, want %d", got, n+1)
		}
		// Active segment (3), the .log under recovery, and one index, time
		// index or recovery-point file read or written at a time.
		if p := fsys.peak.Load(); p > 5 {
			t.Fatalf("Open held %d files at once, want at most 5", p)
		}
		if st := c.Stats(); st.Files != 3 || st.Mappings > 1 {
			t.Fatalf("after Open: %+v, want the active segment's 3 files and at most 1 mapping", st)
		}
		if after := testutil.OpenFDs(t); after > before+3 {
			t.Fatalf("/proc/self/fd: %d before Open, %d after", before, after)
		}
		for off := uint64(0); off < n; off += 37 {
			v, err := l.Read(off, 1, l.NextOffset())
			if err != nil {
				t.Fatalf("Read(%d): %v", off, err)
			}
			if hs := checkBufs(t, v.Bufs); len(hs) != 1 || hs[0].BaseOffset != off {
				t.Fatalf("Read(%d) returned %+v", off, hs)
			}
			v.Release()
		}
		if st := c.Stats(); st.Files+st.Mappings > bound {
			t.Fatalf("after reads: %+v, bound %d", st, bound)
		}
	})
}

// TestEvictionWithConcurrentReaders: readers hold Views of random
// segments while others read, the appender rolls and retention deletes,
// all sharing a FileCache far smaller than the segments read. Eviction
// never unmaps under a reader (every held View reads intact batches until
// Release; run with -race), and once every View is released the cache is
// back within its bound.
func TestEvictionWithConcurrentReaders(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		const bound, readers, reads = 8, 4, 150
		c := NewFileCache(bound)
		l := openLogOn(t, t.TempDir(), be, tinyOptions(c))
		defer l.Close()
		appendBatches(t, l, 40, 1, 1, 100)
		var rwg, awg sync.WaitGroup
		errs := make(chan error, readers+1)
		stop := make(chan struct{})
		for r := range readers {
			rwg.Go(func() {
				if err := readRandomly(l, rand.New(rand.NewPCG(uint64(r), 1)), reads); err != nil {
					errs <- err
				}
			})
		}
		awg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				b, err := testBatch(l.NextOffset())
				if err == nil {
					_, err = l.Append([][]byte{b})
				}
				if err == nil && i%10 == 9 {
					_, err = l.DeleteSegmentsBefore(l.NextOffset() - 30)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
		rwg.Wait()
		close(stop)
		awg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		readable(t, l)
		if st := c.Stats(); st.Files+st.Mappings > bound || st.Evictions == 0 {
			t.Fatalf("after every View was released: %+v, bound %d, want evictions", st, bound)
		}
	})
}

// readRandomly makes n reads of random offsets and sizes of l, holding up
// to four Views at a time and checking every held View's batches after
// each read.
func readRandomly(l *Log, rng *rand.Rand, n int) error {
	var held []*View
	defer func() {
		for _, v := range held {
			v.Release()
		}
	}()
	for range n {
		start, end := l.LogStartOffset(), l.NextOffset()
		off := start + rng.Uint64N(end-start)
		v, err := l.Read(off, 1+rng.IntN(600), end)
		if errors.Is(err, ErrOffsetOutOfRange) {
			continue // retention moved the start meanwhile
		}
		if err != nil {
			return fmt.Errorf("Read(%d): %w", off, err)
		}
		held = append(held, v)
		for _, h := range held {
			if _, err := walkBufs(h.Bufs); err != nil {
				return fmt.Errorf("a held View: %w", err)
			}
		}
		if len(held) > 3 {
			held[0].Release()
			held = held[1:]
		}
	}
	return nil
}

// testBatch is makeBatch(t, first, 1, 100) for goroutines other than the
// test's.
func testBatch(first uint64) ([]byte, error) {
	var b batch.Builder
	v := fmt.Appendf(nil, "rec-%d-", first)
	for len(v) < 100 {
		v = append(v, 'x')
	}
	b.Add(nil, v, nil, 1000)
	return b.Build()
}

// TestResourceErrorsSurface: an EMFILE, ENFILE or ENOMEM from open(2)
// while mapping a sealed segment, or creating the next segment at a roll,
// is returned by Read, Append and Open wrapped with ErrResources (errno kept) and
// recorded in the FileCache until an open succeeds again, or Recheck finds
// that one can.
func TestResourceErrorsSurface(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM} {
		t.Run(errno.Error(), func(t *testing.T) {
			c := NewFileCache(16)
			fsys := &failOpenFS{FS: ring.OS}
			dir := t.TempDir()
			l, err := Open(dir, fsys, ring.NewPortable(), tinyOptions(c))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			appendBatches(t, l, 3, 1, 1, 100)
			fsys.err.Store(&errno)
			_, err = l.Read(0, 1, l.NextOffset())
			if !errors.Is(err, ErrResources) || !errors.Is(err, errno) {
				t.Fatalf("Read with open failing with %v: %v, want ErrResources and the errno", errno, err)
			}
			if st := c.Stats(); !errors.Is(st.Err, errno) {
				t.Fatalf("FileCache error %v, want %v", st.Err, errno)
			}
			if _, err := l.Append([][]byte{makeBatch(t, l.NextOffset(), 1, 100)}); !errors.Is(err, ErrResources) {
				t.Fatalf("Append that rolls with open failing: %v, want ErrResources", err)
			}
			if err := c.Recheck(fsys, dir); !errors.Is(err, errno) {
				t.Fatalf("Recheck while opens fail: %v, want %v", err, errno)
			}
			fsys.err.Store(nil)
			if err := c.Recheck(fsys, dir); err != nil || c.Err() != nil {
				t.Fatalf("Recheck once opens work: %v (Err %v), want nil", err, c.Err())
			}
			fsys.err.Store(&errno)
			if _, err := l.Read(0, 1, l.NextOffset()); !errors.Is(err, errno) {
				t.Fatalf("Read with open failing again: %v", err)
			}
			fsys.err.Store(nil)
			v, err := l.Read(0, 1, l.NextOffset())
			if err != nil {
				t.Fatal(err)
			}
			v.Release()
			if st := c.Stats(); st.Err != nil {
				t.Fatalf("FileCache error %v after a successful read", st.Err)
			}
			readable(t, l)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			fsys.err.Store(&errno)
			if _, err := Open(dir, fsys, ring.NewPortable(), tinyOptions(c)); !errors.Is(err, ErrResources) || !errors.Is(err, errno) {
				t.Fatalf("Open with open failing with %v: %v, want ErrResources and the errno", errno, err)
			}
			if st := c.Stats(); !errors.Is(st.Err, errno) || st.Files != 0 || st.Mappings != 0 {
				t.Fatalf("after the failed Open: %+v, want the error and nothing held", st)
			}
		})
	}
}

// failOpenFS fails every open and create with err while it is set.
type failOpenFS struct {
	ring.FS
	err atomic.Pointer[syscall.Errno]
}

func (f *failOpenFS) fail(name string) error {
	if e := f.err.Load(); e != nil {
		return &os.PathError{Op: "open", Path: name, Err: *e}
	}
	return nil
}

func (f *failOpenFS) Create(name string) (ring.File, error) {
	if err := f.fail(name); err != nil {
		return nil, err
	}
	return f.FS.Create(name)
}

func (f *failOpenFS) Open(name string) (ring.File, error) {
	if err := f.fail(name); err != nil {
		return nil, err
	}
	return f.FS.Open(name)
}

func (f *failOpenFS) OpenReadWrite(name string) (ring.File, error) {
	if err := f.fail(name); err != nil {
		return nil, err
	}
	return f.FS.OpenReadWrite(name)
}
