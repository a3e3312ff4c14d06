package segment

import (
	"os"
	"testing"
	"time"
)

// fixedClock returns an Options.Now that reads ms (Unix ms).
func fixedClock(ms *int64) func() time.Time {
	return func() time.Time { return time.UnixMilli(*ms) }
}

// TestAppendTimeAheadOnceIsClamped: one append dated while the clock was
// ahead (by 10 years, or by more than MaxClockAhead) does not date every
// later append: the next append with the right clock clamps the future
// times to it, in the active segment or in sealed ones, on disk too. A
// clock ahead by less than MaxClockAhead is kept (times never go back).
func TestAppendTimeAheadOnceIsClamped(t *testing.T) {
	const t0 = 1_700_000_000_000
	year := int64(365 * 24 * 3600 * 1000)
	cases := []struct {
		name   string
		ahead  []int64 // times of the appends made while the clock was ahead
		rollIn bool    // the segment rolls right after them
		clamp  bool    // the later append clamps them
	}{
		{"10 years, active segment", []int64{t0 + 10*year}, false, true},
		{"10 years, then sealed", []int64{t0 + 10*year}, true, true},
		{"several appends 10 years ahead", []int64{t0 + 10*year, t0 + 10*year + 5, t0 + 10*year + 9}, false, true},
		{"several ahead, then sealed", []int64{t0 + 10*year, t0 + 10*year + 5}, true, true},
		{"2 minutes ahead", []int64{t0 + 2*60_000}, false, true},
		{"30 s ahead (within MaxClockAhead)", []int64{t0 + 30_000}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			now := int64(t0 + 100)
			opts := smallOptions()
			opts.Now = fixedClock(&now)
			l := openLog(t, dir, opts)
			timedLog(t, l, 3, t0) // t0, t0+10, t0+20
			for _, ts := range tc.ahead {
				if _, err := l.AppendAt([][]byte{makeBatch(t, l.NextOffset(), 1, 10)}, ts); err != nil {
					t.Fatal(err)
				}
			}
			if tc.rollIn {
				if _, err := l.Roll(); err != nil {
					t.Fatal(err)
				}
			}
			info, err := l.AppendAt([][]byte{makeBatch(t, l.NextOffset(), 1, 10)}, now)
			if err != nil {
				t.Fatal(err)
			}
			segs := l.Segments()
			latest := segs[len(segs)-1].MaxAppendTime
			for _, s := range segs {
				latest = max(latest, s.MaxAppendTime)
			}
			if !tc.clamp {
				if want := tc.ahead[len(tc.ahead)-1]; latest != want {
					t.Fatalf("latest append time %d; want %d (within MaxClockAhead, kept)", latest, want)
				}
				return
			}
			if latest != now {
				t.Fatalf("latest append time %d after the clock came back to %d", latest, now)
			}
			// The appends made while the clock was ahead are dated now:
			// not before their real time, and a lookup of now finds the
			// first of them.
			if off, ts := l.OffsetForTime(t0 + 21); off != 6 || ts != now {
				t.Fatalf("OffsetForTime(t0+21) = %d, %d; want 6, %d", off, ts, now)
			}
			if off, ts := l.OffsetForTime(t0 + 10); off != 2 || ts != t0+10 {
				t.Fatalf("OffsetForTime(t0+10) = %d, %d; the times before stay exact", off, ts)
			}
			_ = info
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// On disk too: a reopen with the clock later keeps them.
			now += 1000
			l = openLog(t, dir, opts)
			defer l.Close()
			for _, s := range l.Segments() {
				if s.MaxAppendTime > now-1000 {
					t.Fatalf("after reopen segment %d dated %d, clock %d", s.BaseOffset, s.MaxAppendTime, now)
				}
			}
		})
	}
}

// TestClampAppendTimesWithoutAppends: a log holding future times, asked
// to bound them (as the engine's retention does for a partition that gets
// no appends), clamps them once and reports it.
func TestClampAppendTimesWithoutAppends(t *testing.T) {
	const t0 = 1_700_000_000_000
	dir := t.TempDir()
	now := int64(t0 + 10*365*24*3600*1000)
	opts := smallOptions()
	opts.Now = fixedClock(&now)
	l := openLog(t, dir, opts)
	defer l.Close()
	timedLog(t, l, 30, now) // appended while the clock was ahead; several segments
	if l.SegmentCount() < 3 {
		t.Fatalf("%d segments; the test wants several", l.SegmentCount())
	}
	now = t0
	if changed, err := l.ClampAppendTimes(now); err != nil || !changed {
		t.Fatalf("ClampAppendTimes = %v, %v; want true", changed, err)
	}
	for _, s := range l.Segments() {
		if s.FirstAppendTime != now || s.MaxAppendTime != now {
			t.Fatalf("segment %d dated %d..%d; want %d", s.BaseOffset, s.FirstAppendTime, s.MaxAppendTime, now)
		}
	}
	if changed, err := l.ClampAppendTimes(now); err != nil || changed {
		t.Fatalf("second ClampAppendTimes = %v, %v; want false", changed, err)
	}
	if off, ts := l.OffsetForTime(now); off != 0 || ts != now {
		t.Fatalf("OffsetForTime(now) = %d, %d", off, ts)
	}
}

// TestPersistedTimesBoundedAtOpen: times read back at Open are bounded by
// Options.Now (the injected clock, not the machine's): time index entries
// and a .log modification time in the future are clamped to it.
func TestPersistedTimesBoundedAtOpen(t *testing.T) {
	for _, name := range []string{"time index ahead of the injected clock", "log mtime 10 years ahead"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, smallOptions())
			timedLog(t, l, 30, time.Now().Add(-time.Hour).UnixMilli())
			segs := l.Segments()
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			now := time.Now().UnixMilli()
			opts := smallOptions()
			if name == "log mtime 10 years ahead" {
				ahead := time.Now().AddDate(10, 0, 0)
				for _, s := range segs {
					if err := os.Chtimes(logPath(dir, s.BaseOffset), ahead, ahead); err != nil {
						t.Fatal(err)
					}
					if err := os.Remove(timeIndexPath(dir, s.BaseOffset)); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				now = time.Now().Add(-2 * time.Hour).UnixMilli() // the records look 1 hour ahead
				opts.Now = fixedClock(&now)
			}
			l = openLog(t, dir, opts)
			defer l.Close()
			for _, s := range l.Segments() {
				if s.MaxAppendTime < 0 || s.MaxAppendTime > now+MaxClockAhead.Milliseconds() {
					t.Fatalf("segment %d dated %d..%d; clock %d", s.BaseOffset, s.FirstAppendTime, s.MaxAppendTime, now)
				}
			}
		})
	}
}
