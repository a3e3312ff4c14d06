package segment

import (
	"errors"
	"testing"
)

func TestDeleteSegmentsBefore(t *testing.T) {
	for _, clean := range []bool{true, false} {
		name := map[bool]string{true: "then Close", false: "then crash"}[clean]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, smallOptions())
			infos := appendBatches(t, l, 40, 1, 2, 50)
			segs := l.Segments()
			if len(segs) < 4 || !segs[len(segs)-1].Active || segs[0].MaxTimestamp != 1001 {
				t.Fatalf("Segments() = %+v", segs)
			}
			// A reader holding the first segment keeps its bytes after the
			// delete.
			held, err := l.Read(0, 1<<20, l.NextOffset())
			if err != nil {
				t.Fatal(err)
			}
			cut := segs[2].BaseOffset + 1 // inside the third segment
			n, err := l.DeleteSegmentsBefore(cut)
			if err != nil || n != 2 {
				t.Fatalf("DeleteSegmentsBefore(%d) = %d, %v; want 2", cut, n, err)
			}
			if l.LogStartOffset() != segs[2].BaseOffset || l.SegmentCount() != len(segs)-2 {
				t.Fatalf("start %d segments %d after delete", l.LogStartOffset(), l.SegmentCount())
			}
			for _, s := range segs[:2] {
				if exists(logPath(dir, s.BaseOffset)) || exists(indexPath(dir, s.BaseOffset)) {
					t.Errorf("files of segment %d still exist", s.BaseOffset)
				}
			}
			checkBufs(t, held.Bufs)
			held.Release()
			if _, err := l.Read(0, 1, l.NextOffset()); !errors.Is(err, ErrOffsetOutOfRange) {
				t.Fatalf("Read(0) after delete = %v", err)
			}
			readable(t, l)
			var size int64
			for _, s := range l.Segments() {
				size += s.Bytes
			}
			if l.SizeBytes() != size {
				t.Fatalf("SizeBytes %d, segments hold %d", l.SizeBytes(), size)
			}
			if n, err := l.DeleteSegmentsBefore(l.NextOffset() + 10); err != nil || n != len(segs)-3 || l.SegmentCount() != 1 {
				t.Fatalf("delete everything = %d, %v; %d segments left", n, err, l.SegmentCount())
			}
			if clean {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				abandon(t, l)
			}
			l = openLog(t, dir, smallOptions())
			defer l.Close()
			if start, end := readable(t, l); start != segs[len(segs)-1].BaseOffset || end != infos[len(infos)-1].NextOffset {
				t.Fatalf("after reopen: readable [%d, %d)", start, end)
			}
		})
	}
}
