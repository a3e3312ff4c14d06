package segment

import (
	"errors"
	"fmt"
	"runtime/debug"
	"syscall"

	"github.com/seedqueue/sq/api/batch"
)

// View is the result of Read: whole batches, back to back, as slices of
// read-only mappings of the segment files (zero copy). Each element of Bufs
// holds one or more whole batches from one segment; walk them with
// batch.Split. The slices stay valid until Release and must not be written.
type View struct {
	Bufs       [][]byte // whole batches; one element per segment touched
	Bytes      int      // total length of Bufs
	NextOffset uint64   // offset after the last batch in Bufs; the offset asked for if empty
	maps       []*mapping
}

// Release gives the mappings back. The View and its Bufs must not be used
// afterwards. Release is idempotent but not safe for concurrent calls on the
// same View.
func (v *View) Release() {
	for _, m := range v.maps {
		m.release()
	}
	if len(v.maps) > 0 {
		// Segments this View kept from eviction may go now.
		v.maps[0].c.trim()
	}
	v.maps, v.Bufs = nil, nil
}

// readSeg is what Read needs of one segment, taken under Log.mu.
type readSeg struct {
	s     *segment
	end   int64
	index []indexEntry
	m     *mapping
}

// Read returns the batches from the one containing offset (it may start
// before offset) onward, across segment boundaries, while they total at most
// maxBytes, but always at least one whole batch if any exists, and only
// batches whose baseOffset is below limit (the caller passes the high
// watermark; limit is clamped to NextOffset). It never touches bytes at or
// after limit.
//
// An offset below LogStartOffset returns *OffsetOutOfRangeError; an offset at
// or after limit returns an empty View. A batch that does not parse, or an
// I/O fault on the mapping, returns *CorruptError. Read is safe concurrently
// with Append, Sync and other Reads. The caller must Release the View.
func (l *Log) Read(offset uint64, maxBytes int, limit uint64) (*View, error) {
	segs, limit, err := l.snapshot(offset, maxBytes, limit)
	if err != nil {
		return nil, err
	}
	if len(segs) == 0 {
		return &View{NextOffset: offset}, nil
	}
	v := &View{NextOffset: offset}
	used, err := collect(v, segs, offset, maxBytes, limit)
	for i, rs := range segs {
		if i < used && err == nil {
			v.maps = append(v.maps, rs.m)
		} else {
			rs.m.release()
		}
	}
	l.files.trim()
	if err != nil {
		v.Release()
		return nil, err
	}
	return v, nil
}

// snapshot takes, under the read lock, the segments a read of offset may
// touch and a reference on each one's mapping.
func (l *Log) snapshot(offset uint64, maxBytes int, limit uint64) ([]readSeg, uint64, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, 0, ErrClosed
	}
	if start := l.segs[0].base; offset < start {
		return nil, 0, &OffsetOutOfRangeError{Offset: offset, Start: start, End: l.next}
	}
	limit = min(limit, l.next)
	if offset >= limit {
		return nil, limit, nil
	}
	var segs []readSeg
	var room int64 // an upper bound of the bytes the read may take so far
	last := len(l.segs) - 1
	for i := l.find(offset); i < len(l.segs) && l.segs[i].base < limit; i++ {
		s := l.segs[i]
		if s.end == 0 {
			continue
		}
		from := int64(0)
		if len(segs) == 0 {
			// Without an in-memory index (a sealed segment, whose index is
			// mapped), count none of the first segment: at worst one more
			// segment is mapped than the read needs.
			from = s.end
			if s.index != nil {
				from = int64(lookup(s.index, uint32(offset-s.base)).pos)
			}
		}
		m, err := l.acquire(s, i == last)
		if err != nil {
			for _, rs := range segs {
				rs.m.release()
			}
			return nil, 0, err
		}
		segs = append(segs, readSeg{s: s, end: s.end, index: s.index, m: m})
		if room += s.end - from; room >= int64(maxBytes) {
			break
		}
	}
	return segs, limit, nil
}

// acquire returns s's mapping with a reference for the caller, mapping a
// sealed segment (its .log and its .index) on its first read or after the
// FileCache evicted it, and marks a sealed segment as recently read in the
// FileCache. If mmap fails with ENOMEM (vm.max_map_count), every idle
// sealed segment of the FileCache is unmapped and the mapping tried once
// more; an error that remains is returned, wrapped with ErrResources.
// Called with Log.mu read-locked, so Close and retention cannot release
// the segment's own reference meanwhile.
func (l *Log) acquire(s *segment, active bool) (*mapping, error) {
	m, err := l.acquireMapping(s, active)
	if errors.Is(err, syscall.ENOMEM) {
		l.files.trimAll()
		m, err = l.acquireMapping(s, active)
	}
	if err != nil {
		return nil, err
	}
	if !active {
		l.files.touch(s)
	}
	return m, nil
}

// acquireMapping is acquire under s.mapMu. An active segment without a
// mapping (parked: ParkIfOver) is mapped for this read only: the View's
// reference is the mapping's only one, so the segment holds nothing once
// the read is released.
func (l *Log) acquireMapping(s *segment, active bool) (*mapping, error) {
	s.mapMu.Lock()
	defer s.mapMu.Unlock()
	if s.m == nil && active {
		return l.mapForRead(s)
	}
	if s.m == nil {
		f, err := l.fs.Open(s.logPath)
		if err != nil {
			return nil, l.files.observe(fmt.Errorf("segment: read: %w", err))
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("segment: read: %w", err)
		}
		if fi.Size() < s.end {
			return nil, &CorruptError{File: s.logPath, Position: fi.Size(), Err: fmt.Errorf("file is %d bytes, data ends at %d", fi.Size(), s.end)}
		}
		m, err := newMapping(f, fi.Size(), l.files)
		if err != nil {
			return nil, err
		}
		if err := l.mapIndex(s, m); err != nil {
			m.release()
			return nil, err
		}
		s.m = m
	}
	s.m.acquire()
	return s.m, nil
}

// collect fills v from segs and returns how many of segs it used. It runs
// with panics on memory faults enabled, so that an I/O error under a
// mapping becomes a *CorruptError instead of a crash.
func collect(v *View, segs []readSeg, offset uint64, maxBytes int, limit uint64) (used int, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	cur := segs[0].s.logPath
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(interface{ Addr() uintptr })
			if !ok {
				panic(r)
			}
			err = &CorruptError{File: cur, Position: -1, Err: fmt.Errorf("I/O fault reading the mapping at address %#x", f.Addr())}
		}
	}()
	pos, err := locate(segs[0], offset)
	if err != nil {
		return 0, err
	}
	want := segs[0].s.base // baseOffset the next batch must have; set by locate
	for i, rs := range segs {
		cur = rs.s.logPath
		if i > 0 {
			pos = 0
		}
		start, last := pos, false
		for pos < rs.end && !last {
			h, err := headerAt(rs, pos)
			if err != nil {
				return 0, err
			}
			if v.Bytes > 0 && h.BaseOffset != want {
				return 0, &CorruptError{File: rs.s.logPath, Position: pos, Err: fmt.Errorf("baseOffset %d, want %d", h.BaseOffset, want)}
			}
			if v.Bytes > 0 && v.Bytes+h.Size() > maxBytes {
				last = true
				break
			}
			pos += int64(h.Size())
			v.Bytes += h.Size()
			v.NextOffset, want = h.NextOffset(), h.NextOffset()
			// The next batch starts at NextOffset: do not read its header
			// if it is at or after the limit.
			last = want >= limit
		}
		if pos > start {
			v.Bufs = append(v.Bufs, rs.m.data[start:pos:pos])
			used = i + 1
		}
		if last {
			break
		}
	}
	return used, nil
}

// locate returns the position in rs of the batch containing offset: the
// sparse index entry at or before it, then a forward scan of headers. If the
// entry does not point at the batch it names, the scan starts over from the
// beginning of the segment.
func locate(rs readSeg, offset uint64) (int64, error) {
	e := rs.lookup(uint32(offset - rs.s.base))
	if h, err := headerAt(rs, int64(e.pos)); err != nil || h.BaseOffset != rs.s.base+uint64(e.rel) {
		e = indexEntry{}
	}
	pos, want := int64(e.pos), rs.s.base+uint64(e.rel)
	for pos < rs.end {
		h, err := headerAt(rs, pos)
		if err != nil {
			return 0, err
		}
		if h.BaseOffset != want {
			return 0, &CorruptError{File: rs.s.logPath, Position: pos, Err: fmt.Errorf("baseOffset %d, want %d", h.BaseOffset, want)}
		}
		if h.NextOffset() > offset {
			return pos, nil
		}
		pos, want = pos+int64(h.Size()), h.NextOffset()
	}
	return 0, &CorruptError{File: rs.s.logPath, Position: pos, Err: fmt.Errorf("offset %d not found before the end of data", offset)}
}

// lookup returns the index entry of rs at or before relative offset rel:
// from the in-memory index of an active (or just sealed) segment, else from
// the mapped .index file, else the start of the segment.
func (rs readSeg) lookup(rel uint32) indexEntry {
	if rs.index != nil {
		return lookup(rs.index, rel)
	}
	return lookupEncoded(rs.m.idx, rel)
}

// headerAt parses the header of the batch at pos of rs and checks that the
// batch lies within the data.
func headerAt(rs readSeg, pos int64) (batch.Header, error) {
	if pos+batch.HeaderSize > rs.end {
		return batch.Header{}, &CorruptError{File: rs.s.logPath, Position: pos, Err: fmt.Errorf("header crosses the end of data at %d", rs.end)}
	}
	h, err := batch.ParseHeader(rs.m.data[pos:rs.end])
	if err == nil && (h.BatchLength < batch.HeaderSize-batch.LengthFieldEnd || pos+int64(h.Size()) > rs.end) {
		err = fmt.Errorf("batch of %d bytes crosses the end of data at %d", h.Size(), rs.end)
	}
	if err != nil {
		return h, &CorruptError{File: rs.s.logPath, Position: pos, Err: err}
	}
	return h, nil
}

// mapForRead maps the .log of s, which ParkIfOver left unmapped, with one
// reference for the caller; the in-memory index of the active segment
// serves the lookups. s.mapMu is held.
func (l *Log) mapForRead(s *segment) (*mapping, error) {
	f, err := l.fs.Open(s.logPath)
	if err != nil {
		return nil, l.files.observe(fmt.Errorf("segment: read: %w", err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("segment: read: %w", err)
	}
	if fi.Size() < s.end {
		return nil, &CorruptError{File: s.logPath, Position: fi.Size(), Err: fmt.Errorf("file is %d bytes, data ends at %d", fi.Size(), s.end)}
	}
	return newMapping(f, fi.Size(), l.files)
}
