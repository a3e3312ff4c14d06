package batch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Byte offsets of the header fields (see the package doc).
const (
	offBaseOffset      = 0
	offBatchLength     = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offFirstTimestamp  = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offRecordCount     = 57
	offReserved        = 61

	// HeaderSize is the size of the batch header in bytes.
	HeaderSize = 64
	// LengthFieldEnd is where batchLength starts counting: a batch is
	// LengthFieldEnd + batchLength bytes long.
	LengthFieldEnd = 12
	// Magic is the batch format version this package writes and reads.
	Magic = 1
	// ChecksumFrom is the first byte of a batch that its CRC-32C covers
	// (the attributes field): see Checksum and UpdateChecksum.
	ChecksumFrom = offAttributes

	attrCompressionMask = 0x7
	attrControl         = 1 << 4
)

// Errors returned by ParseHeader, Validate and the iterators. ErrCorrupt is
// the class of every integrity failure: test with errors.Is.
var (
	ErrCorrupt  = errors.New("batch: corrupt")
	ErrTooLarge = errors.New("batch: over the size limit")
	ErrShort    = errors.New("batch: short buffer")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is the decoded 64-byte batch header.
type Header struct {
	BaseOffset      uint64
	BatchLength     uint32 // bytes after the batchLength field
	LeaderEpoch     uint32
	Magic           uint8
	CRC             uint32
	Attributes      uint16
	LastOffsetDelta uint32
	FirstTimestamp  int64 // Unix ms
	MaxTimestamp    int64 // Unix ms
	ProducerID      int64
	ProducerEpoch   int16
	BaseSequence    int32
	RecordCount     uint32
}

// Size is the batch's total size in bytes, header included.
func (h Header) Size() int { return LengthFieldEnd + int(h.BatchLength) }

// LastOffset is the offset of the batch's last record.
func (h Header) LastOffset() uint64 { return h.BaseOffset + uint64(h.LastOffsetDelta) }

// NextOffset is the offset after the batch's last record.
func (h Header) NextOffset() uint64 { return h.BaseOffset + uint64(h.RecordCount) }

// ParseHeader decodes the header at the start of b without checking the CRC
// or the records. It fails with ErrShort when b holds fewer than HeaderSize
// bytes. It does not check that b holds the whole batch.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes, header needs %d", ErrShort, len(b), HeaderSize)
	}
	le := binary.LittleEndian
	return Header{
		BaseOffset:      le.Uint64(b[offBaseOffset:]),
		BatchLength:     le.Uint32(b[offBatchLength:]),
		LeaderEpoch:     le.Uint32(b[offLeaderEpoch:]),
		Magic:           b[offMagic],
		CRC:             le.Uint32(b[offCRC:]),
		Attributes:      le.Uint16(b[offAttributes:]),
		LastOffsetDelta: le.Uint32(b[offLastOffsetDelta:]),
		FirstTimestamp:  int64(le.Uint64(b[offFirstTimestamp:])),
		MaxTimestamp:    int64(le.Uint64(b[offMaxTimestamp:])),
		ProducerID:      int64(le.Uint64(b[offProducerID:])),
		ProducerEpoch:   int16(le.Uint16(b[offProducerEpoch:])),
		BaseSequence:    int32(le.Uint32(b[offBaseSequence:])),
		RecordCount:     le.Uint32(b[offRecordCount:]),
	}, nil
}

// putHeader encodes h into b[:HeaderSize] (the CRC field as given).
func putHeader(b []byte, h Header) {
	le := binary.LittleEndian
	le.PutUint64(b[offBaseOffset:], h.BaseOffset)
	le.PutUint32(b[offBatchLength:], h.BatchLength)
	le.PutUint32(b[offLeaderEpoch:], h.LeaderEpoch)
	b[offMagic] = h.Magic
	le.PutUint32(b[offCRC:], h.CRC)
	le.PutUint16(b[offAttributes:], h.Attributes)
	le.PutUint32(b[offLastOffsetDelta:], h.LastOffsetDelta)
	le.PutUint64(b[offFirstTimestamp:], uint64(h.FirstTimestamp))
	le.PutUint64(b[offMaxTimestamp:], uint64(h.MaxTimestamp))
	le.PutUint64(b[offProducerID:], uint64(h.ProducerID))
	le.PutUint16(b[offProducerEpoch:], uint16(h.ProducerEpoch))
	le.PutUint32(b[offBaseSequence:], uint32(h.BaseSequence))
	le.PutUint32(b[offRecordCount:], h.RecordCount)
	b[offReserved], b[offReserved+1], b[offReserved+2] = 0, 0, 0
}

// SetBaseOffset patches the baseOffset field of the batch in b. The CRC
// stays valid.
func SetBaseOffset(b []byte, off uint64) { binary.LittleEndian.PutUint64(b[offBaseOffset:], off) }

// SetLeaderEpoch patches the leaderEpoch field of the batch in b. The CRC
// stays valid.
func SetLeaderEpoch(b []byte, epoch uint32) { binary.LittleEndian.PutUint32(b[offLeaderEpoch:], epoch) }

// Checksum returns the CRC-32C of b[21:], the value the crc field must hold.
func Checksum(b []byte) uint32 { return crc32.Checksum(b[offAttributes:], castagnoli) }

// Split returns the first batch of buf (by its length field) and the rest.
// It checks only that the header and the declared length fit in buf and in
// maxBatchBytes; call Validate or CheckCRC for integrity. A buf shorter than
// a header, or shorter than the declared length, returns ErrShort.
func Split(buf []byte, maxBatchBytes int) (first, rest []byte, h Header, err error) {
	h, err = ParseHeader(buf)
	if err != nil {
		return nil, buf, h, err
	}
	size := h.Size()
	if h.BatchLength < HeaderSize-LengthFieldEnd {
		return nil, buf, h, fmt.Errorf("%w: batchLength %d shorter than the header", ErrCorrupt, h.BatchLength)
	}
	if maxBatchBytes > 0 && size > maxBatchBytes {
		return nil, buf, h, fmt.Errorf("%w: batch of %d bytes, limit %d", ErrTooLarge, size, maxBatchBytes)
	}
	if size > len(buf) {
		return nil, buf, h, fmt.Errorf("%w: batch of %d bytes, %d available", ErrShort, size, len(buf))
	}
	return buf[:size:size], buf[size:], h, nil
}

// CheckHeader checks what can be checked of a whole batch b without walking
// its records: length, magic, CRC, record count, reserved attributes.
func CheckHeader(b []byte) (Header, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return h, err
	}
	if h.Size() != len(b) {
		return h, fmt.Errorf("%w: batchLength says %d bytes, have %d", ErrCorrupt, h.Size(), len(b))
	}
	return h, checkFields(h, Checksum(b))
}

// CheckHeaderSum is CheckHeader for a batch read in pieces, too large to
// hold at once: hdr holds its first HeaderSize bytes and sum is the
// CRC-32C of the whole batch from byte 21 to its end (the span Checksum
// covers), computed as UpdateChecksum(UpdateChecksum(0, hdr[ChecksumFrom:]), rest...).
// The caller makes sure the batch has h.Size() bytes.
func CheckHeaderSum(hdr []byte, sum uint32) (Header, error) {
	h, err := ParseHeader(hdr)
	if err != nil {
		return h, err
	}
	return h, checkFields(h, sum)
}

// UpdateChecksum returns crc updated with the bytes p (CRC-32C, the
// Castagnoli polynomial), for a Checksum computed piecewise from 0.
func UpdateChecksum(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }

// checkFields checks the header fields of a batch whose CRC-32C is sum.
func checkFields(h Header, sum uint32) error {
	switch {
	case h.Magic != Magic:
		return fmt.Errorf("%w: magic %d, want %d", ErrCorrupt, h.Magic, Magic)
	case h.CRC != sum:
		return fmt.Errorf("%w: CRC mismatch (stored %#08x, computed %#08x)", ErrCorrupt, h.CRC, sum)
	case h.RecordCount == 0:
		return fmt.Errorf("%w: recordCount 0", ErrCorrupt)
	case h.LastOffsetDelta != h.RecordCount-1:
		return fmt.Errorf("%w: lastOffsetDelta %d with recordCount %d", ErrCorrupt, h.LastOffsetDelta, h.RecordCount)
	case h.Attributes&attrCompressionMask != 0:
		return fmt.Errorf("%w: compression %d not supported", ErrCorrupt, h.Attributes&attrCompressionMask)
	case h.Attributes&attrControl != 0:
		return fmt.Errorf("%w: control batches are reserved", ErrCorrupt)
	}
	return nil
}
