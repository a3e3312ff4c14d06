package segment

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/seedqueue/sq/ring"
)

// Open opens the partition directory dir, creating it (and a first segment
// at offset 0) if needed, and recovers it (docs/architecture.md §3.6):
//
//   - files ending in .sqtmp are deleted; other unknown files are logged and
//     left alone;
//   - a segment that has a successor must be whole: valid batches in
//     sequence from its base offset exactly up to the next segment's base
//     offset (a roll syncs a segment before creating its successor, so a
//     torn write can only be in the last segment). Below the recovery
//     point this is spot-checked from the last index entry (or from the
//     start if the index disagrees); above it, or without one, every batch
//     is checked. A bad batch, a short or empty file, an offset gap, a
//     missing segment or a file shorter than the recovery point says
//     returns a *CorruptError and nothing is truncated or removed;
//   - in the last segment, above the recovery point, the log is scanned
//     batch by batch; the first batch that is short, longer than the file,
//     has zero magic, fails CheckHeader (CRC) or breaks
//     the baseOffset sequence ends the log: it and everything after it are
//     cut off (ftruncate + fsync) before anything is mapped, unless a valid
//     batch continuing the offsets follows it: then, under
//     DurableEveryBatch, Open returns a *CorruptError and cuts nothing, and
//     under the other policies the hole is cut and logged at ERROR;
//   - an index that disagrees with its log or is implausible (missing,
//     empty, torn, not increasing, pointing past the data, times zero,
//     going back or in the future) is rebuilt from the log, by temp file
//     and rename. If that finds no space (ENOSPC, EDQUOT) the rebuilt
//     index stays in memory, serving reads, and the file is written by a
//     later Checkpoint, roll, DeleteSegmentsBefore or Close (a WARN, at
//     most one a minute, says so); PendingIndexWrites counts them.
//
// The recovered data is then fdatasynced and a new recovery point written
// (skipped with a WARN when it finds no space: the old one stays valid).
//
// Running out of file descriptors (EMFILE, ENFILE) fails Open with an error
// wrapping ErrResources, recorded in opts.Files (FileStats.Err).
func Open(dir string, fsys ring.FS, backend ring.Backend, opts Options) (*Log, error) {
	opts.Defaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	l, err := open(dir, fsys, backend, opts)
	if err != nil {
		return nil, opts.Files.observe(err)
	}
	return l, nil
}

// open is Open after the options are checked.
func open(dir string, fsys ring.FS, backend ring.Backend, opts Options) (*Log, error) {
	l := &Log{dir: dir, fs: fsys, be: backend, opts: opts, ix: indexer{interval: int64(opts.IndexIntervalBytes)}, lastAppend: -1, files: opts.Files}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("segment: open: %w", err)
	}
	if err := fsys.SyncDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("segment: open: %w", err)
	}
	bases, orphans, err := l.listDir()
	if err != nil {
		return nil, err
	}
	rp, found, err := readRecoveryPoint(fsys, dir, opts.Logger)
	if err != nil {
		return nil, err
	}
	if err := l.recover(bases, rp, found); err != nil {
		l.closeFiles()
		return nil, err
	}
	act := l.active()
	if err := l.openActiveIndexes(act); err != nil {
		l.closeFiles()
		return nil, err
	}
	for _, s := range l.segs[:len(l.segs)-1] {
		if !s.tidxFailed {
			s.times = nil // sealed: lookups read the .timeindex file
		}
	}
	if err := l.grow(act, act.end); err != nil {
		l.closeFiles()
		return nil, err
	}
	if err := l.checkpointLocked(); err != nil {
		if !isNoSpace(err) {
			l.closeFiles()
			return nil, err
		}
		// The recovered data is synced; the old recovery point (or
		// none) stays, which only makes the next recovery scan more.
		l.warnUnwritten(filepath.Join(dir, recoveryPointName), err)
	}
	l.logStart(rp, found, orphans)
	return l, nil
}

// openActiveIndexes opens the active segment's .index and .timeindex
// for appending. An index file that recovery could not rewrite for lack
// of space (idxFailed, tidxFailed) may be missing: it is created empty;
// if even that finds no space, appends keep its entries in memory only
// (the handle stays nil) and the roll writes the file.
func (l *Log) openActiveIndexes(act *segment) error {
	for _, f := range []struct {
		h      *ring.File
		path   string
		failed *bool
	}{{&act.idx, act.idxPath, &act.idxFailed}, {&act.tidx, act.tidxPath, &act.tidxFailed}} {
		if *f.h != nil {
			continue
		}
		h, err := l.openHeld(l.fs.OpenReadWrite, f.path)
		if errors.Is(err, fs.ErrNotExist) && *f.failed {
			h, err = l.openHeld(l.fs.Create, f.path)
		}
		if err != nil && *f.failed && isNoSpace(err) {
			l.warnUnwritten(f.path, err)
			continue
		}
		if err != nil {
			return fmt.Errorf("segment: open: %w", err)
		}
		*f.h = h
	}
	return nil
}

// logStart logs where the log starts and ends after Open, at INFO; and at
// WARN when index files of segments below the first one are left
// (orphans: base offsets of .index or .timeindex files without a .log),
// which means the first segments' .log files were deleted while the
// partition was stopped, moving the log start: the WARN names the missing
// offset range. (The recovery point does not record the log start, so a
// .log deleted together with its index files is seen only in the INFO.)
func (l *Log) logStart(rp recoveryPoint, found bool, orphans []uint64) {
	start, next, segs := l.segs[0].base, l.next, len(l.segs)
	var missing []uint64
	for _, b := range orphans {
		if b < start {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		l.opts.Logger.Warn("segment: log start moved while stopped: the .log files of the first segments are missing",
			"dir", l.dir, "missing_from", slices.Min(missing), "missing_to", start, "log_start", start)
	}
	args := []any{"dir", l.dir, "log_start", start, "next_offset", next, "segments", segs}
	if found {
		args = append(args, "recovery_point", rp.next)
	}
	l.opts.Logger.Info("segment: opened", args...)
}

// listDir returns the base offsets of the .log files in l.dir, sorted,
// deleting .sqtmp files and logging unknown ones, and those of .index or
// .timeindex files that have no .log (orphans).
func (l *Log) listDir() (bases, orphans []uint64, err error) {
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("segment: open: %w", err)
	}
	logs, indexes := map[uint64]bool{}, map[uint64]string{}
	removed := false
	for _, name := range names {
		base, suffix, ok := parseName(name)
		switch {
		case strings.HasSuffix(name, tmpSuffix):
			if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil {
				return nil, nil, fmt.Errorf("segment: open: %w", err)
			}
			l.opts.Logger.Info("segment: removed temporary file", "file", filepath.Join(l.dir, name))
			removed = true
		case name == recoveryPointName, callerFiles[name]:
		case ok && suffix == logSuffix:
			bases = append(bases, base)
			logs[base] = true
		case ok && suffix == indexSuffix:
			indexes[base] = name
		case ok && suffix == timeIndexSuffix:
			// Checked against its log by recoverTimeIndex.
			indexes[base] = name
		default:
			l.opts.Logger.Warn("segment: stray file left alone", "file", filepath.Join(l.dir, name))
		}
	}
	for base, name := range indexes {
		if !logs[base] {
			l.opts.Logger.Warn("segment: index without a log left alone", "file", filepath.Join(l.dir, name))
			orphans = append(orphans, base)
		}
	}
	if removed {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return nil, nil, fmt.Errorf("segment: open: %w", err)
		}
	}
	slices.Sort(bases)
	slices.Sort(orphans)
	return bases, orphans, nil
}

// closeFiles closes every file and mapping of l after a failed Open.
func (l *Log) closeFiles() {
	for _, s := range l.segs {
		l.dropMapping(s)
		for _, f := range []*ring.File{&s.file, &s.idx, &s.tidx} {
			_ = l.closeHeld(f)
		}
	}
}

// errMissing is the cause of a CorruptError for a segment file that the
// recovery point says must exist.
var errMissing = errors.New("file named by the recovery point is missing")
