package batch

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
)

// Fix-ups that fuzzFixup applies to a mutated batch, one bit each, so that
// the record walk behind the checks is reached: a mutated batch almost
// never has a matching length, record count or CRC, and Validate would
// reject it before reading one record (FuzzValidate found 14 interesting
// inputs in 12 M executions without them). Inputs whose mask leaves a bit
// clear keep fuzzing the check that bit repairs.
const (
	fixFraming = 1 << iota // batchLength, magic, the record list's segment table
	fixCounts              // recordCount and lastOffsetDelta from the record list
	fixFields              // no compression or control bit, timestamps not negative
	fixCRC                 // CRC-32C, last
	fixAll     = fixFraming | fixCounts | fixFields | fixCRC
)

// fuzzFixup returns a copy of b repaired as mask says.
func fuzzFixup(b []byte, mask uint8) []byte {
	b = append([]byte(nil), b...)
	if mask&fixFraming != 0 {
		if len(b) < HeaderSize+8 {
			b = append(b, make([]byte, HeaderSize+8-len(b))...)
		}
		b = b[:HeaderSize+8+(len(b)-HeaderSize-8)/8*8]
		binary.LittleEndian.PutUint32(b[offBatchLength:], uint32(len(b)-LengthFieldEnd))
		b[offMagic] = Magic
		binary.LittleEndian.PutUint32(b[HeaderSize:], 0)
		binary.LittleEndian.PutUint32(b[HeaderSize+4:], uint32((len(b)-HeaderSize-8)/8))
	}
	if len(b) < HeaderSize {
		return b
	}
	if mask&fixCounts != 0 {
		if list, _, err := recordList(b); err == nil && list.Len() > 0 {
			binary.LittleEndian.PutUint32(b[offRecordCount:], uint32(list.Len()))
			binary.LittleEndian.PutUint32(b[offLastOffsetDelta:], uint32(list.Len()-1))
		}
	}
	if mask&fixFields != 0 {
		binary.LittleEndian.PutUint16(b[offAttributes:], binary.LittleEndian.Uint16(b[offAttributes:])&^(attrCompressionMask|attrControl))
		b[offFirstTimestamp+7] &= 0x7f
		b[offMaxTimestamp+7] &= 0x7f
	}
	if mask&fixCRC != 0 {
		binary.LittleEndian.PutUint32(b[offCRC:], Checksum(b))
	}
	return b
}

// fuzzSeeds are batches of the Builder: plain records, empty and absent
// keys, headers.
func fuzzSeeds(f *testing.F) [][]byte {
	var hb Builder
	hb.Add([]byte("k"), []byte("v"), []RecordHeader{{Key: "h", Value: []byte("x")}, {Key: "e"}}, 1)
	hb.Add(nil, []byte{}, nil, 2)
	hb.Add([]byte{}, []byte("w"), nil, 3)
	withHeaders, err := hb.Build()
	if err != nil {
		f.Fatal(err)
	}
	return [][]byte{build(f, 1, 0), build(f, 3, 20), withHeaders, make([]byte, 80)}
}

// FuzzValidate checks Validate against the iterator: a batch Validate
// accepts must iterate without error, give RecordCount records at the
// offsets base..base+n-1 with timestamps not negative and each record
// within the limit, and give the same records by the direct decoding and
// by the generated accessors.
func FuzzValidate(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, uint8(fixAll))
		f.Add(s, uint8(0))
	}
	const maxRecord = 1 << 10
	f.Fuzz(func(t *testing.T, data []byte, mask uint8) {
		b := fuzzFixup(data, mask)
		h, err := Validate(b, Limits{MaxRecordBytes: maxRecord, MaxBatchBytes: 1 << 20})
		if err != nil {
			return
		}
		fast, ferr := iterAll(t, b, true)
		slow, serr := iterAll(t, b, false)
		if ferr != nil || serr != nil {
			t.Fatalf("valid batch, iteration failed: direct %v, accessors %v", ferr, serr)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("valid batch decoded differently:\ndirect %+v\naccessors %+v", fast, slow)
		}
		if uint32(len(fast)) != h.RecordCount {
			t.Fatalf("valid batch: %d records, recordCount %d", len(fast), h.RecordCount)
		}
		for i, r := range fast {
			if r.Offset != h.BaseOffset+uint64(i) {
				t.Fatalf("record %d at offset %d, base %d", i, r.Offset, h.BaseOffset)
			}
			if r.Timestamp < 0 {
				t.Fatalf("record %d: negative timestamp %d accepted", i, r.Timestamp)
			}
			if size := RecordSize(r.Key, r.Value, r.Headers); size > maxRecord {
				t.Fatalf("record %d of %d bytes accepted, limit %d", i, size, maxRecord)
			}
		}
	})
}

// FuzzIter feeds mutated batches to the iterator, which readers use on
// batches whose CRC they may not have checked: it must fail cleanly, never
// panic or read out of bounds, and where both decodings succeed the direct
// one must agree with the generated accessors.
func FuzzIter(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, uint8(fixAll))
		f.Add(s, uint8(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, mask uint8) {
		b := fuzzFixup(data, mask)
		fast, ferr := iterAll(t, b, true)
		slow, serr := iterAll(t, b, false)
		if ferr == nil && serr == nil && !reflect.DeepEqual(fast, slow) {
			t.Fatalf("decoded differently:\ndirect %+v\naccessors %+v", fast, slow)
		}
	})
}

// fuzzFixup leaves a valid batch as it is, and repairs the lengths, counts
// and CRC of a mutated one so that Validate gets past CheckHeader to the
// record walk.
func TestFuzzFixup(t *testing.T) {
	for _, b := range [][]byte{build(t, 1, 0), build(t, 3, 20)} {
		if got := fuzzFixup(b, fixAll); !bytes.Equal(got, b) {
			t.Fatalf("valid batch changed:\n got %x\nwant %x", got, b)
		}
		bad := append(append([]byte(nil), b...), 1, 2, 3) // a longer tail
		bad[offRecordCount] ^= 0x10                       // a wrong count
		bad[offCRC] ^= 0xff                               // a wrong CRC
		bad[offAttributes] |= attrControl
		if _, err := CheckHeader(bad); err == nil {
			t.Fatal("the mutated batch passes CheckHeader")
		}
		fixed := fuzzFixup(bad, fixAll)
		if _, err := CheckHeader(fixed); err != nil {
			t.Fatalf("repaired batch: %v", err)
		}
		if _, err := Validate(fixed, Limits{}); err != nil {
			t.Fatalf("repaired batch does not validate: %v", err)
		}
	}
}
