package segment

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// SegmentInfo describes one segment, for retention decisions.
type SegmentInfo struct {
	BaseOffset uint64 // offset of the first record; the file name
	NextOffset uint64 // offset after the last record
	Bytes      int64  // bytes of batches
	// MaxTimestamp is the largest batch maxTimestamp (Unix ms) seen in the
	// segment, -1 if none: exact for segments written or fully scanned since
	// Open; for a segment recovered below the recovery point, the largest
	// among the batches after its last index entry.
	MaxTimestamp int64
	// FirstAppendTime and MaxAppendTime are the broker append times (Unix
	// ms) of the segment's first and last batches, from its time index; -1
	// when the segment is empty. Retention by time and the roll by
	// segment.ms use these, never the producer's timestamps.
	FirstAppendTime int64
	MaxAppendTime   int64
	Active          bool // the last segment, which receives appends
}

// Segments returns a description of every segment, oldest first.
func (l *Log) Segments() []SegmentInfo {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]SegmentInfo, len(l.segs))
	for i, s := range l.segs {
		out[i] = SegmentInfo{BaseOffset: s.base, NextOffset: s.next, Bytes: s.end, MaxTimestamp: s.maxTs,
			FirstAppendTime: s.firstAppend, MaxAppendTime: s.maxAppend, Active: i == len(l.segs)-1}
	}
	return out
}

// DeleteSegmentsBefore deletes the oldest sealed segments whose records are
// all below offset, and returns how many it deleted; LogStartOffset moves to
// the base offset of the first remaining segment. The active segment is
// never deleted. If a segment to delete holds the recovery point, the Log
// first syncs and checkpoints so that the recovery point moves past it.
// Files are unlinked at once (then the directory is fsynced); Views that
// still use their mappings stay valid until released.
//
// Safe concurrently with Append and Read; serialized with Sync, Checkpoint
// and Close.
func (l *Log) DeleteSegmentsBefore(offset uint64) (int, error) {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.RLock()
	closed, n := l.closed, 0
	for n < len(l.segs)-1 && l.segs[n].next <= offset {
		n++
	}
	var lastBase uint64
	if n > 0 {
		lastBase = l.segs[n-1].base
	}
	l.mu.RUnlock()
	switch {
	case closed:
		return 0, ErrClosed
	case n == 0:
		return 0, nil
	}
	if l.checkpointed.base <= lastBase {
		if err := l.syncLocked(); err != nil {
			return 0, err
		}
		if err := l.checkpointLocked(); err != nil {
			if !isNoSpace(err) {
				return 0, err
			}
			// A recovery point in a deleted segment would make Open
			// report the log corrupt; without one Open scans every
			// segment, which is slower but as safe. Removing it frees
			// space, so retention still works on a full disk.
			if err := l.dropRecoveryPoint(err); err != nil {
				return 0, err
			}
		}
	}
	l.mu.Lock()
	doomed := l.segs[:n]
	l.segs = append([]*segment(nil), l.segs[n:]...)
	for _, s := range doomed {
		l.size -= s.end
	}
	l.mu.Unlock()
	var errs []error
	for _, s := range doomed {
		// Sealed: no files open (roll closed them); the mapping goes when
		// the last View using it is released.
		l.dropMapping(s)
		// The .log last: a crash in between leaves a .log without
		// indexes (rebuilt at Open, deleted again by retention), never
		// indexes without a .log, which Open reports as a .log deleted by
		// hand (logStart).
		for _, p := range []string{s.idxPath, s.tidxPath, s.logPath} {
			if err := l.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, l.fs.SyncDir(l.dir))
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("segment: delete segments before offset %d: %w", offset, err)
	}
	l.rewritePending() // the space just freed may hold them
	return n, nil
}

// Roll seals the active segment and starts a new, empty one at the log end
// offset, so that retention can delete the old one (the roll by segment.ms
// of a partition that receives no appends). It does nothing and returns
// false when the active segment is empty. Like Append, Roll must be called
// from the appending goroutine. The new segment's name is durable when Roll
// returns.
func (l *Log) Roll() (bool, error) {
	l.mu.RLock()
	closed, failed, next, act := l.closed, l.failed, l.next, l.active()
	l.mu.RUnlock()
	switch {
	case closed:
		return false, ErrClosed
	case failed != nil:
		return false, failed
	case act.end == 0:
		return false, nil
	}
	if _, err := l.roll(act, next); err != nil {
		return false, err
	}
	return true, nil
}

// dropRecoveryPoint removes the recovery-point file (and fsyncs the
// directory) after writing a new one failed with cause (no space), before
// retention deletes the segment that the old one names.
func (l *Log) dropRecoveryPoint(cause error) error {
	path := filepath.Join(l.dir, recoveryPointName)
	l.warnUnwritten(path, cause)
	if err := l.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("segment: delete segments: remove the recovery point after %w: %w", cause, err)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("segment: delete segments: remove the recovery point after %w: %w", cause, err)
	}
	l.checkpointed = recoveryPoint{}
	return nil
}
