package segment

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/ring"
)

// faultyBackend fails chosen calls of the portable backend.
type faultyBackend struct {
	ring.Backend
	writeErr    error // WriteAt writes everything, then returns this
	indexErr    error // WriteAt to .index files fails with this, writing nothing
	syncErr     error
	allocateErr error
}

func (b *faultyBackend) WriteAt(f ring.File, bufs [][]byte, off int64) (int64, error) {
	if b.indexErr != nil && strings.HasSuffix(f.Name(), indexSuffix) {
		return 0, b.indexErr
	}
	n, err := b.Backend.WriteAt(f, bufs, off)
	if err == nil && b.writeErr != nil {
		return n, b.writeErr
	}
	return n, err
}

func (b *faultyBackend) Sync(files ...ring.File) error {
	if b.syncErr != nil {
		return b.syncErr
	}
	return b.Backend.Sync(files...)
}

func (b *faultyBackend) Allocate(f ring.File, off, n int64) error {
	if b.allocateErr != nil {
		return b.allocateErr
	}
	return b.Backend.Allocate(f, off, n)
}

// TestFailedWrite: a failed write publishes nothing, the next append
// overwrites it, and bytes the failed write left past the new end do not
// come back as batches after a crash.
func TestFailedWrite(t *testing.T) {
	for _, c := range []struct {
		fail   string
		direct bool
	}{{"write", false}, {"allocate", false}, {"write", true}, {"allocate", true}} {
		fail := c.fail
		t.Run(fmt.Sprintf("%s/direct=%v", fail, c.direct), func(t *testing.T) {
			dir := t.TempDir()
			be := &faultyBackend{Backend: ring.NewPortable()}
			opts := smallOptions()
			opts.SegmentBytes = 1 << 20
			opts.DirectWrites = c.direct
			l, err := Open(dir, ring.OS, be, opts)
			if err != nil {
				t.Fatal(err)
			}
			appendBatches(t, l, 3, 1, 2, 50)
			size := l.SizeBytes()
			if fail == "write" {
				be.writeErr = syscall.EIO
			} else {
				// Beyond the preallocated space, so Append must allocate.
				be.allocateErr = syscall.ENOSPC
				for l.active().alloc >= l.active().end+int64(3*len(makeBatch(t, 0, 2, 50))) {
					appendBatches(t, l, 1, 1, 2, 50)
				}
				size = l.SizeBytes()
			}
			next := l.NextOffset()
			failed := [][]byte{makeBatch(t, next, 2, 50), makeBatch(t, next+2, 2, 50), makeBatch(t, next+4, 2, 50)}
			if _, err := l.Append(failed); err == nil {
				t.Fatal("Append succeeded")
			}
			if l.NextOffset() != next || l.SizeBytes() != size {
				t.Fatalf("after a failed append: NextOffset %d SizeBytes %d, want %d %d", l.NextOffset(), l.SizeBytes(), next, size)
			}
			be.writeErr, be.allocateErr = nil, nil
			info, err := l.Append([][]byte{makeBatch(t, next, 2, 50)})
			if err != nil || info.BaseOffset != next {
				t.Fatalf("Append after failure = %+v, %v", info, err)
			}
			if _, end := readable(t, l); end != next+2 {
				t.Fatalf("readable to %d, want %d", end, next+2)
			}
			abandon(t, l)
			l = openLog(t, dir, opts)
			defer l.Close()
			if _, end := readable(t, l); end != next+2 {
				t.Fatalf("after a crash: readable to %d, want %d (bytes of the failed write came back)", end, next+2)
			}
		})
	}
}

// TestFailedSync: a failed sync fails the Log until it is reopened.
func TestFailedSync(t *testing.T) {
	dir := t.TempDir()
	be := &faultyBackend{Backend: ring.NewPortable()}
	l, err := Open(dir, ring.OS, be, smallOptions())
	if err != nil {
		t.Fatal(err)
	}
	appendBatches(t, l, 3, 1, 2, 50)
	be.syncErr = syscall.EIO
	if err := l.Sync(); !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync = %v, want ErrFailed and EIO", err)
	}
	be.syncErr = nil
	if err := l.Sync(); !errors.Is(err, ErrFailed) {
		t.Fatalf("second Sync = %v, want ErrFailed", err)
	}
	if _, err := l.Append([][]byte{makeBatch(t, 6, 1, 10)}); !errors.Is(err, ErrFailed) {
		t.Fatalf("Append = %v, want ErrFailed", err)
	}
	readable(t, l) // reads keep working
	if err := l.Close(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Close = %v, want ErrFailed", err)
	}
	l = openLog(t, dir, smallOptions())
	defer l.Close()
	if _, end := readable(t, l); end != 6 {
		t.Fatalf("after reopen: readable to %d, want 6", end)
	}
}

func TestClosed(t *testing.T) {
	l := openLog(t, t.TempDir(), smallOptions())
	appendBatches(t, l, 2, 1, 1, 10)
	v, err := l.Read(0, 1<<20, l.NextOffset())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A View taken before Close stays readable until released.
	if hs := checkBufs(t, v.Bufs); len(hs) != 2 {
		t.Fatalf("view after Close has %d batches", len(hs))
	}
	v.Release()
	for name, err := range map[string]error{
		"Close":      l.Close(),
		"Sync":       l.Sync(),
		"Checkpoint": l.Checkpoint(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if _, err := l.Append([][]byte{makeBatch(t, 2, 1, 10)}); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v", err)
	}
	if _, err := l.Read(0, 1, 2); !errors.Is(err, ErrClosed) {
		t.Errorf("Read after Close = %v", err)
	}
}

// TestFailedWriteThenRoll: bytes a failed write left past the end of a
// segment that then rolled must not make recovery drop the next segment.
func TestFailedWriteThenRoll(t *testing.T) {
	dir := t.TempDir()
	be := &faultyBackend{Backend: ring.NewPortable()}
	l, err := Open(dir, ring.OS, be, smallOptions())
	if err != nil {
		t.Fatal(err)
	}
	appendBatches(t, l, 2, 1, 2, 50)
	next := l.NextOffset()
	be.writeErr = syscall.EIO
	if _, err := l.Append([][]byte{makeBatch(t, next, 2, 50), makeBatch(t, next+2, 2, 50)}); err == nil {
		t.Fatal("Append succeeded")
	}
	be.writeErr = nil
	// A reader keeps the old segment mapped, so the roll cannot trim it.
	v, err := l.Read(0, 1, next)
	if err != nil {
		t.Fatal(err)
	}
	// Big enough to roll: the failed batches stay behind in the old segment.
	info, err := l.Append([][]byte{makeBatch(t, next, 2, 1500)})
	if err != nil || !info.Rolled {
		t.Fatalf("Append = %+v, %v; want a roll", info, err)
	}
	v.Release()
	appendBatches(t, l, 3, 1, 2, 50)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	want := l.NextOffset()
	abandon(t, l)
	l = openLog(t, dir, smallOptions())
	defer l.Close()
	if _, end := readable(t, l); end != want {
		t.Fatalf("after a crash: readable to %d, want %d", end, want)
	}
}

// TestFailedIndexWrite: index writes that fail leave the data readable; the
// roll rewrites the sealed segment's index from memory.
func TestFailedIndexWrite(t *testing.T) {
	want := build(t, 30, 0, true) // the same appends with a healthy backend
	dir := t.TempDir()
	be := &faultyBackend{Backend: ring.NewPortable()}
	l, err := Open(dir, ring.OS, be, smallOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	appendBatches(t, l, 2, 1, 2, 50)
	be.indexErr = syscall.EIO
	appendBatches(t, l, 3, 1, 2, 50)
	be.indexErr = nil
	appendBatches(t, l, 25, 1, 2, 50)
	readable(t, l)
	for off := uint64(0); off < l.NextOffset(); off++ {
		v, err := l.Read(off, 1, l.NextOffset())
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		v.Release()
	}
	first := want.infos[0].Segment
	got, _ := os.ReadFile(indexPath(dir, first))
	wantIdx, _ := os.ReadFile(indexPath(want.dir, first))
	if !bytes.Equal(got, wantIdx) {
		t.Fatalf("sealed index after failed writes:\n got %x\nwant %x", got, wantIdx)
	}
}
