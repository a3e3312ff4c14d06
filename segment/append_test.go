package segment

import (
	"testing"

	"github.com/seedqueue/sq/ring"
)

func TestAppendReadAcrossRolls(t *testing.T) { forEachBackend(t, testAppendReadAcrossRolls) }

func testAppendReadAcrossRolls(t *testing.T, be ring.Backend) {
	tests := []struct {
		name                   string
		appends, per, recs, vb int
		wantSegmentsAtLeast    int
	}{
		{"one batch per append", 60, 1, 3, 40, 5},
		{"several batches per append", 30, 4, 2, 20, 5},
		{"batch larger than a segment", 3, 1, 4, 1000, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLogOn(t, dir, be, smallOptions())
			defer l.Close()
			infos := appendBatches(t, l, tc.appends, tc.per, tc.recs, tc.vb)
			next := uint64(0)
			for i, info := range infos {
				if info.BaseOffset != next {
					t.Fatalf("append %d: BaseOffset %d, want %d", i, info.BaseOffset, next)
				}
				next = info.NextOffset
			}
			if want := uint64(tc.appends * tc.per * tc.recs); l.NextOffset() != want || next != want {
				t.Fatalf("NextOffset %d, want %d", l.NextOffset(), want)
			}
			if l.SegmentCount() < tc.wantSegmentsAtLeast {
				t.Fatalf("SegmentCount %d, want at least %d", l.SegmentCount(), tc.wantSegmentsAtLeast)
			}
			readable(t, l)
			var size int64
			for _, info := range infos {
				size += info.Bytes
			}
			if l.SizeBytes() != size {
				t.Fatalf("SizeBytes %d, want %d", l.SizeBytes(), size)
			}
			// Every offset, read with maxBytes 1, returns exactly the one
			// whole batch containing it.
			for off := uint64(0); off < l.NextOffset(); off++ {
				v, err := l.Read(off, 1, l.NextOffset())
				if err != nil {
					t.Fatalf("Read(%d): %v", off, err)
				}
				hs := checkBufs(t, v.Bufs)
				if len(hs) != 1 || hs[0].BaseOffset > off || hs[0].NextOffset() <= off || v.NextOffset != hs[0].NextOffset() {
					t.Fatalf("Read(%d, 1) = %+v", off, hs)
				}
				v.Release()
			}
		})
	}
}

func TestReadMaxBytesAndLimit(t *testing.T) {
	l := openLog(t, t.TempDir(), smallOptions())
	defer l.Close()
	appendBatches(t, l, 40, 1, 2, 50) // offsets 0..79, 2 per batch
	batchSize := l.SizeBytes() / 40
	tests := []struct {
		name            string
		offset          uint64
		maxBytes        int
		limit           uint64
		wantFirst       uint64
		wantNext        uint64 // View.NextOffset
		wantBatches     int
		wantEmpty       bool
		wantBytesAtMost int64
	}{
		{"mid batch start", 5, 1, 80, 4, 6, 1, false, batchSize},
		{"maxBytes for three batches", 10, int(3 * batchSize), 80, 10, 16, 3, false, 3 * batchSize},
		{"maxBytes just under three batches", 10, int(3*batchSize) - 1, 80, 10, 14, 2, false, 2 * batchSize},
		{"limit stops early", 0, 1 << 20, 7, 0, 8, 4, false, 4 * batchSize},
		{"limit on a batch boundary", 0, 1 << 20, 8, 0, 8, 4, false, 4 * batchSize},
		{"offset at limit", 8, 1 << 20, 8, 0, 8, 0, true, 0},
		{"offset past the end", 500, 1 << 20, 1000, 0, 500, 0, true, 0},
		{"limit past the end is clamped", 76, 1 << 20, 1000, 76, 80, 2, false, 2 * batchSize},
		{"whole log", 0, 1 << 30, 80, 0, 80, 40, false, 40 * batchSize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := l.Read(tc.offset, tc.maxBytes, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Release()
			hs := checkBufs(t, v.Bufs)
			if tc.wantEmpty {
				if len(hs) != 0 || v.Bytes != 0 || v.NextOffset != tc.wantNext {
					t.Fatalf("got %d batches, NextOffset %d; want empty at %d", len(hs), v.NextOffset, tc.wantNext)
				}
				return
			}
			if len(hs) != tc.wantBatches || hs[0].BaseOffset != tc.wantFirst || v.NextOffset != tc.wantNext {
				t.Fatalf("got %d batches from %d to %d; want %d from %d to %d", len(hs), hs[0].BaseOffset, v.NextOffset, tc.wantBatches, tc.wantFirst, tc.wantNext)
			}
			if int64(v.Bytes) > tc.wantBytesAtMost {
				t.Fatalf("Bytes %d > %d", v.Bytes, tc.wantBytesAtMost)
			}
			for _, h := range hs {
				if h.BaseOffset >= tc.limit {
					t.Fatalf("batch at %d at or after limit %d", h.BaseOffset, tc.limit)
				}
			}
		})
	}
}
