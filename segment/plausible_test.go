package segment

import (
	"encoding/binary"
	"os"
	"testing"
	"time"
)

// timeIndexDamages rewrite a .timeindex file of entries with implausible
// contents. Each gets the file's bytes and returns the new ones.
var timeIndexDamages = map[string]func(b []byte) []byte{
	"12 zero bytes":       func([]byte) []byte { return make([]byte, 12) },
	"first time zero":     func(b []byte) []byte { binary.LittleEndian.PutUint64(b, 0); return b },
	"first time negative": func(b []byte) []byte { binary.LittleEndian.PutUint64(b, ^uint64(0)); return b },
	"time 10 years ahead": func(b []byte) []byte {
		ts := time.Now().AddDate(10, 0, 0).UnixMilli()
		binary.LittleEndian.PutUint64(b[timeEntrySize:], uint64(ts))
		return b
	},
	"last time 2 minutes ahead": func(b []byte) []byte {
		ts := time.Now().Add(2 * time.Minute).UnixMilli()
		binary.LittleEndian.PutUint64(b[len(b)-timeEntrySize:], uint64(ts))
		return b
	},
	"time going backwards": func(b []byte) []byte {
		prev := binary.LittleEndian.Uint64(b)
		binary.LittleEndian.PutUint64(b[timeEntrySize:], prev-5)
		return b
	},
	"before the previous segment": func(b []byte) []byte {
		binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)-3_600_000)
		return b
	},
	"offset outside the segment": func(b []byte) []byte {
		binary.LittleEndian.PutUint32(b[2*timeEntrySize+8:], 1_000_000)
		return b
	},
	"first offset not 0":    func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 1); return b },
	"truncated by 5 bytes":  func(b []byte) []byte { return b[:len(b)-5] },
	"3 extra bytes":         func(b []byte) []byte { return append(b, 1, 2, 3) },
	"last entry duplicated": func(b []byte) []byte { return append(b, b[len(b)-timeEntrySize:]...) },
	"all 0xFF":              func(b []byte) []byte { return bytes255(len(b)) },
}

func bytes255(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 0xff
	}
	return b
}

// TestTimeIndexImplausibleRebuilt: a .timeindex with implausible entries
// (zero, negative or future times, times going backwards within the file
// or before the previous segment, offsets outside the segment, a size that
// is not whole entries) is rebuilt from the log while the partition is
// stopped. Afterwards no append time of the damaged segment is earlier than
// the real one (retention cannot delete it early), none is in the future,
// no lookup by time answers later than the exact offset (--from-time never
// starts late), the other segments keep their exact times, and the file is
// plausible again.
func TestTimeIndexImplausibleRebuilt(t *testing.T) {
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	for name, damage := range timeIndexDamages {
		for _, which := range []string{"sealed", "active"} {
			t.Run(which+"/"+name, func(t *testing.T) {
				dir := t.TempDir()
				l := openLog(t, dir, smallOptions())
				bases := timedLog(t, l, 40, t0)
				segs := l.Segments()
				if len(segs) < 4 {
					t.Fatalf("%d segments; the test wants several", len(segs))
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				k := 1
				if which == "active" {
					k = len(segs) - 1
				}
				seg := segs[k]
				path := timeIndexPath(dir, seg.BaseOffset)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if len(b) < 3*timeEntrySize {
					t.Fatalf("segment %d has %d time index bytes; the test wants 3 entries", k, len(b))
				}
				if err := os.WriteFile(path, damage(b), 0o644); err != nil {
					t.Fatal(err)
				}
				l = openLog(t, dir, smallOptions())
				defer l.Close()
				now := time.Now().UnixMilli()
				got := l.Segments()[k]
				if got.FirstAppendTime < seg.FirstAppendTime || got.MaxAppendTime < seg.MaxAppendTime || got.MaxAppendTime > now {
					t.Fatalf("append times [%d, %d] after the rebuild; real [%d, %d], now %d",
						got.FirstAppendTime, got.MaxAppendTime, seg.FirstAppendTime, seg.MaxAppendTime, now)
				}
				for i, base := range bases {
					ts := t0 + int64(i)*10
					off, at := l.OffsetForTime(ts)
					if off > base || at < ts {
						t.Fatalf("OffsetForTime(%d) = %d, %d; exact answer %d", ts, off, at, base)
					}
					if base < seg.BaseOffset && (off != base || at != ts) {
						t.Fatalf("OffsetForTime(%d) = %d, %d before the damaged segment; want %d, %d", ts, off, at, base, ts)
					}
				}
				for j, s := range l.Segments() {
					if j != k && j < len(segs) && (s.FirstAppendTime != segs[j].FirstAppendTime || s.MaxAppendTime != segs[j].MaxAppendTime) {
						t.Fatalf("segment %d times %d..%d changed from %d..%d", j, s.FirstAppendTime, s.MaxAppendTime, segs[j].FirstAppendTime, segs[j].MaxAppendTime)
					}
				}
				rb, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				tb := timeBounds{floor: 1, ceil: now + MaxClockAhead.Milliseconds()}
				if _, whole, why := decodeTimeIndex(rb, seg.NextOffset-seg.BaseOffset, tb); !whole {
					t.Fatalf("time index not rewritten plausibly: %s", why)
				}
				// Appends continue with plausible times.
				if _, err := l.AppendAt([][]byte{makeBatch(t, l.NextOffset(), 1, 10)}, now); err != nil {
					t.Fatal(err)
				}
				if last := l.Segments()[l.SegmentCount()-1].MaxAppendTime; last > now+MaxClockAhead.Milliseconds() {
					t.Fatalf("next append dated %d, now %d", last, now)
				}
			})
		}
	}
}

// TestOffsetIndexImplausibleRebuilt: a .index whose entries are
// implausible (not whole entries, offsets or positions outside the segment,
// not increasing, pointing between batches) is rebuilt from the log, and
// every offset reads back.
func TestOffsetIndexImplausibleRebuilt(t *testing.T) {
	damages := map[string]func(b []byte) []byte{
		"12 zero bytes":         func([]byte) []byte { return make([]byte, 12) },
		"all zero":              func(b []byte) []byte { return make([]byte, len(b)) },
		"position past the end": func(b []byte) []byte { binary.LittleEndian.PutUint32(b[len(b)-4:], 1<<30); return b },
		"offset outside":        func(b []byte) []byte { binary.LittleEndian.PutUint32(b[len(b)-8:], 1<<30); return b },
		"position between batches": func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[len(b)-4:], binary.LittleEndian.Uint32(b[len(b)-4:])+3)
			return b
		},
		"truncated by 3 bytes":   func(b []byte) []byte { return b[:len(b)-3] },
		"first entry not (0, 0)": func(b []byte) []byte { binary.LittleEndian.PutUint32(b, 1); return b },
		"all 0xFF":               func(b []byte) []byte { return bytes255(len(b)) },
	}
	for name, damage := range damages {
		for _, which := range []string{"sealed", "active"} {
			t.Run(which+"/"+name, func(t *testing.T) {
				dir := t.TempDir()
				l := openLog(t, dir, smallOptions())
				appendBatches(t, l, 40, 1, 2, 50)
				segs := l.Segments()
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				k := 1
				if which == "active" {
					k = len(segs) - 1
				}
				path := indexPath(dir, segs[k].BaseOffset)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if len(b) < 2*indexEntrySize {
					t.Fatalf("segment %d has %d index bytes; the test wants 2 entries", k, len(b))
				}
				if err := os.WriteFile(path, damage(b), 0o644); err != nil {
					t.Fatal(err)
				}
				l = openLog(t, dir, smallOptions())
				defer l.Close()
				readable(t, l)
				for off := uint64(0); off < l.NextOffset(); off++ {
					v, err := l.Read(off, 1, l.NextOffset())
					if err != nil {
						t.Fatalf("Read(%d): %v", off, err)
					}
					hs := checkBufs(t, v.Bufs)
					v.Release()
					if len(hs) != 1 || hs[0].BaseOffset > off || hs[0].NextOffset() <= off {
						t.Fatalf("Read(%d) = %+v", off, hs)
					}
				}
				if _, ok, why := readIndex(osFS(), path, fileSize(t, logPath(dir, segs[k].BaseOffset))); !ok {
					t.Fatalf("index not rebuilt: %s", why)
				}
			})
		}
	}
}
