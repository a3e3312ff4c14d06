package segment

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/seedqueue/sq/ring"
)

// recover rebuilds l.segs from the .log files with base offsets bases
// (sorted) and the recovery point rp (found false: none, scan everything).
// See Open for the rules. On error l.segs holds what was opened so far.
func (l *Log) recover(bases []uint64, rp recoveryPoint, found bool) error {
	if len(bases) == 0 {
		return l.recoverEmpty(rp, found)
	}
	if !found {
		rp = recoveryPoint{next: bases[0], base: bases[0]}
	}
	rpIdx := slices.Index(bases, rp.base)
	if rpIdx < 0 {
		return &CorruptError{File: logPath(l.dir, rp.base), Position: rp.pos, Err: errMissing}
	}
	dirChanged := false
	for i, base := range bases {
		if i > rpIdx && base != l.next {
			l.opts.Logger.Warn("segment: torn log: segment does not follow the previous one; removing it and later ones",
				"file", logPath(l.dir, base), "want_base", l.next)
			l.removeSegments(bases[i:])
			dirChanged = true
			break
		}
		s := l.newSegment(base)
		l.segs = append(l.segs, s)
		torn, rewrote, err := l.recoverSegment(s, i, rpIdx, rp, bases)
		if err != nil {
			return err
		}
		l.next = s.next
		l.size += s.end
		dirChanged = dirChanged || rewrote
		if torn && i+1 < len(bases) {
			l.removeSegments(bases[i+1:])
			dirChanged = true
			break
		}
	}
	if dirChanged {
		if err := l.fs.SyncDir(l.dir); err != nil {
			return fmt.Errorf("segment: open: %w", err)
		}
	}
	return l.finishRecovery(rpIdx, rp, found)
}

// recoverEmpty starts a directory without segments.
func (l *Log) recoverEmpty(rp recoveryPoint, found bool) error {
	if found && (rp.pos > 0 || rp.next != rp.base) {
		return &CorruptError{File: logPath(l.dir, rp.base), Position: rp.pos, Err: errMissing}
	}
	s, err := l.createSegment(rp.base) // base 0 when not found
	if err != nil {
		return err
	}
	l.segs = []*segment{s}
	l.next = s.base
	l.synced = recoveryPoint{next: s.base, base: s.base}
	l.checkpointed = rp
	return nil
}

// finishRecovery fdatasyncs the segments recovery scanned (their bytes may
// have been only in the page cache of a crashed process), closes the files
// of sealed segments, and records the recovered end as synced.
func (l *Log) finishRecovery(rpIdx int, rp recoveryPoint, found bool) error {
	var files []ring.File
	for _, s := range l.segs[rpIdx:] {
		files = append(files, s.file)
	}
	if err := l.be.Sync(files...); err != nil {
		return fmt.Errorf("segment: open: %w", err)
	}
	for _, s := range l.segs[:len(l.segs)-1] {
		if err := s.file.Close(); err != nil {
			return fmt.Errorf("segment: open: %w", err)
		}
		s.file = nil
		s.index = nil // the .index file now matches; reads map it
	}
	act := l.active()
	l.synced = recoveryPoint{next: l.next, base: act.base, pos: act.end}
	if found {
		l.checkpointed = rp
	}
	return nil
}

// recoverSegment opens s (the i-th of bases) and finds its end. torn reports
// that the log ends inside s; rewrote that its index file was rewritten.
func (l *Log) recoverSegment(s *segment, i, rpIdx int, rp recoveryPoint, bases []uint64) (torn, rewrote bool, err error) {
	if s.file, err = l.fs.OpenReadWrite(s.logPath); err != nil {
		return false, false, fmt.Errorf("segment: open: %w", err)
	}
	fi, err := s.file.Stat()
	if err != nil {
		return false, false, fmt.Errorf("segment: open: %w", err)
	}
	size := fi.Size()
	s.alloc = size
	fileIndex, indexOK, why := readIndex(l.fs, s.idxPath, size)
	if !indexOK {
		l.opts.Logger.Warn("segment: rebuilding index from its log", "file", s.idxPath, "reason", why)
	}
	sc := &scanner{f: s.file, path: s.logPath, size: size, maxBatch: l.opts.MaxBatchBytes}
	stop := never
	if i+1 < len(bases) {
		// A sealed segment ends where the next one begins. Bytes after that
		// can only be left over from a failed write before the roll.
		stop = func(_ int64, off uint64) bool { return off >= bases[i+1] }
	}
	switch {
	case i < rpIdx:
		err = l.verifyBelow(sc, s, fileIndex, indexOK, -1, bases[i+1])
	case i == rpIdx:
		if size < rp.pos {
			return false, false, &CorruptError{File: s.logPath, Position: size,
				Err: fmt.Errorf("file is %d bytes, the recovery point is at byte %d", size, rp.pos)}
		}
		if err = l.verifyBelow(sc, s, fileIndex, indexOK, rp.pos, rp.next); err == nil {
			torn = l.scanAbove(sc, s, s.end, s.next, stop)
		}
	default:
		torn = l.scanAbove(sc, s, 0, s.base, stop)
	}
	if err != nil {
		return false, false, err
	}
	last := torn || i == len(bases)-1
	if i >= rpIdx && last && size > s.end {
		if err := l.be.Truncate(s.file, s.end); err != nil {
			return false, false, fmt.Errorf("segment: open: cut torn tail: %w", err)
		}
		s.alloc = s.end
	}
	if !indexOK || !slices.Equal(s.index, fileIndex) {
		if err := l.writeIndex(s); err != nil {
			return false, false, err
		}
		rewrote = true
	}
	above := s.base // first offset above the recovery point
	switch {
	case i < rpIdx:
		above = s.next
	case i == rpIdx:
		above = rp.next
	}
	trewrote, err := l.recoverTimeIndex(s, above)
	if err != nil {
		return false, false, err
	}
	return torn, rewrote || trewrote, nil
}

// verifyBelow checks the part of s below the recovery point, which must be
// intact: from the index entry nearest the target (or from the start if the
// index disagrees) up to byte atPos holding offset want (the recovery
// point's segment), or, with atPos < 0, up to offset want (the next
// segment's base). It sets s.end, s.next and s.index. Anything else is a
// *CorruptError.
func (l *Log) verifyBelow(sc *scanner, s *segment, fileIndex []indexEntry, indexOK bool, atPos int64, want uint64) error {
	stop := func(_ int64, off uint64) bool { return off >= want }
	if atPos >= 0 {
		stop = func(pos int64, _ uint64) bool { return pos >= atPos }
	}
	reached := func(pos int64, off uint64) bool { return off == want && (atPos < 0 || pos == atPos) }
	if indexOK && len(fileIndex) > 0 {
		e := fileIndex[len(fileIndex)-1]
		if atPos >= 0 {
			// Strictly before atPos, so that the entry used is checked
			// against a batch below the recovery point.
			e = lookupPos(fileIndex, atPos-1)
		}
		k := 0
		for k < len(fileIndex) && fileIndex[k].pos <= e.pos {
			k++
		}
		s.index = slices.Clone(fileIndex[:k])
		pos, off, err := l.walk(sc, s, int64(e.pos), s.base+uint64(e.rel), stop)
		if err == nil && reached(pos, off) {
			s.end, s.next = pos, off
			return nil
		}
		l.opts.Logger.Warn("segment: index disagrees with its log; rebuilding", "file", s.idxPath, "position", pos, "err", err)
	}
	s.index = nil
	pos, off, err := l.walk(sc, s, 0, s.base, stop)
	if err == nil && !reached(pos, off) {
		err = fmt.Errorf("data reaches offset %d at byte %d; expected offset %d", off, pos, want)
		if atPos >= 0 {
			err = fmt.Errorf("%w at the recovery point, byte %d", err, atPos)
		}
	} else if errors.Is(err, errCleanEnd) {
		err = fmt.Errorf("data ends at offset %d, byte %d, before offset %d", off, pos, want)
	}
	if err != nil {
		return &CorruptError{File: s.logPath, Position: pos, Err: err}
	}
	s.end, s.next = pos, off
	return nil
}

// scanAbove scans s from byte pos and offset off, above the recovery point,
// to the first batch that is not whole, valid and in sequence, or until
// stop, and sets s.end and s.next there. It reports whether it stopped at a
// torn write rather than the clean end of the data.
func (l *Log) scanAbove(sc *scanner, s *segment, pos int64, off uint64, stop func(int64, uint64) bool) bool {
	pos, off, err := l.walk(sc, s, pos, off, stop)
	s.end, s.next = pos, off
	if err == nil || errors.Is(err, errCleanEnd) {
		return false
	}
	l.opts.Logger.Warn("segment: torn write cut off", "file", s.logPath, "position", pos, "offset", off, "reason", err)
	return true
}

// writeIndex replaces s's index file with s.index and fsyncs it.
func (l *Log) writeIndex(s *segment) error {
	f, err := l.fs.Create(s.idxPath)
	if err != nil {
		return fmt.Errorf("segment: rewrite index %s: %w", s.idxPath, err)
	}
	if len(s.index) > 0 {
		_, err = f.WriteAt(encodeIndex(s.index), 0)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("segment: rewrite index %s: %w", s.idxPath, err)
	}
	return nil
}

// removeSegments deletes the .log and .index files of bases (after a torn
// write: they follow the end of the log).
func (l *Log) removeSegments(bases []uint64) {
	for _, base := range bases {
		for _, p := range []string{logPath(l.dir, base), indexPath(l.dir, base), timeIndexPath(l.dir, base)} {
			if err := l.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				l.opts.Logger.Warn("segment: removing a segment after the torn tail failed", "file", p, "err", err)
				continue
			}
			l.opts.Logger.Warn("segment: removed a segment after the end of the log", "file", p)
		}
	}
}
