package segment

import (
	"testing"
)

func TestLookup(t *testing.T) {
	entries := []indexEntry{{0, 0}, {10, 300}, {25, 700}, {40, 1100}}
	enc := encodeIndex(entries)
	tests := []struct {
		rel  uint32
		want indexEntry
	}{
		{0, indexEntry{0, 0}}, {9, indexEntry{0, 0}}, {10, indexEntry{10, 300}},
		{24, indexEntry{10, 300}}, {39, indexEntry{25, 700}}, {40, indexEntry{40, 1100}}, {1 << 30, indexEntry{40, 1100}},
	}
	for _, tc := range tests {
		if got := lookup(entries, tc.rel); got != tc.want {
			t.Errorf("lookup(%d) = %+v, want %+v", tc.rel, got, tc.want)
		}
		if got := lookupEncoded(enc, tc.rel); got != tc.want {
			t.Errorf("lookupEncoded(%d) = %+v, want %+v", tc.rel, got, tc.want)
		}
	}
	if got := lookupEncoded(nil, 5); got != (indexEntry{}) {
		t.Errorf("lookupEncoded(nil) = %+v", got)
	}
	if got := lookupPos(entries, 699); got != (indexEntry{10, 300}) {
		t.Errorf("lookupPos(699) = %+v", got)
	}
}

// TestSealedIndexMapped: sealed segments keep no index in memory, after a
// roll and after Open; reads map their .index files.
func TestSealedIndexMapped(t *testing.T) {
	f := build(t, 30, 0, true)
	for _, reopen := range []bool{false, true} {
		l := openLog(t, f.dir, smallOptions())
		if !reopen {
			appendBatches(t, l, 20, 1, 2, 50) // rolls while open
		}
		readable(t, l)
		l.mu.RLock()
		for _, s := range l.segs[:len(l.segs)-1] {
			s.mapMu.Lock()
			if s.index != nil || s.m == nil || s.m.idx == nil {
				t.Errorf("sealed segment %d: in-memory index %v, mapped index %v", s.base, s.index != nil, s.m != nil && s.m.idx != nil)
			}
			s.mapMu.Unlock()
		}
		l.mu.RUnlock()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
