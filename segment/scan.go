package segment

import (
	"bytes"
	"encoding/binary"
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

// errRead marks a failed read of a .log file during recovery: the bytes
// could not be seen, so they are neither a torn write to cut nor proof of
// corruption, and Open fails without changing the file.
var errRead = errors.New("read failed")

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
	return fmt.Errorf("%w: %s at byte %d: %w", errRead, sc.path, pos, err)
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

// findChunkBytes is how much findContinuation reads at a time.
const findChunkBytes = 1 << 20

// findContinuation looks after a bad batch at byte from, where offset off
// was due, for a valid batch that continues the offsets: a batch that
// passes every check of next (CRC-32C included) and whose baseOffset b is
// at least off and at most off + (its position - from) (every skipped
// record takes at least one byte). It returns the first such batch's
// position and header. Torn writes leave zeros or the start of the torn
// write after their end, never such a batch, so one found means damage
// before data that was written after it (docs/storage.md, Recovery).
//
// It reads the rest of the file in chunks of findChunkBytes and tries only
// positions whose magic byte is batch.Magic, so a zero tail costs one
// bytes.IndexByte pass. A failed read returns its error (errRead).
func (sc *scanner) findContinuation(from int64, base, off uint64) (int64, batch.Header, bool, error) {
	const overlap = batch.HeaderSize - 1
	buf := make([]byte, findChunkBytes+overlap)
	for start := from + 1; start+batch.HeaderSize <= sc.size; start += findChunkBytes {
		n := min(int64(len(buf)), sc.size-start)
		chunk := buf[:n]
		if err := sc.readAt(chunk, start); err != nil {
			return 0, batch.Header{}, false, err
		}
		for k := 0; ; {
			j := bytes.IndexByte(chunk[k:], batch.Magic)
			if j < 0 {
				break
			}
			k += j + 1
			at := k - 1 - 16 // the magic byte is at header offset 16
			if at < 0 || at >= findChunkBytes || int64(at)+batch.HeaderSize > n {
				continue
			}
			pos := start + int64(at)
			b := binary.LittleEndian.Uint64(chunk[at:])
			if b < off || b-off > uint64(pos-from) {
				continue
			}
			h, err := sc.next(pos, base, b)
			if err == nil {
				return pos, h, true, nil
			}
			if errors.Is(err, errRead) {
				return 0, batch.Header{}, false, err
			}
		}
	}
	return 0, batch.Header{}, false, nil
}
