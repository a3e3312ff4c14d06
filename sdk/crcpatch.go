package sdk

import (
	"encoding/binary"
	"hash/crc32"
	"sync"

	"github.com/seedqueue/sq/api/batch"
)

// Patching the producer fields of an encoded batch (setProducer) must
// update its CRC-32C, which covers bytes [batch.ChecksumFrom, end). The
// fields sit at the start of that range, so instead of a second pass over
// the whole batch the CRC is corrected for the change alone: CRC is linear
// over GF(2), so with H the covered bytes up to the end of the fields and
// S the rest,
//
//	crc(H'||S) = crc(H||S) ^ shift(crc(H) ^ crc(H'), len(S))
//
// where shift advances a CRC register over len(S) zero bytes (zlib's
// crc32_combine), done with precomputed matrices in O(log len(S)).

var castagnoliTable = crc32.MakeTable(crc32.Castagnoli)

// zeroShift[k] is the GF(2) matrix (32 columns) that advances a CRC-32C
// register over 2^k zero bytes.
var (
	zeroShift     [32][32]uint32
	zeroShiftOnce sync.Once
)

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(sq, mat *[32]uint32) {
	for n := range 32 {
		sq[n] = gf2Times(mat, mat[n])
	}
}

func initZeroShift() {
	// The operator for one zero bit, then squared to 2, 4 and 8 bits.
	var bit [32]uint32
	bit[0] = 0x82F63B78 // Castagnoli, reversed
	row := uint32(1)
	for n := 1; n < 32; n++ {
		bit[n] = row
		row <<= 1
	}
	var two, four [32]uint32
	gf2Square(&two, &bit)
	gf2Square(&four, &two)
	gf2Square(&zeroShift[0], &four)
	for k := 1; k < 32; k++ {
		gf2Square(&zeroShift[k], &zeroShift[k-1])
	}
}

// patchMinBytes is the batch size from which patchHeader corrects the
// CRC rather than computing it again: below it (a few microseconds of
// CRC) the full pass is as fast.
const patchMinBytes = 32 << 10

// crcShift advances the CRC-32C register crc over n zero bytes.
func crcShift(crc uint32, n int) uint32 {
	zeroShiftOnce.Do(initZeroShift)
	for k := 0; n != 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			crc = gf2Times(&zeroShift[k], crc)
		}
	}
	return crc
}

// patchHeader writes fields at offset at of the encoded batch b (inside
// its CRC's range, before the records) and updates the CRC field, without
// reading the records when b is large.
func patchHeader(b []byte, at int, fields []byte) {
	end := at + len(fields)
	if len(b) < patchMinBytes {
		copy(b[at:end], fields)
		binary.LittleEndian.PutUint32(b[offCRC:], batch.Checksum(b))
		return
	}
	head := b[batch.ChecksumFrom:end]
	before := crc32.Checksum(head, castagnoliTable)
	copy(b[at:end], fields)
	after := crc32.Checksum(head, castagnoliTable)
	old := binary.LittleEndian.Uint32(b[offCRC:])
	binary.LittleEndian.PutUint32(b[offCRC:], old^crcShift(before^after, len(b)-end))
}
