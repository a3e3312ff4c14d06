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
	recs, firstTs := b.recs, b.firstTs
	keys, hdrs := b.keys, b.hdrs
	nextKey, nextHdr := -1, -1 // the records keys[0] and hdrs[0] belong to
	if len(keys) > 0 {
		nextKey = keys[0].rec
	}
	if len(hdrs) > 0 {
		nextHdr = hdrs[0].rec
	}
	for i := range recs {
		p := &recs[i]
		o := 24 + 40*i
		r := seg[o : o+40 : o+40] // one bounds check for the record's words
		le.PutUint64(r[0:8], uint64(uint32(i)))
		le.PutUint64(r[8:16], uint64(p.ts-firstTs))
		if i != nextKey {
			le.PutUint64(r[16:24], 0)
		} else {
			k := keys[0].key
			le.PutUint64(r[16:24], dataPointer(o+16, at, len(k)))
			at = putBytes(seg, at, k)
			keys = keys[1:]
			nextKey = -1
			if len(keys) > 0 {
				nextKey = keys[0].rec
			}
		}
		le.PutUint64(r[24:32], dataPointer(o+24, at, len(p.value)))
		at = putBytes(seg, at, p.value)
		if i != nextHdr {
			le.PutUint64(r[32:40], 0)
			continue
		}
		at = putHeaders(seg, o+32, at, hdrs[0].headers)
		hdrs = hdrs[1:]
		nextHdr = -1
		if len(hdrs) > 0 {
			nextHdr = hdrs[0].rec
		}
	}
	return at
}

// dataPointer returns the near pointer, at byte ptrAt, to a Data list of n
// bytes that starts at byte at, after ptrAt (a multiple of 8 from it).
func dataPointer(ptrAt, at, n int) uint64 {
	return uint64(uint32(at-ptrAt-8)>>3<<2) | 1 | 2<<32 | uint64(n)<<35
}

// putBytes copies v to byte at of seg, padded with zeros to a word, and
// returns the end of the padded bytes.
func putBytes(seg []byte, at int, v []byte) int {
	end := at + pad8(len(v))
	if end > at {
		dst := seg[at:end:end]
		binary.LittleEndian.PutUint64(dst[len(dst)-8:], 0) // the padding
		copy(dst, v)
	}
	return end
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
	binary.LittleEndian.PutUint64(seg[ptrAt:], dataPointer(ptrAt, at, len(v)))
	return putBytes(seg, at, v)
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

// boxes holds spare *[]byte, the boxes bufferPools hold buffers in, so
// that giving a buffer back allocates nothing either.
var boxes sync.Pool

// getBuffer returns a buffer of n bytes, from the pool when n is in the
// pooled range (its capacity is then its class's). Its contents are not
// zeroed.
func getBuffer(n int) []byte {
	if b := PooledBuffer(n); b != nil {
		return b
	}
	if _, size, ok := bufferClass(n); ok {
		return make([]byte, n, size)
	}
	return make([]byte, n)
}

// NewBuffer returns a buffer of n bytes (not zeroed) for a batch, from
// the pool of Build's buffers when n is within the pooled range (64 KiB to
// 64 MiB; its capacity is then its class's, up to 1/8 more than n) and
// freshly allocated otherwise. Give it back with ReleaseBuffer once nothing
// reads it. net/dataplane reads each publish's records tail into such a
// buffer.
func NewBuffer(n int) []byte { return getBuffer(n) }

// PooledBuffer returns a buffer of n bytes (not zeroed) that the pool
// holds, or nil when it holds none of n's class or n is outside the pooled
// range. It never allocates, so a reader that must not allocate on a
// peer's word alone may take it before the bytes arrive.
func PooledBuffer(n int) []byte {
	idx, _, ok := bufferClass(n)
	if !ok {
		return nil
	}
	p, _ := bufferPools[idx].Get().(*[]byte)
	if p == nil {
		return nil
	}
	b := (*p)[:n]
	*p = nil
	boxes.Put(p)
	return b
}

// ReleaseBuffer gives b, a batch of Build or a buffer of NewBuffer or
// PooledBuffer, back for reuse, once nothing reads it any more (the SDK:
// once the server acknowledged it; net/dataplane: once the engine no
// longer holds the batch). Neither b nor any slice of it may be used
// afterwards. Only buffers whose capacity is one of the pool's classes
// (those of Build from 64 KiB to 64 MiB) are kept; for any other b it does
// nothing.
func ReleaseBuffer(b []byte) {
	idx, size, ok := bufferClass(cap(b))
	if !ok || size != cap(b) {
		return
	}
	p, _ := boxes.Get().(*[]byte)
	if p == nil {
		p = new([]byte) // the pool holds pointers: a slice would be boxed anyway
	}
	*p = b[:0]
	bufferPools[idx].Put(p)
}
