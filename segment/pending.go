package segment

import (
	"time"
)

// unwrittenWarnEvery bounds the WARN lines about index files that could
// not be written (warnUnwritten): at most one per Log per interval, so a
// full disk retried at every checkpoint does not flood the log.
const unwrittenWarnEvery = time.Minute

// unwrittenWarn is the rate limiter of warnUnwritten.
type unwrittenWarn struct {
	last       time.Time // when the last WARN was logged; zero: never
	suppressed int       // failures not logged since then
}

// warnUnwritten logs at WARN that the file at path (an .index,
// .timeindex or the recovery point) could not be written, err saying why
// (ENOSPC or EDQUOT mostly). The contents are in memory and nothing
// acknowledged is lost: the write is retried at the next checkpoint, roll
// or retention pass (rewritePending), and recovery rebuilds the file if
// the process stops first. Rate-limited by unwrittenWarnEvery; the WARN
// counts the failures left out since the previous one. Safe from any
// goroutine.
func (l *Log) warnUnwritten(path string, err error) {
	now := l.opts.Now()
	l.warnMu.Lock()
	w := &l.unwritten
	if d := now.Sub(w.last); !w.last.IsZero() && d >= 0 && d < unwrittenWarnEvery {
		w.suppressed++
		l.warnMu.Unlock()
		return
	}
	suppressed := w.suppressed
	w.last, w.suppressed = now, 0
	l.warnMu.Unlock()
	l.opts.Logger.Warn("segment: could not write an index file; it is kept in memory and written again later",
		"file", path, "err", err, "suppressed", suppressed)
}

// rewritePending writes the index files of sealed segments that are held
// in memory because writing them failed (at recovery, or at the roll): the
// .index from s.index (idxFailed), the .timeindex from s.times
// (tidxFailed). Called with syncMu held (Checkpoint, the roll's sealOld,
// DeleteSegmentsBefore), so it never races retention deleting the same
// segment. A file written is dropped from memory: a sealed segment's
// .timeindex is read by path; its .index only if no mapping holds the old
// one (the mapping would keep the old inode), else the in-memory index
// stays until the process stops. Failures are logged (warnUnwritten) and
// retried next time.
func (l *Log) rewritePending() {
	l.mu.RLock()
	var pend []*segment
	for _, s := range l.segs[:len(l.segs)-1] {
		if s.idxFailed || s.tidxFailed {
			pend = append(pend, s)
		}
	}
	l.mu.RUnlock()
	for _, s := range pend {
		if s.idxFailed {
			l.rewritePendingIndex(s)
		}
		if s.tidxFailed {
			l.rewritePendingTimeIndex(s)
		}
	}
}

// rewritePendingIndex writes sealed segment s's .index from s.index.
func (l *Log) rewritePendingIndex(s *segment) {
	s.mapMu.Lock()
	err := l.writeIndex(s)
	unmapped := s.m == nil
	s.mapMu.Unlock()
	if err != nil {
		l.warnUnwritten(s.idxPath, err)
		return
	}
	l.mu.Lock()
	s.idxFailed = false
	if unmapped {
		s.index = nil // later mappings map the new file
	}
	l.mu.Unlock()
	l.opts.Logger.Info("segment: index file written after an earlier failure", "file", s.idxPath)
}

// rewritePendingTimeIndex writes sealed segment s's .timeindex from
// s.times.
func (l *Log) rewritePendingTimeIndex(s *segment) {
	l.mu.RLock()
	times := s.times
	l.mu.RUnlock()
	if err := l.writeTimeIndex(s, times); err != nil {
		l.warnUnwritten(s.tidxPath, err)
		return
	}
	l.mu.Lock()
	s.tidxFailed = false
	s.times = nil // lookups read the file
	l.mu.Unlock()
	l.opts.Logger.Info("segment: time index file written after an earlier failure", "file", s.tidxPath)
}

// PendingIndexWrites returns the number of sealed segments whose .index
// or .timeindex file is held in memory because writing it failed for lack
// of space (ENOSPC, EDQUOT): Checkpoint writes them once there is room,
// even when there is nothing new to checkpoint. Safe from any goroutine.
func (l *Log) PendingIndexWrites() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	n := 0
	for _, s := range l.segs[:len(l.segs)-1] {
		if s.idxFailed || s.tidxFailed {
			n++
		}
	}
	return n
}

// writeActiveIndexes writes the active segment's .index and .timeindex
// from memory if a write to them failed (idxFailed, tidxFailed), at Close:
// the handles are closed right after, so replacing the files by rename is
// safe. Failures are logged (warnUnwritten); Open rebuilds the files.
func (l *Log) writeActiveIndexes(act *segment) {
	if act.idxFailed {
		if err := l.writeIndex(act); err != nil {
			l.warnUnwritten(act.idxPath, err)
		} else {
			act.idxFailed = false
		}
	}
	if act.tidxFailed {
		if err := l.writeTimeIndex(act, act.times); err != nil {
			l.warnUnwritten(act.tidxPath, err)
		} else {
			act.tidxFailed = false
		}
	}
}
