package batch

import (
	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
)

// buildReference encodes the records of b as Build did through the
// generated Cap'n Proto code (api/sq.capnp) and an arena: the record list
// Build writes directly must be these bytes. It returns the segment.
func buildReference(b *Builder) ([]byte, error) {
	msg, seg, err := capnp.NewMessage(capnp.SingleSegment(nil))
	if err != nil {
		return nil, err
	}
	defer msg.Release()
	if err := b.encode(seg); err != nil {
		return nil, err
	}
	return append([]byte(nil), seg.Data()...), nil
}

// encode writes the added records as a RecordSet rooted in seg's message.
func (b *Builder) encode(seg *capnp.Segment) error {
	rs, err := api.NewRootRecordSet(seg)
	if err != nil {
		return err
	}
	list, err := rs.NewRecords(int32(len(b.recs)))
	if err != nil {
		return err
	}
	headers := make([][]RecordHeader, len(b.recs))
	for _, h := range b.hdrs {
		headers[h.rec] = h.headers
	}
	keys := make([][]byte, len(b.recs))
	for _, k := range b.keys {
		keys[k.rec] = k.key
	}
	for i, p := range b.recs {
		r := list.At(i)
		r.SetOffsetDelta(uint32(i))
		r.SetTimestampDelta(p.ts - b.firstTs)
		if keys[i] != nil {
			if err := r.SetKey(keys[i]); err != nil {
				return err
			}
		}
		if err := r.SetValue(nonNil(p.value)); err != nil {
			return err
		}
		if len(headers[i]) > 0 {
			hl, err := r.NewHeaders(int32(len(headers[i])))
			if err != nil {
				return err
			}
			for j, h := range headers[i] {
				if err := hl.At(j).SetKey(h.Key); err != nil {
					return err
				}
				if err := hl.At(j).SetValue(nonNil(h.Value)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// nonNil returns b, or an empty non-nil slice so capnp stores an empty
// (not null) Data: an empty value is a value.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
