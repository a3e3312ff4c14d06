package segment

import (
	"errors"
	"fmt"
	"path/filepath"
)

// Sync makes everything appended so far durable: it fdatasyncs the active
// segment (segments sealed since the last Sync were synced by their roll)
// and records the synced position for Checkpoint. Appends that run
// concurrently with Sync may or may not be covered.
//
// A failed sync puts the Log in a failed state: the error wraps ErrFailed
// and the cause, and every later Append and Sync returns it until the Log
// is reopened (after EIO the kernel may have dropped the dirty pages, so a
// later successful sync would prove nothing; docs/architecture.md §3.3).
func (l *Log) Sync() error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	return l.syncLocked()
}

func (l *Log) syncLocked() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	if l.failed != nil {
		l.mu.Unlock()
		return l.failed
	}
	act := l.active()
	rp := recoveryPoint{next: l.next, base: act.base, pos: act.end}
	l.mu.Unlock()
	if rp == l.synced {
		return nil
	}
	if l.dsyncWriter() != nil {
		l.synced = rp // every append was durable when it returned (dsync.go)
		return nil
	}
	if err := l.unpark(act); err != nil {
		return err
	}
	if err := l.be.Sync(act.file); err != nil {
		err = fmt.Errorf("%w: sync: %w", ErrFailed, err)
		l.mu.Lock()
		l.failed = err
		l.mu.Unlock()
		return err
	}
	l.synced = rp
	return nil
}

// Checkpoint writes the recovery point, the last position Sync made
// durable, so that the next Open scans only what follows it (docs/architecture.md §3.6):
// tmp file, fsync, rename, fsync of the directory. It does nothing if the
// synced position has not moved since the last Checkpoint. It first writes
// the index files of sealed segments left in memory by an earlier lack of
// space (PendingIndexWrites), logging a rate-limited WARN if they still do
// not fit. When the recovery point does not fit either (ENOSPC, EDQUOT)
// the error is returned and also logged the same rate-limited way; the
// Log keeps working (the old recovery point only makes recovery scan
// more).
func (l *Log) Checkpoint() error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.RLock()
	closed := l.closed
	l.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	l.rewritePending()
	err := l.checkpointLocked()
	if isNoSpace(err) {
		l.warnUnwritten(filepath.Join(l.dir, recoveryPointName), err)
	}
	return err
}

func (l *Log) checkpointLocked() error {
	if l.synced == l.checkpointed {
		return nil
	}
	// The recovery point vouches for the time index entries below it
	// (recoverTimeIndex): make the active segment's durable first. Sealed
	// segments' were synced with their data.
	l.mu.RLock()
	tidx := l.active().tidx
	l.mu.RUnlock()
	if tidx != nil {
		if err := l.be.Sync(tidx); err != nil {
			return fmt.Errorf("segment: checkpoint: sync time index: %w", err)
		}
	}
	if err := writeRecoveryPoint(l.fs, l.dir, l.synced); err != nil {
		return err
	}
	l.checkpointed = l.synced
	return nil
}

// Close syncs, trims the active segment's preallocated tail to its real end,
// writes the recovery point, drops the Log's mappings and closes its files.
// Index files left in memory by a lack of space (PendingIndexWrites, and
// the active segment's) are written if they fit now; if they or the
// recovery point still do not fit, that is logged (the next Open rebuilds
// them from the synced data), not returned.
// Views still held stay valid until released. Append must not run
// concurrently with Close. After a failed sync Close skips the trim and the
// checkpoint, closes everything and returns the sync error.
func (l *Log) Close() error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	err := l.syncLocked()
	if errors.Is(err, ErrClosed) {
		return err
	}
	l.mu.Lock()
	l.closed = true
	segs := l.segs
	l.mu.Unlock()
	for _, s := range segs {
		l.dropMapping(s)
	}
	act := segs[len(segs)-1]
	if err == nil {
		err = l.unpark(act)
	}
	if err == nil {
		err = l.be.Truncate(act.file, act.end)
		if err == nil {
			err = l.be.Sync(act.file)
		}
		if err == nil {
			err = l.checkpointLocked()
			if isNoSpace(err) {
				// The data is synced: only the next recovery scans more.
				l.warnUnwritten(filepath.Join(l.dir, recoveryPointName), err)
				err = nil
			}
		}
		if err == nil {
			l.rewritePending()
			l.writeActiveIndexes(act)
		}
	}
	errs := []error{err}
	for _, s := range segs {
		// Sealed segments hold no files (roll closed them).
		errs = append(errs, l.closeHeld(&s.file), l.closeHeld(&s.idx), l.closeHeld(&s.tidx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("segment: close %s: %w", l.dir, err)
	}
	return nil
}
