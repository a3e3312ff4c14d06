package engine

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/ring"
)

// Refresh bounds of the free-space floor: the file system is asked again
// (statfs(2)) when this long has passed or this many bytes were admitted
// since the last answer, whichever comes first. In between, the bytes
// admitted are subtracted from the last answer, so the hot path costs a
// few atomic operations.
const (
	diskFreeRefresh      = 100 * time.Millisecond
	diskFreeRefreshBytes = 8 << 20
)

// statfsFree returns the function that gives the bytes available to
// unprivileged users on the file system holding a directory: f_bavail *
// f_bsize of statfs(2), through fs (ring.FS.Statfs).
func statfsFree(fs ring.FS) func(dir string) (int64, error) {
	return func(dir string) (int64, error) {
		st, err := fs.Statfs(dir)
		if err != nil {
			return 0, fmt.Errorf("engine: %w", err)
		}
		return st.Avail, nil
	}
}

// DiskSpace returns the space of the file system holding the data
// directory (statfs(2) through Options.FS), in bytes.
func (e *Engine) DiskSpace() (ring.DiskSpace, error) {
	st, err := e.opts.FS.Statfs(e.opts.DataDir)
	if err != nil {
		return st, fmt.Errorf("engine: %w", err)
	}
	return st, nil
}

// diskFloor rejects publishes with DISK_FULL while the free space of the
// data directory's file system is below Options.MinFreeBytes (docs/architecture.md
// §3.3). Fetches, commits and the control plane do not consult it. A nil
// *diskFloor admits everything.
type diskFloor struct {
	min  int64
	dir  string
	free func(string) (int64, error)
	now  func() time.Time
	log  *slog.Logger

	last       atomic.Int64 // Unix ns of the last statfs
	avail      atomic.Int64 // bytes free at the last statfs
	since      atomic.Int64 // bytes admitted since the last statfs
	refreshing atomic.Bool
	full       atomic.Bool  // a batch was refused and none that size fits yet (for logging)
	refused    atomic.Int64 // bytes of the last batch refused, while full
}

// MinFreeAuto as Options.MinFreeBytes asks for the automatic free-space
// floor: AutoMinFreeBytes of the size of the data directory's file system,
// read once (statfs(2)) when the engine opens.
const MinFreeAuto = -1

// MaxAutoMinFreeBytes is the largest automatic free-space floor: 256 MiB.
const MaxAutoMinFreeBytes = 256 << 20

// AutoMinFreeBytes returns the automatic free-space floor of a file system
// of totalBytes: 5% of it, at most MaxAutoMinFreeBytes (256 MiB). So a
// 64 MiB volume keeps 3.2 MiB free, a 1 GiB one 51 MiB, and a volume of
// 5 GiB or more 256 MiB.
func AutoMinFreeBytes(totalBytes int64) int64 {
	return min(MaxAutoMinFreeBytes, max(totalBytes, 0)/20)
}

// minFreeBytes resolves opts.MinFreeBytes: MinFreeAuto becomes
// AutoMinFreeBytes of the data directory's file system (MaxAutoMinFreeBytes
// when its size cannot be read), logged once; any other value is kept.
func minFreeBytes(opts Options) int64 {
	if opts.MinFreeBytes != MinFreeAuto {
		return opts.MinFreeBytes
	}
	st, err := opts.FS.Statfs(opts.DataDir)
	if err != nil {
		opts.Logger.Warn("free-space floor: cannot read the size of the data directory's file system; using the largest automatic floor",
			"data_dir", opts.DataDir, "min_free_bytes", MaxAutoMinFreeBytes, "err", err)
		return MaxAutoMinFreeBytes
	}
	floor := AutoMinFreeBytes(st.Total)
	opts.Logger.Info("free-space floor set automatically: 5% of the file system, at most 256 MiB",
		"data_dir", opts.DataDir, "min_free_bytes", floor, "fs_total_bytes", st.Total, "fs_free_bytes", st.Avail)
	return floor
}

// newDiskFloor returns the floor of opts (MinFreeAuto resolved), or nil
// when it is 0.
func newDiskFloor(opts Options) *diskFloor {
	floor := minFreeBytes(opts)
	if floor <= 0 {
		return nil
	}
	if opts.MinFreeBytes != MinFreeAuto {
		warnFloorAboveSize(opts, floor)
	}
	d := &diskFloor{min: floor, dir: opts.DataDir, free: opts.DiskFree, now: opts.Now, log: opts.Logger}
	d.refresh(d.now())
	return d
}

// warnFloorAboveSize logs a warning when an explicit floor is as large
// as the data directory's file system: no publish could ever be accepted
// there, so the operator hears of it at start, not at the first refusal.
func warnFloorAboveSize(opts Options, floor int64) {
	st, err := opts.FS.Statfs(opts.DataDir)
	if err != nil || st.Total <= 0 || floor < st.Total {
		return
	}
	opts.Logger.Warn("free-space floor is not below the size of the data directory's file system; every publish will get DISK_FULL: lower --min-free-bytes or use auto",
		"data_dir", opts.DataDir, "min_free_bytes", floor, "fs_total_bytes", st.Total)
}

// MinFreeBytes returns the free-space floor in force, in bytes (0: none):
// Options.MinFreeBytes, or the floor computed for MinFreeAuto at Open.
func (e *Engine) MinFreeBytes() int64 {
	if e.disk == nil {
		return 0
	}
	return e.disk.min
}

// refresh asks the file system for the free space; one caller at a time,
// the others use the previous answer. A failed statfs keeps it.
func (d *diskFloor) refresh(now time.Time) {
	if !d.refreshing.CompareAndSwap(false, true) {
		return
	}
	defer d.refreshing.Store(false)
	free, err := d.free(d.dir)
	d.last.Store(now.UnixNano())
	if err != nil {
		d.log.Warn("free-space check failed; keeping the previous figure", "err", err)
		return
	}
	d.avail.Store(free)
	d.since.Store(0)
}

// fresh refreshes the free space when the last figure is stale.
func (d *diskFloor) fresh() {
	now := d.now()
	if now.UnixNano()-d.last.Load() >= int64(diskFreeRefresh) || d.since.Load() >= diskFreeRefreshBytes {
		d.refresh(now)
	}
}

// room returns the bytes that may be allocated without taking the free
// space below the floor (negative when it is below already): the bound of
// a segment's preallocation step (segment.Options.AllocRoom).
func (d *diskFloor) room() int64 {
	d.fresh()
	return d.avail.Load() - d.since.Load() - d.min
}

// allocated counts the step bytes a segment just preallocated against the
// last statfs figure (segment.Options.Allocated), so that the next step of
// another partition sees them before the next statfs; the needed bytes of
// it were admitted (and counted in since) already, so since drops by them.
func (d *diskFloor) allocated(step, needed int64) {
	d.avail.Add(-step)
	for {
		s := d.since.Load()
		if d.since.CompareAndSwap(s, max(s-needed, 0)) {
			return
		}
	}
}

// admit accounts for n bytes about to be appended to a partition whose
// active segment has spare bytes allocated beyond its end, and returns a
// DISK_FULL *api.Error (retriable) when the batch fits neither above the
// floor nor in that allocated space. A batch that fits in the spare
// space takes nothing from the file system: it is admitted, below the
// floor too, and not counted against the last statfs figure; a larger one
// is counted for its bytes past the spare space only.
func (d *diskFloor) admit(n int, spare func() int64) error {
	if d == nil {
		return nil
	}
	var sp int64
	if spare != nil {
		if sp = spare(); int64(n) <= sp {
			// Written into space allocated (and counted by statfs) already.
			return nil
		}
	}
	// Only the part past the spare space takes from the file system:
	// that is what the segment's preallocation reports as needed
	// (allocated), so counting the whole batch would count its first
	// part twice until the next statfs.
	take := int64(n) - sp
	d.fresh()
	left := d.avail.Load() - d.since.Add(take)
	if left < d.min {
		d.since.Add(-take)
		free := max(left+take, 0)
		d.refused.Store(int64(n))
		if d.full.CompareAndSwap(false, true) {
			d.log.Warn("free disk space below the floor; publishes refused with DISK_FULL",
				"data_dir", d.dir, "free_bytes", free, "batch_bytes", n, "min_free_bytes", d.min)
		}
		if free >= d.min {
			// Above the floor, but not by the size of this batch.
			return api.NewError(api.CodeDiskFull, "a batch of %d bytes does not fit: %d bytes free on the file system of %s, and the free-space floor is %d bytes (--min-free-bytes); smaller batches may still be accepted",
				n, free, d.dir, d.min)
		}
		return api.NewError(api.CodeDiskFull, "%d bytes free on the file system of %s, below the free-space floor of %d bytes (--min-free-bytes)",
			free, d.dir, d.min)
	}
	// Leave the full state only once a batch as large as the last one
	// refused would fit as well: a small batch squeezing in above the
	// floor does not mean publishes are accepted again.
	if d.full.Load() && left+take-d.refused.Load() >= d.min && d.full.CompareAndSwap(true, false) {
		d.log.Info("free disk space above the floor again; publishes accepted", "data_dir", d.dir, "free_bytes", left, "min_free_bytes", d.min)
	}
	return nil
}

// released counts n bytes of preallocated space given back to the file
// system (reclaimSpare) as free in the last statfs figure, until the next
// statfs sees them (ext4 may show freed blocks only after its journal
// commits).
func (d *diskFloor) released(n int64) {
	d.avail.Add(n)
}
