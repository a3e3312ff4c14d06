package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/seedqueue/sq/ring"
)

// TestRecoverIndex: an index that disagrees with its log is rebuilt to the
// same bytes Append wrote, and reads work.
func TestRecoverIndex(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string, logSize int64)
	}{
		{"deleted", func(t *testing.T, path string, _ int64) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated to 0", func(t *testing.T, path string, _ int64) { truncate(t, path, 0) }},
		{"truncated mid-entry", func(t *testing.T, path string, _ int64) { truncate(t, path, fileSize(t, path)-3) }},
		{"entry past the end of the log", func(t *testing.T, path string, logSize int64) {
			e := binary.LittleEndian.AppendUint32(nil, 1000)
			e = binary.LittleEndian.AppendUint32(e, uint32(logSize+100))
			patch(t, path, fileSize(t, path), e)
		}},
		{"entry pointing mid-batch", func(t *testing.T, path string, _ int64) {
			b, _ := os.ReadFile(path)
			last := binary.LittleEndian.Uint32(b[len(b)-4:])
			patch(t, path, int64(len(b)-4), binary.LittleEndian.AppendUint32(nil, last+5))
		}},
		{"entries not increasing", func(t *testing.T, path string, _ int64) {
			patch(t, path, 8, make([]byte, 8))
		}},
	}
	for _, tc := range tests {
		for _, which := range []string{"sealed", "active"} {
			t.Run(tc.name+"/"+which, func(t *testing.T) {
				f := build(t, 30, 0, true)
				seg := f.infos[0].Segment
				if which == "active" {
					seg = f.last().Segment
				}
				path := indexPath(f.dir, seg)
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if len(want) < 16 {
					t.Fatalf("fixture index has %d bytes; want at least two entries", len(want))
				}
				tc.damage(t, path, fileSize(t, logPath(f.dir, seg)))
				l := openLog(t, f.dir, smallOptions())
				defer l.Close()
				if _, end := readable(t, l); end != f.last().NextOffset {
					t.Fatalf("readable to %d, want %d", end, f.last().NextOffset)
				}
				for off := uint64(0); off < l.NextOffset(); off += 3 {
					v, err := l.Read(off, 1, l.NextOffset())
					if err != nil {
						t.Fatalf("Read(%d): %v", off, err)
					}
					v.Release()
				}
				if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
					t.Fatalf("rebuilt index differs:\n got %x\nwant %x", got, want)
				}
			})
		}
	}
}

// TestStrayFiles: .sqtmp files are deleted, other unknown files logged and
// kept.
func TestStrayFiles(t *testing.T) {
	f := build(t, 10, 0, true)
	stray := []string{"notes.txt", "00000000000000000000.timeindex", "00000000000000099999.index", "0123.log"}
	tmp := []string{"foo.sqtmp", recoveryPointName + tmpSuffix}
	for _, name := range append(stray, tmp...) {
		if err := os.WriteFile(filepath.Join(f.dir, name), []byte("junk"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	opts := smallOptions()
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	l := openLog(t, f.dir, opts)
	defer l.Close()
	if _, end := readable(t, l); end != f.last().NextOffset {
		t.Fatalf("readable to %d, want %d", end, f.last().NextOffset)
	}
	for _, name := range stray {
		if !exists(filepath.Join(f.dir, name)) {
			t.Errorf("%s was removed", name)
		}
	}
	for _, name := range tmp {
		if exists(filepath.Join(f.dir, name)) {
			t.Errorf("%s was not removed", name)
		}
	}
	for _, name := range []string{"notes.txt", "0123.log", "00000000000000099999.index"} {
		if !strings.Contains(logs.String(), name) {
			t.Errorf("stray %s not logged:\n%s", name, logs.String())
		}
	}
}

// TestReopen: offsets continue after Close, and after a crash without Close
// (unsynced data that reached the page cache survives a process crash).
func TestReopen(t *testing.T) { forEachBackend(t, testReopen) }

func testReopen(t *testing.T, be ring.Backend) {
	for _, clean := range []bool{true, false} {
		name := map[bool]string{true: "after Close", false: "after a crash"}[clean]
		t.Run(name, func(t *testing.T) {
			f := build(t, 10, 15, clean)
			if clean {
				for _, s := range segmentFiles(t, f.dir) {
					if s == logPath(f.dir, f.last().Segment) && fileSize(t, s) != f.last().Position+f.last().Bytes {
						t.Errorf("active segment not trimmed: %d bytes, data ends at %d", fileSize(t, s), f.last().Position+f.last().Bytes)
					}
				}
			}
			for round := 0; round < 3; round++ {
				l := openLogOn(t, f.dir, be, smallOptions())
				want := f.last().NextOffset + uint64(round*10)
				if _, end := readable(t, l); end != want {
					t.Fatalf("round %d: readable to %d, want %d", round, end, want)
				}
				appendBatches(t, l, 5, 1, 2, 50)
				if clean {
					if err := l.Close(); err != nil {
						t.Fatal(err)
					}
				} else {
					abandon(t, l)
				}
			}
		})
	}
}

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	return logs
}

// TestReadOutOfRange: a log whose start is above 0 rejects reads below it.
func TestReadOutOfRange(t *testing.T) {
	dir := t.TempDir()
	if err := writeRecoveryPoint(osFS(), dir, recoveryPoint{next: 100, base: 100}); err != nil {
		t.Fatal(err)
	}
	l := openLog(t, dir, smallOptions())
	defer l.Close()
	if l.LogStartOffset() != 100 || l.NextOffset() != 100 {
		t.Fatalf("start %d next %d, want 100 100", l.LogStartOffset(), l.NextOffset())
	}
	appendBatches(t, l, 3, 1, 2, 10)
	_, err := l.Read(99, 100, 106)
	var oor *OffsetOutOfRangeError
	if !errors.As(err, &oor) || oor.Start != 100 || oor.End != 106 || !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("Read(99) = %v, want OffsetOutOfRangeError{100, 106}", err)
	}
	v, err := l.Read(100, 1, 106)
	if err != nil || len(checkBufs(t, v.Bufs)) != 1 {
		t.Fatalf("Read(100) = %v", err)
	}
	v.Release()
}

// TestLogStartLogged: Open logs the log start; a first segment whose .log
// was deleted while stopped (its index files left) is a WARN naming the
// missing offset range; retention's deletions are not.
func TestLogStartLogged(t *testing.T) {
	tests := []struct {
		name   string
		remove func(t *testing.T, l *Log, second uint64) // second: base of the second segment
		want   []string                                  // substrings of the log
		never  string
	}{
		{"first .log deleted by hand", func(t *testing.T, l *Log, _ uint64) {
			if err := os.Remove(logPath(l.Dir(), 0)); err != nil {
				t.Fatal(err)
			}
		}, []string{"level=WARN", "log start moved while stopped", "missing_from=0 missing_to=%d", "log_start=%d"}, ""},
		{"first segment's files all deleted by hand", func(t *testing.T, l *Log, _ uint64) {
			for _, p := range []string{logPath(l.Dir(), 0), indexPath(l.Dir(), 0), timeIndexPath(l.Dir(), 0)} {
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
			}
		}, []string{"level=INFO", "segment: opened", "log_start=%d"}, "level=WARN"},
		{"retention", nil, []string{"level=INFO", "segment: opened", "log_start=%d"}, "level=WARN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, smallOptions())
			appendBatches(t, l, 30, 1, 2, 50)
			second := l.Segments()[1].BaseOffset
			if tc.remove == nil {
				if n, err := l.DeleteSegmentsBefore(second); n != 1 || err != nil {
					t.Fatalf("DeleteSegmentsBefore: %d, %v", n, err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if tc.remove != nil {
				tc.remove(t, l, second)
			}
			var logs bytes.Buffer
			opts := smallOptions()
			opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			l = openLog(t, dir, opts)
			defer l.Close()
			if got := l.LogStartOffset(); got != second {
				t.Fatalf("log start %d, want %d", got, second)
			}
			for _, w := range tc.want {
				if strings.Contains(w, "%d") {
					w = strings.ReplaceAll(w, "%d", strconv.FormatUint(second, 10))
				}
				if !strings.Contains(logs.String(), w) {
					t.Errorf("log lacks %q:\n%s", w, logs.String())
				}
			}
			if tc.never != "" && strings.Contains(logs.String(), tc.never) {
				t.Errorf("log has %q:\n%s", tc.never, logs.String())
			}
		})
	}
}
