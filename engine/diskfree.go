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
	full       atomic.Bool // below the floor at the last check (for logging)
}

// newDiskFloor returns the floor of opts, or nil when MinFreeBytes is 0.
func newDiskFloor(opts Options) *diskFloor {
	if opts.MinFreeBytes <= 0 {
		return nil
	}
	d := &diskFloor{min: opts.MinFreeBytes, dir: opts.DataDir, free: opts.DiskFree, now: opts.Now, log: opts.Logger}
	d.refresh(d.now())
	return d
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

// admit accounts for n bytes about to be appended and returns a DISK_FULL
// *api.Error (retriable) when they would take the free space below the
// floor.
func (d *diskFloor) admit(n int) error {
	if d == nil {
		return nil
	}
	now := d.now()
	if now.UnixNano()-d.last.Load() >= int64(diskFreeRefresh) || d.since.Load() >= diskFreeRefreshBytes {
		d.refresh(now)
	}
	left := d.avail.Load() - d.since.Add(int64(n))
	if left < d.min {
		d.since.Add(-int64(n))
		if d.full.CompareAndSwap(false, true) {
			d.log.Warn("free disk space below the floor; publishes refused with DISK_FULL",
				"data_dir", d.dir, "free_bytes", left+int64(n), "min_free_bytes", d.min)
		}
		return api.NewError(api.CodeDiskFull, "%d bytes free on the file system of %s, below the floor of %d bytes (--min-free-bytes)",
			max(left+int64(n), 0), d.dir, d.min)
	}
	if d.full.CompareAndSwap(true, false) {
		d.log.Info("free disk space above the floor again; publishes accepted", "data_dir", d.dir, "free_bytes", left)
	}
	return nil
}
