package control

import (
	"bytes"
	"math"
	"runtime"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/seedqueue/sq/api/sqv1"
)

// TestDecodedSizeCoversUnmarshal: for requests made of many small fields,
// the estimate made from the wire bytes is at least what proto.Unmarshal
// allocates for them, and a message nested past the depth bound is
// estimated too large to decode.
func TestDecodedSizeCoversUnmarshal(t *testing.T) {
	empties := &sqv1.PublishRequest{Topic: "t"}
	for range 100_000 {
		empties.Records = append(empties.Records, &sqv1.Record{})
	}
	headers := &sqv1.PublishRequest{Topic: "t"}
	for range 20_000 {
		headers.Records = append(headers.Records, &sqv1.Record{Key: []byte{}, Value: []byte("v"),
			Headers: []*sqv1.RecordHeader{{}, {Key: []byte{0xff}}, {Value: []byte("x")}}})
	}
	offsets := &sqv1.CommitOffsetsRequest{Group: "g"}
	for i := range 50_000 {
		offsets.Offsets = append(offsets.Offsets, &sqv1.OffsetEntry{Topic: "t", Partition: int32(i), Offset: 1, Metadata: "m"})
	}
	large := &sqv1.PublishRequest{Topic: "t", Records: []*sqv1.Record{{Value: bytes.Repeat([]byte{1}, 4<<20)}}}
	for _, tc := range []struct {
		name string
		msg  proto.Message
	}{{"empty records", empties}, {"records with headers", headers}, {"offset entries", offsets}, {"one large record", large}} {
		b, err := proto.Marshal(tc.msg)
		if err != nil {
			t.Fatal(err)
		}
		into := tc.msg.ProtoReflect().New().Interface()
		est := decodedSize(b, into.ProtoReflect().Descriptor())
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if err := proto.Unmarshal(b, into); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		alloc := int64(after.TotalAlloc - before.TotalAlloc)
		t.Logf("%s: %d bytes on the wire, %d allocated decoding, %d estimated", tc.name, len(b), alloc, est)
		// decodeFreeBytes of slack: TotalAlloc also counts what other
		// goroutines of the test binary allocated meanwhile.
		if est+decodeFreeBytes < alloc {
			t.Errorf("%s: estimated %d bytes decoded, Unmarshal allocated %d", tc.name, est, alloc)
		}
		if est > 4*alloc+decodeFreeBytes {
			t.Errorf("%s: estimated %d bytes decoded, over 4 times the %d Unmarshal allocated", tc.name, est, alloc)
		}
	}
	// A recursive type (google.protobuf.Value: list_value 6 holds a
	// ListValue whose values 1 hold Values) nested deeper than the bound
	// is estimated too large to decode.
	var nested []byte
	for range decodeDepthMax {
		list := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), nested)
		nested = protowire.AppendBytes(protowire.AppendTag(nil, 6, protowire.BytesType), list)
	}
	if est := decodedSize(nested, (&structpb.Value{}).ProtoReflect().Descriptor()); est != math.MaxInt64 {
		t.Errorf("estimate %d of a message nested %d deep, want math.MaxInt64", est, 2*decodeDepthMax)
	}
}
