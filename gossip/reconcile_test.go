package gossip

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
)

// checkLocal fails the test when the storage's copy of mt differs from the metadata's topic in id, creation time, config
// (replication factor aside) or partition count.
func checkLocal(t *testing.T, n *testNode, mt *meta.Topic) {
	t.Helper()
	d, err := n.eng.DescribeTopic(mt.Name)
	if err != nil {
		t.Fatalf("local copy of %s: %v", mt.Name, err)
	}
	// The engine keeps the replication settings as given (0 for a topic
	// made before the cluster); the metadata's are resolved.
	if d.ID != mt.ID || d.CreatedMs != mt.CreatedMs || localConfig(d.Config) != localConfig(mt.Config) || d.PartitionCount != len(mt.Partitions) {
		t.Fatalf("local copy of %s: id %v created %d %d partitions config %+v; metadata: id %v created %d %d partitions config %+v",
			mt.Name, d.ID, d.CreatedMs, d.PartitionCount, d.Config, mt.ID, mt.CreatedMs, len(mt.Partitions), mt.Config)
	}
}

func absent(t *testing.T, n *testNode, name string) {
	t.Helper()
	if _, err := n.eng.DescribeTopic(name); codeOf(err) != api.CodeUnknownTopic {
		t.Fatalf("topic %s still local: %v", name, err)
	}
}

// OnApply creates, alters, grows and deletes the local copies as the
// metadata log does, and a topic deleted and created again under its
// name is replaced by the new one (its data gone).
func TestReconcileFollowsLog(t *testing.T) {
	m := newFakeMeta(t, "n1", "n2")
	n := newTestNode(t, m, "n1", "", true)
	m.mustApply(t, placed("t", "n1", "n1", "n2"))
	checkLocal(t, n, m.state0().Topics["t"])
	old := m.state0().Topics["t"]
	if _, err := n.eng.Append(context.Background(), "t", 0, mkBatch(t, "old")); err != nil {
		t.Fatal(err)
	}

	cfg := old.Config
	cfg.RetentionMs, cfg.SyncPolicy = 1234, "every-batch"
	m.mustApply(t, meta.Command{Op: meta.OpAlterTopic, Name: "t", ID: old.ID, Config: &cfg})
	checkLocal(t, n, m.state0().Topics["t"])

	grow := []meta.Partition{{Replicas: []string{"n2"}, Leader: "n2", ISR: []string{"n2"}}}
	m.mustApply(t, meta.Command{Op: meta.OpCreatePartitions, Name: "t", ID: old.ID, NewPartitions: grow})
	checkLocal(t, n, m.state0().Topics["t"])

	m.mustApply(t, meta.Command{Op: meta.OpDeleteTopic, Name: "t", ID: old.ID})
	absent(t, n, "t")
	m.mustApply(t, placed("t", "n1", "n1"))
	now := m.state0().Topics["t"]
	checkLocal(t, n, now)
	if d, _ := n.eng.DescribeTopic("t"); d.Partitions[0].LogEndOffset != 0 {
		t.Fatalf("the new topic holds the old one's data: %+v", d.Partitions[0])
	}
	if strings.Contains(n.logs.String(), "level=WARN") {
		t.Fatalf("warnings while following the log:\n%s", n.logs)
	}
}

// A node away while its topics were deleted, one of them created again,
// catches up at the snapshot restore (OnApply with prev nil): the copies
// whose id is in DeletedIDs go, the new topic is created, and a local
// topic the metadata never knew is left alone and logged once.
func TestReconcileRestore(t *testing.T) {
	m := newFakeMeta(t, "n1", "n2")
	dir := t.TempDir()
	n := newTestNode(t, m, "n1", dir, true)
	m.mustApply(t, placed("gone", "n1", "n1"))
	m.mustApply(t, placed("again", "n1", "n1", "n2"))
	if _, err := n.eng.CreateTopic("mine", 1, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.eng.Append(context.Background(), "mine", 0, mkBatch(t, "keep")); err != nil {
		t.Fatal(err)
	}
	// The node goes away.
	m.mu.Lock()
	delete(m.hooks, "n1")
	m.mu.Unlock()
	oldAgain := m.state0().Topics["again"].ID
	m.mustApply(t, meta.Command{Op: meta.OpDeleteTopic, Name: "gone", ID: m.state0().Topics["gone"].ID})
	m.mustApply(t, meta.Command{Op: meta.OpDeleteTopic, Name: "again", ID: oldAgain})
	m.mustApply(t, placed("again", "n1", "n2", "n1", "n2"))
	m.mustApply(t, placed("new", "n1", "n2"))
	if d, _ := n.eng.DescribeTopic("again"); d.ID != oldAgain {
		t.Fatalf("the away node changed: %+v", d)
	}

	s := m.state0()
	n.rec.OnApply(nil, s)
	absent(t, n, "gone")
	checkLocal(t, n, s.Topics["again"])
	checkLocal(t, n, s.Topics["new"])
	if d, err := n.eng.DescribeTopic("mine"); err != nil || d.Partitions[0].LogEndOffset != 1 {
		t.Fatalf("the local topic unknown to the metadata: %+v %v", d, err)
	}
	n.rec.OnApply(nil, s)
	if c := strings.Count(n.logs.String(), "an orphaned topic"); c != 1 {
		t.Fatalf("the unknown local topic was logged %d times, want once:\n%s", c, n.logs)
	}
	if n.rec.Pending("mine") {
		t.Fatal("an unknown local topic is pending")
	}
}

// A topic the storage cannot create is pending: the gate answers
// LEADER_NOT_AVAILABLE for its partitions led here, and the retry loop
// creates it once the cause is gone.
func TestReconcileRetry(t *testing.T) {
	m := newFakeMeta(t, "n1")
	dir := t.TempDir()
	n := newTestNode(t, m, "n1", dir, true)
	n.rec.opts.RetryInterval = 10 * time.Millisecond
	n.rec.Start()
	defer n.rec.Close()
	// A directory with data but no metadata file blocks the name.
	blocker := filepath.Join(dir, "topics", "t", "0")
	if err := os.MkdirAll(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(blocker, "00000000000000000000.log"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.mustApply(t, placed("t", "n1", "n1"))
	if !n.rec.Pending("t") {
		t.Fatal("a failed create is not pending")
	}
	if _, err := n.b.Append(context.Background(), "t", 0, mkBatch(t, "x")); codeOf(err) != api.CodeLeaderNotAvailable {
		t.Fatalf("append to a pending topic: %v", err)
	}
	if !strings.Contains(n.logs.String(), "could not be updated") {
		t.Fatalf("the failure was not logged:\n%s", n.logs)
	}
	if err := os.RemoveAll(filepath.Join(dir, "topics", "t")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for n.rec.Pending("t") {
		if time.Now().After(deadline) {
			t.Fatalf("the retry loop did not create the topic:\n%s", n.logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	checkLocal(t, n, m.state0().Topics["t"])
	if _, err := n.b.Append(context.Background(), "t", 0, mkBatch(t, "x")); err != nil {
		t.Fatalf("append once created: %v", err)
	}
	if c := strings.Count(n.logs.String(), "could not be updated"); c != 1 {
		t.Fatalf("the same failure was logged %d times, want once:\n%s", c, n.logs)
	}
}

// A local topic holding the name of a metadata topic with another id,
// and not listed as deleted, is kept; the metadata's topic is pending
// meanwhile (the gate answers LEADER_NOT_AVAILABLE): the local topic may
// hold data from before the node joined.
func TestReconcileForeignTopicKept(t *testing.T) {
	m := newFakeMeta(t, "n1")
	n := newTestNode(t, m, "n1", "", false)
	if _, err := n.eng.CreateTopic("t", 1, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	m.mustApply(t, placed("t", "n1", "n1"))
	n.rec.OnApply(nil, m.state0())
	if !n.rec.Pending("t") {
		t.Fatal("the metadata's topic is not pending")
	}
	if d, _ := n.eng.DescribeTopic("t"); d.ID == m.state0().Topics["t"].ID {
		t.Fatal("the local topic was replaced")
	}
	if _, err := n.b.Append(context.Background(), "t", 0, mkBatch(t, "x")); codeOf(err) != api.CodeLeaderNotAvailable {
		t.Fatalf("append while the metadata's topic is pending: %v", err)
	}
}

// LocalTopics reports the storage's topics for the one-time import: this
// node leads each partition alone, and a partition holds data when
// records were appended.
func TestLocalTopics(t *testing.T) {
	m := newFakeMeta(t, "n1")
	n := newTestNode(t, m, "n1", "", false)
	ti, err := n.eng.CreateTopic("a", 2, engine.TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.eng.Append(context.Background(), "a", 1, mkBatch(t, "x")); err != nil {
		t.Fatal(err)
	}
	got := n.rec.LocalTopics()
	if len(got) != 1 {
		t.Fatalf("LocalTopics: %+v", got)
	}
	a := got[0]
	want := ti.Config
	want.ReplicationFactor, want.MinInsyncReplicas = 1, 1
	if a.Name != "a" || a.ID != ti.ID || a.CreatedMs != ti.CreatedMs || a.Config != want || len(a.Partitions) != 2 {
		t.Fatalf("imported topic %+v, engine %+v", a, ti)
	}
	for i, p := range a.Partitions {
		if p.Leader != "n1" || len(p.Replicas) != 1 || p.Replicas[0] != "n1" || len(p.ISR) != 1 || p.HasData != (i == 1) {
			t.Fatalf("partition %d: %+v", i, p)
		}
	}
	// The import is accepted by the metadata and needs no change here.
	m.mustApply(t, meta.Command{Op: meta.OpImport, Topics: got})
	n.rec.OnApply(nil, m.state0())
	checkLocal(t, n, m.state0().Topics["a"])
	if n.rec.Pending("a") {
		t.Fatal("an imported topic is pending")
	}
}
