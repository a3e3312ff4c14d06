package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/seedqueue/sq/api"
)

// TestDeferOffsetClamp: with DeferOffsetClamp, Open keeps committed
// offsets above the recovered high watermark; ClampOffsets then lowers
// only those of the partitions its test selects.
func TestDeferOffsetClamp(t *testing.T) {
	dir := t.TempDir()
	e, err := Open(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateTopic("t", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	for p := range 2 {
		if _, err := e.Append(context.Background(), "t", p, mkBatch(t, "a", "b")); err != nil {
			t.Fatal(err)
		}
	}
	// Offsets beyond the high watermark (2), as a cluster node stores for
	// partitions it does not lead.
	e.SetCommitCheck(func(string, int) bool { return false })
	if _, err := e.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "t", Partition: 0, Offset: 9}, {Topic: "t", Partition: 1, Offset: 7}}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	o := testOptions(dir)
	o.DeferOffsetClamp = true
	e = openTest(t, o)
	offsets := func() map[int]uint64 {
		got, err := e.FetchOffsets("g", "t")
		if err != nil {
			t.Fatal(err)
		}
		m := map[int]uint64{}
		for _, c := range got {
			m[c.Partition] = c.Offset
		}
		return m
	}
	if got := offsets(); got[0] != 9 || got[1] != 7 {
		t.Fatalf("after a deferred clamp at Open: %v, want the committed 9 and 7", got)
	}
	if n := e.ClampOffsets(func(topic string, p int) bool { return topic == "t" && p == 1 }); n != 1 {
		t.Fatalf("ClampOffsets of partition 1 lowered %d offsets, want 1", n)
	}
	if got := offsets(); got[0] != 9 || got[1] != 2 {
		t.Fatalf("after clamping partition 1: %v, want 9 and 2", got)
	}
	if n := e.ClampOffsets(nil); n != 1 {
		t.Fatalf("ClampOffsets(nil) lowered %d, want 1", n)
	}
	if got := offsets(); got[0] != 2 || got[1] != 2 {
		t.Fatalf("after clamping all: %v, want 2 and 2", got)
	}
}

// TestTopicStatsHook: DescribeGroup and ResetOffsets read the statistics
// SetTopicStats gives; a partition whose statistics are unavailable has
// lag LagUnknown, and a reset that needs them is refused with
// LEADER_NOT_AVAILABLE, storing nothing.
func TestTopicStatsHook(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	if _, err := e.CreateTopic("t", 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CommitOffsets("g", "", -1, []OffsetCommit{{Topic: "t", Partition: 0, Offset: 0}}); err != nil {
		t.Fatal(err)
	}
	var down, unreadable bool
	e.SetTopicStats(func(topic string) (TopicInfo, error) {
		if unreadable {
			return TopicInfo{}, api.NewError(api.CodeNoQuorum, "no controller known")
		}
		ti, err := e.DescribeTopic(topic)
		if err != nil {
			return ti, err
		}
		// The leaders' statistics: partition 0 holds 40 records from 10,
		// partition 1's leader is down when down is set.
		ti.Partitions[0].LogStartOffset, ti.Partitions[0].HighWatermark, ti.Partitions[0].LogEndOffset = 10, 50, 50
		ti.Partitions[1].HighWatermark = 5
		if down {
			ti.Partitions[1] = PartitionInfo{Partition: 1, Err: api.NewError(api.CodeLeaderNotAvailable, "the leader of t/1 is not alive")}
		}
		return ti, nil
	})
	d, err := e.DescribeGroup("g")
	if err != nil || len(d.Offsets) != 2 {
		t.Fatalf("DescribeGroup = %+v, %v", d, err)
	}
	if l := d.Offsets[0]; l.Lag != 40 || l.HighWatermark != 50 || l.LogEndOffset != 50 {
		t.Fatalf("partition 0 from the hook: %+v, want lag 40 (HW 50 - log start 10)", l)
	}
	if l := d.Offsets[1]; l.Lag != 5 {
		t.Fatalf("partition 1 from the hook: %+v, want lag 5", l)
	}
	res, err := e.ResetOffsets("g", "t", ResetLatest, 0)
	if err != nil || len(res) != 2 || res[0].Offset != 50 || res[1].Offset != 5 {
		t.Fatalf("reset to latest = %+v, %v; want the hook's 50 and 5", res, err)
	}
	down = true
	d, err = e.DescribeGroup("g")
	if err != nil || len(d.Offsets) != 2 || d.Offsets[1].Lag != LagUnknown || d.Offsets[0].Lag != 0 {
		t.Fatalf("with partition 1's leader down: %+v, %v; want lags 0 and %d", d.Offsets, err, LagUnknown)
	}
	for _, mode := range []ResetMode{ResetEarliest, ResetLatest} {
		_, err = e.ResetOffsets("g", "t", mode, 0)
		if !errors.Is(err, api.ErrLeaderNotAvailable) || !api.IsRetriable(err) {
			t.Fatalf("reset mode %d with a leader down: %v, want LEADER_NOT_AVAILABLE", mode, err)
		}
	}
	if got, _ := e.FetchOffsets("g", "t"); len(got) != 2 || got[0].Offset != 50 || got[1].Offset != 5 {
		t.Fatalf("a refused reset changed the offsets: %+v", got)
	}
	// A topic whose statistics cannot be read at all: its committed
	// offsets are still listed, with unknown statistics.
	unreadable = true
	d, err = e.DescribeGroup("g")
	if err != nil || len(d.Offsets) != 2 {
		t.Fatalf("with the topic's statistics unreadable: %+v, %v; want both committed partitions listed", d.Offsets, err)
	}
	for i, want := range []int64{50, 5} {
		if l := d.Offsets[i]; l.Partition != i || l.CommittedOffset != want || l.Lag != LagUnknown {
			t.Fatalf("partition %d with the statistics unreadable: %+v, want committed %d and lag unknown", i, l, want)
		}
	}
	unreadable = false
	e.SetTopicStats(nil)
	if d, _ := e.DescribeGroup("g"); d.Offsets[1].Lag != 0 || d.Offsets[0].HighWatermark != 0 {
		t.Fatalf("without the hook: %+v, want the engine's own (empty) partitions", d.Offsets)
	}
}
