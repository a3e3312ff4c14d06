package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seedqueue/sq/ring"
)

// fixture is a log directory written by a Log that then crashed or closed.
type fixture struct {
	dir    string
	infos  []AppendInfo // one batch per append
	synced int          // appends covered by the recovery point (the explicit checkpoint or the last roll)
}

// last returns the last append.
func (f *fixture) last() AppendInfo { return f.infos[len(f.infos)-1] }

func (f *fixture) logOf(i int) string { return logPath(f.dir, f.infos[i].Segment) }

// build appends synced batches, syncs and checkpoints, appends unsynced
// more, then crashes (or closes, if clean).
func build(t *testing.T, synced, unsynced int, clean bool) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), synced: synced}
	l := openLog(t, f.dir, smallOptions())
	f.infos = appendBatches(t, l, synced, 1, 2, 50)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	f.infos = append(f.infos, appendBatches(t, l, unsynced, 1, 2, 50)...)
	if clean {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		f.synced = len(f.infos)
	} else {
		abandon(t, l)
		// A roll checkpoints at the end of the sealed segment.
		for k := len(f.infos) - 1; k > synced; k-- {
			if f.infos[k].Rolled {
				f.synced = k
				break
			}
		}
	}
	return f
}

func patch(t *testing.T, path string, pos int64, b []byte) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
}

func flipBit(t *testing.T, path string, pos int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	patch(t, path, pos, []byte{b[pos] ^ 0x10})
}

func truncate(t *testing.T, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

// TestRecoverTornTail: damage above the recovery point ends the log at the
// damaged batch; everything before it stays readable and appends continue.
func TestRecoverTornTail(t *testing.T) { forEachBackend(t, testRecoverTornTail) }

func testRecoverTornTail(t *testing.T, be ring.Backend) {
	tests := []struct {
		name string
		// damage returns the first offset that must not survive (the
		// log end offset after reopen).
		damage func(t *testing.T, f *fixture) uint64
	}{
		{"no damage, crash only", func(t *testing.T, f *fixture) uint64 {
			return f.last().NextOffset
		}},
		{"last batch cut 7 bytes in", func(t *testing.T, f *fixture) uint64 {
			truncate(t, f.logOf(len(f.infos)-1), f.last().Position+7)
			return f.last().BaseOffset
		}},
		{"last batch cut 1 byte short", func(t *testing.T, f *fixture) uint64 {
			truncate(t, f.logOf(len(f.infos)-1), f.last().Position+f.last().Bytes-1)
			return f.last().BaseOffset
		}},
		{"4096 zero bytes after the end", func(t *testing.T, f *fixture) uint64 {
			end := f.last().Position + f.last().Bytes
			truncate(t, f.logOf(len(f.infos)-1), end)
			patch(t, f.logOf(len(f.infos)-1), end, make([]byte, 4096))
			return f.last().NextOffset
		}},
		{"length field 0xFFFFFFFF", func(t *testing.T, f *fixture) uint64 {
			patch(t, f.logOf(len(f.infos)-1), f.last().Position+8, []byte{0xff, 0xff, 0xff, 0xff})
			return f.last().BaseOffset
		}},
		{"length field below the header", func(t *testing.T, f *fixture) uint64 {
			patch(t, f.logOf(len(f.infos)-1), f.last().Position+8, []byte{3, 0, 0, 0})
			return f.last().BaseOffset
		}},
		{"CRC bit flip in the last batch", func(t *testing.T, f *fixture) uint64 {
			flipBit(t, f.logOf(len(f.infos)-1), f.last().Position+f.last().Bytes-3)
			return f.last().BaseOffset
		}},
		{"zero magic in the last batch", func(t *testing.T, f *fixture) uint64 {
			patch(t, f.logOf(len(f.infos)-1), f.last().Position+16, []byte{0})
			return f.last().BaseOffset
		}},
		{"baseOffset sequence break", func(t *testing.T, f *fixture) uint64 {
			b := binary.LittleEndian.AppendUint64(nil, f.last().BaseOffset+5)
			patch(t, f.logOf(len(f.infos)-1), f.last().Position, b)
			return f.last().BaseOffset
		}},
		{"first batch of a later segment has the wrong offset", func(t *testing.T, f *fixture) uint64 {
			k := len(f.infos) - 1
			for f.infos[k-1].Segment == f.last().Segment {
				k--
			}
			if k < f.synced {
				t.Fatal("fixture's last segment starts below the recovery point")
			}
			b := binary.LittleEndian.AppendUint64(nil, f.infos[k].BaseOffset+1)
			patch(t, f.logOf(k), f.infos[k].Position, b)
			return f.infos[k].BaseOffset
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := build(t, 12, 14, false)
			want := tc.damage(t, f)
			// The fixture's last appends were never synced, as under
			// sync policy none (hole_test.go covers every policy).
			opts := smallOptions()
			opts.Durability = DurableNone
			l := openLogOn(t, f.dir, be, opts)
			defer l.Close()
			if start, end := readable(t, l); start != 0 || end != want {
				t.Fatalf("readable [%d, %d), want [0, %d)", start, end, want)
			}
			// Appends continue at the next offset and survive a reopen.
			appendBatches(t, l, 3, 1, 2, 50)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l2 := openLogOn(t, f.dir, be, opts)
			defer l2.Close()
			if _, end := readable(t, l2); end != want+6 {
				t.Fatalf("after appending 6 records and reopening: end %d, want %d", end, want+6)
			}
		})
	}
}

// TestRecoverCorruptBelowRecoveryPoint: damage to data the recovery point
// says is durable is reported, never truncated.
func TestRecoverCorruptBelowRecoveryPoint(t *testing.T) {
	tests := []struct {
		name string
		// damage returns the file and position the error must name.
		damage func(t *testing.T, f *fixture) (string, int64)
	}{
		{"bit flip in the last synced batch", func(t *testing.T, f *fixture) (string, int64) {
			i := f.synced - 1
			flipBit(t, f.logOf(i), f.infos[i].Position+f.infos[i].Bytes-3)
			return f.logOf(i), f.infos[i].Position
		}},
		{"bit flip in the last batch of a sealed segment", func(t *testing.T, f *fixture) (string, int64) {
			i := 0
			for f.infos[i+1].Segment == f.infos[0].Segment {
				i++
			}
			flipBit(t, f.logOf(i), f.infos[i].Position+f.infos[i].Bytes-3)
			return f.logOf(i), f.infos[i].Position
		}},
		{"length field garbage in a synced batch", func(t *testing.T, f *fixture) (string, int64) {
			i := f.synced - 1
			patch(t, f.logOf(i), f.infos[i].Position+8, []byte{0xff, 0xff, 0xff, 0x7f})
			return f.logOf(i), f.infos[i].Position
		}},
		{"file shorter than the recovery point", func(t *testing.T, f *fixture) (string, int64) {
			i := f.synced - 1
			end := f.infos[i].Position + f.infos[i].Bytes
			truncate(t, f.logOf(i), end-10)
			return f.logOf(i), end - 10
		}},
		{"segment of the recovery point missing", func(t *testing.T, f *fixture) (string, int64) {
			i := f.synced - 1
			if err := os.Remove(f.logOf(i)); err != nil {
				t.Fatal(err)
			}
			return f.logOf(i), f.infos[i].Position + f.infos[i].Bytes
		}},
	}
	for _, tc := range tests {
		for _, clean := range []bool{false, true} {
			name := tc.name + "/crashed"
			if clean {
				name = tc.name + "/closed"
			}
			t.Run(name, func(t *testing.T) {
				f := build(t, 12, 14, clean)
				file, pos := tc.damage(t, f)
				sizes := map[string]int64{}
				logs, _ := filepath.Glob(filepath.Join(f.dir, "*.log"))
				for _, p := range logs {
					sizes[p] = fileSize(t, p)
				}
				l, err := Open(f.dir, ring.OS, ring.NewPortable(), smallOptions())
				if err == nil {
					l.Close()
					t.Fatal("Open succeeded on a corrupt log")
				}
				var ce *CorruptError
				if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Open: %v, want a *CorruptError", err)
				}
				if ce.File != file || ce.Position != pos {
					t.Fatalf("CorruptError names %s at %d, want %s at %d (%v)", ce.File, ce.Position, file, pos, err)
				}
				for p, size := range sizes {
					if got := fileSize(t, p); got != size {
						t.Errorf("%s: size %d after Open, was %d", p, got, size)
					}
				}
			})
		}
	}
}

// TestRecoverSealedSegmentCorrupt: damage in a segment that has a successor
// is corruption even above the recovery point (or without one): Open fails
// naming the file and position, and no file is cut or removed.
func TestRecoverSealedSegmentCorrupt(t *testing.T) {
	// middle returns an append in a segment that is neither the first nor
	// the last, and not that segment's first batch.
	middle := func(t *testing.T, f *fixture) int {
		for k := 1; k < len(f.infos); k++ {
			s := f.infos[k].Segment
			if s != f.infos[0].Segment && s != f.last().Segment && f.infos[k-1].Segment == s {
				return k
			}
		}
		t.Fatal("fixture has no middle segment of two batches")
		return 0
	}
	tests := []struct {
		name string
		// damage returns the file and position the error must name.
		damage func(t *testing.T, f *fixture) (string, int64)
	}{
		{"bit flip in the middle of a middle segment", func(t *testing.T, f *fixture) (string, int64) {
			k := middle(t, f)
			flipBit(t, f.logOf(k), f.infos[k].Position+f.infos[k].Bytes/2)
			return f.logOf(k), f.infos[k].Position
		}},
		{"middle segment cut short", func(t *testing.T, f *fixture) (string, int64) {
			k := middle(t, f)
			truncate(t, f.logOf(k), f.infos[k].Position+7)
			return f.logOf(k), f.infos[k].Position
		}},
		{"empty stray segment inside a segment's range", func(t *testing.T, f *fixture) (string, int64) {
			k := middle(t, f)
			stray := logPath(f.dir, f.infos[k].BaseOffset+1)
			if err := os.WriteFile(stray, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return f.logOf(k), f.infos[k].Position + f.infos[k].Bytes
		}},
		{"empty stray segment after the end", func(t *testing.T, f *fixture) (string, int64) {
			if err := os.WriteFile(logPath(f.dir, f.last().NextOffset+1000), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return f.logOf(len(f.infos) - 1), f.last().Position + f.last().Bytes
		}},
	}
	for _, tc := range tests {
		for _, clean := range []bool{false, true} {
			name := tc.name + "/crashed"
			if clean {
				name = tc.name + "/closed"
			}
			t.Run(name, func(t *testing.T) {
				f := build(t, 12, 14, clean)
				if err := os.Remove(filepath.Join(f.dir, recoveryPointName)); err != nil {
					t.Fatal(err)
				}
				file, pos := tc.damage(t, f)
				sizes := map[string]int64{}
				logs, _ := filepath.Glob(filepath.Join(f.dir, "*"))
				for _, p := range logs {
					sizes[p] = fileSize(t, p)
				}
				l, err := Open(f.dir, ring.OS, ring.NewPortable(), smallOptions())
				if err == nil {
					l.Close()
					t.Fatal("Open succeeded on a corrupt log")
				}
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("Open: %v, want a *CorruptError", err)
				}
				if ce.File != file || ce.Position != pos {
					t.Fatalf("CorruptError names %s at %d, want %s at %d (%v)", ce.File, ce.Position, file, pos, err)
				}
				for p, size := range sizes {
					if !exists(p) {
						t.Errorf("%s removed by Open", p)
					} else if got := fileSize(t, p); strings.HasSuffix(p, logSuffix) && got != size {
						t.Errorf("%s: size %d after Open, was %d", p, got, size)
					}
				}
			})
		}
	}
}

// TestRecoverDamagedRecoveryPoint: a recovery-point file that does not
// decode is logged at ERROR and ignored (full scan): the log opens with all
// its data, and damage in a sealed segment is still corruption.
func TestRecoverDamagedRecoveryPoint(t *testing.T) {
	damages := []struct {
		name   string
		damage func(t *testing.T, p string)
	}{
		{"empty", func(t *testing.T, p string) { truncate(t, p, 0) }},
		{"bit flip", func(t *testing.T, p string) { flipBit(t, p, 9) }},
		{"short", func(t *testing.T, p string) { truncate(t, p, rpSize-1) }},
	}
	for _, d := range damages {
		for _, clean := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/clean=%v", d.name, clean), func(t *testing.T) {
				f := build(t, 12, 14, clean)
				rpPath := filepath.Join(f.dir, recoveryPointName)
				d.damage(t, rpPath)
				var logs bytes.Buffer
				opts := smallOptions()
				opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
				l, err := Open(f.dir, ring.OS, ring.NewPortable(), opts)
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if start, end := readable(t, l); start != 0 || end != f.last().NextOffset {
					t.Errorf("readable [%d, %d), want [0, %d)", start, end, f.last().NextOffset)
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), rpPath) {
					t.Errorf("no ERROR naming %s in the log:\n%s", rpPath, logs.String())
				}
				if _, found, err := readRecoveryPoint(ring.OS, f.dir, opts.Logger); !found || err != nil {
					t.Errorf("recovery point not rewritten: found %v, %v", found, err)
				}
			})
		}
	}
	t.Run("damaged and a bit flip in a sealed segment", func(t *testing.T) {
		f := build(t, 12, 14, false)
		flipBit(t, filepath.Join(f.dir, recoveryPointName), 9)
		k := 1
		for f.infos[k].Segment == f.infos[0].Segment {
			k++
		}
		flipBit(t, f.logOf(k-1), f.infos[k-1].Position+f.infos[k-1].Bytes/2)
		l, err := Open(f.dir, ring.OS, ring.NewPortable(), smallOptions())
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.File != f.logOf(k-1) {
			if err == nil {
				l.Close()
			}
			t.Fatalf("Open: %v, want a *CorruptError naming %s", err, f.logOf(k-1))
		}
	})
}
