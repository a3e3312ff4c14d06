package engine

import (
	"context"
	"testing"
	"time"
)

func TestConsumerLag(t *testing.T) {
	for _, c := range []struct {
		name      string
		committed uint64
		has       bool
		start, hw uint64
		want      int64
	}{
		{"issue example: committed below the log start", 100, true, 4200, 5200, 1000},
		{"committed inside the log", 4500, true, 4200, 5200, 700},
		{"committed at the log start", 4200, true, 4200, 5200, 1000},
		{"committed at the high watermark", 5200, true, 4200, 5200, 0},
		{"committed 0, nothing deleted", 0, true, 0, 10, 10},
		{"committed 0, everything deleted", 0, true, 10, 10, 0},
		{"nothing committed", 0, false, 4200, 5200, 1000},
		{"nothing committed, empty log", 0, false, 0, 0, 0},
		{"nothing committed, committed value ignored", 9999, false, 3, 8, 5},
		{"committed beyond the high watermark (not stored by the engine)", 10, true, 0, 5, 0},
	} {
		if got := ConsumerLag(c.committed, c.has, c.start, c.hw); got != c.want {
			t.Errorf("%s: ConsumerLag(%d, %v, %d, %d) = %d, want %d", c.name, c.committed, c.has, c.start, c.hw, got, c.want)
		}
	}
}

// TestDescribeGroupLagAfterRetention: a committed offset that retention
// has overtaken counts only the records still stored.
func TestDescribeGroupLagAfterRetention(t *testing.T) {
	clk := newRetClock()
	e := openTest(t, retentionOptions(t.TempDir(), clk))
	if _, err := e.CreateTopic("g", 2, TopicConfig{RetentionMs: 1000}); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, "g", 30, 20)
	// Partition 1 holds 3 records and no group commits there: its lag is
	// HW - log start = 3.
	if _, err := e.Append(context.Background(), "g", 1, mkBatch(t, "a", "b", "c")); err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		name string
		off  uint64
	}{{"behind", 5}, {"zero", 0}} {
		if _, err := e.CommitOffsets(g.name, "", -1, []OffsetCommit{{Topic: "g", Partition: 0, Offset: g.off}}); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Second)
	appendN(t, e, "g", 30, 20)
	if err := e.EnforceRetention(); err != nil {
		t.Fatal(err)
	}
	pi := partInfo(t, e, "g")
	if pi.LogStartOffset <= 5 {
		t.Fatalf("retention did not pass offset 5: %+v", pi)
	}
	ahead := pi.LogStartOffset + 7
	if _, err := e.CommitOffsets("ahead", "", -1, []OffsetCommit{{Topic: "g", Partition: 0, Offset: ahead}}); err != nil {
		t.Fatal(err)
	}
	for group, want := range map[string]int64{
		"behind": int64(pi.HighWatermark - pi.LogStartOffset),
		"zero":   int64(pi.HighWatermark - pi.LogStartOffset),
		"ahead":  int64(pi.HighWatermark - ahead),
	} {
		d, err := e.DescribeGroup(group)
		if err != nil || len(d.Offsets) != 2 {
			t.Fatalf("DescribeGroup(%s) = %+v, %v", group, d, err)
		}
		if d.Offsets[0].Lag != want {
			t.Errorf("%s: lag %d, want %d (log start %d, HW %d, committed %d)", group, d.Offsets[0].Lag, want,
				pi.LogStartOffset, pi.HighWatermark, d.Offsets[0].CommittedOffset)
		}
		if p1 := d.Offsets[1]; p1.Partition != 1 || p1.CommittedOffset != -1 || p1.Lag != 3 {
			t.Errorf("%s: partition without a commit %+v, want committed -1 and lag 3", group, p1)
		}
	}
}
