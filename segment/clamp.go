package segment

import (
	"fmt"
)

// ClampAppendTimes bounds the log's broker append times by the clock's
// reading nowMs (Unix ms): when a time index entry is more than
// MaxClockAhead after nowMs (appended while the clock was ahead), every
// entry after nowMs is dropped and the records they dated are dated nowMs,
// which is not earlier than their real append time. Without this, one
// append made while the clock was ahead would date every later append
// (append times never go back), and its segment would never roll by
// segment.ms nor expire by retention.ms (docs/storage.md, Clock bounds).
// The .timeindex files changed are replaced by temp file and rename, and
// the change is logged at WARN. It reports whether anything changed.
//
// AppendAt calls it when its appendMs is that far behind the latest
// append time; call it from the appending goroutine (like Append) when
// the log may hold such times without receiving appends (retention).
func (l *Log) ClampAppendTimes(nowMs int64) (bool, error) {
	l.mu.RLock()
	closed, failed := l.closed, l.failed
	segs := append([]*segment(nil), l.segs...)
	l.mu.RUnlock()
	switch {
	case closed:
		return false, ErrClosed
	case failed != nil:
		return false, failed
	}
	limit := nowMs + MaxClockAhead.Milliseconds()
	if l.lastAppend <= limit {
		return false, nil
	}
	changed := false
	for i, s := range segs {
		if s.maxAppend <= nowMs {
			continue
		}
		if err := l.clampSegment(s, i == len(segs)-1, nowMs); err != nil {
			return changed, err
		}
		changed = true
	}
	l.mu.Lock()
	l.lastAppend = -1
	for _, s := range l.segs {
		l.lastAppend = max(l.lastAppend, s.maxAppend)
	}
	l.mu.Unlock()
	return changed, nil
}

// clampSegment rewrites the time index of s (active: the last segment)
// with its entries after nowMs replaced by one entry at nowMs, and
// publishes the new times. Without space for the file (ENOSPC, EDQUOT)
// the clamped entries are kept in memory and written later.
func (l *Log) clampSegment(s *segment, active bool, nowMs int64) error {
	l.mu.RLock()
	entries, count, oldMax := s.times, s.next-s.base, s.maxAppend
	l.mu.RUnlock()
	inMemory := entries != nil
	if !inMemory {
		var err error
		if entries, _, _, err = readTimeIndexFile(l.fs, s.tidxPath, count, anyTime); err != nil {
			return fmt.Errorf("segment: clamp append times: %w", err)
		}
	}
	var kept []timeEntry
	for _, e := range entries {
		if e.ts > nowMs {
			if len(kept) == 0 || kept[len(kept)-1].ts < nowMs {
				kept = append(kept, timeEntry{ts: nowMs, rel: e.rel})
			}
			break
		}
		kept = append(kept, e)
	}
	switch err := l.writeTimeIndex(s, kept); {
	case isNoSpace(err):
		// Clamped in memory; the file is written later (at the roll for
		// the active segment, by rewritePending for a sealed one).
		l.warnUnwritten(s.tidxPath, err)
		inMemory = true
		l.mu.Lock()
		s.tidxFailed = true
		l.mu.Unlock()
	case err != nil:
		return err
	case active:
		l.reopenTimeIndex(s)
	}
	l.opts.Logger.Warn("segment: append times in the future (the clock was ahead); clamped to the clock",
		"file", s.tidxPath, "max_append_ms", oldMax, "now_ms", nowMs)
	l.mu.Lock()
	if inMemory {
		s.times = kept
	}
	s.firstAppend, s.maxAppend = -1, -1
	if n := len(kept); n > 0 {
		s.firstAppend, s.maxAppend = kept[0].ts, kept[n-1].ts
	}
	l.mu.Unlock()
	return nil
}

// reopenTimeIndex replaces the active segment's .timeindex handle after
// its file was replaced by rename. If the new file cannot be opened, later
// entries stay in memory and the file is rewritten at the roll
// (tidxFailed).
func (l *Log) reopenTimeIndex(s *segment) {
	if s.tidx != nil {
		if err := s.tidx.Close(); err != nil {
			l.opts.Logger.Warn("segment: closing a replaced time index failed", "file", s.tidxPath, "err", err)
		}
		s.tidx = nil
	}
	f, err := l.fs.OpenReadWrite(s.tidxPath)
	if err != nil {
		l.opts.Logger.Warn("segment: reopening a time index failed; it is rewritten at the roll", "file", s.tidxPath, "err", err)
		s.tidxFailed = true
		return
	}
	s.tidx = f
}
