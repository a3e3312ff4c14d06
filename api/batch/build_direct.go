package batch

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"sync"
)

// The Builder writes the record list in the Cap'n Proto encoding (spec:
// https://capnproto.org/encoding.html) itself, in the layout the generated
// code of api/sq.capnp writes through an arena (and every earlier build
// wrote), so the bytes are the same:
//
//	word 0            root pointer: struct at word 1, 0 data words, 1 pointer
//	word 1            RecordSet.records: composite list at word 2, 5n words
//	word 2            list tag: n elements of 2 data words and 3 pointers
//	words 3..3+5n     the records: offsetDelta (u32, then 4 zero bytes),
//	                  timestampDelta (i64), key, value and headers pointers
//	then, record by record: the key's bytes (when not null), the value's,
//	and the header list (a tag, 2 pointers per header, then each header's
//	NUL-terminated key, when not empty, and its value), each padded with
//	zeros to a word.
//
// Pointers are near pointers (offsets from the word after the pointer, in
// words); every byte of the list is written, so the buffer need not be
// zeroed first.

// maxListLen is the most elements (bytes of a Data or Text, words of a
// composite list) a Cap'n Proto list pointer can count: 29 bits.
const maxListLen = 1<<29 - 1

// headersTooLong reports whether hs has more headers, or a header a longer
// key or value, than a Cap'n Proto list can hold.
func headersTooLong(hs []RecordHeader) bool {
	if 2*len(hs) > maxListLen {
		return true
	}
	for i := range hs {
		if len(hs[i].Key)+1 > maxListLen || len(hs[i].Value) > maxListLen {
			return true
		}
	}
	return false
}

// buildSize returns the size of the buffer Build encodes into: an upper
// bound of the batch, EstimatedSize, raised should a header list have
// grown since Add (a caller that breaks Add's rule can make it grow: the
// length of a key or value slice is fixed, the elements of a
// []RecordHeader are not). It fails when the records do
// not fit the format: a key, value or header list over maxListLen, a
// record list over maxListLen words, or a batch over 4 GiB (batchLength
// is a u32).
func (b *Builder) buildSize() (int, error) {
	size := b.EstimatedSize()
	oversize := b.oversize
	for i := range b.hdrs {
		h := &b.hdrs[i]
		if n := headersBound(h.headers); n > h.bound {
			size += n - h.bound
		}
		oversize = oversize || headersTooLong(h.headers)
	}
	switch {
	case oversize:
		return 0, fmt.Errorf("batch: build: a key, value or header list over %d bytes or elements", maxListLen)
	case 5*len(b.recs) > maxListLen:
		return 0, fmt.Errorf("batch: build: %d records, at most %d", len(b.recs), maxListLen/5)
	case size > math.MaxUint32:
		return 0, fmt.Errorf("batch: build: %d bytes, over the format's 4 GiB", size)
	}
	return size, nil
}

// encodeRecords writes the record list of the added records at the start
// of seg, which holds at least buildSize - HeaderSize - 8 bytes, and
// returns its length in bytes (a multiple of 8).
func (b *Builder) encodeRecords(seg []byte) int {
	le := binary.LittleEndian
	n := len(b.recs)
	le.PutUint64(seg[0:], 1<<48)
	putList(seg, 8, 16, 7, 5*n)
	le.PutUint64(seg[16:], uint64(n)<<2|2<<32|3<<48)
	at := 24 + 40*n
	_ = seg[at-1]
	hdrs := b.hdrs
	for i := range b.recs {
		p := &b.recs[i]
		r := seg[24+40*i : 24+40*i+40]
		le.PutUint64(r[0:], uint64(uint32(i)))
		le.PutUint64(r[8:], uint64(p.ts-b.firstTs))
		if p.key == nil {
			le.PutUint64(r[16:], 0)
		} else {
			at = putData(seg, 24+40*i+16, at, p.key)
		}
		at = putData(seg, 24+40*i+24, at, p.value)
		if len(hdrs) == 0 || hdrs[0].rec != i {
			le.PutUint64(r[32:], 0)
		} else {
			at = putHeaders(seg, 24+40*i+32, at, hdrs[0].headers)
			hdrs = hdrs[1:]
		}
	}
	return at
}

// putList writes at byte ptrAt of seg a near pointer to a list of count
// elements of element size code elem (2: bytes, 7: composite, count in
// words) that starts at byte at, after ptrAt.
func putList(seg []byte, ptrAt, at int, elem uint64, count int) {
	off := uint64(uint32((at-ptrAt-8)/8) << 2)
	binary.LittleEndian.PutUint64(seg[ptrAt:], off|1|elem<<32|uint64(count)<<35)
}

// putData writes v as a Data list at byte at of seg, padded to a word,
// with its pointer at ptrAt, and returns the end of the padded bytes.
func putData(seg []byte, ptrAt, at int, v []byte) int {
	putList(seg, ptrAt, at, 2, len(v))
	end := at + pad8(len(v))
	if end > at {
		binary.LittleEndian.PutUint64(seg[end-8:], 0) // the padding
	}
	copy(seg[at:end], v)
	return end
}

// putHeaders writes hs as a list of Header at byte at of seg, with its
// pointer at ptrAt, and returns the end of what it wrote.
func putHeaders(seg []byte, ptrAt, at int, hs []RecordHeader) int {
	le := binary.LittleEndian
	putList(seg, ptrAt, at, 7, 2*len(hs))
	le.PutUint64(seg[at:], uint64(len(hs))<<2|2<<48)
	first := at + 8
	at = first + 16*len(hs)
	for j := range hs {
		h := &hs[j]
		e := first + 16*j
		if h.Key == "" {
			le.PutUint64(seg[e:], 0) // capnp stores an empty Text as null
		} else {
			putList(seg, e, at, 2, len(h.Key)+1)
			end := at + pad8(len(h.Key)+1)
			binary.LittleEndian.PutUint64(seg[end-8:], 0) // NUL and padding
			copy(seg[at:end], h.Key)
			at = end
		}
		at = putData(seg, e+8, at, h.Value)
	}
	return at
}

// Batch buffers of Build are pooled by capacity class, from
// minPooledBuffer to maxPooledBuffer bytes: eight classes per power of two
// (2^k + j*2^(k-3), j = 1..8), so a buffer is at most 1/8 larger than
// asked. Smaller buffers are left to the allocator (they cost little),
// larger ones are not kept.
const (
	minPooledBuffer = 64 << 10
	maxPooledBuffer = 64 << 20
	classesPerPow2  = 8
)

// bufferPools holds *[]byte whose capacity is the size of their class
// (bufferClass).
var bufferPools [(25 - 15 + 1) * classesPerPow2]sync.Pool

// bufferClass returns the pool index and the capacity of the smallest
// class that holds n bytes; ok is false outside the pooled range.
func bufferClass(n int) (idx, size int, ok bool) {
	if n < minPooledBuffer || n > maxPooledBuffer {
		return 0, 0, false
	}
	k := bits.Len(uint(n-1)) - 1 // 2^k < n <= 2^(k+1)
	step := 1 << (k - 3)
	j := (n - 1<<k + step - 1) / step // 1..8
	return (k-15)*classesPerPow2 + j - 1, 1<<k + j*step, true
}

// getBuffer returns a buffer of n bytes, from the pool when n is in the
// pooled range (its capacity is then its class's). Its contents are not
// zeroed.
func getBuffer(n int) []byte {
	idx, size, ok := bufferClass(n)
	if !ok {
		return make([]byte, n)
	}
	if p, _ := bufferPools[idx].Get().(*[]byte); p != nil {
		return (*p)[:n]
	}
	return make([]byte, n, size)
}

// ReleaseBuffer gives b, a batch of Build, back for reuse by a later
// Build, once nothing reads it any more (the SDK: once the server
// acknowledged it). Neither b nor any slice of it may be used afterwards.
// Only buffers whose capacity is one of the pool's classes (those of
// Build from 64 KiB to 64 MiB) are kept; for any other b it does nothing.
func ReleaseBuffer(b []byte) {
	idx, size, ok := bufferClass(cap(b))
	if !ok || size != cap(b) {
		return
	}
	p := new([]byte) // the pool holds pointers: a slice would be boxed anyway
	*p = b[:0]
	bufferPools[idx].Put(p)
}
