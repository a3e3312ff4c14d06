package segment

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/internal/faultfs"
	"github.com/seedqueue/sq/ring"
)

// TestTruncateTo cuts a multi-segment log at each kind of point, with and
// without a View held over the cut bytes, and checks the log, its files,
// appends after the cut, and what Open recovers after a clean stop and
// after a crash.
func TestTruncateTo(t *testing.T) {
	type point struct {
		name string
		at   func(segs []SegmentInfo, next uint64) uint64
	}
	points := []point{
		{"inside a sealed segment", func(segs []SegmentInfo, _ uint64) uint64 { return segs[1].BaseOffset + 4 }},
		{"at a sealed segment's base", func(segs []SegmentInfo, _ uint64) uint64 { return segs[2].BaseOffset }},
		{"inside the active segment", func(segs []SegmentInfo, _ uint64) uint64 { return segs[len(segs)-1].BaseOffset + 2 }},
		{"at the active segment's base", func(segs []SegmentInfo, _ uint64) uint64 { return segs[len(segs)-1].BaseOffset }},
		{"at the log end (no-op)", func(_ []SegmentInfo, next uint64) uint64 { return next }},
		{"at the log start", func(segs []SegmentInfo, _ uint64) uint64 { return segs[0].BaseOffset }},
	}
	for _, pt := range points {
		for _, held := range []bool{false, true} {
			for _, clean := range []bool{true, false} {
				name := pt.name + map[bool]string{true: "/view held", false: ""}[held] + map[bool]string{true: "/then Close", false: "/then crash"}[clean]
				t.Run(name, func(t *testing.T) {
					dir := t.TempDir()
					l := openLog(t, dir, smallOptions())
					appendBatches(t, l, 40, 1, 2, 50)
					segs := l.Segments()
					if len(segs) < 4 || segs[len(segs)-1].NextOffset-segs[len(segs)-1].BaseOffset < 4 {
						t.Fatalf("setup: want 4+ segments and 2+ batches in the active one, got %+v", segs)
					}
					next := l.NextOffset()
					off := pt.at(segs, next)
					var view *View
					if held {
						v, err := l.Read(segs[0].BaseOffset, 1<<30, next)
						if err != nil {
							t.Fatal(err)
						}
						view = v
					}
					cutPath := logPath(dir, segs[l.find(min(off, next))].BaseOffset)
					before, err := os.Stat(cutPath)
					if err != nil {
						t.Fatal(err)
					}
					if err := l.TruncateTo(off); err != nil {
						t.Fatalf("TruncateTo(%d): %v", off, err)
					}
					after, err := os.Stat(cutPath)
					if err != nil {
						t.Fatal(err)
					}
					// Cut in place unless a View maps the cut bytes: then
					// the kept prefix is a new file.
					if copied := !os.SameFile(before, after); copied != (held && off != next) {
						t.Fatalf("cut segment's .log replaced: %v, want %v", copied, held && off != next)
					}
					if view != nil {
						// The View still reads every batch it was given.
						if hs := checkBufs(t, view.Bufs); hs[len(hs)-1].NextOffset() != next {
							t.Fatalf("held View ends at %d, want %d", hs[len(hs)-1].NextOffset(), next)
						}
						view.Release()
					}
					checkTruncated(t, l, dir, segs, off)
					// The recovery point never names a cut byte.
					if rp, found, err := readRecoveryPoint(osFS(), dir, l.opts.Logger); err != nil || (found && rp.next > off) {
						t.Fatalf("recovery point %+v (found %v, %v) after truncating to %d", rp, found, err, off)
					}
					if off != next {
						// What was cut reads as out of the log.
						if v, err := l.Read(off, 1<<20, next); err != nil || len(v.Bufs) != 0 {
							t.Fatalf("Read(%d) after truncate = %d bufs, %v", off, len(v.Bufs), err)
						}
					}
					// A crash right after the truncation recovers the same log.
					abandon(t, l)
					l = openLog(t, dir, smallOptions())
					checkTruncated(t, l, dir, segs, off)
					// Appends continue at off, across rolls.
					appendBatches(t, l, 12, 1, 2, 50)
					want := off + 24
					if _, end := readable(t, l); end != want {
						t.Fatalf("log ends at %d after appends, want %d", end, want)
					}
					if clean {
						if err := l.Close(); err != nil {
							t.Fatal(err)
						}
					} else {
						abandon(t, l)
					}
					l = openLog(t, dir, smallOptions())
					defer l.Close()
					if start, end := readable(t, l); start != segs[0].BaseOffset || end != want {
						t.Fatalf("reopened log holds [%d, %d), want [%d, %d)", start, end, segs[0].BaseOffset, want)
					}
				})
			}
		}
	}
}

// checkTruncated checks l (truncated to off from a log of segments segs)
// and the files in dir.
func checkTruncated(t *testing.T, l *Log, dir string, segs []SegmentInfo, off uint64) {
	t.Helper()
	if l.NextOffset() != off {
		t.Fatalf("NextOffset %d, want %d", l.NextOffset(), off)
	}
	if start, end := readable(t, l); start != segs[0].BaseOffset || end != off {
		t.Fatalf("log holds [%d, %d), want [%d, %d)", start, end, segs[0].BaseOffset, off)
	}
	now := l.Segments()
	var size int64
	for _, s := range now {
		size += s.Bytes
	}
	if size != l.SizeBytes() {
		t.Fatalf("SizeBytes %d, segments hold %d", l.SizeBytes(), size)
	}
	last := now[len(now)-1]
	if !last.Active || last.BaseOffset > off || last.NextOffset != off {
		t.Fatalf("last segment %+v after truncating to %d", last, off)
	}
	for _, s := range segs {
		gone := s.BaseOffset > last.BaseOffset
		if exists(logPath(dir, s.BaseOffset)) == gone || exists(indexPath(dir, s.BaseOffset)) == gone || exists(timeIndexPath(dir, s.BaseOffset)) == gone {
			t.Fatalf("segment %d: files exist %v, want %v", s.BaseOffset, !gone, !gone)
		}
	}
	if got := fileSize(t, logPath(dir, last.BaseOffset)); got < last.Bytes {
		t.Fatalf(".log of %d bytes holds %d bytes of batches", got, last.Bytes)
	}
}

// TestTruncateToRefuses checks that an offset inside a batch, below the
// log start or past the end changes nothing.
func TestTruncateToRefuses(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallOptions())
	defer l.Close()
	appendBatches(t, l, 40, 1, 2, 50)
	if _, err := l.DeleteSegmentsBefore(l.Segments()[1].BaseOffset); err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	next := l.NextOffset()
	for _, off := range []uint64{segs[1].BaseOffset + 1, segs[len(segs)-1].BaseOffset + 1, segs[0].BaseOffset - 1, next + 1} {
		if err := l.TruncateTo(off); !errors.Is(err, ErrNotBoundary) {
			t.Fatalf("TruncateTo(%d) = %v, want ErrNotBoundary", off, err)
		}
		if l.NextOffset() != next || !slices.Equal(l.Segments(), segs) {
			t.Fatalf("TruncateTo(%d) changed the log", off)
		}
	}
}

// TestAppendEpochAndReplica stamps leader epochs at append and copies the
// batches to another log with AppendReplica, which keeps offsets and
// epochs and refuses batches that do not continue its log.
func TestAppendEpochAndReplica(t *testing.T) {
	leader := openLog(t, t.TempDir(), smallOptions())
	defer leader.Close()
	for i := range 10 {
		epoch := uint32(3 + i/4)
		b := makeBatch(t, leader.NextOffset(), 2, 50)
		batch.SetLeaderEpoch(b, 99) // what a client sent is overwritten
		if _, err := leader.AppendEpoch([][]byte{b}, 1000, epoch); err != nil {
			t.Fatal(err)
		}
	}
	v, err := leader.Read(0, 1<<30, leader.NextOffset())
	if err != nil {
		t.Fatal(err)
	}
	var copies [][]byte
	for i, h := range checkBufs(t, v.Bufs) {
		if want := uint32(3 + i/4); h.LeaderEpoch != want {
			t.Fatalf("batch %d: leader epoch %d, want %d", i, h.LeaderEpoch, want)
		}
	}
	for _, buf := range v.Bufs {
		for len(buf) > 0 {
			b, rest, _, err := batch.Split(buf, 0)
			if err != nil {
				t.Fatal(err)
			}
			copies = append(copies, slices.Clone(b))
			buf = rest
		}
	}
	v.Release()

	dir := t.TempDir()
	f := openLog(t, dir, smallOptions())
	if _, err := f.AppendReplica(copies[1:3], 2000); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("AppendReplica starting at offset 2 of an empty log = %v, want ErrNotContiguous", err)
	}
	if _, err := f.AppendReplica([][]byte{copies[0], copies[2]}, 2000); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("AppendReplica with a gap = %v, want ErrNotContiguous", err)
	}
	if f.NextOffset() != 0 {
		t.Fatalf("refused appends moved the log end to %d", f.NextOffset())
	}
	for i := 0; i < len(copies); i += 3 {
		if _, err := f.AppendReplica(copies[i:min(i+3, len(copies))], 2000); err != nil {
			t.Fatalf("AppendReplica from batch %d: %v", i, err)
		}
	}
	abandon(t, f)
	f = openLog(t, dir, smallOptions())
	defer f.Close()
	fv, err := f.Read(0, 1<<30, f.NextOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer fv.Release()
	for i, h := range checkBufs(t, fv.Bufs) {
		if h.BaseOffset != uint64(2*i) || h.LeaderEpoch != uint32(3+i/4) {
			t.Fatalf("replica batch %d: offset %d epoch %d, want %d and %d", i, h.BaseOffset, h.LeaderEpoch, 2*i, 3+i/4)
		}
	}
	if f.NextOffset() != leader.NextOffset() {
		t.Fatalf("replica ends at %d, leader at %d", f.NextOffset(), leader.NextOffset())
	}
}

// TestTruncateWhileReading truncates and appends while readers read the
// whole log: every read sees intact, contiguous batches (run with -race).
func TestTruncateWhileReading(t *testing.T) {
	l := openLog(t, t.TempDir(), smallOptions())
	defer l.Close()
	appendBatches(t, l, 30, 1, 2, 50)
	stop := make(chan struct{})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				v, err := l.Read(l.LogStartOffset(), 1<<30, l.NextOffset())
				if err != nil {
					errs <- err
					return
				}
				_, err = walkBufs(v.Bufs)
				v.Release()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range 20 {
		segs := l.Segments()
		off := segs[len(segs)/2].BaseOffset + uint64(2*(i%3))
		if err := l.TruncateTo(min(off, l.NextOffset())); err != nil {
			t.Fatalf("round %d: TruncateTo(%d): %v", i, off, err)
		}
		appendBatches(t, l, 10, 1, 2, 50)
	}
	close(stop)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	readable(t, l)
}

// TestTruncateCrashAtEveryStep crashes at every counted disk call of a
// truncation inside a sealed segment (with and without a View held, so
// both the in-place cut and the copy), restores the synced state (and a
// torn one), and checks that the log reopens whole, holding what it held
// below the truncation point and ending at a batch boundary between it
// and the old end; a second truncation then completes.
func TestTruncateCrashAtEveryStep(t *testing.T) {
	for _, held := range []bool{false, true} {
		for n := int64(1); ; n++ {
			root := t.TempDir()
			dir := filepath.Join(root, "p")
			fs := faultfs.New(root, nil)
			l, err := Open(dir, fs, fs.Backend(), smallOptions())
			if err != nil {
				t.Fatal(err)
			}
			appendBatches(t, l, 40, 1, 2, 50)
			segs := l.Segments()
			next := l.NextOffset()
			off := segs[1].BaseOffset + 4
			var view *View
			if held {
				if view, err = l.Read(0, 1<<30, next); err != nil {
					t.Fatal(err)
				}
			}
			fs.CrashAfter(n)
			err = l.TruncateTo(off)
			crashed := fs.Crashed()
			fs.CrashAfter(0)
			if view != nil {
				checkBufs(t, view.Bufs)
				view.Release()
			}
			if !crashed {
				if err != nil {
					t.Fatalf("held %v: TruncateTo without a crash: %v", held, err)
				}
				if n < 10 {
					t.Fatalf("held %v: TruncateTo made only %d disk calls", held, n-1)
				}
				t.Logf("held %v: crashed at each of %d disk calls", held, n-1)
				l.Close()
				break
			}
			if err == nil {
				t.Fatalf("held %v, crash at call %d: TruncateTo returned no error", held, n)
			}
			abandon(t, l)
			var rng *rand.Rand
			if n%2 == 0 {
				rng = rand.New(rand.NewPCG(uint64(n), 7))
			}
			if err := fs.Restore(rng); err != nil {
				t.Fatal(err)
			}
			l, err = Open(dir, fs, fs.Backend(), smallOptions())
			if err != nil {
				t.Fatalf("held %v, crash at call %d: reopen: %v", held, n, err)
			}
			start, end := readable(t, l)
			if start != 0 || end < off || end > next || (end-off)%2 != 0 {
				t.Fatalf("held %v, crash at call %d: log holds [%d, %d), want [0, x) with %d <= x <= %d", held, n, start, end, off, next)
			}
			if err := l.TruncateTo(off); err != nil {
				t.Fatalf("held %v, crash at call %d: TruncateTo again: %v", held, n, err)
			}
			if _, end := readable(t, l); end != off {
				t.Fatalf("held %v, crash at call %d: second truncation ends at %d", held, n, end)
			}
			l.Close()
		}
	}
}

// TestTruncateOnEachBackend truncates inside a sealed segment and inside
// the active one on each I/O backend, appends, and reopens.
func TestTruncateOnEachBackend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be ring.Backend) {
		dir := t.TempDir()
		l := openLogOn(t, dir, be, smallOptions())
		appendBatches(t, l, 40, 1, 2, 50)
		segs := l.Segments()
		for _, off := range []uint64{segs[len(segs)-1].BaseOffset + 2, segs[1].BaseOffset + 2} {
			if err := l.TruncateTo(off); err != nil {
				t.Fatalf("TruncateTo(%d): %v", off, err)
			}
			if _, end := readable(t, l); end != off {
				t.Fatalf("log ends at %d after TruncateTo(%d)", end, off)
			}
		}
		appendBatches(t, l, 20, 1, 2, 50)
		want := segs[1].BaseOffset + 2 + 40
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l = openLogOn(t, dir, be, smallOptions())
		defer l.Close()
		if _, end := readable(t, l); end != want {
			t.Fatalf("reopened log ends at %d, want %d", end, want)
		}
	})
}

// TestTruncateFullyAndStartAt empties a multi-segment log (a View held
// over it stays readable) and starts it at a later offset; appends and
// reopening after a crash or a clean stop agree. A crash at every disk
// call of it leaves a log that Open recovers whole, and starting over
// again completes.
func TestTruncateFullyAndStartAt(t *testing.T) {
	for _, clean := range []bool{true, false} {
		dir := t.TempDir()
		l := openLog(t, dir, smallOptions())
		appendBatches(t, l, 40, 1, 2, 50)
		old := l.Segments()
		at := l.NextOffset() + 100
		v, err := l.Read(0, 1<<30, l.NextOffset())
		if err != nil {
			t.Fatal(err)
		}
		if err := l.TruncateFullyAndStartAt(at); err != nil {
			t.Fatal(err)
		}
		checkBufs(t, v.Bufs)
		v.Release()
		if l.LogStartOffset() != at || l.NextOffset() != at || l.SegmentCount() != 1 || l.SizeBytes() != 0 {
			t.Fatalf("after starting over at %d: start %d end %d segments %d size %d", at, l.LogStartOffset(), l.NextOffset(), l.SegmentCount(), l.SizeBytes())
		}
		for _, s := range old {
			if exists(logPath(dir, s.BaseOffset)) {
				t.Fatalf("segment %d still exists", s.BaseOffset)
			}
		}
		appendBatches(t, l, 10, 1, 2, 50)
		if clean {
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			abandon(t, l)
		}
		l = openLog(t, dir, smallOptions())
		if start, end := readable(t, l); start != at || end != at+20 {
			t.Fatalf("reopened log holds [%d, %d), want [%d, %d)", start, end, at, at+20)
		}
		l.Close()
	}
	for n := int64(1); ; n++ {
		root := t.TempDir()
		dir := filepath.Join(root, "p")
		fs := faultfs.New(root, nil)
		l, err := Open(dir, fs, fs.Backend(), smallOptions())
		if err != nil {
			t.Fatal(err)
		}
		appendBatches(t, l, 40, 1, 2, 50)
		next := l.NextOffset()
		at := next + 100
		fs.CrashAfter(n)
		err = l.TruncateFullyAndStartAt(at)
		crashed := fs.Crashed()
		fs.CrashAfter(0)
		if !crashed {
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
			t.Logf("crashed at each of %d disk calls", n-1)
			break
		}
		abandon(t, l)
		if err := fs.Restore(nil); err != nil {
			t.Fatal(err)
		}
		l, err = Open(dir, fs, fs.Backend(), smallOptions())
		if err != nil {
			t.Fatalf("crash at call %d: reopen: %v", n, err)
		}
		start, end := readable(t, l)
		if !(start == 0 && end <= next || start == at && end == at) {
			t.Fatalf("crash at call %d: log holds [%d, %d)", n, start, end)
		}
		if err := l.TruncateFullyAndStartAt(at); err != nil {
			t.Fatalf("crash at call %d: again: %v", n, err)
		}
		if start, end := readable(t, l); start != at || end != at {
			t.Fatalf("crash at call %d: after starting over again [%d, %d)", n, start, end)
		}
		l.Close()
	}
}
