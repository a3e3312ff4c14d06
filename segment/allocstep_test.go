package segment

import (
	"errors"
	"sync"
	"syscall"
	"testing"

	"github.com/seedqueue/sq/ring"
)

// quotaBackend is the portable backend on a disk that has free bytes left:
// an Allocate of more fails with ENOSPC and allocates nothing, as
// fallocate(2) does on ext4, xfs and tmpfs.
type quotaBackend struct {
	ring.Backend
	mu   sync.Mutex
	free int64
}

func (b *quotaBackend) Allocate(f ring.File, off, n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.free {
		return syscall.ENOSPC
	}
	if err := b.Backend.Allocate(f, off, n); err != nil {
		return err
	}
	b.free -= n
	return nil
}

// TestPreallocationStepLargerThanFreeSpace: when the next preallocation
// step does not fit in the free space but the write does, the write is
// accepted (the segment grows by what it needs), and DISK_FULL (ENOSPC)
// comes only when the batches themselves do not fit. For each free space
// left after the first step, whatever the step size.
func TestPreallocationStepLargerThanFreeSpace(t *testing.T) {
	const value = 200
	batchBytes := int64(len(makeBatch(t, 0, 1, value)))
	for _, prealloc := range []int64{4 << 10, 64 << 10, 1 << 20} {
		for _, extra := range []int64{0, batchBytes - 1, batchBytes, 3*batchBytes + 7, prealloc - 1} {
			dir := t.TempDir()
			first := min(prealloc, minGrowBytes)
			be := &quotaBackend{Backend: ring.NewPortable(), free: first + extra}
			opts := Options{SegmentBytes: 16 << 20, IndexIntervalBytes: 4096, PreallocBytes: prealloc, MaxBatchBytes: 1 << 16}
			l, err := Open(dir, ring.OS, be, opts)
			if err != nil {
				t.Fatal(err)
			}
			fits := (first + extra) / batchBytes // batches the disk can hold
			var n int64
			for ; n < fits; n++ {
				if _, err := l.Append([][]byte{makeBatch(t, uint64(n), 1, value)}); err != nil {
					t.Fatalf("prealloc %d, %d bytes free after the first step: append %d of %d that fit: %v", prealloc, extra, n, fits, err)
				}
			}
			if _, err := l.Append([][]byte{makeBatch(t, uint64(n), 1, value)}); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("prealloc %d, %d bytes free after the first step: append past the free space: %v, want ENOSPC", prealloc, extra, err)
			}
			if _, end := readable(t, l); end != uint64(fits) {
				t.Fatalf("readable to %d, want %d", end, fits)
			}
			l.Close()
		}
	}
}
