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

func TestFitStep(t *testing.T) {
	const K = 1 << 10
	for _, tc := range []struct{ alloc, need, size, room, want int64 }{
		{0, 100, 1 << 20, 1 << 30, 1 << 20},     // room enough: the step as asked
		{0, 100, 1 << 20, 8 << 20, 1 << 20},     // exactly an eighth of the room
		{0, 100, 1 << 20, 1 << 20, 128 * K},     // shrunk to an eighth of the room
		{0, 100, 1 << 20, 320 * K, 40 * K},      // an eighth of 320 KiB
		{0, 100, 1 << 20, 320*K + 5, 40 * K},    // in whole 4 KiB blocks
		{0, 100, 1 << 20, 300 * K, 36 * K},      // 37.5 KiB, down to whole blocks
		{0, 100, 1 << 20, 30000, 100},           // an eighth is less than a block: what the append needs
		{0, 100, 1 << 20, 0, 100},               // no room: what the append needs
		{0, 100, 1 << 20, -5 << 20, 100},        // below the floor already
		{0, 200 * K, 1 << 20, 800 * K, 200 * K}, // never below what the append needs
		{8 << 20, 8<<20 + 10, 16 << 20, 512 * K, 8<<20 + 64*K},
	} {
		if got := fitStep(tc.alloc, tc.need, tc.size, tc.room); got != tc.want {
			t.Errorf("fitStep(alloc %d, need %d, size %d, room %d) = %d, want %d", tc.alloc, tc.need, tc.size, tc.room, got, tc.want)
		}
	}
}

// TestPreallocationShrinksToRoom: with Options.AllocRoom, no
// preallocation step takes more than the room above the floor, except
// what the append needs; with room to spare the steps are the usual ones;
// Allocated hears of every step; the data reads back.
func TestPreallocationShrinksToRoom(t *testing.T) {
	for _, room := range []int64{1 << 30, 3 << 20, 200 << 10, 5000, 0, -1 << 20} {
		dir := t.TempDir()
		var steps, needed []int64
		opts := Options{SegmentBytes: 16 << 20, IndexIntervalBytes: 4096, PreallocBytes: 4 << 20, MaxBatchBytes: 1 << 20,
			AllocRoom: func() int64 { return room },
			Allocated: func(step, need int64) { steps, needed = append(steps, step), append(needed, need) }}
		l, err := Open(dir, ring.OS, ring.NewPortable(), opts)
		if err != nil {
			t.Fatal(err)
		}
		const n = 200
		for i := range n {
			if _, err := l.Append([][]byte{makeBatch(t, uint64(i), 1, 20<<10)}); err != nil {
				t.Fatalf("room %d: append %d: %v", room, i, err)
			}
		}
		var total int64
		for i, s := range steps {
			total += s
			if s > max(needed[i], room) {
				t.Errorf("room %d: step %d of %d bytes (the append needed %d)", room, i, s, needed[i])
			}
			if room >= 1<<30 && i == 0 && s != 1<<20 {
				t.Errorf("room %d: first step %d, want 1 MiB", room, s)
			}
		}
		if act := l.active(); total != act.alloc || act.alloc < act.end {
			t.Errorf("room %d: steps add to %d, segment allocated %d, end %d", room, total, act.alloc, act.end)
		}
		if _, end := readable(t, l); end != n {
			t.Errorf("room %d: readable to %d, want %d", room, end, n)
		}
		l.Close()
	}
}
