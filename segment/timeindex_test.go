package segment

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// timedLog appends n single-batch appends of 2 records with broker times
// t0, t0+10, t0+20, ... and returns the base offset of each append.
func timedLog(t *testing.T, l *Log, n int, t0 int64) []uint64 {
	t.Helper()
	var bases []uint64
	for i := 0; i < n; i++ {
		info, err := l.AppendAt([][]byte{makeBatch(t, l.NextOffset(), 2, 50)}, t0+int64(i)*10)
		if err != nil {
			t.Fatal(err)
		}
		bases = append(bases, info.BaseOffset)
	}
	return bases
}

// checkTimes checks OffsetForTime against appends made by timedLog.
func checkTimes(t *testing.T, l *Log, bases []uint64, t0 int64) {
	t.Helper()
	for i, base := range bases {
		ts := t0 + int64(i)*10
		for _, ask := range []int64{ts, ts - 9} {
			if off, got := l.OffsetForTime(ask); off != base || got != ts {
				t.Fatalf("OffsetForTime(%d) = %d, %d; want %d, %d", ask, off, got, base, ts)
			}
		}
	}
	last := t0 + int64(len(bases)-1)*10
	if off, ts := l.OffsetForTime(last + 1); off != l.NextOffset() || ts != -1 {
		t.Fatalf("OffsetForTime after the last append = %d, %d; want %d, -1", off, ts, l.NextOffset())
	}
	if off, ts := l.OffsetForTime(0); off != l.LogStartOffset() || ts < t0 {
		t.Fatalf("OffsetForTime(0) = %d, %d; want the log start %d", off, ts, l.LogStartOffset())
	}
}

func TestOffsetForTime(t *testing.T) {
	const t0 = 1_700_000_000_000
	for _, reopen := range []string{"none", "close", "crash"} {
		t.Run(reopen, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, smallOptions())
			bases := timedLog(t, l, 60, t0)
			if l.SegmentCount() < 4 {
				t.Fatalf("%d segments; the test wants several", l.SegmentCount())
			}
			checkTimes(t, l, bases, t0)
			segs := l.Segments()
			if segs[0].FirstAppendTime != t0 || segs[len(segs)-1].MaxAppendTime != t0+590 {
				t.Fatalf("segment append times %+v", segs)
			}
			switch reopen {
			case "close":
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				l = openLog(t, dir, smallOptions())
			case "crash":
				if err := l.Sync(); err != nil {
					t.Fatal(err)
				}
				if err := l.Checkpoint(); err != nil {
					t.Fatal(err)
				}
				abandon(t, l)
				l = openLog(t, dir, smallOptions())
			}
			defer l.Close()
			checkTimes(t, l, bases, t0)
			// New appends continue the time index.
			more := timedLog(t, l, 3, t0+600)
			checkTimes(t, l, append(bases, more...), t0)
		})
	}
}

func TestAppendTimeNeverGoesBack(t *testing.T) {
	l := openLog(t, t.TempDir(), smallOptions())
	defer l.Close()
	a, _ := l.AppendAt([][]byte{makeBatch(t, 0, 1, 10)}, 5000)
	b, _ := l.AppendAt([][]byte{makeBatch(t, 1, 1, 10)}, 4000) // the clock stepped back
	c, _ := l.AppendAt([][]byte{makeBatch(t, 2, 1, 10)}, 6000)
	cases := []struct {
		ask  int64
		want uint64
		ts   int64
	}{{4000, a.BaseOffset, 5000}, {5000, a.BaseOffset, 5000}, {5001, c.BaseOffset, 6000}, {6001, c.NextOffset, -1}}
	for _, tc := range cases {
		if off, ts := l.OffsetForTime(tc.ask); off != tc.want || ts != tc.ts {
			t.Errorf("OffsetForTime(%d) = %d, %d; want %d, %d (batch b at %d)", tc.ask, off, ts, tc.want, tc.ts, b.BaseOffset)
		}
	}
}

// TestIndexesRebuilt is case d: the active segment's .index deleted or
// truncated to 0 bytes is rebuilt, and reads by offset and by time are
// right; a damaged .timeindex is repaired with times never earlier than
// the real ones, so a lookup by time never skips a record.
func TestIndexesRebuilt(t *testing.T) {
	const t0 = 1_700_000_000_000
	damage := map[string]func(string) error{
		"deleted":   os.Remove,
		"truncated": func(p string) error { return os.Truncate(p, 0) },
		"torn":      func(p string) error { return os.Truncate(p, timeEntrySize+5) },
	}
	for _, file := range []string{"index", "timeindex"} {
		for name, fn := range damage {
			if file == "index" && name == "torn" {
				continue // covered by the index tests
			}
			t.Run(file+" "+name, func(t *testing.T) {
				dir := t.TempDir()
				l := openLog(t, dir, smallOptions())
				bases := timedLog(t, l, 40, t0)
				act := l.Segments()[l.SegmentCount()-1]
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				path := indexPath(dir, act.BaseOffset)
				if file == "timeindex" {
					path = timeIndexPath(dir, act.BaseOffset)
				}
				if err := fn(path); err != nil {
					t.Fatal(err)
				}
				l = openLog(t, dir, smallOptions())
				defer l.Close()
				readable(t, l)
				for _, off := range []uint64{act.BaseOffset, act.NextOffset - 1} {
					v, err := l.Read(off, 1, l.NextOffset())
					if err != nil {
						t.Fatal(err)
					}
					hs := checkBufs(t, v.Bufs)
					v.Release()
					if len(hs) != 1 || hs[0].BaseOffset > off || hs[0].NextOffset() <= off {
						t.Fatalf("Read(%d) = %+v", off, hs)
					}
				}
				if file == "index" {
					checkTimes(t, l, bases, t0)
					return
				}
				// Sealed segments are exact; in the repaired one no lookup
				// answers later than the exact offset.
				for i, base := range bases {
					ts := t0 + int64(i)*10
					off, got := l.OffsetForTime(ts)
					if base < act.BaseOffset && (off != base || got != ts) || off > base || got < ts {
						t.Fatalf("OffsetForTime(%d) = %d, %d; exact answer %d", ts, off, got, base)
					}
				}
				if fileSize(t, path)%timeEntrySize != 0 {
					t.Fatalf("time index of %d bytes not rewritten", fileSize(t, path))
				}
				segs := l.Segments()
				if got := segs[len(segs)-1].MaxAppendTime; got < t0+390 {
					t.Fatalf("repaired MaxAppendTime %d earlier than the real %d", got, t0+390)
				}
			})
		}
	}
}

// TestRecoveryDatesUncoveredRecords: records above the recovery point
// whose time index entries were lost get the log's modification time.
func TestRecoveryDatesUncoveredRecords(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentBytes: 1 << 20, PreallocBytes: 1 << 16})
	old := time.Now().Add(-time.Hour).UnixMilli()
	timedLog(t, l, 5, old)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	tail := timedLog(t, l, 5, old+1000)
	abandon(t, l)
	// The entries of the last appends never reached the disk.
	if err := os.Truncate(timeIndexPath(dir, 0), 5*timeEntrySize); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Minute).UnixMilli()
	l = openLog(t, dir, Options{SegmentBytes: 1 << 20, PreallocBytes: 1 << 16})
	defer l.Close()
	if off, ts := l.OffsetForTime(old + 1000); off != tail[0] || ts < before {
		t.Fatalf("OffsetForTime = %d, %d; want %d dated about now", off, ts, tail[0])
	}
	if off, ts := l.OffsetForTime(old + 40); off != tail[0]-2 || ts != old+40 {
		t.Fatalf("OffsetForTime(old+40) = %d, %d; want the synced entry", off, ts)
	}
}

// TestStrayFilesSurviveRetention is case e at the segment level: strays
// are logged and left alone, also by DeleteSegmentsBefore and Roll.
func TestStrayFilesSurviveRetention(t *testing.T) {
	dir := t.TempDir()
	strays := []string{"README", "00000000000000000123.log.tmp", ".nfs000001"}
	opts := smallOptions()
	var logs bytes.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	l := openLog(t, dir, opts)
	appendBatches(t, l, 30, 1, 2, 50)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range strays {
		if err := os.WriteFile(dir+"/"+s, []byte("not ours"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l = openLog(t, dir, opts)
	defer l.Close()
	for _, s := range strays {
		if !strings.Contains(logs.String(), s) {
			t.Errorf("stray %s not logged: %s", s, logs.String())
		}
	}
	if rolled, err := l.Roll(); err != nil || !rolled {
		t.Fatalf("Roll = %v, %v", rolled, err)
	}
	if rolled, err := l.Roll(); err != nil || rolled {
		t.Fatalf("Roll of an empty segment = %v, %v", rolled, err)
	}
	if _, err := l.DeleteSegmentsBefore(l.NextOffset()); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	want := append([]string{baseName(l.NextOffset()) + ".index", baseName(l.NextOffset()) + ".log",
		baseName(l.NextOffset()) + ".timeindex", "recovery-point"}, strays...)
	if len(names) != len(want) {
		t.Fatalf("directory holds %v, want %v", names, want)
	}
	for _, w := range want {
		if !exists(dir + "/" + w) {
			t.Errorf("%s missing; directory holds %v", w, names)
		}
	}
	if l.LogStartOffset() != l.NextOffset() || l.SizeBytes() != 0 {
		t.Fatalf("log start %d, end %d, size %d", l.LogStartOffset(), l.NextOffset(), l.SizeBytes())
	}
}

// TestUncoveredRecordsLogLevel: after an unclean stop the last segment's
// time index may lack the entries above the recovery point (it is synced
// at checkpoints): that is logged once at INFO. Records below the
// recovery point left undated (an entry there damaged, which a checkpoint
// vouched for) stay a WARN.
func TestUncoveredRecordsLogLevel(t *testing.T) {
	for _, tc := range []struct {
		name      string
		damage    func(path string) error
		wantLevel string
	}{
		{"entries above the recovery point lost", func(path string) error { return os.Truncate(path, 5*timeEntrySize) }, "level=INFO"},
		{"entry below the recovery point damaged", func(path string) error {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt(make([]byte, timeEntrySize), 2*timeEntrySize) // time 0: implausible
			return err
		}, "level=WARN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, Options{SegmentBytes: 1 << 20, PreallocBytes: 1 << 16})
			old := time.Now().Add(-time.Hour).UnixMilli()
			timedLog(t, l, 5, old)
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := l.Checkpoint(); err != nil {
				t.Fatal(err)
			}
			timedLog(t, l, 5, old+1000)
			abandon(t, l)
			if err := tc.damage(timeIndexPath(dir, 0)); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			opts := Options{SegmentBytes: 1 << 20, PreallocBytes: 1 << 16, Logger: slog.New(slog.NewTextHandler(&buf, nil))}
			l = openLog(t, dir, opts)
			defer l.Close()
			var lines []string
			for _, line := range strings.Split(buf.String(), "\n") {
				if strings.Contains(line, "does not cover") || strings.Contains(line, "time index behind") {
					lines = append(lines, line)
				}
			}
			if len(lines) != 1 || !strings.Contains(lines[0], tc.wantLevel) {
				t.Fatalf("lines about undated records %q, want one at %s", lines, tc.wantLevel)
			}
		})
	}
}
