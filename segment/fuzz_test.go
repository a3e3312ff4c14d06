package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seedqueue/sq/api/batch"
	"github.com/seedqueue/sq/ring"
)

// FuzzRecoverTail overwrites the log with arbitrary bytes at an arbitrary
// position, with no recovery point (so everything is above it), and checks
// that Open recovers: every batch wholly before the damage survives, and
// what is readable is whole, valid and contiguous. Under DurableEveryBatch
// Open may instead report the damage as a *CorruptError (a valid batch
// follows it), and then the file is left as it was. With fix, the CRC of
// every batch the damage touches is recomputed (fixCRCs), so that the
// damage reaches the checks behind the CRC (offset sequence, record count,
// the record walk) instead of failing the CRC.
func FuzzRecoverTail(f *testing.F) {
	src := f.TempDir()
	opts := smallOptions()
	opts.SegmentBytes = 1 << 20
	l := openLog(f, src, opts)
	infos := appendBatches(f, l, 8, 1, 2, 40)
	if err := l.Close(); err != nil {
		f.Fatal(err)
	}
	logData, err := os.ReadFile(logPath(src, 0))
	if err != nil {
		f.Fatal(err)
	}
	for _, fix := range []bool{false, true} {
		f.Add(uint16(infos[7].Position+7), []byte{}, fix)
		f.Add(uint16(infos[5].Position+8), []byte{0xff, 0xff, 0xff, 0xff}, fix)
		f.Add(uint16(infos[3].Position+30), []byte{1, 2, 3}, fix)
		f.Add(uint16(infos[3].Position), []byte{0, 0, 0, 0, 0, 0, 0, 9}, fix)
		f.Add(uint16(len(logData)), make([]byte, 4096), fix)
		f.Add(uint16(infos[6].Position), logData[infos[2].Position:infos[4].Position], fix)
	}
	f.Fuzz(func(t *testing.T, at uint16, data []byte, fix bool) {
		pos := min(int64(at), int64(len(logData)))
		dir := t.TempDir()
		damaged := append(append([]byte(nil), logData[:pos]...), data...)
		end := pos + int64(len(data))
		if end < int64(len(logData)) {
			damaged = append(damaged, logData[end:]...)
		}
		if fix {
			fixCRCs(damaged, pos, end)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(logPath(src, 0))), damaged, 0o644); err != nil {
			t.Fatal(err)
		}
		strict := opts
		strict.Durability = DurableEveryBatch
		if l, err := Open(dir, osFS(), ring.NewPortable(), strict); err == nil {
			l.Close()
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Open under every-batch: %v", err)
		} else if after, rerr := os.ReadFile(logPath(dir, 0)); rerr != nil || !bytes.Equal(after, damaged) {
			t.Fatalf("Open reported %v and changed the file (%v)", err, rerr)
		}
		lax := opts
		lax.Durability = DurableNone
		l := openLog(t, dir, lax)
		defer l.Close()
		var intact uint64
		for _, info := range infos {
			if info.Position+info.Bytes <= pos {
				intact = info.NextOffset
			}
		}
		v, err := l.Read(0, 1<<30, l.NextOffset())
		if err != nil {
			t.Fatal(err)
		}
		defer v.Release()
		var next uint64
		for _, buf := range v.Bufs {
			for len(buf) > 0 {
				b, rest, h, err := batch.Split(buf, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := batch.CheckHeader(b); err != nil || h.BaseOffset != next {
					t.Fatalf("batch at offset %d (want %d): %v", h.BaseOffset, next, err)
				}
				next, buf = h.NextOffset(), rest
			}
		}
		if next != l.NextOffset() || next < intact {
			t.Fatalf("readable to %d, NextOffset %d, intact before the damage %d", next, l.NextOffset(), intact)
		}
	})
}

// FuzzIndexDamage overwrites a sealed and the active segment's .index with
// arbitrary bytes after a clean Close; the logs are intact, so Open must
// succeed and every offset must read back.
func FuzzIndexDamage(f *testing.F) {
	src := f.TempDir()
	l := openLog(f, src, smallOptions())
	appendBatches(f, l, 24, 1, 2, 50)
	segs := l.Segments()
	if err := l.Close(); err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(0), uint16(8), []byte{0xff, 0, 0, 0, 0xff, 0, 0, 0})
	f.Add(uint8(1), uint16(0), []byte{1})
	f.Add(uint8(1), uint16(12), []byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, which uint8, at uint16, data []byte) {
		dir := copyDir(t, src)
		seg := segs[int(which)%len(segs)].BaseOffset
		idx, err := os.ReadFile(indexPath(dir, seg))
		if err != nil {
			t.Fatal(err)
		}
		pos := min(int(at), len(idx))
		idx = append(idx[:pos], data...)
		if err := os.WriteFile(indexPath(dir, seg), idx, 0o644); err != nil {
			t.Fatal(err)
		}
		l := openLog(t, dir, smallOptions())
		defer l.Close()
		readable(t, l)
		for off := uint64(0); off < l.NextOffset(); off += 5 {
			v, err := l.Read(off, 1, l.NextOffset())
			if err != nil {
				t.Fatalf("Read(%d): %v", off, err)
			}
			v.Release()
		}
	})
}

// FuzzTimeIndexDamage overwrites a sealed or the active segment's
// .timeindex with arbitrary bytes after a clean Close; Open must succeed
// with plausible times: no segment dated before its real append times or
// after the clock, and no lookup by time answering later than the exact
// offset.
func FuzzTimeIndexDamage(f *testing.F) {
	src := f.TempDir()
	l := openLog(f, src, smallOptions())
	t0 := time.Now().Add(-time.Hour).UnixMilli()
	var bases []uint64
	for i := 0; i < 24; i++ {
		info, err := l.AppendAt([][]byte{makeBatch(f, l.NextOffset(), 2, 50)}, t0+int64(i)*10)
		if err != nil {
			f.Fatal(err)
		}
		bases = append(bases, info.BaseOffset)
	}
	segs := l.Segments()
	if err := l.Close(); err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(0), uint16(0), make([]byte, 12))
	f.Add(uint8(1), uint16(12), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Add(uint8(2), uint16(5), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, which uint8, at uint16, data []byte) {
		dir := copyDir(t, src)
		k := int(which) % len(segs)
		path := timeIndexPath(dir, segs[k].BaseOffset)
		tidx, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		pos := min(int(at), len(tidx))
		tidx = append(tidx[:pos], data...)
		if err := os.WriteFile(path, tidx, 0o644); err != nil {
			t.Fatal(err)
		}
		{
			prev, end := int64(1), bases[len(bases)-1]+2 // the log's end: 2 records a batch
			if k > 0 {
				prev = segs[k-1].MaxAppendTime
			}
			if k < len(segs)-1 {
				end = segs[k+1].BaseOffset
			}
			seg := segs[k]
			ents, whole, _ := decodeTimeIndex(tidx, end-seg.BaseOffset, timeBounds{floor: prev, ceil: time.Now().UnixMilli()})
			if whole && len(ents) > 0 && ents[len(ents)-1].ts < seg.MaxAppendTime {
				// A .timeindex that is whole and plausible but ends early
				// (cut at an entry boundary, or rewritten with earlier
				// times) cannot be told from an intact one below the
				// recovery point: the segment is dated by its last entry
				// (docs/storage.md, Index plausibility: a known limit; a
				// crash cannot cause it, since the file is synced before
				// the recovery point above it is written).
				t.Skip("plausible time index that ends early: undetectable")
			}
		}
		l := openLog(t, dir, smallOptions())
		defer l.Close()
		now := time.Now().UnixMilli()
		for j, s := range l.Segments() {
			if s.FirstAppendTime < segs[j].FirstAppendTime || s.MaxAppendTime < segs[j].MaxAppendTime ||
				s.MaxAppendTime > now+MaxClockAhead.Milliseconds() {
				t.Fatalf("segment %d dated %d..%d; real %d..%d, now %d", j, s.FirstAppendTime, s.MaxAppendTime,
					segs[j].FirstAppendTime, segs[j].MaxAppendTime, now)
			}
		}
		for i, base := range bases {
			ts := t0 + int64(i)*10
			if off, got := l.OffsetForTime(ts); off > base || got < ts {
				t.Fatalf("OffsetForTime(%d) = %d, %d; exact answer %d", ts, off, got, base)
			}
		}
	})
}

// fixCRCs walks the batches of log by their length fields and recomputes
// the CRC of each one that overlaps [from, to), up to the first length
// that is shorter than a header or runs past the end.
func fixCRCs(log []byte, from, to int64) {
	for p := int64(0); p+batch.HeaderSize <= int64(len(log)); {
		b, _, _, err := batch.Split(log[p:], 0)
		if err != nil {
			return
		}
		if p < to && p+int64(len(b)) > from {
			binary.LittleEndian.PutUint32(b[17:], batch.Checksum(b)) // the crc field
		}
		p += int64(len(b))
	}
}

// copyDir copies the files of the directory src into a new temporary
// directory and returns its path.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	names, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
