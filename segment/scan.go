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
	maxBatch int   // largest batch read at once, header included
	buf      []byte
	// oversized counts the batches larger than maxBatch that
	// findContinuation checked (maxOversizedCandidates).
	oversized int
}

// next reads and checks the batch at pos, which must start at offset want
// of a segment whose base offset is base. It returns errCleanEnd when the
// data ends at pos, and a descriptive error when the bytes at pos are not a
// whole valid batch (short, length beyond the file, CRC, sequence break).
// It never allocates more than maxBatch bytes: a longer batch (written
// before the server's batch limit was lowered) is checked in pieces, so a
// lower --max-batch-bytes never turns acknowledged batches into a torn
// tail or corruption.
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
	case size > left:
		return h, fmt.Errorf("batch of %d bytes, %d left in the file", size, left)
	}
	if size > int64(sc.maxBatch) {
		h, err = sc.checkInPieces(hb[:], pos, size)
	} else {
		h, err = sc.checkWhole(pos, size)
	}
	if err != nil {
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

// checkWhole reads the size-byte batch at pos into sc.buf and checks it.
func (sc *scanner) checkWhole(pos, size int64) (batch.Header, error) {
	if cap(sc.buf) < int(size) {
		sc.buf = make([]byte, size)
	}
	b := sc.buf[:size]
	if err := sc.readAt(b, pos); err != nil {
		return batch.Header{}, err
	}
	return batch.CheckHeader(b)
}

// checkInPieces checks the size-byte batch at pos, whose header is hdr,
// reading it maxBatch bytes at a time.
func (sc *scanner) checkInPieces(hdr []byte, pos, size int64) (batch.Header, error) {
	chunk := int64(max(sc.maxBatch, batch.HeaderSize))
	if int64(cap(sc.buf)) < chunk {
		sc.buf = make([]byte, chunk)
	}
	sum := batch.UpdateChecksum(0, hdr[batch.ChecksumFrom:])
	for at := pos + batch.HeaderSize; at < pos+size; at += chunk {
		b := sc.buf[:min(chunk, pos+size-at)]
		if err := sc.readAt(b, at); err != nil {
			return batch.Header{}, err
		}
		sum = batch.UpdateChecksum(sum, b)
	}
	return batch.CheckHeaderSum(hdr, sum)
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

// maxOversizedCandidates bounds how many candidate batches longer than the
// batch limit findContinuation checks (each read in pieces).
const maxOversizedCandidates = 16

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
			// A candidate longer than maxBatch is read in pieces, up to
			// the rest of the file: only a few are tried, so record
			// bytes that mimic headers cannot make the look quadratic.
			if size := batch.LengthFieldEnd + int64(binary.LittleEndian.Uint32(chunk[at+8:])); size > int64(sc.maxBatch) {
				if sc.oversized >= maxOversizedCandidates {
					continue
				}
				sc.oversized++
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
