package segment

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"runtime/debug"
	"slices"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/ring"
)

// truncateCopyChunk is how much of a segment's kept prefix TruncateTo
// copies at a time when a reader holds the segment's mapping.
const truncateCopyChunk = 1 << 20

// TruncateTo removes every batch at or after offset, so that NextOffset
// becomes offset: a replica cutting a suffix that diverges from its
// leader's log (docs/storage.md, Truncation). offset must be the base
// offset of a batch of the log or NextOffset (then nothing changes);
// anything else returns an error wrapping ErrNotBoundary and changes
// nothing.
//
// In order: the log is synced and the recovery point moved to offset
// (everything kept is durable, and the recovery point never names a byte
// that is cut); the segments after the one holding offset are deleted,
// newest first, each followed by a directory fsync; the segment holding
// offset is cut (its .log, .index and .timeindex) and fsynced, and it
// becomes the active segment again if it was sealed. A segment cut at its
// base offset stays, empty. A crash in between leaves a log that ends at a
// batch boundary at or after offset, with every segment whole, which Open
// recovers like any other; the caller truncates again.
//
// Readers stay safe: Views already taken keep their mappings (a deleted
// segment's file stays mapped until they release it, as with
// DeleteSegmentsBefore). The cut segment's .log is cut in place
// (ftruncate) only when no View holds its mapping; otherwise its kept
// prefix is copied to a new file (temp file, fsync, rename, fsync of the
// directory), so no View ever maps bytes past the end of its file. Reads
// that start after the call see the log end at offset.
//
// SegmentInfo.MaxTimestamp of the cut segment is not recomputed: it may
// still count a removed batch. Like Append, TruncateTo must be called from
// the appending goroutine; it is serialized with Sync, Checkpoint and
// DeleteSegmentsBefore. A failure after the recovery point was moved puts
// the Log in the failed state (an error wrapping ErrFailed, as for a
// failed sync) until it is reopened.
func (l *Log) TruncateTo(offset uint64) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.RLock()
	closed, failed, next, start := l.closed, l.failed, l.next, l.segs[0].base
	l.mu.RUnlock()
	switch {
	case closed:
		return ErrClosed
	case failed != nil:
		return failed
	case offset == next:
		return nil
	case offset < start || offset > next:
		return fmt.Errorf("%w: truncate %s to offset %d, outside the log [%d, %d]", ErrNotBoundary, l.dir, offset, start, next)
	}
	i, pos, err := l.boundary(offset)
	if err != nil {
		return err
	}
	s := l.segs[i] // segs change only on this goroutine or under syncMu
	index, times, err := l.keptIndexes(s, offset, pos)
	if err != nil {
		return err
	}
	if err := l.syncLocked(); err != nil {
		return err
	}
	prevSynced := l.synced
	l.synced = recoveryPoint{next: offset, base: s.base, pos: pos}
	if err := l.checkpointLocked(); err != nil {
		if !isNoSpace(err) {
			l.synced = prevSynced
			return fmt.Errorf("segment: truncate %s to offset %d: %w", l.dir, offset, err)
		}
		// As for retention: a recovery point past the cut would make
		// Open report the log corrupt; without one Open scans it all.
		if err := l.dropRecoveryPoint(err); err != nil {
			l.synced = prevSynced
			return err
		}
	}

	l.mu.Lock()
	oldAct := l.active()
	wasActive := s == oldAct
	doomed := slices.Clone(l.segs[i+1:])
	for _, d := range doomed {
		l.size -= d.end
	}
	l.size -= s.end - pos
	l.segs = l.segs[:i+1]
	s.end, s.next, l.next = pos, offset, offset
	s.index = index
	s.times = times
	s.firstAppend, s.maxAppend = -1, -1
	if n := len(times); n > 0 {
		s.firstAppend, s.maxAppend = times[0].ts, times[n-1].ts
	}
	l.lastAppend = -1
	for _, t := range l.segs {
		l.lastAppend = max(l.lastAppend, t.maxAppend)
	}
	// Views taken from now on read below pos only. One that holds the
	// mapping already may read anything up to the old end.
	s.mapMu.Lock()
	inPlace := s.m == nil || s.m.refs.Load() == 1
	s.mapMu.Unlock()
	l.mu.Unlock()

	if err := l.cut(s, wasActive, oldAct, doomed, pos, inPlace); err != nil {
		err = fmt.Errorf("%w: truncate %s to offset %d: %w", ErrFailed, l.dir, offset, err)
		l.mu.Lock()
		l.failed = err
		l.mu.Unlock()
		return err
	}
	l.opts.Logger.Info("segment: log truncated", "dir", l.dir, "offset", offset, "from_offset", next,
		"segments_deleted", len(doomed), "in_place", inPlace)
	return nil
}

// cut does TruncateTo's file work once the in-memory state says the log
// ends at byte pos of s: it deletes the doomed segments (newest first,
// each followed by a directory fsync), cuts s's .log in place or by copy
// (inPlace), rewrites or cuts its indexes, fsyncs them, and makes s the
// active segment with open files and a current mapping.
func (l *Log) cut(s *segment, wasActive bool, oldAct *segment, doomed []*segment, pos int64, inPlace bool) error {
	if !wasActive {
		closeErr := errors.Join(l.closeHeld(&oldAct.idx), l.closeHeld(&oldAct.file), l.closeHeld(&oldAct.tidx))
		if closeErr != nil {
			l.opts.Logger.Warn("segment: closing a truncated segment's files failed", "file", oldAct.logPath, "err", closeErr)
		}
	}
	for j := len(doomed) - 1; j >= 0; j-- {
		d := doomed[j]
		l.dropMapping(d)
		// The .log last, as DeleteSegmentsBefore does.
		for _, p := range []string{d.idxPath, d.tidxPath, d.logPath} {
			if err := l.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		// One segment at a time: a crash never leaves a gap in the offsets.
		if err := l.fs.SyncDir(l.dir); err != nil {
			return err
		}
	}
	if s.file == nil {
		f, err := l.openHeld(l.fs.OpenReadWrite, s.logPath)
		if err != nil {
			return err
		}
		s.file = f
	}
	if inPlace {
		if err := l.be.Truncate(s.file, pos); err != nil {
			return err
		}
	} else if err := l.replacePrefix(s, pos); err != nil {
		return err
	}
	s.alloc, s.dirty = pos, 0
	if err := l.cutIndexes(s, wasActive); err != nil {
		return err
	}
	files := []ring.File{s.file}
	for _, f := range []ring.File{s.idx, s.tidx} {
		if f != nil {
			files = append(files, f)
		}
	}
	if err := l.be.Sync(files...); err != nil {
		return err
	}
	if !wasActive || !inPlace {
		// The mapping is of the old file, or a sealed segment's with its
		// mapped .index: map the cut file afresh. Views keep the old one.
		l.dropMapping(s)
	}
	if err := l.grow(s, s.end); err != nil {
		return err
	}
	l.spare.Store(s.alloc - s.end)
	return nil
}

// replacePrefix replaces s's .log by a copy of its first pos bytes (temp
// file, fsync, rename, fsync of the directory) and reopens it as s.file:
// Views that map the old file keep its bytes.
func (l *Log) replacePrefix(s *segment, pos int64) error {
	tmp := s.logPath + tmpSuffix
	f, err := l.fs.Create(tmp)
	if err != nil {
		return err
	}
	buf := make([]byte, min(pos, truncateCopyChunk))
	for at := int64(0); at < pos && err == nil; at += int64(len(buf)) {
		b := buf[:min(int64(len(buf)), pos-at)]
		var n int
		if n, err = s.file.ReadAt(b, at); err == io.EOF && n == len(b) {
			err = nil
		}
		if err == nil {
			_, err = f.WriteAt(b, at)
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.fs.Rename(tmp, s.logPath)
	}
	if err == nil {
		err = l.fs.SyncDir(l.dir)
	}
	if err != nil {
		_ = l.fs.Remove(tmp) // best effort; Open deletes .sqtmp files
		return fmt.Errorf("copy the first %d bytes of %s: %w", pos, s.logPath, err)
	}
	if err := l.closeHeld(&s.file); err != nil {
		l.opts.Logger.Warn("segment: closing a replaced segment file failed", "file", s.logPath, "err", err)
	}
	s.file, err = l.openHeld(l.fs.OpenReadWrite, s.logPath)
	return err
}

// cutIndexes makes s's .index and .timeindex files hold s.index and
// s.times and leaves them open for appending: the active segment's files
// are cut in place (nothing maps them); a sealed segment's are replaced
// (temp file and rename: a View may map its .index) and opened.
func (l *Log) cutIndexes(s *segment, wasActive bool) error {
	if wasActive {
		if s.idx != nil {
			if err := l.be.Truncate(s.idx, int64(len(s.index))*indexEntrySize); err != nil {
				return err
			}
		}
		if s.tidx != nil {
			if err := l.be.Truncate(s.tidx, int64(len(s.times))*timeEntrySize); err != nil {
				return err
			}
		}
		return nil
	}
	if err := l.writeIndex(s); err != nil {
		return err
	}
	if err := l.writeTimeIndex(s, s.times); err != nil {
		return err
	}
	s.idxFailed, s.tidxFailed = false, false
	var err error
	if s.idx, err = l.openHeld(l.fs.OpenReadWrite, s.idxPath); err != nil {
		return err
	}
	s.tidx, err = l.openHeld(l.fs.OpenReadWrite, s.tidxPath)
	return err
}

// keptIndexes returns the sparse index and time index entries of s below
// offset (at byte pos): from memory when s holds them, else from its
// files. An .index file that cannot be used is rebuilt from the log up to
// pos; a time index without an entry for the records kept gets one dated
// now, an upper bound of their append time, as recovery dates records
// (recoverTimeIndex).
func (l *Log) keptIndexes(s *segment, offset uint64, pos int64) ([]indexEntry, []timeEntry, error) {
	l.mu.RLock()
	index, times, end, count := s.index, s.times, s.end, s.next-s.base
	l.mu.RUnlock()
	if index == nil && pos > 0 {
		var ok bool
		var why string
		if index, ok, why = readIndex(l.fs, s.idxPath, end); !ok {
			l.opts.Logger.Warn("segment: truncate: rebuilding index from its log", "file", s.idxPath, "reason", why)
			var err error
			if index, err = l.rebuildIndex(s, pos); err != nil {
				return nil, nil, err
			}
		}
	}
	if times == nil && pos > 0 {
		var err error
		times, _, _, err = readTimeIndexFile(l.fs, s.tidxPath, count, anyTime)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("segment: truncate: %w", err)
		}
	}
	rel := uint32(offset - s.base)
	keptIdx := slices.Clone(index[:lookupEnd(index, rel)])
	var keptTimes []timeEntry
	for _, e := range times {
		if e.rel >= rel {
			break
		}
		keptTimes = append(keptTimes, e)
	}
	if len(keptTimes) == 0 && pos > 0 {
		keptTimes = []timeEntry{{ts: max(l.opts.Now().UnixMilli(), 1), rel: 0}}
	}
	return keptIdx, keptTimes, nil
}

// lookupEnd returns how many entries of index have a relative offset
// below rel.
func lookupEnd(index []indexEntry, rel uint32) int {
	n := 0
	for n < len(index) && index[n].rel < rel {
		n++
	}
	return n
}

// rebuildIndex returns the sparse index of s's first pos bytes, read
// through the file (CRC checked).
func (l *Log) rebuildIndex(s *segment, pos int64) ([]indexEntry, error) {
	f, err := l.fs.Open(s.logPath)
	if err != nil {
		return nil, fmt.Errorf("segment: truncate: %w", err)
	}
	defer f.Close()
	sc := &scanner{f: f, path: s.logPath, size: pos, maxBatch: l.opts.MaxBatchBytes}
	scratch := l.newSegment(s.base)
	if _, _, err := l.walk(sc, scratch, 0, s.base, func(p int64, _ uint64) bool { return p >= pos }); err != nil {
		return nil, &CorruptError{File: s.logPath, Position: pos, Err: fmt.Errorf("rebuilding the index to truncate: %w", err)}
	}
	return scratch.index, nil
}

// boundary returns the index in l.segs of the segment holding offset (a
// batch's base offset, within the log) and the byte position of that
// batch, or an error wrapping ErrNotBoundary when offset falls inside a
// batch.
func (l *Log) boundary(offset uint64) (int, int64, error) {
	l.mu.RLock()
	i := l.find(offset)
	s := l.segs[i]
	if offset == s.base {
		l.mu.RUnlock()
		return i, 0, nil
	}
	rs := readSeg{s: s, end: s.end, index: s.index}
	m, err := l.acquire(s, i == len(l.segs)-1)
	l.mu.RUnlock()
	if err != nil {
		return 0, 0, err
	}
	defer m.release()
	rs.m = m
	pos, h, err := locateHeader(rs, offset)
	if err != nil {
		return 0, 0, err
	}
	if h.BaseOffset != offset {
		return 0, 0, fmt.Errorf("%w: truncate %s to offset %d, inside the batch of offsets %d to %d", ErrNotBoundary, l.dir, offset, h.BaseOffset, h.LastOffset())
	}
	return i, pos, nil
}

// locateHeader is locate that also returns the header of the batch found,
// with memory faults on the mapping turned into a *CorruptError.
func locateHeader(rs readSeg, offset uint64) (pos int64, h batch.Header, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(interface{ Addr() uintptr })
			if !ok {
				panic(r)
			}
			err = &CorruptError{File: rs.s.logPath, Position: -1, Err: fmt.Errorf("I/O fault reading the mapping at address %#x", f.Addr())}
		}
	}()
	if pos, err = locate(rs, offset); err != nil {
		return 0, h, err
	}
	h, err = headerAt(rs, pos)
	return pos, h, err
}

// TruncateFullyAndStartAt removes every segment and starts the log empty
// at offset (Kafka's truncateFullyAndStartAt): a replica whose log end is
// below its leader's log start, or whose whole log diverges, starts over
// at the leader's log start. Readers holding Views keep their mappings.
//
// In order: the in-memory log becomes empty at offset; the recovery point
// is removed; the old segments are deleted, newest first, each followed
// by a directory fsync; the new empty segment is created (directory
// fsynced) and the recovery point written at it. A crash in between
// leaves a prefix of the old segments or an empty directory, which Open
// recovers (an empty directory as an empty log at offset 0); the caller
// starts over again. Like Append it must be called from the appending
// goroutine. A failure puts the Log in the failed state (ErrFailed).
func (l *Log) TruncateFullyAndStartAt(offset uint64) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	if l.closed || l.failed != nil {
		err := l.failed
		if l.closed {
			err = ErrClosed
		}
		l.mu.Unlock()
		return err
	}
	doomed := l.segs
	placeholder := l.newSegment(offset)
	l.segs = []*segment{placeholder}
	l.next, l.size, l.lastAppend = offset, 0, -1
	l.mu.Unlock()
	l.spare.Store(0)
	fail := func(err error) error {
		err = fmt.Errorf("%w: start %s over at offset %d: %w", ErrFailed, l.dir, offset, err)
		l.mu.Lock()
		l.failed = err
		l.mu.Unlock()
		return err
	}
	if err := l.fs.Remove(filepath.Join(l.dir, recoveryPointName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail(err)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fail(err)
	}
	l.checkpointed = recoveryPoint{}
	for j := len(doomed) - 1; j >= 0; j-- {
		d := doomed[j]
		closeErr := errors.Join(l.closeHeld(&d.idx), l.closeHeld(&d.file), l.closeHeld(&d.tidx))
		if closeErr != nil {
			l.opts.Logger.Warn("segment: closing a removed segment's files failed", "file", d.logPath, "err", closeErr)
		}
		l.dropMapping(d)
		for _, p := range []string{d.idxPath, d.tidxPath, d.logPath} {
			if err := l.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fail(err)
			}
		}
		if err := l.fs.SyncDir(l.dir); err != nil {
			return fail(err)
		}
	}
	s, err := l.createSegment(offset)
	if err != nil {
		return fail(err)
	}
	l.mu.Lock()
	l.segs = []*segment{s}
	l.mu.Unlock()
	l.synced = recoveryPoint{next: offset, base: offset}
	if err := l.checkpointLocked(); err != nil && !isNoSpace(err) {
		return fail(err)
	}
	l.opts.Logger.Info("segment: log started over", "dir", l.dir, "offset", offset, "segments_deleted", len(doomed))
	return nil
}
