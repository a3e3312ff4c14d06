package engine

import (
	"context"
	"sync"
	"testing"

	"github.com/seedqueue/sq/api"
)

// fakeRemoteLog is a RemoteLog with no remote data whose Stats answer
// from a table by partition; it records the calls.
type fakeRemoteLog struct {
	mu    sync.Mutex
	stats map[int]RemoteStats // partition -> stats; missing: not seen yet
	calls []string            // topic of each Stats call
}

func (f *fakeRemoteLog) Bounds(string, api.TopicID, int) (uint64, uint64, bool) { return 0, 0, false }

func (f *fakeRemoteLog) Fetch(context.Context, string, api.TopicID, int, uint64, int) ([][]byte, error) {
	return nil, api.NewError(api.CodeOffsetOutOfRange, "no remote log")
}

func (f *fakeRemoteLog) Stats(topic string, _ api.TopicID, partition int) (RemoteStats, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, topic)
	s, ok := f.stats[partition]
	return s, ok
}

// TestDescribeTopicRemoteStats: without a remote log a partition's Remote
// is nil; with one, DescribeTopic fills it from RemoteLog.Stats (zero for
// a partition the remote log has not seen), except for the internal
// offsets topic, never tiered.
func TestDescribeTopicRemoteStats(t *testing.T) {
	e := openTest(t, testOptions(t.TempDir()))
	if _, err := e.CreateTopic("t", 3, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateTopicSpec(TopicSpec{Name: OffsetsTopic, ID: api.NewTopicID(), Partitions: 1,
		Config: TopicConfig{SyncPolicy: "every-batch", RetentionMs: -1, RetentionBytes: -1}}); err != nil {
		t.Fatal(err)
	}
	ti, err := e.DescribeTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	for _, pi := range ti.Partitions {
		if pi.Remote != nil {
			t.Fatalf("partition %d without a remote log: remote %+v", pi.Partition, *pi.Remote)
		}
	}

	s0 := RemoteStats{LogStartOffset: 10, EndOffset: 500, Segments: 4, Bytes: 4 << 20, LagSegments: 2, LagBytes: 2 << 20}
	s2 := RemoteStats{LagSegments: 1, LagBytes: 1000}
	f := &fakeRemoteLog{stats: map[int]RemoteStats{0: s0, 2: s2}}
	e.SetRemoteLog(f)
	ti, err = e.DescribeTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []RemoteStats{s0, {}, s2} {
		got := ti.Partitions[i].Remote
		if got == nil || *got != want {
			t.Fatalf("partition %d: remote %+v, want %+v", i, got, want)
		}
	}
	ti, err = e.DescribeTopic(OffsetsTopic)
	if err != nil {
		t.Fatal(err)
	}
	if ti.Partitions[0].Remote != nil {
		t.Fatalf("internal topic: remote %+v", *ti.Partitions[0].Remote)
	}
	f.mu.Lock()
	for _, topic := range f.calls {
		if topic != "t" {
			t.Errorf("Stats asked about %q", topic)
		}
	}
	f.mu.Unlock()

	// ListTopics carries no partitions; SetRemoteLog(nil) turns it off.
	e.SetRemoteLog(nil)
	if ti, _ = e.DescribeTopic("t"); ti.Partitions[0].Remote != nil {
		t.Fatalf("after SetRemoteLog(nil): remote %+v", *ti.Partitions[0].Remote)
	}
}
