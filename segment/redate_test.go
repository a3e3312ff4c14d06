package segment

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// timeIndexFiles returns the bytes of the .timeindex file of every segment
// of segs, by base offset.
func timeIndexFiles(t *testing.T, dir string, segs []SegmentInfo) map[uint64][]byte {
	t.Helper()
	files := make(map[uint64][]byte)
	for _, s := range segs {
		b, err := os.ReadFile(timeIndexPath(dir, s.BaseOffset))
		if err != nil {
			t.Fatal(err)
		}
		files[s.BaseOffset] = b
	}
	return files
}

// TestRedatedSegmentStaysPut: records whose sealed .timeindex was lost or
// damaged are dated again at start, and that date is an approximation
// (never earlier than their real append time), not a real time. It must
// never be taken as evidence against the real times of the segments after
// it: before the fix the records of a segment were dated by its .log's
// modification time, which is later than the next segment's first
// appends, so at the next start that segment's correct times looked
// earlier than the previous segment's and were dated again too, and each
// restart moved the damage one segment on. Now the date is bounded by the
// next real time, and over three restarts (clean stops or crashes) every
// undamaged .timeindex keeps its bytes, the dated ones keep the date they
// got at the first start, no dated time is earlier than the real one or
// later than the next segment's first real time, and no lookup by time
// answers later than the exact offset (exact outside the dated spans).
func TestRedatedSegmentStaysPut(t *testing.T) {
	const appends = 60
	truncate := func(path string) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(path, b[:len(b)-5], 0o644)
	}
	zero := func(path string) error { return os.WriteFile(path, make([]byte, timeEntrySize), 0o644) }
	cases := []struct {
		name   string
		which  func(sealed int) []int // indexes of the damaged segments, given the sealed count
		damage func(path string) error
	}{
		{"middle removed", func(n int) []int { return []int{n / 2} }, os.Remove},
		{"first removed", func(int) []int { return []int{0} }, os.Remove},
		{"last sealed removed", func(n int) []int { return []int{n - 1} }, os.Remove},
		{"two adjacent removed", func(n int) []int { return []int{n/2 - 1, n / 2} }, os.Remove},
		{"two apart removed", func(n int) []int { return []int{1, n - 2} }, os.Remove},
		{"middle torn", func(n int) []int { return []int{n / 2} }, truncate},
		{"middle zeroed", func(n int) []int { return []int{n / 2} }, zero},
		{"every sealed removed", func(n int) []int {
			var all []int
			for i := 0; i < n; i++ {
				all = append(all, i)
			}
			return all
		}, os.Remove},
	}
	for _, tc := range cases {
		for _, stop := range []string{"close", "crash"} {
			t.Run(tc.name+"/"+stop, func(t *testing.T) {
				dir := t.TempDir()
				// Real times an hour back: every .log's modification time
				// is much later than the next segment's first append.
				t0 := time.Now().Add(-time.Hour).UnixMilli()
				l := openLog(t, dir, smallOptions())
				bases := timedLog(t, l, appends, t0)
				truth := l.Segments()
				sealed := len(truth) - 1
				if sealed < 5 {
					t.Fatalf("%d sealed segments; the test wants at least 5", sealed)
				}
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				orig := timeIndexFiles(t, dir, truth)
				damaged := make(map[int]bool)
				for _, k := range tc.which(sealed) {
					damaged[k] = true
					if err := tc.damage(timeIndexPath(dir, truth[k].BaseOffset)); err != nil {
						t.Fatal(err)
					}
				}
				var first map[uint64][]byte // files after the first start
				for round := 1; round <= 3; round++ {
					l = openLog(t, dir, smallOptions())
					got := l.Segments()
					checkRedated(t, l, got, truth, damaged, bases, t0)
					if stop == "close" {
						if err := l.Close(); err != nil {
							t.Fatal(err)
						}
					} else {
						abandon(t, l)
					}
					files := timeIndexFiles(t, dir, truth)
					for j, s := range truth {
						if !damaged[j] && !bytes.Equal(files[s.BaseOffset], orig[s.BaseOffset]) {
							t.Fatalf("start %d: undamaged segment %d's .timeindex changed: % x, was % x",
								round, j, files[s.BaseOffset], orig[s.BaseOffset])
						}
						if first != nil && !bytes.Equal(files[s.BaseOffset], first[s.BaseOffset]) {
							t.Fatalf("start %d: segment %d's .timeindex changed again: % x, after the first start % x",
								round, j, files[s.BaseOffset], first[s.BaseOffset])
						}
					}
					if first == nil {
						first = files
					}
				}
			})
		}
	}
}

// checkRedated checks the segments got of a log reopened after the time
// indexes of the segments damaged were lost, against their real times: the
// others keep their times exactly; a damaged one is dated no earlier than
// its real times and no later than the first real time of the next
// undamaged segment; and OffsetForTime never answers later than the exact
// offset, and answers exactly for times after every damaged segment's
// dates. bases and t0 are timedLog's.
func checkRedated(t *testing.T, l *Log, got, truth []SegmentInfo, damaged map[int]bool, bases []uint64, t0 int64) {
	t.Helper()
	if len(got) != len(truth) {
		t.Fatalf("%d segments after the restart, %d before", len(got), len(truth))
	}
	for j, s := range got {
		r := truth[j]
		switch {
		case !damaged[j] && (s.FirstAppendTime != r.FirstAppendTime || s.MaxAppendTime != r.MaxAppendTime):
			t.Fatalf("undamaged segment %d dated %d..%d; real %d..%d", j, s.FirstAppendTime, s.MaxAppendTime, r.FirstAppendTime, r.MaxAppendTime)
		case damaged[j] && (s.FirstAppendTime < r.FirstAppendTime || s.MaxAppendTime < r.MaxAppendTime):
			t.Fatalf("damaged segment %d dated %d..%d, earlier than its real times %d..%d", j, s.FirstAppendTime, s.MaxAppendTime, r.FirstAppendTime, r.MaxAppendTime)
		case damaged[j] && s.MaxAppendTime > truth[nextIntact(damaged, j)].FirstAppendTime:
			t.Fatalf("damaged segment %d dated up to %d, after the next undamaged segment's first real time %d",
				j, s.MaxAppendTime, truth[nextIntact(damaged, j)].FirstAppendTime)
		}
	}
	var datedUpTo int64 // the latest time of a dated segment
	for j, s := range got {
		if damaged[j] {
			datedUpTo = max(datedUpTo, s.MaxAppendTime)
		}
	}
	for i, base := range bases {
		ts := t0 + int64(i)*10
		for _, ask := range []int64{ts, ts - 9} {
			off, at := l.OffsetForTime(ask)
			if off > base || at < ts {
				t.Fatalf("OffsetForTime(%d) = %d, %d: later than the exact answer %d, %d", ask, off, at, base, ts)
			}
			if ask > datedUpTo && (off != base || at != ts) {
				t.Fatalf("OffsetForTime(%d) = %d, %d; want the exact answer %d, %d", ask, off, at, base, ts)
			}
		}
	}
	if off, ts := l.OffsetForTime(t0 + appendsSpan(bases) + 1); off != l.NextOffset() || ts != -1 {
		t.Fatalf("OffsetForTime after the last append = %d, %d; want %d, -1", off, ts, l.NextOffset())
	}
}

// nextIntact returns the index of the first segment after j not in
// damaged (the active segment is never damaged here).
func nextIntact(damaged map[int]bool, j int) int {
	for j++; damaged[j]; j++ {
	}
	return j
}

// appendsSpan returns the time from timedLog's first append to its last.
func appendsSpan(bases []uint64) int64 { return int64(len(bases)-1) * 10 }

// TestMinAppendTimeAheadIsNoFloor: an Options.MinAppendTime after the
// clock (a topic created while the clock was ahead) says nothing about
// when the records were appended, so it never makes their real times look
// like damage: over restarts every .timeindex keeps its bytes and lookups
// by time stay exact. One before the clock still dates a rebuilt segment
// no earlier than itself.
func TestMinAppendTimeAheadIsNoFloor(t *testing.T) {
	now := time.Now()
	for _, ahead := range []time.Duration{time.Millisecond, 30 * time.Second, 10 * 365 * 24 * time.Hour} {
		t.Run(ahead.String(), func(t *testing.T) {
			dir := t.TempDir()
			t0 := now.Add(-time.Hour).UnixMilli()
			opts := smallOptions()
			opts.Now = func() time.Time { return now }
			l := openLog(t, dir, opts)
			bases := timedLog(t, l, 40, t0)
			segs := l.Segments()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			orig := timeIndexFiles(t, dir, segs)
			opts.MinAppendTime = now.Add(ahead).UnixMilli()
			for round := 1; round <= 2; round++ {
				l = openLog(t, dir, opts)
				checkTimes(t, l, bases, t0)
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
				for b, want := range timeIndexFiles(t, dir, segs) {
					if !bytes.Equal(want, orig[b]) {
						t.Fatalf("start %d: .timeindex of segment %d changed: % x, was % x", round, b, want, orig[b])
					}
				}
			}
		})
	}
	t.Run("before the clock", func(t *testing.T) {
		dir := t.TempDir()
		t0 := now.Add(-time.Hour).UnixMilli()
		opts := smallOptions()
		opts.Now = func() time.Time { return now }
		l := openLog(t, dir, opts)
		timedLog(t, l, 40, t0)
		segs := l.Segments()
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		opts.MinAppendTime = segs[1].MaxAppendTime + 1 // segment 1 and before look damaged
		l = openLog(t, dir, opts)
		defer l.Close()
		for j, s := range l.Segments()[:2] {
			if s.FirstAppendTime < opts.MinAppendTime {
				t.Fatalf("segment %d dated from %d, before MinAppendTime %d", j, s.FirstAppendTime, opts.MinAppendTime)
			}
		}
	})
}
