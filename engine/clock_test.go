package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/seedqueue/sq/segment"
)

// set moves the clock to t.
func (c *retClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// TestClockAheadOnce: appends made while the clock was 10 years ahead,
// then the clock comes back. With later appends (busy) or without (quiet,
// where only the retention pass sees it), and across a restart, the
// future times are clamped to the clock: later appends are dated by the
// clock, the active segment rolls by segment.ms, and retention.ms deletes
// the sealed segments once they are old enough.
func TestClockAheadOnce(t *testing.T) {
	for _, mode := range []string{"busy", "quiet", "restart"} {
		t.Run(mode, func(t *testing.T) {
			clk := newRetClock()
			t0 := clk.Now()
			dir := t.TempDir()
			opts := retentionOptions(dir, clk)
			e, err := Open(opts)
			if err != nil {
				t.Fatal(err)
			}
			cfg := TopicConfig{RetentionMs: week.Milliseconds(), SegmentMs: week.Milliseconds()}
			if _, err := e.CreateTopic("ck", 1, cfg); err != nil {
				t.Fatal(err)
			}
			appendN(t, e, "ck", 5, 20)
			clk.set(t0.AddDate(10, 0, 0))
			appendN(t, e, "ck", 40, 20) // several segments dated 10 years ahead
			clk.set(t0.Add(time.Minute))
			if mode == "restart" {
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				e, err = Open(opts)
				if err != nil {
					t.Fatal(err)
				}
			}
			defer e.Close()
			if mode != "quiet" {
				appendN(t, e, "ck", 5, 20)
			}
			if err := e.EnforceRetention(); err != nil {
				t.Fatal(err)
			}
			limit := clk.Now().Add(segment.MaxClockAhead).UnixMilli()
			for _, s := range segmentsOf(t, e, "ck") {
				if s.MaxAppendTime > limit {
					t.Fatalf("segment %d dated %d, clock %d", s.BaseOffset, s.MaxAppendTime, clk.Now().UnixMilli())
				}
			}
			end := partInfo(t, e, "ck").LogEndOffset
			// A week later the active segment rolls by segment.ms and every
			// segment expires by retention.ms.
			clk.Advance(week + time.Hour)
			if err := e.EnforceRetention(); err != nil {
				t.Fatal(err)
			}
			if pi := partInfo(t, e, "ck"); pi.LogStartOffset != end || pi.SegmentCount != 1 {
				t.Fatalf("a week later: log start %d (want %d), %d segments", pi.LogStartOffset, end, pi.SegmentCount)
			}
			if mode == "quiet" {
				return
			}
			if res := appendValues(t, e, "ck", 0, fmt.Sprintf("v%d", end)); res.LogAppendTime != clk.Now().UnixMilli() {
				t.Fatalf("append dated %d, clock %d", res.LogAppendTime, clk.Now().UnixMilli())
			}
		})
	}
}

// TestCreatedTimeAheadDropped: a topic's creation time stored while the
// clock was ahead is dropped (0, unknown) when the metadata is read back.
func TestCreatedTimeAheadDropped(t *testing.T) {
	clk := newRetClock()
	dir := t.TempDir()
	opts := retentionOptions(dir, clk)
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * 365 * 24 * time.Hour)
	if _, err := e.CreateTopic("ahead", 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(-10 * 365 * 24 * time.Hour)
	e = openTest(t, opts)
	tp, err := e.topic("ahead")
	if err != nil {
		t.Fatal(err)
	}
	if got := tp.meta().CreatedMs; got != 0 {
		t.Fatalf("creation time %d read back; want 0 (unknown)", got)
	}
}

// TestCreatedTimeAheadIsNoFloor: a topic created while the clock was 10
// years ahead, then written to once the clock came back. Its creation time
// read back is in the future and tells nothing about when records were
// appended, so it is never a bound for their times: the time indexes keep
// their real times over restarts a day apart (clamped to the clock at each
// start, it was later than every record and made each start date them all
// again at its own time), and a week later retention deletes them.
func TestCreatedTimeAheadIsNoFloor(t *testing.T) {
	clk := newRetClock()
	dir := t.TempDir()
	opts := retentionOptions(dir, clk)
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if e != nil {
			e.Close()
		}
	})
	clk.Advance(10 * 365 * 24 * time.Hour)
	cfg := TopicConfig{RetentionMs: week.Milliseconds(), SegmentMs: week.Milliseconds()}
	if _, err := e.CreateTopic("ahead", 1, cfg); err != nil {
		t.Fatal(err)
	}
	clk.Advance(-10 * 365 * 24 * time.Hour)
	for i := 0; i < 40; i++ {
		appendN(t, e, "ahead", 1, 20)
		clk.Advance(time.Second)
	}
	want := segmentsOf(t, e, "ahead")
	if len(want) < 3 {
		t.Fatalf("%d segments; the test wants several", len(want))
	}
	end := partInfo(t, e, "ahead").LogEndOffset
	for day := 1; day <= 2; day++ {
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		clk.Advance(24 * time.Hour)
		if e, err = Open(opts); err != nil {
			t.Fatal(err)
		}
		got := segmentsOf(t, e, "ahead")
		for j := range want {
			if got[j].FirstAppendTime != want[j].FirstAppendTime || got[j].MaxAppendTime != want[j].MaxAppendTime {
				t.Fatalf("day %d: segment %d dated %d..%d; appended %d..%d", day, j,
					got[j].FirstAppendTime, got[j].MaxAppendTime, want[j].FirstAppendTime, want[j].MaxAppendTime)
			}
		}
	}
	clk.Advance(week)
	if err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	if pi := partInfo(t, e, "ahead"); pi.LogStartOffset != end {
		t.Fatalf("a week later: log start %d, want %d (every record expired)", pi.LogStartOffset, end)
	}
}
