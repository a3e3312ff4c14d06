package segment

import (
	"errors"
	"fmt"
	"math"
	"syscall"
	"time"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/ring"
)

// Append writes batches at the end of the log with one gather write.
//
// The batches must already be validated (batch.Validate). Append patches
// their baseOffset fields in place, consecutively from NextOffset, so the
// caller's buffers are modified. If the active segment would grow past
// SegmentBytes, or a relative offset or position would overflow u32, it
// first rolls to a new segment: it fdatasyncs the old segment and writes
// the recovery point at its end, then creates the new segment's files and
// fsyncs the directory before returning. Otherwise it does not fdatasync
// the data: call Sync. A failed fdatasync at a roll returns an error
// wrapping ErrFailed (see Sync).
//
// On error nothing is published: NextOffset and the write position are
// unchanged and the next Append overwrites the same bytes. After a failed
// sync (ErrFailed) every Append fails until the Log is reopened.
func (l *Log) Append(batches [][]byte) (AppendInfo, error) {
	return l.AppendAt(batches, time.Now().UnixMilli())
}

// AppendAt is Append with the broker append time of the batches, appendMs
// (Unix ms), recorded in the segment's time index (see OffsetForTime and
// SegmentInfo.MaxAppendTime). Append times are kept monotonic: an appendMs
// below an earlier one is recorded as the earlier one, unless the earlier
// one is more than MaxClockAhead after appendMs (the clock was ahead):
// then the earlier times are clamped to appendMs first
// (ClampAppendTimes). The batches' leaderEpoch fields are set to 0
// (AppendEpoch sets another epoch).
func (l *Log) AppendAt(batches [][]byte, appendMs int64) (AppendInfo, error) {
	return l.AppendEpoch(batches, appendMs, 0)
}

// AppendEpoch is AppendAt that stamps every batch's leaderEpoch field
// (header offset 12, outside the CRC) with epoch, the leader epoch of the
// partition at this append (docs/architecture.md §3.2), as it patches
// baseOffset.
func (l *Log) AppendEpoch(batches [][]byte, appendMs int64, epoch uint32) (AppendInfo, error) {
	return l.appendBatches(batches, appendMs, func(b []byte, off uint64) {
		batch.SetBaseOffset(b, off)
		batch.SetLeaderEpoch(b, epoch)
	})
}

// AppendReplica appends batches copied from a partition's leader, keeping
// the baseOffset and leaderEpoch fields the leader gave them: the first
// batch's baseOffset must be NextOffset and each next batch must start
// where the one before it ends, or it returns an error wrapping
// ErrNotContiguous and writes nothing. The batches must already be validated
// (batch.Validate); appendMs is this replica's append time. Everything else
// is as for AppendAt.
func (l *Log) AppendReplica(batches [][]byte, appendMs int64) (AppendInfo, error) {
	l.mu.RLock()
	next := l.next
	l.mu.RUnlock()
	for i, b := range batches {
		h, err := batch.ParseHeader(b)
		if err != nil || h.Size() != len(b) || h.RecordCount == 0 {
			return AppendInfo{}, fmt.Errorf("segment: append replica: batch %d of %d bytes is not one whole batch (header: %w)", i, len(b), err)
		}
		if h.BaseOffset != next {
			return AppendInfo{}, fmt.Errorf("%w: batch %d of %d has baseOffset %d, the log needs %d", ErrNotContiguous, i, len(batches), h.BaseOffset, next)
		}
		next = h.NextOffset()
	}
	return l.appendBatches(batches, appendMs, nil)
}

// appendBatches is AppendAt with stamp, which patches each batch with the
// offset it gets (nil: the batches keep theirs, checked by AppendReplica).
func (l *Log) appendBatches(batches [][]byte, appendMs int64, stamp func(b []byte, off uint64)) (AppendInfo, error) {
	l.mu.RLock()
	closed, failed, next, act := l.closed, l.failed, l.next, l.active()
	l.mu.RUnlock()
	switch {
	case closed:
		return AppendInfo{}, ErrClosed
	case failed != nil:
		return AppendInfo{}, failed
	case len(batches) == 0:
		return AppendInfo{BaseOffset: next, NextOffset: next, Segment: act.base, Position: act.end}, nil
	}
	if err := l.unpark(act); err != nil {
		return AppendInfo{}, err
	}
	if l.lastAppend > appendMs+MaxClockAhead.Milliseconds() {
		// An earlier append was dated while the clock was ahead: bound it
		// rather than date this one (and every later one) after it.
		if _, err := l.ClampAppendTimes(appendMs); err != nil {
			l.opts.Logger.Warn("segment: clamping append times failed", "dir", l.dir, "err", err)
		}
	}
	var total int64
	var count uint64
	for i, b := range batches {
		h, err := batch.ParseHeader(b)
		if err != nil || h.Size() != len(b) || h.RecordCount == 0 {
			return AppendInfo{}, fmt.Errorf("segment: append: batch %d of %d bytes is not one whole batch (header: %w)", i, len(b), err)
		}
		total += int64(len(b))
		count += uint64(h.RecordCount)
	}
	info := AppendInfo{BaseOffset: next, NextOffset: next + count, Bytes: total}
	if l.needsRoll(act, total, next, count) {
		s, err := l.roll(act, next)
		if err != nil {
			return AppendInfo{}, err
		}
		act, info.Rolled = s, true
		l.spare.Store(0)
	}
	if act.end+total > math.MaxUint32 {
		return AppendInfo{}, fmt.Errorf("segment: append of %d bytes does not fit a segment's u32 positions", total)
	}
	if err := l.grow(act, act.end+total); err != nil {
		return AppendInfo{}, err
	}
	off, maxTs := next, act.maxTs
	for _, b := range batches {
		if stamp != nil {
			stamp(b, off)
		}
		h, _ := batch.ParseHeader(b)
		off, maxTs = h.NextOffset(), max(maxTs, h.MaxTimestamp)
	}
	bufs := batches
	if act.dirty > act.end+total {
		// An earlier failed write left bytes past this append's end that
		// could pass for batches after a crash; zero them in the same write.
		bufs = append(bufs[:len(bufs):len(bufs)], make([]byte, act.dirty-act.end-total))
	}
	pos := act.end
	if n, err := l.writeData(act.file, bufs, pos); err != nil {
		act.dirty = max(act.dirty, pos+n)
		return AppendInfo{}, fmt.Errorf("segment: append to %s at byte %d: wrote %d of %d bytes: %w", act.logPath, pos, n, total, err)
	}
	act.dirty = 0
	add := l.indexBatches(act, batches, pos, next)
	tadd := l.timeBatches(act, appendMs, next)
	l.mu.Lock()
	act.index = append(act.index, add...)
	l.publishTimes(act, tadd)
	act.end = pos + total
	l.spare.Store(act.alloc - act.end)
	act.next = off
	act.maxTs = maxTs
	l.next = off
	l.size += total
	l.mu.Unlock()
	info.Segment, info.Position = act.base, pos
	return info, nil
}

// needsRoll reports whether an append of total bytes and count records must
// go to a new segment.
func (l *Log) needsRoll(act *segment, total int64, next, count uint64) bool {
	if act.end == 0 {
		return false
	}
	return act.end+total > l.opts.SegmentBytes ||
		act.end+total > math.MaxUint32 ||
		next+count-act.base > math.MaxUint32
}

// indexBatches returns the sparse index entries of batches written at pos
// and writes them to the .index file. A failed index write is logged, not
// returned: the data is written, and recovery rebuilds an index that
// disagrees with its log.
func (l *Log) indexBatches(s *segment, batches [][]byte, pos int64, off uint64) []indexEntry {
	var add []indexEntry
	entries := s.index
	for _, b := range batches {
		if l.ix.wants(entries, pos) {
			e := indexEntry{rel: uint32(off - s.base), pos: uint32(pos)}
			add = append(add, e)
			entries = append(entries[:len(entries):len(entries)], e)
		}
		h, _ := batch.ParseHeader(b)
		pos += int64(len(b))
		off = h.NextOffset()
	}
	if len(add) == 0 {
		return nil
	}
	if s.idx == nil {
		// Not opened for lack of space (openActiveIndexes), or closed by
		// ParkIfOver: the roll writes it.
		s.idxFailed = true
		return add
	}
	at := int64(len(s.index)) * indexEntrySize
	if _, err := l.be.WriteAt(s.idx, [][]byte{encodeIndex(add)}, at); err != nil {
		l.opts.Logger.Warn("segment: index write failed; it is rewritten at the roll or rebuilt by recovery", "file", s.idxPath, "err", err)
		s.idxFailed = true
	}
	return add
}

// minGrowBytes is the first fallocate step of a segment (at most
// PreallocBytes): an empty segment takes no disk space, and a partition
// that receives little data takes little.
const minGrowBytes = 1 << 20

// growSize returns the size to which a segment file of alloc bytes grows
// to hold need bytes: need itself if alloc already holds it; otherwise the
// first step is max(need, min(1 MiB, prealloc)), and each later step
// doubles alloc, at most prealloc bytes per step, and at least up to need.
// The result does not pass segBytes unless need does.
func growSize(alloc, need, prealloc, segBytes int64) int64 {
	if need <= alloc {
		return alloc
	}
	size := max(need, min(minGrowBytes, prealloc))
	if alloc > 0 {
		size = max(need, alloc+min(alloc, prealloc))
	}
	if need <= segBytes && size > segBytes {
		size = max(segBytes, need)
	}
	return size
}

// allocAlign is the unit of a preallocation step shrunk to the room
// above the free-space floor: a file system block.
const allocAlign = 4 << 10

// allocRoomShare: a preallocation step takes at most 1/allocRoomShare of
// the room above the free-space floor. Partitions that grow one after the
// other thus shrink the room geometrically instead of the first few taking
// all of it: on a 16 MiB volume, 1 MiB first steps of 13 partitions used
// to leave nothing, and the 14th partition's first record got DISK_FULL.
const allocRoomShare = 8

// fitStep returns the size to which a segment file of alloc bytes grows to
// hold need bytes when growSize asked for size but only room bytes may be
// allocated without taking the file system below its free-space floor
// (Options.AllocRoom): the step shrinks to an eighth of the room
// (allocRoomShare), in whole 4 KiB blocks, and never below need, which
// the floor check admitted already.
func fitStep(alloc, need, size, room int64) int64 {
	share := max(room, 0) / allocRoomShare
	if size-alloc <= share {
		return size
	}
	return max(need, alloc+share&^(allocAlign-1))
}

// grow makes sure s's file is allocated and mapped up to at least need
// bytes, growing by fallocate in steps that start small and double up to
// PreallocBytes (growSize), and remaps it if it grew. Nothing is allocated
// or mapped while need is 0: readers skip an empty segment. Readers holding
// the old mapping keep it until they release it.
func (l *Log) grow(s *segment, need int64) error {
	s.mapMu.Lock()
	mapped := s.m != nil // a read may map a parked segment (ParkIfOver)
	s.mapMu.Unlock()
	if need <= s.alloc && (mapped || need == 0) {
		return nil
	}
	size := growSize(s.alloc, need, l.opts.PreallocBytes, l.opts.SegmentBytes)
	if size > need && l.opts.AllocRoom != nil {
		size = fitStep(s.alloc, need, size, l.opts.AllocRoom())
	}
	if size > s.alloc {
		err := l.be.Allocate(s.file, s.alloc, size-s.alloc)
		if isNoSpace(err) && size > need {
			// The step does not fit in the free space; the write may: grow
			// by what it needs, so a nearly full disk refuses only the
			// batches that do not fit. The retry covers the same range
			// from s.alloc, whatever the failed call left allocated.
			size = need
			err = l.be.Allocate(s.file, s.alloc, size-s.alloc)
		}
		if err != nil {
			return fmt.Errorf("segment: preallocate %s to %d bytes: %w", s.logPath, size, err)
		}
		if l.opts.Allocated != nil {
			l.opts.Allocated(size-s.alloc, min(need, size)-s.alloc)
		}
	} else {
		size = s.alloc
	}
	m, err := newMapping(s.file, size, l.files)
	if errors.Is(err, syscall.ENOMEM) {
		// vm.max_map_count: make room among idle sealed segments.
		l.files.trimAll()
		m, err = newMapping(s.file, size, l.files)
	}
	if err != nil {
		return err
	}
	s.alloc = size
	l.spare.Store(s.alloc - s.end)
	s.mapMu.Lock()
	old := s.m
	s.m = m
	s.mapMu.Unlock()
	if old != nil {
		old.release()
	} else {
		l.files.trim() // a new mapping: make room among sealed segments
	}
	return nil
}

// roll creates the segment with base offset base, makes its name durable,
// and makes it the active segment. The old active segment, old, is sealed:
// if no reader has it mapped, its preallocated tail is trimmed and its
// in-memory index dropped (later reads map the .index file); its three
// files are closed (sealOld synced them), whatever the sync policy, so a
// sealed segment holds no file descriptor, and a mapping only while a
// reader or the FileCache keeps it.
//
// Before the new file is created, old is fdatasynced, whatever the sync
// policy, and the recovery point is moved to its end (sealOld): a segment
// that has a successor is durable, so recovery may treat any damage in it
// as corruption and cut a torn write only in the last segment (doc.go).
func (l *Log) roll(old *segment, base uint64) (*segment, error) {
	if err := l.sealOld(old, base); err != nil {
		return nil, err
	}
	s, err := l.createSegment(base)
	if err != nil {
		return nil, err
	}
	dropIndex := false
	old.mapMu.Lock()
	if old.m == nil || old.m.refs.Load() == 1 {
		// (Unmapped: parked, ParkIfOver, and reopened by this append.)
		if old.m != nil {
			old.m.release()
			old.m = nil
		}
		if err := l.be.Truncate(old.file, old.end); err != nil {
			l.opts.Logger.Warn("segment: trimming a sealed segment failed", "file", old.logPath, "err", err)
		}
		// Later reads map the .index file; make it match the in-memory
		// index if an index write failed. Nothing has it mapped yet.
		dropIndex = true
		if old.idxFailed {
			if err := l.writeIndex(old); err != nil {
				l.warnUnwritten(old.idxPath, err)
				dropIndex = false // kept in memory; rewritePending retries
			} else {
				old.idxFailed = false
			}
		}
	}
	old.mapMu.Unlock()
	dropTimes := l.sealTimeIndex(old)
	closeErr := errors.Join(l.closeHeld(&old.idx), l.closeHeld(&old.file), l.closeHeld(&old.tidx))
	l.mu.Lock()
	if dropIndex {
		old.index = nil
	}
	if dropTimes {
		old.times = nil
	}
	l.segs = append(l.segs, s)
	l.mu.Unlock()
	if closeErr != nil {
		l.opts.Logger.Warn("segment: closing a sealed segment's files failed", "file", old.logPath, "err", closeErr)
	}
	// A mapping kept for a reader is now a sealed segment's: the FileCache
	// may evict it once idle. Trim for the new segment's files.
	l.files.touch(old)
	return s, nil
}

// sealOld fdatasyncs old, the active segment about to be sealed at offset
// next, with its time index, and checkpoints the recovery point at its end.
// A failed sync puts the Log in the failed state (see Sync); a failed
// checkpoint is logged: the recovery point only shortens recovery.
func (l *Log) sealOld(old *segment, next uint64) error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	files := []ring.File{old.file}
	if old.tidx != nil {
		files = append(files, old.tidx)
	}
	if err := l.be.Sync(files...); err != nil {
		err = fmt.Errorf("%w: sync %s before the roll: %w", ErrFailed, old.logPath, err)
		l.mu.Lock()
		l.failed = err
		l.mu.Unlock()
		return err
	}
	if l.synced.next <= next {
		l.synced = recoveryPoint{next: next, base: old.base, pos: old.end}
	}
	if err := l.checkpointLocked(); err != nil {
		l.opts.Logger.Warn("segment: recovery-point checkpoint at a roll failed", "dir", l.dir, "err", l.files.observe(err))
	}
	l.rewritePending()
	return nil
}

// createSegment creates the .log and .index files of a new segment and
// fsyncs the directory. On error it removes what it created.
func (l *Log) createSegment(base uint64) (*segment, error) {
	s := l.newSegment(base)
	var err error
	if s.file, err = l.openHeld(l.fs.Create, s.logPath); err == nil {
		if s.idx, err = l.openHeld(l.fs.Create, s.idxPath); err == nil {
			if s.tidx, err = l.openHeld(l.fs.Create, s.tidxPath); err == nil {
				err = l.fs.SyncDir(l.dir)
			}
		}
	}
	if err != nil {
		for _, f := range []*ring.File{&s.file, &s.idx, &s.tidx} {
			_ = l.closeHeld(f)
		}
		// Best effort: a leftover empty file is removed or reused at the
		// next recovery.
		_ = l.fs.Remove(s.tidxPath)
		_ = l.fs.Remove(s.idxPath)
		_ = l.fs.Remove(s.logPath)
		return nil, l.files.observe(fmt.Errorf("segment: create segment %d: %w", base, err))
	}
	return s, nil
}
