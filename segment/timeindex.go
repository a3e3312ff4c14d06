package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"sort"

	"github.com/seedqueue/sq/ring"
)

// timeEntrySize is the size of one time index entry on disk: i64 broker
// append time (Unix ms), u32 relative offset, little-endian.
const timeEntrySize = 12

// timeEntry says that the batch starting at relative offset rel, and every
// batch after it up to the next entry, was appended at broker time ts
// (Unix ms). Entries strictly increase in both fields.
type timeEntry struct {
	ts  int64
	rel uint32
}

func timeIndexPath(dir string, base uint64) string {
	return filepath.Join(dir, baseName(base)+timeIndexSuffix)
}

// newSegment returns the in-memory state of an empty segment at base.
func (l *Log) newSegment(base uint64) *segment {
	return &segment{base: base, next: base, maxTs: -1, firstAppend: -1, maxAppend: -1,
		logPath: logPath(l.dir, base), idxPath: indexPath(l.dir, base), tidxPath: timeIndexPath(l.dir, base)}
}

// encodeTimeIndex returns the on-disk form of entries.
func encodeTimeIndex(entries []timeEntry) []byte {
	b := make([]byte, len(entries)*timeEntrySize)
	for i, e := range entries {
		binary.LittleEndian.PutUint64(b[i*timeEntrySize:], uint64(e.ts))
		binary.LittleEndian.PutUint32(b[i*timeEntrySize+8:], e.rel)
	}
	return b
}

// timeBounds are the append times a time index entry may plausibly hold
// (Unix ms): at least floor (the previous segment's last time and
// Options.MinAppendTime, and never below 1: zero or negative means damage)
// and at most ceil (the clock plus MaxClockAhead).
type timeBounds struct{ floor, ceil int64 }

// anyTime accepts every positive time: for reading a time index that Open
// already checked.
var anyTime = timeBounds{floor: 1, ceil: math.MaxInt64}

// decodeTimeIndex returns the longest plausible prefix of the entries in b
// for a segment holding count records: the first entry at relative offset
// 0, then strictly increasing times and offsets, every offset below count
// and every time within tb. whole is false when b holds anything beyond
// that prefix (an implausible entry, or a size that is not a multiple of
// the entry size), and why then says what.
func decodeTimeIndex(b []byte, count uint64, tb timeBounds) (entries []timeEntry, whole bool, why string) {
	n := len(b) / timeEntrySize
	for i := 0; i < n; i++ {
		e := timeEntry{
			ts:  int64(binary.LittleEndian.Uint64(b[i*timeEntrySize:])),
			rel: binary.LittleEndian.Uint32(b[i*timeEntrySize+8:]),
		}
		switch {
		case uint64(e.rel) >= count:
			return entries, false, fmt.Sprintf("entry %d: offset %d outside the segment's %d records", i, e.rel, count)
		case i == 0 && e.rel != 0:
			return entries, false, fmt.Sprintf("first entry at relative offset %d, not 0", e.rel)
		case e.ts < tb.floor:
			return entries, false, fmt.Sprintf("entry %d: time %d before %d (zero, or earlier than the log before it or Options.MinAppendTime)", i, e.ts, tb.floor)
		case e.ts > tb.ceil:
			return entries, false, fmt.Sprintf("entry %d: time %d in the future (after %d)", i, e.ts, tb.ceil)
		case i > 0 && (e.ts <= entries[i-1].ts || e.rel <= entries[i-1].rel):
			return entries, false, fmt.Sprintf("entry %d %+v does not follow %+v", i, e, entries[i-1])
		}
		entries = append(entries, e)
	}
	if len(b)%timeEntrySize != 0 {
		return entries, false, fmt.Sprintf("size %d is not a multiple of %d", len(b), timeEntrySize)
	}
	return entries, true, ""
}

// readTimeIndexFile reads and decodes the time index at path.
func readTimeIndexFile(fsys ring.FS, path string, count uint64, tb timeBounds) (entries []timeEntry, whole bool, why string, err error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, false, "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, "", err
	}
	b := make([]byte, fi.Size())
	if n, err := f.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && n == len(b)) {
		return nil, false, "", err
	}
	entries, whole, why = decodeTimeIndex(b, count, tb)
	return entries, whole, why, nil
}

// searchTime returns the index of the first entry with ts >= ms, or
// len(entries).
func searchTime(entries []timeEntry, ms int64) int {
	return sort.Search(len(entries), func(i int) bool { return entries[i].ts >= ms })
}

// timeBatches returns the time index entry of an append at broker time
// appendMs whose first batch gets offset off in segment s (nil when the
// append falls in the same millisecond as the segment's last entry, or the
// clock went back), and writes it to s's .timeindex file. Times are kept
// monotonic across the log: an append is never dated before an earlier one.
// A failed write is logged, not returned (as for the offset index): the
// file is rewritten at the roll, and recovery repairs it.
func (l *Log) timeBatches(s *segment, appendMs int64, off uint64) []timeEntry {
	ts := max(appendMs, l.lastAppend)
	if n := len(s.times); n > 0 && ts <= s.times[n-1].ts {
		return nil
	}
	add := []timeEntry{{ts: ts, rel: uint32(off - s.base)}}
	if s.tidx == nil {
		s.tidxFailed = true // closed by ParkIfOver or for lack of space: the roll writes it
	} else {
		at := int64(len(s.times)) * timeEntrySize
		if _, err := l.be.WriteAt(s.tidx, [][]byte{encodeTimeIndex(add)}, at); err != nil {
			l.opts.Logger.Warn("segment: time index write failed; it is rewritten at the roll or repaired by recovery", "file", s.tidxPath, "err", err)
			s.tidxFailed = true
		}
	}
	return add
}

// publishTimes records entries added by an append; l.mu is held for writing.
func (l *Log) publishTimes(s *segment, add []timeEntry) {
	if len(add) == 0 {
		return
	}
	if len(s.times) == 0 {
		s.firstAppend = add[0].ts
	}
	s.times = append(s.times, add...)
	s.maxAppend = add[len(add)-1].ts
	l.lastAppend = s.maxAppend
}

// sealTimeIndex is called at the roll of s (on the append goroutine): it
// rewrites s's .timeindex from memory if a write to it failed, and reports
// whether the in-memory entries can be dropped (the file is complete). The
// roll then closes the file (sealOld synced it).
func (l *Log) sealTimeIndex(s *segment) bool {
	if !s.tidxFailed {
		return true
	}
	if err := l.writeTimeIndex(s, s.times); err != nil {
		l.warnUnwritten(s.tidxPath, err)
		return false // kept in memory; rewritePending retries
	}
	s.tidxFailed = false
	return true
}

// writeTimeIndex replaces s's .timeindex file with entries
// (writeFileAtomic: never in place).
func (l *Log) writeTimeIndex(s *segment, entries []timeEntry) error {
	if err := writeFileAtomic(l.fs, l.dir, s.tidxPath, encodeTimeIndex(entries)); err != nil {
		return fmt.Errorf("segment: rewrite time index %s: %w", s.tidxPath, err)
	}
	return nil
}

// recoverTimeIndex makes s's .timeindex agree with its recovered log (s.end
// and s.next are final) and sets s.times, s.firstAppend and s.maxAppend,
// now or, for a segment whose records must be dated, once a later segment
// bounds them (dateUndated). last says s is the last segment.
//
// The time index is a cache of broker append times that the log does not
// hold. Its entries must be plausible (decodeTimeIndex): positive, not in
// the future (more than MaxClockAhead after Options.Now), not before the
// last entry read from an earlier segment's file, strictly increasing,
// offsets inside the segment, whole entries.
// A segment with a successor had its time index synced at the roll, so an
// implausible entry there is damage: the whole file is dropped and the
// segment's records dated again. In the last segment the entries above the
// recovery point may be torn, so the plausible prefix is kept and the
// records it does not cover, and those above the recovery point, are
// dated again. above is the first offset of s above the recovery point
// (s.next when none is).
//
// Records dated again get a time that is an upper bound of their real
// append time, never evidence against a real one: the .log's modification
// time, lowered to the first entry read from a later segment's file when
// that is earlier (append times never go back across the log, so it bounds
// every earlier record too). The file written then stays plausible next
// to its successor's at every later start, so recovery never moves a
// segment's times again (docs/storage.md, Index plausibility). It reports
// whether it rewrote a time index file (s's or an earlier segment's).
func (l *Log) recoverTimeIndex(s *segment, above uint64, last bool) (bool, error) {
	count := s.next - s.base
	now := l.opts.Now().UnixMilli()
	tb := timeBounds{floor: max(1, l.timeFloor), ceil: now + MaxClockAhead.Milliseconds()}
	if l.opts.MinAppendTime <= now {
		// A later one was written while the clock was ahead: it says
		// nothing about when records were appended (clamped to now, it
		// would be later than every record and make their real times
		// look like damage).
		tb.floor = max(tb.floor, l.opts.MinAppendTime)
	}
	entries, whole, why, err := readTimeIndexFile(l.fs, s.tidxPath, count, tb)
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		l.opts.Logger.Warn("segment: time index unreadable; dating its records again", "file", s.tidxPath, "err", err)
	case err == nil && !whole && !last:
		l.opts.Logger.Warn("segment: time index implausible; dating its records again",
			"file", s.tidxPath, "reason", why)
		entries = nil
	case err == nil && !whole:
		l.opts.Logger.Info("segment: time index of the last segment cut to its plausible prefix",
			"file", s.tidxPath, "entries_kept", len(entries), "reason", why)
	}
	rewrote := false
	if n := len(entries); n > 0 {
		// Real times: they bound the records of the segments before s
		// that wait to be dated.
		var err error
		if rewrote, err = l.dateUndated(entries[0].ts, true); err != nil {
			return false, err
		}
		l.timeFloor = entries[n-1].ts
	}
	u := undated{s: s, entries: entries, from: count, floor: tb.floor, rewrite: err != nil || !whole}
	if count > 0 {
		u.from = 0 // no entry: date the whole segment
		if n := len(entries); n > 0 {
			u.from = uint64(entries[n-1].rel) + 1
			if !u.rewrite {
				// An intact file vouches for the records below the
				// recovery point.
				u.from = max(u.from, max(above, s.base)-s.base)
			}
		}
	}
	u.behind = last && u.from >= max(above, s.base)-s.base
	if u.from < count {
		u.mtime = l.mtimeMs(s, now) // s.file is closed before dateUndated runs
	}
	l.undated = append(l.undated, u)
	if !last && (u.from < count || len(l.undated) > 1) {
		// Dated (or, for an empty segment, published after the
		// segments before it) once a later segment's real time bounds
		// it.
		return rewrote, nil
	}
	r, err := l.dateUndated(0, false)
	return rewrote || r, err
}

// undated is a segment, during recovery, whose time index is settled by
// dateUndated: entries are the real entries kept from its file, from the
// first relative offset they do not cover (the segment's count when they
// cover every record), mtime its .log's modification time (mtimeMs), floor
// the earliest time plausible for it (timeBounds.floor), rewrite that the
// file must be written even if no entry is added, behind that the records
// from from on lie above the recovery point of the last segment.
type undated struct {
	s            *segment
	entries      []timeEntry
	from         uint64
	mtime, floor int64
	rewrite      bool
	behind       bool
}

// dateUndated settles the time index of every segment in l.undated, in
// order, and empties it. With bounded, bound (Unix ms) is the first real
// time index entry of a later segment: no record of these segments was
// appended after it. Records not covered by a real entry are dated by
// their .log's modification time, or by bound when that is earlier, but
// never before floor, the latest append time so far or the segment's last
// real entry; when bound equals that last entry, the entry already dates
// them exactly and none is added. It reports whether it rewrote a file.
func (l *Log) dateUndated(bound int64, bounded bool) (bool, error) {
	rewrote := false
	for _, u := range l.undated {
		s, entries := u.s, u.entries
		if count := s.next - s.base; u.from < count {
			ts := u.mtime
			if bounded {
				ts = min(ts, bound)
			}
			ts = max(ts, u.floor, l.lastAppend)
			n := len(entries)
			// Records appended after the last real entry and not after
			// bound, when bound equals it: dated exactly by that entry.
			exact := n > 0 && bounded && bound <= entries[n-1].ts
			if !exact {
				if n > 0 {
					ts = max(ts, entries[n-1].ts+1)
				}
				l.logDated(u, ts)
				entries = append(entries, timeEntry{ts: ts, rel: uint32(u.from)})
				u.rewrite = true
			}
		}
		if u.rewrite {
			switch err := l.writeTimeIndex(s, entries); {
			case err == nil:
				rewrote = true
			case isNoSpace(err):
				// Kept in memory (OffsetForTime uses s.times) and
				// written later: at the roll for the last segment
				// (sealTimeIndex), by rewritePending for the others.
				l.warnUnwritten(s.tidxPath, err)
				s.tidxFailed = true
			default:
				return rewrote, err
			}
		}
		s.times = entries
		s.firstAppend, s.maxAppend = -1, -1
		if n := len(entries); n > 0 {
			s.firstAppend, s.maxAppend = entries[0].ts, entries[n-1].ts
			l.lastAppend = max(l.lastAppend, s.maxAppend)
		}
	}
	l.undated = l.undated[:0]
	return rewrote, nil
}

// logDated logs that u's records from u.from on are dated ts (Unix ms).
func (l *Log) logDated(u undated, ts int64) {
	s := u.s
	if u.behind {
		// The time index is synced at checkpoints only, so after an
		// unclean stop the last segment's entries above the recovery
		// point may be missing: expected, one line per partition.
		l.opts.Logger.Info("segment: time index behind the log after an unclean stop; dating the records above the recovery point by the log's modification time",
			"file", s.tidxPath, "from_offset", s.base+u.from, "append_time_ms", ts)
		return
	}
	l.opts.Logger.Warn("segment: time index does not cover every record; dating the rest by the log's modification time or the next segment's first append time, whichever is earlier",
		"file", s.tidxPath, "from_offset", s.base+u.from, "append_time_ms", ts)
}

// mtimeMs returns the modification time of s's .log in Unix ms, bounded by
// the clock's reading now (Unix ms): now if the time cannot be read, is
// not after 1970 (a file system that keeps no times: a time too early
// would expire the records at once), or is more than MaxClockAhead in the
// future (written while the clock was ahead; logged).
func (l *Log) mtimeMs(s *segment, now int64) int64 {
	if s.file == nil {
		return now
	}
	fi, err := s.file.Stat()
	if err != nil || fi.ModTime().UnixMilli() <= 0 {
		return now
	}
	ms := fi.ModTime().UnixMilli()
	if ms > now+MaxClockAhead.Milliseconds() {
		l.opts.Logger.Warn("segment: log modification time in the future; clamped to the clock",
			"file", s.logPath, "mtime_ms", ms, "now_ms", now)
		return now
	}
	return ms
}

// OffsetForTime returns the first offset of the first batch appended (by
// broker append time, Unix ms) at or after ms, and that batch's append
// time; when every batch was appended before ms it returns the log end
// offset and -1. This is the lookup of Kafka's ListOffsets by timestamp
// (KIP-79), except that times are the broker's, never the producer's.
// Records recovered without a time index entry are dated by their file's
// modification time (see the package doc), so the answer may come earlier
// than the exact one, never later. Safe from any goroutine.
func (l *Log) OffsetForTime(ms int64) (offset uint64, ts int64) {
	type cand struct {
		s     *segment
		times []timeEntry
		count uint64
	}
	l.mu.RLock()
	next := l.next
	var cands []cand
	for _, s := range l.segs {
		if s.maxAppend >= ms {
			cands = append(cands, cand{s: s, times: s.times, count: s.next - s.base})
		}
	}
	l.mu.RUnlock()
	for _, c := range cands {
		times := c.times
		if times == nil {
			var err error
			if times, _, _, err = readTimeIndexFile(l.fs, c.s.tidxPath, c.count, anyTime); err != nil {
				l.opts.Logger.Warn("segment: time index unreadable; answering with the segment's start", "file", c.s.tidxPath, "err", err)
				return c.s.base, -1
			}
		}
		if i := searchTime(times, ms); i < len(times) {
			return c.s.base + uint64(times[i].rel), times[i].ts
		}
	}
	return next, -1
}
