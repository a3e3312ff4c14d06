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

// TestCreatedTimeAheadClamped: a topic's creation time stored while the
// clock was ahead is clamped to the clock when the metadata is read back.
func TestCreatedTimeAheadClamped(t *testing.T) {
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
	if got, now := tp.meta().CreatedMs, clk.Now().UnixMilli(); got != now {
		t.Fatalf("creation time %d read back; want it clamped to the clock %d", got, now)
	}
}
