package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/seedqueue/sq/api"
)

// TestRestoreTopicStartsAt: a restored topic's partitions start at the
// given offsets: new records continue there, the log start and high
// watermark are there, before and after a restart, also on a replica
// that leads it.
func TestRestoreTopicStartsAt(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	e := openTest(t, opts)
	id := api.NewTopicID()
	if _, err := e.RestoreTopic(TopicSpec{Name: "back", ID: id, Partitions: 2}, []uint64{1000}); !errors.Is(err, api.ErrInvalidRequest) {
		t.Fatalf("restore with 1 start for 2 partitions: %v", err)
	}
	ti, err := e.RestoreTopic(TopicSpec{Name: "back", ID: id, Partitions: 2}, []uint64{1000, 0})
	if err != nil {
		t.Fatal(err)
	}
	if ti.ID != id || ti.Partitions[0].LogStartOffset != 1000 || ti.Partitions[0].HighWatermark != 1000 || ti.Partitions[1].LogEndOffset != 0 {
		t.Fatalf("restored topic: %+v", ti.Partitions)
	}
	res, err := e.Append(context.Background(), "back", 0, mkBatch(t, "a", "b"))
	if err != nil || res.BaseOffset != 1000 {
		t.Fatalf("append to the restored partition: %+v, %v; want base offset 1000", res, err)
	}
	if _, err := e.Fetch(context.Background(), "back", 0, 999, 1<<20, 0); !errors.Is(err, api.ErrOffsetOutOfRange) {
		t.Fatalf("fetch below the start without a remote log: %v", err)
	}
	e.Close()
	e = openTest(t, opts)
	d, err := e.DescribeTopic("back")
	if err != nil || d.Partitions[0].LogStartOffset != 1000 || d.Partitions[0].HighWatermark != 1002 {
		t.Fatalf("after a restart: %+v, %v", d.Partitions, err)
	}
	// A replica (a cluster node) leads the restored partition from there.
	r := openTest(t, Options{DataDir: t.TempDir(), Replication: &ReplicationOptions{NodeID: "a"}, Logger: opts.Logger})
	if _, err := r.RestoreTopic(TopicSpec{Name: "back", ID: id, Partitions: 1}, []uint64{5}); err != nil {
		t.Fatal(err)
	}
	if err := r.BecomeLeader("back", id, 0, 1, []string{"a"}, []string{"a"}, 1); err != nil {
		t.Fatal(err)
	}
	res, err = r.Append(context.Background(), "back", 0, mkBatch(t, "c"))
	if err != nil || res.BaseOffset != 5 {
		t.Fatalf("append to the restored replica: %+v, %v", res, err)
	}
	if st, err := r.ReplicaState("back", id, 0); err != nil || st.HighWatermark != 6 || st.LogStartOffset != 5 {
		t.Fatalf("restored replica: %+v, %v", st, err)
	}
}
