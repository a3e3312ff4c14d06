package batch

import "encoding/binary"

// The record list is read directly from its Cap'n Proto encoding when it has
// the plain shape every SQ encoder produces (Cap'n Proto encoding spec,
// https://capnproto.org/encoding.html): a near struct pointer to the
// RecordSet, a near composite-list pointer to the records, and per record
// near byte-list pointers (or null) for key and value. Anything else (far
// pointers, other element sizes, out-of-range offsets) and every record with
// headers goes through the generated accessors instead, so the fast path
// only skips their per-field overhead, never their checks.

// rawList locates the records of the list rooted in seg (the single
// segment of a batch's record list, already read by recordList). ok is
// false when the encoding is not the plain shape, or when its record count
// is not n.
func rawList(seg []byte, n int) (l rawRecords, ok bool) {
	root, ok := word(seg, 0)
	if !ok || root&3 != 0 {
		return l, false
	}
	rsData := 8 + int64(int32(uint32(root))>>2)*8
	rsDataW, rsPtrs := int64(uint16(root>>32)), uint16(root>>48)
	if rsPtrs < 1 {
		return l, false
	}
	lp := rsData + rsDataW*8
	p, ok := word(seg, lp)
	if !ok || p&3 != 1 || (p>>32)&7 != 7 {
		return l, false
	}
	tagAt := lp + 8 + int64(int32(uint32(p))>>2)*8
	tag, ok := word(seg, tagAt)
	if !ok || tag&3 != 0 {
		return l, false
	}
	count := int64(int32(uint32(tag)) >> 2)
	dataW, ptrs := int64(uint16(tag>>32)), int64(uint16(tag>>48))
	stride := (dataW + ptrs) * 8
	if count != int64(n) || count*(dataW+ptrs) > int64(p>>35) || tagAt+8+count*stride > int64(len(seg)) {
		return l, false
	}
	return rawRecords{seg: seg, first: tagAt + 8, stride: stride, dataBytes: dataW * 8, ptrs: ptrs,
		n: count, rootBytes: (rsDataW + int64(rsPtrs)) * 8}, true
}

// rawRecords is the position and shape of a composite list of Record.
type rawRecords struct {
	seg       []byte
	first     int64 // byte offset of element 0 in seg
	stride    int64 // bytes per element
	dataBytes int64 // data section bytes per element
	ptrs      int64 // pointers per element
	n         int64 // elements
	rootBytes int64 // size of the RecordSet struct
}

// word returns the little-endian word at byte offset at of seg.
func word(seg []byte, at int64) (uint64, bool) {
	if at < 0 || at+8 > int64(len(seg)) {
		return 0, false
	}
	return binary.LittleEndian.Uint64(seg[at:]), true
}

// record decodes element i into rec (Offset and Timestamp relative to the
// batch header h). ok is false when the element needs the generated
// accessors: a pointer that is not a near byte list, or headers.
func (l *rawRecords) record(i int, h *Header, rec *Record) (ok bool) {
	at := l.first + int64(i)*l.stride
	var offDelta uint32
	var tsDelta int64
	if l.dataBytes >= 4 {
		offDelta = binary.LittleEndian.Uint32(l.seg[at:])
	}
	if l.dataBytes >= 16 {
		tsDelta = int64(binary.LittleEndian.Uint64(l.seg[at+8:]))
	}
	ptrAt := at + l.dataBytes
	if l.ptrs > 2 && binary.LittleEndian.Uint64(l.seg[ptrAt+16:]) != 0 {
		return false // headers
	}
	var key, value []byte
	if l.ptrs > 0 {
		if key, ok = l.data(ptrAt); !ok {
			return false
		}
	}
	if l.ptrs > 1 {
		if value, ok = l.data(ptrAt + 8); !ok {
			return false
		}
	}
	if value == nil {
		value = []byte{}
	}
	rec.Offset = h.BaseOffset + uint64(offDelta)
	rec.Timestamp = h.FirstTimestamp + tsDelta
	rec.Key = key
	rec.Value = value
	rec.Headers = rec.Headers[:0]
	return true
}

// data resolves the pointer at byte offset at: nil for a null pointer, the
// bytes (capacity clipped) for a near byte list inside seg; ok is false
// otherwise.
func (l *rawRecords) data(at int64) ([]byte, bool) {
	p := binary.LittleEndian.Uint64(l.seg[at:])
	if p == 0 {
		return nil, true
	}
	if p&3 != 1 || (p>>32)&7 != 2 {
		return nil, false
	}
	start := at + 8 + int64(int32(uint32(p))>>2)*8
	end := start + int64(p>>35)
	if start < 0 || end > int64(len(l.seg)) {
		return nil, false
	}
	return l.seg[start:end:end], true
}

// valid reports whether every record passes the checks of Validate's walk
// (validateRecords) with the batch header h and the limit maxRecord (0: no
// limit), reading the list directly: offsetDelta runs 0..n-1, no record's
// timestamp is negative, key and value are null or near byte lists inside
// the segment, no record has headers, each record is within maxRecord, and
// the bytes the accessors would read stay within readLimit.
//
// It never rejects: false means "not shown valid", and the caller walks the
// list through the accessors for the verdict. So it must return true only
// where they accept. The read limit is counted as Cap'n Proto counts it
// (capnp.Message.ResetReadLimit): the RecordSet struct and the list's
// elements when the list was read (a word per element of an empty struct),
// then the bytes of each non-null key and value. Element data outside the
// data section reads as 0 and pointers past the pointer section as null, as
// in the accessors.
func (l *rawRecords) valid(h *Header, maxRecord int, readLimit uint64) bool {
	elem := l.stride
	if elem == 0 {
		elem = 8
	}
	read := uint64(l.rootBytes) + uint64(l.n)*uint64(elem)
	seg := l.seg
	if l.dataBytes == 16 && l.ptrs == 3 {
		// The shape of every SQ encoder: one 40-byte element after the
		// other, fixed offsets, one bounds check per element.
		recs := seg[l.first : l.first+40*l.n]
		for i := int64(0); len(recs) >= 40; i++ {
			r := recs[:40]
			if int64(binary.LittleEndian.Uint32(r[0:])) != i || h.FirstTimestamp+int64(binary.LittleEndian.Uint64(r[8:])) < 0 ||
				binary.LittleEndian.Uint64(r[32:]) != 0 {
				return false
			}
			at := l.first + 40*i
			k, ok := l.dataLen(at + 16)
			if !ok {
				return false
			}
			v, ok := l.dataLen(at + 24)
			if !ok || maxRecord > 0 && k+v > int64(maxRecord) {
				return false
			}
			read += uint64(k + v)
			recs = recs[40:]
		}
		return read <= readLimit
	}
	for i := int64(0); i < l.n; i++ {
		at := l.first + i*l.stride
		var offDelta uint32
		var tsDelta int64
		if l.dataBytes >= 4 {
			offDelta = binary.LittleEndian.Uint32(seg[at:])
		}
		if l.dataBytes >= 16 {
			tsDelta = int64(binary.LittleEndian.Uint64(seg[at+8:]))
		}
		if int64(offDelta) != i || h.FirstTimestamp+tsDelta < 0 {
			return false
		}
		ptrAt := at + l.dataBytes
		if l.ptrs > 2 && binary.LittleEndian.Uint64(seg[ptrAt+16:]) != 0 {
			return false // headers
		}
		var size int64
		if l.ptrs > 0 {
			n, ok := l.dataLen(ptrAt)
			if !ok {
				return false
			}
			size = n
		}
		if l.ptrs > 1 {
			n, ok := l.dataLen(ptrAt + 8)
			if !ok {
				return false
			}
			size += n
		}
		if maxRecord > 0 && size > int64(maxRecord) {
			return false
		}
		read += uint64(size)
	}
	return read <= readLimit
}

// dataLen is the length of the Data the pointer at byte offset at
// resolves to: 0 for a null pointer, the byte count of a near byte list
// inside seg; ok is false for anything else.
func (l *rawRecords) dataLen(at int64) (n int64, ok bool) {
	p := binary.LittleEndian.Uint64(l.seg[at:])
	if p == 0 {
		return 0, true
	}
	if p&3 != 1 || (p>>32)&7 != 2 {
		return 0, false
	}
	start := at + 8 + int64(int32(uint32(p))>>2)*8
	n = int64(p >> 35)
	if start < 0 || start+n > int64(len(l.seg)) {
		return 0, false
	}
	return n, true
}
