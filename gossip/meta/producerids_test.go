package meta

import (
	"math"
	"strings"
	"testing"

	"github.com/seedqueue/sq/api"
)

// TestApplyAllocateProducerIDs: each command reserves the next block,
// whatever node asks; an unknown node and exhausted ids are refused
// without a change; the state round-trips through a snapshot and the
// command through the codec; two states applying the same commands agree.
func TestApplyAllocateProducerIDs(t *testing.T) {
	s := base(t)
	empty := s.Hash()
	var starts []int64
	for _, n := range []string{"n1", "n2", "n1"} {
		r := mustApply(t, s, Command{Op: OpAllocateProducerIDs, NodeID: n})
		starts = append(starts, r.ProducerIDStart)
	}
	if starts[0] != 0 || starts[1] != ProducerIDBlock || starts[2] != 2*ProducerIDBlock || s.NextProducerID != 3*ProducerIDBlock {
		t.Fatalf("blocks start at %v, next %d; want 0, %d, %d and next %d", starts, s.NextProducerID, ProducerIDBlock, 2*ProducerIDBlock, 3*ProducerIDBlock)
	}
	if s.Hash() == empty {
		t.Fatal("reserving producer ids does not change the hash")
	}
	h := s.Hash()
	if r := s.Apply(Command{Op: OpAllocateProducerIDs, NodeID: "n9"}); r.Err == nil || r.Err.Code != api.CodeInvalidRequest {
		t.Fatalf("unknown node: %+v, want INVALID_REQUEST", r)
	}
	if s.Hash() != h {
		t.Fatal("a refused allocation changed the state")
	}
	full := s.Clone()
	full.NextProducerID = math.MaxInt64 - ProducerIDBlock + 1
	if r := full.Apply(Command{Op: OpAllocateProducerIDs, NodeID: "n1"}); r.Err == nil || !strings.Contains(r.Err.Error(), "exhausted") {
		t.Fatalf("exhausted ids: %+v", r)
	}
	snap, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalState(snap)
	if err != nil || back.Hash() != h || back.NextProducerID != 3*ProducerIDBlock {
		t.Fatalf("snapshot: %v, next %d", err, back.NextProducerID)
	}
	enc, err := Encode(Command{Op: OpAllocateProducerIDs, NodeID: "n2"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Decode(enc)
	if err != nil || c.Op != OpAllocateProducerIDs || c.NodeID != "n2" {
		t.Fatalf("decode: %+v, %v", c, err)
	}
	other := base(t)
	for _, n := range []string{"n1", "n2", "n1"} {
		mustApply(t, other, Command{Op: OpAllocateProducerIDs, NodeID: n})
	}
	if other.Hash() != h {
		t.Fatal("two states applying the same allocations differ")
	}
	rb, err := EncodeResult(Result{ProducerIDStart: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := DecodeResult(rb); err != nil || r.ProducerIDStart != 2000 {
		t.Fatalf("result: %+v, %v", r, err)
	}
}

// TestNextProducerIDOmittedWhenZero: a State that never reserved a
// producer id encodes without the field, so its hash is unchanged.
func TestNextProducerIDOmittedWhenZero(t *testing.T) {
	b, err := base(t).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "producer") {
		t.Fatalf("a state without producer ids encodes them: %s", b)
	}
}
