package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/ring"
)

func TestAutoMinFreeBytes(t *testing.T) {
	for _, tc := range []struct{ total, want int64 }{
		{0, 0},
		{-1, 0},
		{64 << 20, 3355443}, // 5% of 64 MiB
		{1 << 30, 53687091},
		{5 << 30, 256 << 20},
		{5<<30 + 1, 256 << 20},
		{1 << 40, 256 << 20},
	} {
		if got := AutoMinFreeBytes(tc.total); got != tc.want {
			t.Errorf("AutoMinFreeBytes(%d) = %d, want %d", tc.total, got, tc.want)
		}
	}
}

// smallDisk is a file system of capacity bytes in front of the real one:
// Statfs reports its size and what is left, and the backend charges every
// byte a file extends to (fallocate, a write past the allocated end) and
// credits what a truncation gives back, failing with ENOSPC past the
// capacity as ext4 does.
type smallDisk struct {
	ring.FS
	ring.Backend
	mu       sync.Mutex
	capacity int64
	used     int64
	files    map[string]int64 // bytes charged per file
	statErr  error
}

func newSmallDisk(capacity int64) *smallDisk {
	return &smallDisk{FS: ring.OS, Backend: ring.NewPortable(), capacity: capacity, files: map[string]int64{}}
}

func (d *smallDisk) Name() string { return "smalldisk" }

func (d *smallDisk) free() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.capacity - d.used
}

func (d *smallDisk) Statfs(string) (ring.DiskSpace, error) {
	if d.statErr != nil {
		return ring.DiskSpace{}, d.statErr
	}
	return ring.DiskSpace{Total: d.capacity, Avail: d.free()}, nil
}

// extend charges f for growing to end bytes.
func (d *smallDisk) extend(f ring.File, end int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	have := d.files[f.Name()]
	if end <= have {
		return nil
	}
	if d.used+end-have > d.capacity {
		return syscall.ENOSPC
	}
	d.used += end - have
	d.files[f.Name()] = end
	return nil
}

func (d *smallDisk) Allocate(f ring.File, off, n int64) error {
	if err := d.extend(f, off+n); err != nil {
		return err
	}
	return d.Backend.Allocate(f, off, n)
}

func (d *smallDisk) WriteAt(f ring.File, bufs [][]byte, off int64) (int64, error) {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	if err := d.extend(f, off+n); err != nil {
		return 0, err
	}
	return d.Backend.WriteAt(f, bufs, off)
}

func (d *smallDisk) Truncate(f ring.File, size int64) error {
	d.mu.Lock()
	if have := d.files[f.Name()]; size < have {
		d.used -= have - size
		d.files[f.Name()] = size
	}
	d.mu.Unlock()
	return d.Backend.Truncate(f, size)
}

// TestMinFreeAuto: MinFreeAuto is 5% of the data directory's file system
// (at most 256 MiB), read at Open through the FS seam; the largest
// automatic floor when the size cannot be read; an explicit floor stays
// absolute whatever the size; 0 disables it.
func TestMinFreeAuto(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int64
		statErr  error
		min      int64
		want     int64
	}{
		{"auto 64 MiB", 64 << 20, nil, MinFreeAuto, 3355443},
		{"auto 1 TiB", 1 << 40, nil, MinFreeAuto, 256 << 20},
		{"auto, statfs fails", 64 << 20, syscall.EIO, MinFreeAuto, 256 << 20},
		{"explicit on a small disk", 64 << 20, nil, 10 << 20, 10 << 20},
		{"explicit on a large disk", 1 << 40, nil, 1000, 1000},
		{"disabled", 64 << 20, nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newSmallDisk(tc.capacity)
			opts := testOptions(t.TempDir())
			opts.FS, opts.MinFreeBytes = d, tc.min
			d.statErr = tc.statErr
			e := openTest(t, opts)
			if got := e.MinFreeBytes(); got != tc.want {
				t.Fatalf("MinFreeBytes() = %d, want %d", got, tc.want)
			}
		})
	}
	opts := testOptions(t.TempDir())
	opts.MinFreeBytes = -2
	if _, err := Open(opts); err == nil || !strings.Contains(err.Error(), "must not be negative") {
		t.Fatalf("Open with MinFreeBytes -2: %v", err)
	}
}

// TestSmallDiskFillsToTheFloor: on a 64 MiB disk with the automatic floor
// (3.2 MiB) and the default 16 MiB preallocation steps, publishes to four
// partitions are accepted until the free space is within one batch of
// the floor: preallocation steps shrink to the room above the floor
// instead of failing or eating it, DISK_FULL is the only error and comes
// only near the floor (slack), and every acknowledged record reads back
// after a restart. For several batch sizes.
func TestSmallDiskFillsToTheFloor(t *testing.T) {
	for _, tc := range []struct{ records, value int }{{64, 1000}, {1, 10 << 10}, {1, 200 << 10}} {
		t.Run(fmt.Sprintf("%d records of %d bytes", tc.records, tc.value), func(t *testing.T) {
			const capacity = 64 << 20
			d := newSmallDisk(capacity)
			dir := t.TempDir()
			opts := Options{DataDir: dir, FS: d, Backend: d, MinFreeBytes: MinFreeAuto, SyncPolicy: "none", SegmentBytes: 8 << 20, MaxBatchBytes: 1 << 20, MaxRecordBytes: 512 << 10,
				DiskFree: func(string) (int64, error) { return d.free(), nil }, Logger: slog.New(slog.DiscardHandler)}
			e := openTest(t, opts)
			floor := e.MinFreeBytes()
			if floor != capacity/20 {
				t.Fatalf("floor %d, want %d", floor, capacity/20)
			}
			const parts = 4
			if _, err := e.CreateTopic("t", parts, TopicConfig{}); err != nil {
				t.Fatal(err)
			}
			values := make([]string, tc.records)
			for i := range values {
				values[i] = strings.Repeat("v", tc.value)
			}
			acked := make([]int, parts)
			full := make([]bool, parts)
			var batchBytes int64
			for i := 0; ; i++ {
				p := i % parts
				if full[p] {
					if !slicesAll(full) {
						continue
					}
					break
				}
				b := mkBatch(t, values...)
				batchBytes = int64(len(b))
				_, err := e.Append(context.Background(), "t", p, b)
				if err == nil {
					acked[p] += tc.records
					continue
				}
				if codeOf(err) != api.CodeDiskFull {
					t.Fatalf("append %d to partition %d with %d bytes free (floor %d): %v, want success or DISK_FULL", i, p, d.free(), floor, err)
				}
				// Refused only once the batch no longer fits above the floor.
				if free := d.free(); free-batchBytes >= floor+slack(parts, batchBytes) {
					t.Fatalf("DISK_FULL on partition %d with %d bytes free, floor %d, batch %d", p, free, floor, batchBytes)
				}
				full[p] = true
			}
			free := d.free()
			t.Logf("all %d partitions full with %d bytes free (floor %d, batch %d)", parts, free, floor, batchBytes)
			if free < floor-parts*batchBytes || free > floor+batchBytes+slack(parts, batchBytes) {
				t.Errorf("every partition full with %d bytes free; want about the floor %d (batch %d)", free, floor, batchBytes)
			}
			total := 0
			for _, n := range acked {
				total += n
			}
			if stored := int64(total/tc.records) * batchBytes; stored < capacity-floor-(parts+1)*(16<<20)/4 {
				t.Errorf("only %d bytes of batches stored on a %d-byte disk with a %d-byte floor", stored, capacity, floor)
			}
			e.Close()
			e = openTest(t, opts)
			for p := range parts {
				if got := len(readAll(t, e, "t", p)); got != acked[p] {
					t.Errorf("partition %d: %d records after restart, %d acknowledged", p, got, acked[p])
				}
			}
		})
	}
}

// slack is how far above the floor the free space may be when a batch is
// refused: a batch per partition admitted but not yet written, and 1 MiB
// for index files, which grow without preallocation and are seen at the
// next statfs.
func slack(parts int, batchBytes int64) int64 { return int64(parts)*batchBytes + 1<<20 }

func slicesAll(b []bool) bool {
	for _, x := range b {
		if !x {
			return false
		}
	}
	return true
}

// TestDiskFullMessages: a refused batch's DISK_FULL says what did not fit:
// the batch, when the free space is above the floor by less than it; the
// floor, when the free space is below it already. The WARN line carries
// the batch size too.
func TestDiskFullMessages(t *testing.T) {
	for _, tc := range []struct {
		free, batch int64
		want        []string
	}{
		{1500, 600, []string{"a batch of 600 bytes does not fit: 1500 bytes free on the file system of /d", "floor is 1000 bytes", "smaller batches may still be accepted"}},
		{1000, 1, []string{"a batch of 1 bytes does not fit: 1000 bytes free"}},
		{999, 1, []string{"999 bytes free on the file system of /d, below the free-space floor of 1000 bytes (--min-free-bytes)"}},
		{0, 1 << 20, []string{"0 bytes free on the file system of /d, below the free-space floor of 1000 bytes"}},
	} {
		var logs syncBuffer
		d := &diskFloor{min: 1000, dir: "/d", free: func(string) (int64, error) { return tc.free, nil },
			now: func() time.Time { return time.Unix(1, 0) }, log: slog.New(slog.NewTextHandler(&logs, nil))}
		d.refresh(d.now())
		err := d.admit(int(tc.batch), nil)
		if codeOf(err) != api.CodeDiskFull {
			t.Fatalf("free %d, batch %d: admit = %v, want DISK_FULL", tc.free, tc.batch, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("free %d, batch %d: %q lacks %q", tc.free, tc.batch, err, w)
			}
		}
		if w := fmt.Sprintf("batch_bytes=%d min_free_bytes=1000", tc.batch); !strings.Contains(logs.String(), w) {
			t.Errorf("free %d, batch %d: log %q lacks %q", tc.free, tc.batch, logs.String(), w)
		}
	}
}

// TestDiskFloorLogsEpisodes: the WARN at the first refusal and the INFO
// "publishes accepted" come once per episode. Small batches that squeeze
// in above the floor while larger ones are refused do not end it (they
// would log the pair at every alternation); a batch admitted when one as
// large as the last refused fits again does. For several sizes.
func TestDiskFloorLogsEpisodes(t *testing.T) {
	for _, small := range []int{1, 100, 499} {
		var logs syncBuffer
		var free atomic.Int64
		free.Store(1500)
		var clock atomic.Int64
		d := &diskFloor{min: 1000, dir: "/d", free: func(string) (int64, error) { return free.Load(), nil },
			now: func() time.Time { return time.Unix(0, clock.Load()) }, log: slog.New(slog.NewTextHandler(&logs, nil))}
		d.refresh(d.now())
		for range 50 {
			clock.Add(int64(diskFreeRefresh)) // a fresh statfs each time: 1500 free
			if err := d.admit(600, nil); codeOf(err) != api.CodeDiskFull {
				t.Fatalf("admit(600) with 1500 free = %v, want DISK_FULL", err)
			}
			clock.Add(int64(diskFreeRefresh))
			if err := d.admit(small, nil); err != nil {
				t.Fatalf("admit(%d) with 1500 free: %v", small, err)
			}
		}
		out := logs.String()
		if w, i := strings.Count(out, "publishes refused"), strings.Count(out, "publishes accepted"); w != 1 || i != 0 {
			t.Fatalf("small %d: %d WARN and %d INFO lines, want 1 and 0:\n%s", small, w, i, out)
		}
		free.Store(1600) // a 600-byte batch fits again
		for range 3 {
			clock.Add(int64(diskFreeRefresh))
			if err := d.admit(small, nil); err != nil {
				t.Fatal(err)
			}
		}
		if i := strings.Count(logs.String(), "publishes accepted"); i != 1 {
			t.Fatalf("small %d: %d INFO lines once 600 bytes fit again, want 1:\n%s", small, i, logs.String())
		}
	}
}

// TestFloorAboveSizeWarns: an explicit floor at or above the size of the
// file system is logged at Open (no publish could ever be accepted); a
// floor below it, auto and 0 are not.
func TestFloorAboveSizeWarns(t *testing.T) {
	for _, tc := range []struct {
		min  int64
		warn bool
	}{{64 << 20, true}, {1 << 40, true}, {64<<20 - 1, false}, {MinFreeAuto, false}, {0, false}} {
		var logs syncBuffer
		opts := testOptions(t.TempDir())
		opts.FS, opts.MinFreeBytes = newSmallDisk(64<<20), tc.min
		opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		e := openTest(t, opts)
		e.Close()
		if got := strings.Contains(logs.String(), "every publish will get DISK_FULL"); got != tc.warn {
			t.Errorf("floor %d on 64 MiB: warned %v, want %v:\n%s", tc.min, got, tc.warn, logs.String())
		}
	}
}

// TestManyPartitionsOnASmallDisk: on a 16 MiB disk with the automatic
// floor, the first record of each of 50 partitions of a fresh topic is
// accepted, and a second round as well: the partitions' first
// preallocation steps (1 MiB asked) take a share of the room above the
// floor each instead of the first dozen taking all of it. For several
// disk sizes and partition counts; with 200 partitions on 16 MiB the steps
// of the first partitions hold most of the room after the first round,
// and the later rounds are accepted because a refused batch makes the
// other partitions give their unused preallocated space back (reclaim.go).
func TestManyPartitionsOnASmallDisk(t *testing.T) {
	for _, tc := range []struct {
		capacity      int64
		parts, rounds int
	}{{16 << 20, 50, 2}, {16 << 20, 200, 3}, {32 << 20, 100, 2}, {64 << 20, 50, 2}} {
		t.Run(fmt.Sprintf("%d MiB, %d partitions", tc.capacity>>20, tc.parts), func(t *testing.T) {
			d := newSmallDisk(tc.capacity)
			opts := Options{DataDir: t.TempDir(), FS: d, Backend: d, MinFreeBytes: MinFreeAuto, SyncPolicy: "none",
				DiskFree: func(string) (int64, error) { return d.free(), nil }, Logger: slog.New(slog.DiscardHandler)}
			e := openTest(t, opts)
			if _, err := e.CreateTopic("t", tc.parts, TopicConfig{}); err != nil {
				t.Fatal(err)
			}
			for round := range tc.rounds {
				for p := range tc.parts {
					if _, err := e.Append(context.Background(), "t", p, mkBatch(t, fmt.Sprintf("record %d of %d", round, p))); err != nil {
						t.Fatalf("round %d, partition %d, %d bytes free (floor %d): %v", round, p, d.free(), e.MinFreeBytes(), err)
					}
				}
			}
			if free := d.free(); free < e.MinFreeBytes() {
				t.Errorf("%d bytes free, below the floor %d", free, e.MinFreeBytes())
			}
		})
	}
}
