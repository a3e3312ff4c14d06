package batch

import (
	"encoding/binary"
	"fmt"
	"time"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
)

// RecordHeader is one record header: a key and an opaque value.
type RecordHeader struct {
	Key   string
	Value []byte
}

// Record is one decoded record. Key is nil when the record has no key; Value
// is never nil after decoding (an empty value decodes as an empty slice).
// Key, Value and header values alias the batch buffer: copy them to keep them
// past the buffer's lifetime.
type Record struct {
	Offset    uint64
	Timestamp int64 // Unix ms
	Key       []byte
	Value     []byte
	Headers   []RecordHeader
}

// Size returns the bytes the record counts against the record limit: key,
// value and every header key and value.
func RecordSize(key, value []byte, headers []RecordHeader) int {
	n := len(key) + len(value)
	for _, h := range headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// Limits bound what Validate accepts. Zero fields mean no limit.
type Limits struct {
	MaxRecordBytes int // key + value + headers of one record
	MaxBatchBytes  int // whole batch, header included
}

// Validate checks the whole batch b as the server does before an append
// (docs/architecture.md §3.2): length within limits, magic, CRC, lastOffsetDelta =
// recordCount-1, no compression or control bit, firstTimestamp and
// maxTimestamp not negative, then walks the record list in place to check
// that offsetDelta runs 0..n-1, no record's timestamp (firstTimestamp +
// timestampDelta) is negative and every record is within MaxRecordBytes.
// Integrity failures (a negative timestamp included) wrap ErrCorrupt, size
// failures ErrTooLarge.
//
// A list in the plain shape every SQ encoder writes is walked directly by
// its offsets (rawRecords.valid), without allocating; that walk accepts
// only what the generated Cap'n Proto accessors accept, and leaves anything
// else (other pointer kinds, headers, any failure) to them.
func Validate(b []byte, lim Limits) (Header, error) { return validate(b, lim, true) }

// validate is Validate, with the direct walk of the record list when direct
// is set and through the generated accessors only otherwise.
func validate(b []byte, lim Limits, direct bool) (Header, error) {
	if lim.MaxBatchBytes > 0 && len(b) > lim.MaxBatchBytes {
		return Header{}, fmt.Errorf("%w: batch of %d bytes, limit %d", ErrTooLarge, len(b), lim.MaxBatchBytes)
	}
	h, err := CheckHeader(b)
	if err != nil {
		return h, err
	}
	if h.FirstTimestamp < 0 || h.MaxTimestamp < 0 {
		return h, fmt.Errorf("%w: negative timestamp (first %d, max %d ms)", ErrCorrupt, h.FirstTimestamp, h.MaxTimestamp)
	}
	list, _, err := recordList(b)
	if err != nil {
		return h, err
	}
	if uint32(list.Len()) != h.RecordCount {
		return h, fmt.Errorf("%w: %d records in the list, header says %d", ErrCorrupt, list.Len(), h.RecordCount)
	}
	// The direct walk only ever accepts; any doubt, and every failure, is
	// left to the accessors, which give the verdict and its error.
	if !direct {
		return h, validateRecords(list, h, lim)
	}
	if raw, ok := rawList(b[HeaderSize+8:], list.Len()); ok && raw.valid(&h, lim.MaxRecordBytes, readLimit(b)) {
		return h, nil
	}
	return h, validateRecords(list, h, lim)
}

// validateRecords is Validate's walk of the record list through the
// generated accessors: the reference for the direct walk (rawRecords.valid),
// and the walk that finds and describes every failure.
func validateRecords(list api.Record_List, h Header, lim Limits) error {
	for i := 0; i < list.Len(); i++ {
		r := list.At(i)
		if r.OffsetDelta() != uint32(i) {
			return fmt.Errorf("%w: record %d has offsetDelta %d", ErrCorrupt, i, r.OffsetDelta())
		}
		if ts := h.FirstTimestamp + r.TimestampDelta(); ts < 0 {
			return fmt.Errorf("%w: record %d has the negative timestamp %d ms", ErrCorrupt, i, ts)
		}
		size, err := wireRecordSize(r)
		if err != nil {
			return fmt.Errorf("%w: record %d: %w", ErrCorrupt, i, err)
		}
		if lim.MaxRecordBytes > 0 && size > lim.MaxRecordBytes {
			return fmt.Errorf("%w: record %d is %d bytes (key+value+headers), limit %d", ErrTooLarge, i, size, lim.MaxRecordBytes)
		}
	}
	return nil
}

func wireRecordSize(r api.Record) (int, error) {
	k, err := r.Key()
	if err != nil {
		return 0, err
	}
	v, err := r.Value()
	if err != nil {
		return 0, err
	}
	n := len(k) + len(v)
	if !r.HasHeaders() {
		return n, nil
	}
	hs, err := r.Headers()
	if err != nil {
		return 0, err
	}
	for j := 0; j < hs.Len(); j++ {
		hk, err := hs.At(j).KeyBytes()
		if err != nil {
			return 0, err
		}
		hv, err := hs.At(j).Value()
		if err != nil {
			return 0, err
		}
		n += len(hk) + len(hv)
	}
	return n, nil
}

// readLimit is the Cap'n Proto read limit of the record list of batch b, in
// bytes: each record is read a bounded number of times, and 4x the list's
// bytes rejects pointer-loop amplification without limiting real batches.
func readLimit(b []byte) uint64 { return uint64(len(b)-HeaderSize) * 4 }

// recordList decodes the Cap'n Proto record list of batch b in place.
func recordList(b []byte) (api.Record_List, *capnp.Message, error) {
	if len(b) < HeaderSize+8 {
		return api.Record_List{}, nil, fmt.Errorf("%w: no record list", ErrCorrupt)
	}
	body := b[HeaderSize:]
	// Single-segment stream framing: u32 segmentCount-1, u32 words.
	if binary.LittleEndian.Uint32(body) != 0 {
		return api.Record_List{}, nil, fmt.Errorf("%w: record list has more than one segment", ErrCorrupt)
	}
	words := binary.LittleEndian.Uint32(body[4:])
	if uint64(words)*8 != uint64(len(body)-8) {
		return api.Record_List{}, nil, fmt.Errorf("%w: record list of %d words in %d bytes", ErrCorrupt, words, len(body)-8)
	}
	msg := &capnp.Message{Arena: capnp.SingleSegment(body[8:])}
	msg.ResetReadLimit(readLimit(b))
	rs, err := api.ReadRootRecordSet(msg)
	if err != nil {
		return api.Record_List{}, nil, fmt.Errorf("%w: record list root: %w", ErrCorrupt, err)
	}
	list, err := rs.Records()
	if err != nil {
		return api.Record_List{}, nil, fmt.Errorf("%w: record list: %w", ErrCorrupt, err)
	}
	return list, msg, nil
}

// Iter iterates the records of one batch without copying them.
//
//	it, err := batch.NewIter(b)
//	for it.Next() { r := it.Record() ... }
//	if err := it.Err(); err != nil { ... }
type Iter struct {
	h    Header
	list api.Record_List
	i    int
	rec  Record
	err  error
	raw  rawRecords // the list read directly, when fast
	fast bool
}

// NewIter returns an iterator over the records of the whole batch b. It
// checks the header's shape but not the CRC: call Validate first for bytes
// from outside.
func NewIter(b []byte) (*Iter, error) {
	it := &Iter{}
	if err := it.Reset(b); err != nil {
		return nil, err
	}
	return it, nil
}

// Reset points it at the batch b, reusing its memory.
func (it *Iter) Reset(b []byte) error {
	h, err := ParseHeader(b)
	if err != nil {
		return err
	}
	if h.Size() != len(b) {
		return fmt.Errorf("%w: batchLength says %d bytes, have %d", ErrCorrupt, h.Size(), len(b))
	}
	list, _, err := recordList(b)
	if err != nil {
		return err
	}
	*it = Iter{h: h, list: list, rec: Record{Headers: it.rec.Headers[:0]}}
	it.raw, it.fast = rawList(b[HeaderSize+8:], list.Len())
	return nil
}

// Header returns the batch header.
func (it *Iter) Header() Header { return it.h }

// Next advances to the next record and reports whether there is one.
func (it *Iter) Next() bool {
	if it.err != nil || it.i >= it.list.Len() {
		return false
	}
	if it.fast && it.raw.record(it.i, &it.h, &it.rec) {
		it.i++
		return true
	}
	r := it.list.At(it.i)
	it.i++
	rec := &it.rec
	rec.Offset = it.h.BaseOffset + uint64(r.OffsetDelta())
	rec.Timestamp = it.h.FirstTimestamp + r.TimestampDelta()
	rec.Key = nil
	if r.HasKey() {
		if rec.Key, it.err = r.Key(); it.err != nil {
			return false
		}
		if rec.Key == nil {
			rec.Key = []byte{}
		}
	}
	if rec.Value, it.err = r.Value(); it.err != nil {
		return false
	}
	if rec.Value == nil {
		rec.Value = []byte{}
	}
	rec.Headers = rec.Headers[:0]
	if r.HasHeaders() {
		hs, err := r.Headers()
		if err != nil {
			it.err = err
			return false
		}
		for j := 0; j < hs.Len(); j++ {
			hk, _ := hs.At(j).Key()
			hv, _ := hs.At(j).Value()
			rec.Headers = append(rec.Headers, RecordHeader{Key: hk, Value: hv})
		}
	}
	return true
}

// Record returns the current record. It is overwritten by the next call to
// Next (including its Headers slice).
func (it *Iter) Record() *Record { return &it.rec }

// Err returns the first decoding error, wrapped in ErrCorrupt.
func (it *Iter) Err() error {
	if it.err != nil {
		return fmt.Errorf("%w: record %d: %w", ErrCorrupt, it.i-1, it.err)
	}
	return nil
}

// Builder accumulates records and encodes them as one batch. The zero value
// is ready to use. Add keeps references to key, value and headers until
// Build: do not modify them in between.
type Builder struct {
	recs    []pending
	keys    []pendingKey     // of the records that have a key, in order
	hdrs    []pendingHeaders // of the records that have headers, in order
	bytes   int
	firstTs int64
	maxTs   int64
	prod    producerFields // stamped by Build when set
	// oversize: a key, value or header list added is over maxListLen.
	oversize bool
}

// producerFields are an idempotent producer's header fields.
type producerFields struct {
	set   bool
	id    int64
	epoch int16
	seq   int32
}

// SetProducer makes Build stamp the batch as one of an idempotent producer
// (KIP-98; docs/architecture.md §3.3.1): id (>= 0; a negative id means no
// producer, as -1 in the header), its epoch, and baseSequence, the
// sequence of the batch's first record. The CRC covers them. Reset clears
// them.
func (b *Builder) SetProducer(id int64, epoch int16, baseSequence int32) {
	b.prod = producerFields{set: id >= 0, id: id, epoch: epoch, seq: baseSequence}
}

// pending is one added record. Keys and headers are kept apart
// (pendingKey, pendingHeaders), so that the common record, without either,
// takes 32 bytes: Add's stores and Build's loads of this state are a good
// part of the cost of a batch of small records.
type pending struct {
	value []byte
	ts    int64
}

// pendingKey is the key of record rec (not nil; an empty key is a key).
type pendingKey struct {
	rec int
	key []byte
}

// pendingHeaders are the headers of record rec, and their share of
// EncodedRecordBound when added.
type pendingHeaders struct {
	rec     int
	headers []RecordHeader
	bound   int
}

// Add appends a record. key nil means no key; timestampMs 0 means now.
func (b *Builder) Add(key, value []byte, headers []RecordHeader, timestampMs int64) {
	if timestampMs == 0 {
		timestampMs = time.Now().UnixMilli()
	}
	switch {
	case len(b.recs) == 0:
		b.firstTs, b.maxTs = timestampMs, timestampMs
	case timestampMs < b.firstTs:
		b.firstTs = timestampMs // firstTs <= maxTs: not also above it
	case timestampMs > b.maxTs:
		b.maxTs = timestampMs
	}
	bound := 40 + pad8(len(key)) + pad8(len(value))
	if key != nil {
		b.keys = append(b.keys, pendingKey{rec: len(b.recs), key: key})
	}
	if len(headers) > 0 {
		bound += b.addHeaders(headers)
	}
	b.recs = append(b.recs, pending{value: value, ts: timestampMs})
	if len(key)|len(value) > maxListLen {
		b.oversize = true
	}
	b.bytes += bound
}

// addHeaders keeps the headers of the record Add is adding and returns
// their share of EncodedRecordBound.
func (b *Builder) addHeaders(headers []RecordHeader) int {
	bound := headersBound(headers)
	b.hdrs = append(b.hdrs, pendingHeaders{rec: len(b.recs), headers: headers, bound: bound})
	b.oversize = b.oversize || headersTooLong(headers)
	return bound
}

// Overhead is the size in bytes of a batch without records: the header,
// the stream framing of the record list, its root pointer, the RecordSet
// struct and the list tag.
const Overhead = HeaderSize + 8 + 24

// EncodedRecordBound is an upper bound of the Cap'n Proto bytes of one
// record: its list element (2 data words + 3 pointers), key and value
// padded to words, and the header list with each header's struct (2
// pointers), NUL-terminated key and value, padded.
func EncodedRecordBound(key, value []byte, headers []RecordHeader) int {
	return 40 + pad8(len(key)) + pad8(len(value)) + headersBound(headers)
}

// headersBound is the header list's share of EncodedRecordBound.
func headersBound(headers []RecordHeader) int {
	if len(headers) == 0 {
		return 0
	}
	n := 8
	for _, h := range headers {
		n += 16 + pad8(len(h.Key)+1) + pad8(len(h.Value))
	}
	return n
}

func pad8(n int) int { return (n + 7) &^ 7 }

// Len returns the number of records added since the last Reset.
func (b *Builder) Len() int { return len(b.recs) }

// EstimatedSize returns an upper bound in bytes of the batch Build would
// produce now: header, stream framing, root, list tag and every record.
func (b *Builder) EstimatedSize() int {
	return Overhead + b.bytes
}

// Reset forgets every added record, keeping memory for reuse.
func (b *Builder) Reset() {
	clear(b.recs)
	b.recs = b.recs[:0]
	clear(b.keys)
	b.keys = b.keys[:0]
	clear(b.hdrs)
	b.hdrs = b.hdrs[:0]
	b.bytes = 0
	b.prod = producerFields{}
	b.oversize = false
}

// Build encodes the added records as one batch with baseOffset 0, leader
// epoch 0, producerId -1 (or the fields given to SetProducer), and a valid
// CRC. It fails with no records, and with a key, value, header list or
// record list over what a Cap'n Proto list can hold (2^29 - 1 elements, or
// words for the record list).
//
// The records are written straight into the returned buffer in the
// Cap'n Proto layout (encodeRecords), in one pass, without an arena. The
// buffer is at least EstimatedSize bytes (an upper bound) and comes from a
// pool: give it back with ReleaseBuffer once nothing reads it, or let the
// garbage collector have it.
func (b *Builder) Build() ([]byte, error) {
	if len(b.recs) == 0 {
		return nil, fmt.Errorf("batch: build: no records")
	}
	size, err := b.buildSize()
	if err != nil {
		return nil, err
	}
	out := getBuffer(size)
	n := b.encodeRecords(out[HeaderSize+8:])
	out = out[:HeaderSize+8+n]
	binary.LittleEndian.PutUint32(out[HeaderSize:], 0)
	binary.LittleEndian.PutUint32(out[HeaderSize+4:], uint32(n/8))
	h := Header{
		BatchLength:     uint32(len(out) - LengthFieldEnd),
		Magic:           Magic,
		LastOffsetDelta: uint32(len(b.recs) - 1),
		FirstTimestamp:  b.firstTs,
		MaxTimestamp:    b.maxTs,
		ProducerID:      -1,
		ProducerEpoch:   -1,
		BaseSequence:    -1,
		RecordCount:     uint32(len(b.recs)),
	}
	if b.prod.set {
		h.ProducerID, h.ProducerEpoch, h.BaseSequence = b.prod.id, b.prod.epoch, b.prod.seq
	}
	putHeader(out, h)
	binary.LittleEndian.PutUint32(out[offCRC:], Checksum(out))
	return out, nil
}
