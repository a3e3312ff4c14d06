package segment

import (
	"errors"
	"fmt"
	"slices"
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
		if i > 0 && base != l.next {
			// Unreachable: recoverSegment checks that a segment with a
			// successor ends exactly at the successor's base.
			return &CorruptError{File: logPath(l.dir, base), Position: 0,
				Err: fmt.Errorf("segment starts at offset %d; the previous one ends at %d", base, l.next)}
		}
		s := l.newSegment(base)
		l.segs = append(l.segs, s)
		rewrote, err := l.recoverSegment(s, i, rpIdx, rp, bases)
		if err == nil {
			err = l.settle(s, i >= rpIdx, i == len(bases)-1)
		}
		if err != nil {
			return err
		}
		l.next = s.next
		l.size += s.end
		dirChanged = dirChanged || rewrote
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

// finishRecovery records the recovered end as synced (settle synced and
// closed each segment as it was recovered).
func (l *Log) finishRecovery(rpIdx int, rp recoveryPoint, found bool) error {
	act := l.active()
	l.synced = recoveryPoint{next: l.next, base: act.base, pos: act.end}
	if found {
		l.checkpointed = rp
	}
	return nil
}

// recoverSegment opens s (the i-th of bases) and finds its end; rewrote
// reports that its index file was rewritten. Only the last segment may end
// in a torn write (cut off here); in a segment with a successor, data that
// does not run whole and in sequence up to the successor's base offset is a
// *CorruptError, whatever the recovery point says (doc.go).
func (l *Log) recoverSegment(s *segment, i, rpIdx int, rp recoveryPoint, bases []uint64) (rewrote bool, err error) {
	if s.file, err = l.openHeld(l.fs.OpenReadWrite, s.logPath); err != nil {
		return false, fmt.Errorf("segment: open: %w", err)
	}
	fi, err := s.file.Stat()
	if err != nil {
		return false, fmt.Errorf("segment: open: %w", err)
	}
	size := fi.Size()
	s.alloc = size
	fileIndex, indexOK, why := readIndex(l.fs, s.idxPath, size)
	if !indexOK {
		l.opts.Logger.Warn("segment: rebuilding index from its log", "file", s.idxPath, "reason", why)
	}
	sc := &scanner{f: s.file, path: s.logPath, size: size, maxBatch: l.opts.MaxBatchBytes}
	last := i == len(bases)-1
	switch {
	case !last && i != rpIdx:
		// Sealed and durable (roll synced it before creating its
		// successor), whether below the recovery point or not.
		err = l.verifyBelow(sc, s, fileIndex, indexOK && i < rpIdx, -1, bases[i+1])
	case i == rpIdx:
		if size < rp.pos {
			return false, &CorruptError{File: s.logPath, Position: size,
				Err: fmt.Errorf("file is %d bytes, the recovery point is at byte %d", size, rp.pos)}
		}
		if err = l.verifyBelow(sc, s, fileIndex, indexOK, rp.pos, rp.next); err == nil {
			err = l.scanAbove(sc, s, s.end, s.next, bases, i)
		}
	default:
		err = l.scanAbove(sc, s, 0, s.base, bases, i)
	}
	if err != nil {
		return false, err
	}
	if last && size > s.end {
		if err := l.be.Truncate(s.file, s.end); err != nil {
			return false, fmt.Errorf("segment: open: cut torn tail: %w", err)
		}
		s.alloc = s.end
	}
	if !indexOK || !slices.Equal(s.index, fileIndex) {
		switch err := l.writeIndex(s); {
		case err == nil:
			rewrote = true
		case isNoSpace(err):
			// The log is intact and the rebuilt index is in memory:
			// reads use it, and the file is written later
			// (rewritePending).
			l.warnUnwritten(s.idxPath, err)
			s.idxFailed = true
		default:
			return false, err
		}
	}
	above := s.base // first offset above the recovery point
	switch {
	case i < rpIdx:
		above = s.next
	case i == rpIdx:
		above = rp.next
	}
	trewrote, err := l.recoverTimeIndex(s, above, i == len(bases)-1)
	if err != nil {
		return false, err
	}
	return rewrote || trewrote, nil
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
	if errors.Is(err, errRead) {
		return fmt.Errorf("segment: open: %w", err) // not seen, so not known corrupt
	}
	if err != nil {
		return &CorruptError{File: s.logPath, Position: pos, Err: err}
	}
	s.end, s.next = pos, off
	return nil
}

// scanAbove scans s, the i-th of bases, from byte pos and offset off,
// above the recovery point. In the last segment it stops at the first batch
// that is not whole, valid and in sequence, sets s.end and s.next there,
// and lets checkHole decide whether that is a torn write to cut or damage
// before valid data (per Options.Durability). In a
// segment with a successor the data must run whole and in sequence exactly
// up to the successor's base offset (later bytes are left over from a
// failed write before the roll): anything else is a *CorruptError.
func (l *Log) scanAbove(sc *scanner, s *segment, pos int64, off uint64, bases []uint64, i int) error {
	if i+1 < len(bases) {
		want := bases[i+1]
		pos, off, err := l.walk(sc, s, pos, off, func(_ int64, off uint64) bool { return off >= want })
		if err == nil && off != want {
			err = fmt.Errorf("data reaches offset %d at byte %d; the next segment %s starts at offset %d",
				off, pos, logPath(l.dir, want), want)
		} else if errors.Is(err, errCleanEnd) {
			err = fmt.Errorf("data ends at offset %d, byte %d; the next segment %s starts at offset %d",
				off, pos, logPath(l.dir, want), want)
		}
		if errors.Is(err, errRead) {
			return fmt.Errorf("segment: open: %w", err)
		}
		if err != nil {
			return &CorruptError{File: s.logPath, Position: pos, Err: err}
		}
		s.end, s.next = pos, off
		return nil
	}
	pos, off, err := l.walk(sc, s, pos, off, never)
	s.end, s.next = pos, off
	if pos >= sc.size {
		return nil // the file ends with whole batches
	}
	return l.checkHole(sc, s, err)
}

// checkHole decides about the end of the last segment's data, at s.end
// and offset s.next, where the scan stopped with cause (errCleanEnd for a
// zero magic). A failed read is returned as it is: bytes that could not
// be read are never cut. Nothing valid after it: a torn write (or
// preallocated zeros), cut off. A valid batch after it that continues
// the offsets (findContinuation): under DurableEveryBatch the bytes up to
// it were synced before any later batch was acknowledged, so this is
// damage, a *CorruptError, and nothing is cut; under the other policies a
// power loss can leave such a hole (the kernel flushes pages in any
// order), so it is cut, logged at ERROR with the offsets dropped.
func (l *Log) checkHole(sc *scanner, s *segment, cause error) error {
	pos, off := s.end, s.next
	if errors.Is(cause, errRead) {
		return fmt.Errorf("segment: open: %w", cause) // unseen bytes are never cut
	}
	q, h, found, err := sc.findContinuation(pos, s.base, off)
	if err != nil {
		return fmt.Errorf("segment: open: %w", err)
	}
	if !found {
		if !errors.Is(cause, errCleanEnd) {
			l.opts.Logger.Warn("segment: torn write cut off", "file", s.logPath, "position", pos, "offset", off, "reason", cause)
		}
		return nil
	}
	if errors.Is(cause, errCleanEnd) {
		cause = errors.New("zero magic")
	}
	if l.opts.Durability == DurableEveryBatch {
		return &CorruptError{File: s.logPath, Position: pos, Err: fmt.Errorf(
			"bad batch at offset %d (%v) followed by a valid batch at byte %d with offset %d: damage to data synced under sync policy every-batch, not a torn write",
			off, cause, q, h.BaseOffset)}
	}
	scratch := &segment{base: s.base, maxTs: -1}
	_, to, _ := l.walk(sc, scratch, q, h.BaseOffset, never)
	l.opts.Logger.Error("segment: hole before valid data cut off, records dropped (possible after a power loss under this sync policy)",
		"file", s.logPath, "position", pos, "from_offset", off, "to_offset", to, "valid_batch_at", q,
		"reason", cause, "sync_policy", l.opts.Durability.String())
	return nil
}

// writeIndex replaces s's index file with s.index (writeFileAtomic: never
// in place, so a crash leaves the old index or the new one).
func (l *Log) writeIndex(s *segment) error {
	if err := writeFileAtomic(l.fs, l.dir, s.idxPath, encodeIndex(s.index)); err != nil {
		return fmt.Errorf("segment: rewrite index %s: %w", s.idxPath, err)
	}
	return nil
}
