package control

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/api/sqv1"
)

// TestMeasureAndDecodeRecords: the size measured in place is never below
// the encoded size of the records decoded, a response's worth stops at
// the record that reaches the bound, and responses taken one after the
// other give every record once, in order, from any start offset.
func TestMeasureAndDecodeRecords(t *testing.T) {
	var bufs [][]byte
	base := uint64(1 << 40) // offsets of several varint bytes
	for b := range 3 {
		var bb batch.Builder
		for i := range 5 {
			var key []byte
			switch i % 3 {
			case 1:
				key = []byte{}
			case 2:
				key = bytes.Repeat([]byte{0xff}, 300)
			}
			hs := []batch.RecordHeader{{Key: "\xff\x00", Value: nil}, {Key: "", Value: []byte("v")}}
			bb.Add(key, bytes.Repeat([]byte{byte(i)}, 100*i*(b+1)), hs[:i%3], -int64(i+1))
		}
		buf, err := bb.Build()
		if err != nil {
			t.Fatal(err)
		}
		batch.SetBaseOffset(buf, base+uint64(5*b))
		bufs = append(bufs, buf)
	}
	joined := [][]byte{append(append(append([]byte{}, bufs[0]...), bufs[1]...), bufs[2]...)}
	for _, in := range [][][]byte{bufs, joined} {
		for _, bound := range []int{1, 200, 1000, 1 << 20} {
			for start := base; start < base+15; start += 4 {
				off, want := start, start
				for off < base+15 {
					count, size, err := measureRecords(in, off, bound)
					if err != nil || count == 0 {
						t.Fatalf("measure at %d (bound %d): %d records, %v", off, bound, count, err)
					}
					recs, next, err := decodeRecords(in, off, count)
					if err != nil || len(recs) != count {
						t.Fatalf("decode %d at %d: %d records, %v", count, off, len(recs), err)
					}
					got := 0
					for i, r := range recs {
						if r.Offset != want {
							t.Fatalf("record offset %d, want %d", r.Offset, want)
						}
						want++
						n := protowire.SizeTag(3) + protowire.SizeBytes(proto.Size(r))
						got += n
						if i < len(recs)-1 && got >= bound {
							t.Fatalf("bound %d reached at record %d of %d", bound, i, len(recs))
						}
					}
					if size < got {
						t.Fatalf("measured %d bytes, encoded %d", size, got)
					}
					if next != want {
						t.Fatalf("next %d, want %d", next, want)
					}
					off = next
				}
				if count, _, _ := measureRecords(in, off, bound); count != 0 {
					t.Fatalf("%d records past the end", count)
				}
			}
		}
	}
	// A record with every field set is measured exactly.
	var bb batch.Builder
	bb.Add([]byte("k"), []byte("value"), []batch.RecordHeader{{Key: "h", Value: []byte("x")}}, 1234)
	buf, err := bb.Build()
	if err != nil {
		t.Fatal(err)
	}
	batch.SetBaseOffset(buf, 7)
	_, size, _ := measureRecords([][]byte{buf}, 7, 1<<20)
	recs, _, _ := decodeRecords([][]byte{buf}, 7, 1)
	resp := &sqv1.SubscribeResponse{Records: recs}
	if size != proto.Size(resp) {
		t.Fatalf("measured %d, encoded %d", size, proto.Size(resp))
	}
}
