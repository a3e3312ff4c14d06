package sdk

import (
	"encoding/binary"
	"fmt"
	"time"

	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

// batchOverhead is the size in bytes of a batch without records: the
// 64-byte header, the stream framing of the record list, its root pointer,
// the RecordSet struct and the list tag.
const batchOverhead = batch.HeaderSize + 8 + 8 + 8 + 8

// recordEstimate is an upper bound in bytes of what message m adds to an
// encoded batch: its Record struct (2 data + 3 pointer words), key and value
// padded to words, and for headers the list tag plus per header its struct
// (2 pointer words), the key text with its NUL and the value, padded.
func recordEstimate(m *ProducerMessage) int {
	n := 40 + pad8(len(m.Key)) + pad8(len(m.Value))
	if len(m.Headers) > 0 {
		n += 8
		for _, h := range m.Headers {
			n += 16 + pad8(len(h.Key)+1) + pad8(len(h.Value))
		}
	}
	return n
}

func pad8(n int) int { return (n + 7) &^ 7 }

// encodeBatch encodes msgs[idx...] as one batch (DESIGN §3.2). Records
// without headers go through batch.Builder. batch.Builder.Build sizes its
// fixed buffer with an estimate that leaves no room for header lists, so a
// batch with headers is encoded here the same way on a growable arena; the
// result passes batch.Validate like any other.
func encodeBatch(msgs []ProducerMessage, idx []int) ([]byte, error) {
	withHeaders := false
	for _, i := range idx {
		if len(msgs[i].Headers) > 0 {
			withHeaders = true
			break
		}
	}
	if !withHeaders {
		var b batch.Builder
		for _, i := range idx {
			m := &msgs[i]
			b.Add(m.Key, m.Value, nil, m.Timestamp)
		}
		return b.Build()
	}
	return encodeWithHeaders(msgs, idx)
}

func encodeWithHeaders(msgs []ProducerMessage, idx []int) ([]byte, error) {
	now := time.Now().UnixMilli()
	ts := func(m *ProducerMessage) int64 {
		if m.Timestamp == 0 {
			return now
		}
		return m.Timestamp
	}
	firstTs, maxTs := ts(&msgs[idx[0]]), ts(&msgs[idx[0]])
	for _, i := range idx {
		t := ts(&msgs[i])
		firstTs, maxTs = min(firstTs, t), max(maxTs, t)
	}
	msg, seg, err := capnp.NewMessage(capnp.SingleSegment(nil))
	if err != nil {
		return nil, err
	}
	defer msg.Release()
	rs, err := api.NewRootRecordSet(seg)
	if err != nil {
		return nil, err
	}
	list, err := rs.NewRecords(int32(len(idx)))
	if err != nil {
		return nil, err
	}
	for j, i := range idx {
		if err := encodeRecord(list.At(j), &msgs[i], uint32(j), ts(&msgs[i])-firstTs); err != nil {
			return nil, fmt.Errorf("sdk: encode record: %w", err)
		}
	}
	data := seg.Data()
	out := make([]byte, batch.HeaderSize+8+len(data))
	le := binary.LittleEndian
	le.PutUint32(out[batch.HeaderSize:], 0) // one segment
	le.PutUint32(out[batch.HeaderSize+4:], uint32(len(data)/8))
	copy(out[batch.HeaderSize+8:], data)
	// Header fields at the offsets of the batch package doc.
	le.PutUint32(out[8:], uint32(len(out)-batch.LengthFieldEnd))
	out[16] = batch.Magic
	le.PutUint32(out[23:], uint32(len(idx)-1))
	le.PutUint64(out[27:], uint64(firstTs))
	le.PutUint64(out[35:], uint64(maxTs))
	le.PutUint64(out[43:], ^uint64(0)) // producerId -1
	le.PutUint16(out[51:], ^uint16(0)) // producerEpoch -1
	le.PutUint32(out[53:], ^uint32(0)) // baseSequence -1
	le.PutUint32(out[57:], uint32(len(idx)))
	le.PutUint32(out[17:], batch.Checksum(out))
	return out, nil
}

func encodeRecord(r api.Record, m *ProducerMessage, delta uint32, tsDelta int64) error {
	r.SetOffsetDelta(delta)
	r.SetTimestampDelta(tsDelta)
	if m.Key != nil {
		if err := r.SetKey(m.Key); err != nil {
			return err
		}
	}
	if err := r.SetValue(nonNil(m.Value)); err != nil {
		return err
	}
	if len(m.Headers) == 0 {
		return nil
	}
	hl, err := r.NewHeaders(int32(len(m.Headers)))
	if err != nil {
		return err
	}
	for k, h := range m.Headers {
		if err := hl.At(k).SetKey(h.Key); err != nil {
			return err
		}
		if err := hl.At(k).SetValue(nonNil(h.Value)); err != nil {
			return err
		}
	}
	return nil
}

// nonNil returns b, or an empty non-nil slice so an empty value is stored
// as an empty (not null) Data.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
