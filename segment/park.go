package segment

import (
	"errors"
	"fmt"
)

// ParkIfOver gives back the active segment's file descriptors and mapping
// when the FileCache is over its bound (Options.Files, --max-open-segment-
// files) and everything appended is synced, so that a server with more
// partitions than the bound allows still holds at most about the bound:
// it closes the .log, .index and .timeindex and drops the .log's mapping
// unless a reader holds it. It reports whether it parked the segment.
//
// A parked segment costs nothing but memory: the next Append reopens the
// .log (one open(2)) and maps it again; a read maps it for as long as the
// read lasts, as for a sealed segment. Its sparse index and time index
// entries stay in memory from then on (as after a failed index write:
// idxFailed, tidxFailed) and are written to their files, whole, at the
// roll and at Close; after a crash recovery rebuilds the .index from the
// .log and dates the records the .timeindex does not cover by the .log's
// modification time (recoverTimeIndex), as it does after a lack of space.
//
// Nothing is synced here: a segment with appends not yet synced (sync
// policies interval and none between syncs) is not parked, so parking
// never changes what is durable. Must not run concurrently with Append
// (the engine calls it from the partition's append goroutine).
func (l *Log) ParkIfOver() bool {
	if !l.files.over() {
		return false
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.RLock()
	closed, failed, act := l.closed, l.failed, l.active()
	rp := recoveryPoint{next: l.next, base: act.base, pos: act.end}
	l.mu.RUnlock()
	if closed || failed != nil || act.file == nil || act.dirty != 0 || (act.end != 0 && rp != l.synced) {
		return false
	}
	act.mapMu.Lock()
	if act.m != nil && act.m.refs.Load() == 1 {
		act.m.release()
		act.m = nil
	}
	act.mapMu.Unlock()
	if act.idx != nil {
		act.idxFailed = true
	}
	if act.tidx != nil {
		act.tidxFailed = true
	}
	if err := errors.Join(l.closeHeld(&act.file), l.closeHeld(&act.idx), l.closeHeld(&act.tidx)); err != nil {
		// The data was synced through these descriptors already.
		l.opts.Logger.Warn("segment: closing a parked segment's files failed", "file", act.logPath, "err", err)
	}
	return true
}

// unpark reopens the .log of the active segment act if ParkIfOver closed
// it. Its index files stay closed until the roll (see ParkIfOver).
func (l *Log) unpark(act *segment) error {
	if act.file != nil {
		return nil
	}
	f, err := l.openHeld(l.fs.OpenReadWrite, act.logPath)
	if err != nil {
		return fmt.Errorf("segment: reopen %s: %w", act.logPath, err)
	}
	act.file = f
	return nil
}
