package tier_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/tier"
)

// TestParseOffsetIndexOfRealSegments cross-checks ParseOffsetIndex with
// package segment: the .index files of segments it wrote parse, every
// entry points at a batch starting with the entry's offset, and Lookup of
// every offset answers an entry from which a forward scan finds it.
func TestParseOffsetIndexOfRealSegments(t *testing.T) {
	l, dir := writeLog(t, 400, 1)
	defer l.Close()
	entries := 0
	for _, si := range l.Segments() {
		if si.Active {
			continue
		}
		logb := segmentFile(t, dir, si.BaseOffset, tier.LogSuffix, si.Bytes)
		x, err := tier.ParseOffsetIndex(segmentFile(t, dir, si.BaseOffset, tier.IndexSuffix, -1), si.Bytes)
		if err != nil {
			t.Fatalf("segment %d: %v", si.BaseOffset, err)
		}
		if x.Len() < 2 {
			t.Fatalf("segment %d: %d index entries; the test wants several", si.BaseOffset, x.Len())
		}
		entries += x.Len()
		// Walk the log, noting where each batch starts.
		starts := map[uint64]int64{}
		for pos := int64(0); pos < si.Bytes; {
			h, err := batch.ParseHeader(logb[pos:])
			if err != nil {
				t.Fatal(err)
			}
			for o := h.BaseOffset; o < h.NextOffset(); o++ {
				starts[o] = -1
			}
			starts[h.BaseOffset] = pos
			pos += int64(h.Size())
		}
		for o := si.BaseOffset; o < si.NextOffset; o++ {
			rel, pos := x.Lookup(o - si.BaseOffset)
			if uint64(rel) > o-si.BaseOffset {
				t.Fatalf("Lookup(%d) = entry %d above it", o-si.BaseOffset, rel)
			}
			if got, ok := starts[si.BaseOffset+uint64(rel)]; !ok || got != pos {
				t.Fatalf("segment %d: entry (%d, %d) does not point at the batch of offset %d (at %d)", si.BaseOffset, rel, pos, si.BaseOffset+uint64(rel), got)
			}
		}
	}
	if entries == 0 {
		t.Fatal("no index entries checked")
	}
}

func TestParseOffsetIndexCorrupt(t *testing.T) {
	enc := func(pairs ...uint32) []byte {
		b := make([]byte, 4*len(pairs))
		for i, v := range pairs {
			binary.LittleEndian.PutUint32(b[4*i:], v)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"empty", nil, true},
		{"good", enc(0, 0, 5, 100, 9, 300), true},
		{"partial entry", enc(0, 0, 5)[:10], false},
		{"first not zero", enc(1, 0), false},
		{"offsets not increasing", enc(0, 0, 5, 100, 5, 200), false},
		{"positions not increasing", enc(0, 0, 5, 100, 6, 100), false},
		{"past the log", enc(0, 0, 5, 1000), false},
	} {
		x, err := tier.ParseOffsetIndex(tc.b, 1000)
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, tier.ErrCorrupt) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if err == nil && x.Len() != len(tc.b)/8 {
			t.Errorf("%s: %d entries", tc.name, x.Len())
		}
	}
	x, _ := tier.ParseOffsetIndex(enc(0, 0, 5, 100, 9, 300), 1000)
	for _, tc := range []struct {
		rel     uint64
		wantRel uint32
		wantPos int64
	}{{0, 0, 0}, {4, 0, 0}, {5, 5, 100}, {8, 5, 100}, {9, 9, 300}, {1 << 40, 9, 300}} {
		if rel, pos := x.Lookup(tc.rel); rel != tc.wantRel || pos != tc.wantPos {
			t.Errorf("Lookup(%d) = (%d, %d), want (%d, %d)", tc.rel, rel, pos, tc.wantRel, tc.wantPos)
		}
	}
	var zero tier.OffsetIndex
	if rel, pos := zero.Lookup(7); rel != 0 || pos != 0 {
		t.Errorf("empty index Lookup = (%d, %d)", rel, pos)
	}
}
