package segment

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/seedqueue/sq/ring"
)

// Open opens the partition directory dir, creating it (and a first segment
// at offset 0) if needed, and recovers it (DESIGN §3.6):
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
//     batch by batch; the first batch that is short, longer than the file
//     or MaxBatchBytes, has zero magic, fails CheckHeader (CRC) or breaks
//     the baseOffset sequence ends the log: it and everything after it are
//     cut off (ftruncate + fsync) before anything is mapped;
//   - an index that disagrees with its log (missing, empty, not increasing,
//     pointing past the data) is rebuilt from the log.
//
// The recovered data is then fdatasynced and a new recovery point written.
func Open(dir string, fsys ring.FS, backend ring.Backend, opts Options) (*Log, error) {
	opts.Defaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	l := &Log{dir: dir, fs: fsys, be: backend, opts: opts, ix: indexer{interval: int64(opts.IndexIntervalBytes)}, lastAppend: -1}
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("segment: open: %w", err)
	}
	if err := fsys.SyncDir(filepath.Dir(dir)); err != nil {
		return nil, fmt.Errorf("segment: open: %w", err)
	}
	bases, err := l.listDir()
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
	if act.idx == nil {
		if act.idx, err = fsys.OpenReadWrite(act.idxPath); err != nil {
			l.closeFiles()
			return nil, fmt.Errorf("segment: open: %w", err)
		}
	}
	if act.tidx == nil {
		if act.tidx, err = fsys.OpenReadWrite(act.tidxPath); err != nil {
			l.closeFiles()
			return nil, fmt.Errorf("segment: open: %w", err)
		}
	}
	for _, s := range l.segs[:len(l.segs)-1] {
		s.times = nil // sealed: lookups read the .timeindex file
	}
	if err := l.grow(act, act.end); err != nil {
		l.closeFiles()
		return nil, err
	}
	if err := l.checkpointLocked(); err != nil {
		l.closeFiles()
		return nil, err
	}
	return l, nil
}

// listDir returns the base offsets of the .log files in l.dir, sorted,
// deleting .sqtmp files and logging unknown ones.
func (l *Log) listDir() ([]uint64, error) {
	names, err := l.fs.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("segment: open: %w", err)
	}
	var bases []uint64
	logs, indexes := map[uint64]bool{}, map[uint64]bool{}
	removed := false
	for _, name := range names {
		base, suffix, ok := parseName(name)
		switch {
		case strings.HasSuffix(name, tmpSuffix):
			if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil {
				return nil, fmt.Errorf("segment: open: %w", err)
			}
			l.opts.Logger.Info("segment: removed temporary file", "file", filepath.Join(l.dir, name))
			removed = true
		case name == recoveryPointName:
		case ok && suffix == logSuffix:
			bases = append(bases, base)
			logs[base] = true
		case ok && suffix == indexSuffix:
			indexes[base] = true
		case ok && suffix == timeIndexSuffix:
			// Checked against its log by recoverTimeIndex.
		default:
			l.opts.Logger.Warn("segment: stray file left alone", "file", filepath.Join(l.dir, name))
		}
	}
	for base := range indexes {
		if !logs[base] {
			l.opts.Logger.Warn("segment: index without a log left alone", "file", indexPath(l.dir, base))
		}
	}
	if removed {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return nil, fmt.Errorf("segment: open: %w", err)
		}
	}
	slices.Sort(bases)
	return bases, nil
}

// closeFiles closes every file and mapping of l after a failed Open.
func (l *Log) closeFiles() {
	for _, s := range l.segs {
		if s.m != nil {
			s.m.release()
			s.m = nil
		}
		for _, f := range []ring.File{s.file, s.idx, s.tidx} {
			if f != nil {
				f.Close()
			}
		}
		s.file, s.idx, s.tidx = nil, nil, nil
	}
}

// errMissing is the cause of a CorruptError for a segment file that the
// recovery point says must exist.
var errMissing = errors.New("file named by the recovery point is missing")
