package segment

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/ring"
)

// errCleanEnd reports that a .log file ends at the scanned position: at the
// end of the file, or at a header whose magic is zero (preallocated space).
var errCleanEnd = errors.New("end of data")

// scanner reads the batches of one .log file in order for recovery. It
// reads through the file, never a mapping, because recovery may truncate.
type scanner struct {
	f        ring.File
	path     string
	size     int64 // file size in bytes
	maxBatch int   // largest batch accepted, header included
	buf      []byte
}

// next reads and checks the batch at pos, which must start at offset want
// of a segment whose base offset is base. It returns errCleanEnd when the
// data ends at pos, and a descriptive error when the bytes at pos are not a
// whole valid batch (short, length beyond the file or the limit, CRC,
// sequence break). It never allocates more than maxBatch bytes.
func (sc *scanner) next(pos int64, base, want uint64) (batch.Header, error) {
	left := sc.size - pos
	if left == 0 {
		return batch.Header{}, errCleanEnd
	}
	if left < batch.HeaderSize {
		return batch.Header{}, fmt.Errorf("%d bytes left, a header needs %d", left, batch.HeaderSize)
	}
	var hb [batch.HeaderSize]byte
	if err := sc.readAt(hb[:], pos); err != nil {
		return batch.Header{}, err
	}
	h, err := batch.ParseHeader(hb[:])
	if err != nil {
		return h, err
	}
	size := int64(h.Size())
	switch {
	case h.Magic == 0:
		return h, errCleanEnd
	case h.BatchLength < batch.HeaderSize-batch.LengthFieldEnd:
		return h, fmt.Errorf("batchLength %d shorter than the header", h.BatchLength)
	case size > int64(sc.maxBatch):
		return h, fmt.Errorf("batch of %d bytes over the %d-byte limit", size, sc.maxBatch)
	case size > left:
		return h, fmt.Errorf("batch of %d bytes, %d left in the file", size, left)
	}
	if cap(sc.buf) < int(size) {
		sc.buf = make([]byte, size)
	}
	b := sc.buf[:size]
	if err := sc.readAt(b, pos); err != nil {
		return h, err
	}
	if h, err = batch.CheckHeader(b); err != nil {
		return h, err
	}
	if h.BaseOffset != want {
		return h, fmt.Errorf("baseOffset %d breaks the sequence, want %d", h.BaseOffset, want)
	}
	if h.NextOffset()-base > math.MaxUint32 {
		return h, fmt.Errorf("offset %d overflows the segment's u32 relative offsets", h.LastOffset())
	}
	return h, nil
}

func (sc *scanner) readAt(b []byte, pos int64) error {
	n, err := sc.f.ReadAt(b, pos)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read %s at byte %d: %w", sc.path, pos, err)
}

// walk scans the batches of s from byte pos and offset off, adding sparse
// index entries to s.index, until stop(pos, off) is true (err nil) or the
// data ends (errCleanEnd) or a batch is bad (its error). It returns where it
// stopped.
func (l *Log) walk(sc *scanner, s *segment, pos int64, off uint64, stop func(int64, uint64) bool) (int64, uint64, error) {
	for !stop(pos, off) {
		h, err := sc.next(pos, s.base, off)
		if err != nil {
			return pos, off, err
		}
		if l.ix.wants(s.index, pos) {
			s.index = append(s.index, indexEntry{rel: uint32(off - s.base), pos: uint32(pos)})
		}
		pos += int64(h.Size())
		off = h.NextOffset()
		s.maxTs = max(s.maxTs, h.MaxTimestamp)
	}
	return pos, off, nil
}

func never(int64, uint64) bool { return false }
