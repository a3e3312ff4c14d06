package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/batch"
)

var offsetsTopicID = api.NewTopicID()

// newOffsetsNode opens a replicating engine for node id holding the
// offsets topic (parts partitions) and topic rt (4 partitions, a record
// in each so that commits up to 1 pass the high watermark check).
func newOffsetsNode(t *testing.T, id string, parts int, clock *testClock) *replNode {
	t.Helper()
	n := &replNode{id: id, dir: t.TempDir()}
	n.opts = testOptions(n.dir)
	n.opts.Replication = &ReplicationOptions{NodeID: id, LagTimeMax: 10 * time.Second}
	n.opts.Now = clock.Now
	n.opts.RetentionCheckInterval = -1
	n.e = openTest(t, n.opts)
	if _, err := n.e.CreateTopicSpec(TopicSpec{Name: OffsetsTopic, ID: offsetsTopicID, Partitions: parts, Config: TopicConfig{SyncPolicy: "every-batch", RetentionMs: -1, RetentionBytes: -1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.e.CreateTopicSpec(TopicSpec{Name: replTopic, ID: replTopicID, Partitions: 4, Config: TopicConfig{SyncPolicy: "every-batch"}}); err != nil {
		t.Fatal(err)
	}
	return n
}

// leadAll makes n the sole replica and leader of every partition of both
// topics at epoch.
func leadAll(t *testing.T, n *replNode, epoch uint32) {
	t.Helper()
	for _, tp := range []struct {
		name  string
		id    api.TopicID
		parts int
	}{{OffsetsTopic, offsetsTopicID, n.partitions(t, OffsetsTopic)}, {replTopic, replTopicID, 4}} {
		for p := 0; p < tp.parts; p++ {
			if err := n.e.BecomeLeader(tp.name, tp.id, p, epoch, []string{n.id}, []string{n.id}, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	for p := 0; p < 4; p++ {
		if _, err := n.e.Append(context.Background(), replTopic, p, mkBatch(t, "x")); err != nil {
			t.Fatal(err)
		}
	}
}

func (n *replNode) partitions(t *testing.T, topic string) int {
	t.Helper()
	ti, err := n.e.DescribeTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	return ti.PartitionCount
}

// awaitServing polls until n coordinates group (its offsets partition is
// loaded).
func awaitServing(t *testing.T, n *replNode, group string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := n.e.FetchOffsets(group, "")
		if err == nil {
			return
		}
		if !errors.Is(err, api.ErrCoordinatorNotAvailable) || time.Now().After(deadline) {
			t.Fatalf("group %q not served by %s: %v", group, n.id, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func commitStandalone(t *testing.T, e *Engine, group string, partition int, off uint64) {
	t.Helper()
	out, err := e.CommitOffsets(group, "", -1, []OffsetCommit{{Topic: replTopic, Partition: partition, Offset: off, Metadata: group}})
	if err != nil {
		t.Fatalf("commit %s %d@%d: %v", group, partition, off, err)
	}
	if out[0].Err != nil {
		t.Fatalf("commit %s %d@%d: %v", group, partition, off, out[0].Err)
	}
}

func wantOffset(t *testing.T, e *Engine, group string, partition int, off uint64) {
	t.Helper()
	offs, err := e.FetchOffsets(group, replTopic)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range offs {
		if o.Partition == partition {
			if o.Offset != off || o.Metadata != group {
				t.Fatalf("group %s partition %d: offset %d metadata %q, want %d %q", group, partition, o.Offset, o.Metadata, off, group)
			}
			return
		}
	}
	t.Fatalf("group %s: no offset of partition %d in %+v (want %d)", group, partition, offs, off)
}

// TestOffsetsTopicCommitReload: in a cluster, commits go to the offsets
// topic and come back after a restart once the node leads the partition
// again; before that the group's calls are COORDINATOR_NOT_AVAILABLE, and
// no groups/offsets.log is written.
func TestOffsetsTopicCommitReload(t *testing.T) {
	clock := &testClock{now: time.Unix(1_700_000_000, 0)}
	n := newOffsetsNode(t, "a", 3, clock)
	groups := []string{"g1", "g2", "g3", "g4", "g5"}
	if _, err := n.e.FetchOffsets("g1", ""); !errors.Is(err, api.ErrCoordinatorNotAvailable) {
		t.Fatalf("fetch offsets before leading the offsets topic: %v, want COORDINATOR_NOT_AVAILABLE", err)
	}
	leadAll(t, n, 1)
	for _, g := range groups {
		awaitServing(t, n, g)
		commitStandalone(t, n.e, g, 0, 1)
		commitStandalone(t, n.e, g, 1, 1)
	}
	if err := n.e.DeleteGroup("g5"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(n.dir, "groups", offsetsFile)); err == nil && fi.Size() != 0 {
		t.Fatalf("groups/offsets.log has %d bytes in a cluster", fi.Size())
	}
	n.reopen(t)
	if _, err := n.e.FetchOffsets("g1", ""); !errors.Is(err, api.ErrCoordinatorNotAvailable) {
		t.Fatalf("fetch offsets after restart before leading: %v, want COORDINATOR_NOT_AVAILABLE", err)
	}
	leadAll(t, n, 2)
	for _, g := range groups[:4] {
		awaitServing(t, n, g)
		wantOffset(t, n.e, g, 0, 1)
		wantOffset(t, n.e, g, 1, 1)
	}
	if offs, err := n.e.FetchOffsets("g5", ""); err != nil || len(offs) != 0 {
		t.Fatalf("deleted group g5 after reload: %v %v", offs, err)
	}
	if got := len(n.e.ListGroups()); got != 4 {
		t.Fatalf("ListGroups: %d groups, want 4", got)
	}
}

// TestOffsetsTopicSnapshot: past the snapshot size the leader writes a
// snapshot and deletes the segments below it; a reload reads the
// snapshot and what follows it, deletes included.
func TestOffsetsTopicSnapshot(t *testing.T) {
	clock := &testClock{now: time.Unix(1_700_000_000, 0)}
	n := newOffsetsNode(t, "a", 1, clock)
	n.e.offsets.topic.snapshotBytes = 2 << 10
	leadAll(t, n, 1)
	awaitServing(t, n, "g0")
	for i := range 300 {
		g := fmt.Sprintf("g%d", i%7)
		commitStandalone(t, n.e, g, i%4, uint64(i%2))
	}
	if err := n.e.DeleteGroup("g6"); err != nil {
		t.Fatal(err)
	}
	ti, err := n.e.DescribeTopic(OffsetsTopic)
	if err != nil {
		t.Fatal(err)
	}
	if ti.Partitions[0].LogStartOffset == 0 {
		t.Fatalf("offsets partition log start still 0 after 300 commits with a 2 KiB snapshot size: %+v", ti.Partitions[0])
	}
	want := map[string][]OffsetCommit{}
	for i := range 6 {
		g := fmt.Sprintf("g%d", i)
		offs, err := n.e.FetchOffsets(g, "")
		if err != nil {
			t.Fatal(err)
		}
		want[g] = offs
	}
	n.reopen(t)
	leadAll(t, n, 2)
	awaitServing(t, n, "g0")
	for g, offs := range want {
		got, err := n.e.FetchOffsets(g, "")
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(offs) {
			t.Fatalf("group %s after reload: %v, want %v", g, got, offs)
		}
	}
	if offs, _ := n.e.FetchOffsets("g6", ""); len(offs) != 0 {
		t.Fatalf("deleted group g6 came back: %v", offs)
	}
}

// TestOffsetsReplayCutSnapshot: a snapshot cut short by a change of
// leader (begin and part of its groups, then commits of the next leader)
// is ignored; a complete one replaces the state.
func TestOffsetsReplayCutSnapshot(t *testing.T) {
	rec := func(kind, g string, off uint64) offsetRecord {
		r := offsetRecord{Kind: kind, Group: g}
		if g != "" {
			r.Offsets = []offsetEntry{{Topic: "t", Partition: 0, Offset: off}}
		}
		return r
	}
	var r offsetsReplay
	for _, x := range []offsetRecord{
		rec("", "a", 1), rec("", "b", 1),
		rec(kindSnapBegin, "", 0), rec(kindSnap, "a", 99), // cut short
		rec("", "a", 2),
	} {
		r.apply(x)
	}
	if got := r.state(); got["a"][tp{"t", 0}].Offset != 2 || got["b"][tp{"t", 0}].Offset != 1 {
		t.Fatalf("after a cut snapshot: %v", got)
	}
	for _, x := range []offsetRecord{rec(kindSnapBegin, "", 0), rec(kindSnap, "a", 3), rec(kindSnapEnd, "", 0), rec("", "c", 5)} {
		r.apply(x)
	}
	got := r.state()
	if len(got) != 2 || got["a"][tp{"t", 0}].Offset != 3 || got["c"][tp{"t", 0}].Offset != 5 {
		t.Fatalf("after a complete snapshot: %v, want a=3 c=5 (b not in the snapshot)", got)
	}
}

// pumpTopic copies what follower f lacks of topic/partition from leader
// l at epoch, as the cluster's replicator does, and follows the leader's
// log start.
func pumpTopic(t *testing.T, l, f *replNode, topic string, id api.TopicID, partition int, epoch uint32) error {
	st, err := f.e.ReplicaState(topic, id, partition)
	if err != nil {
		return err
	}
	res, err := l.e.FetchReplica(context.Background(), ReplicaFetch{Topic: topic, TopicID: id, Partition: partition, FollowerID: f.id,
		LeaderEpoch: epoch, FetchOffset: st.LogEndOffset, DurableOffset: st.DurableEndOffset, MaxBytes: 1 << 20, MaxWait: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	var batches [][]byte
	for _, buf := range res.Bufs {
		for len(buf) > 0 {
			b, rest, _, err := batch.Split(buf, 0)
			if err != nil {
				res.Release()
				return err
			}
			batches = append(batches, bytes.Clone(b))
			buf = rest
		}
	}
	hw, start := res.HighWatermark, res.LogStartOffset
	res.Release()
	if _, err := f.e.AppendReplica(context.Background(), topic, id, partition, batches, hw); err != nil {
		return err
	}
	_, err = f.e.FollowLogStart(topic, id, partition, start)
	return err
}

// TestOffsetsTopicFailover: a group's commits acknowledged by the leader
// of its offsets partition survive the leader's change; the old leader
// stops serving the group (its members are dropped) and the new one
// serves it once loaded; the follower's log start follows the leader's
// snapshot.
func TestOffsetsTopicFailover(t *testing.T) {
	clock := &testClock{now: time.Unix(1_700_000_000, 0)}
	a := newOffsetsNode(t, "a", 1, clock)
	b := newOffsetsNode(t, "b", 1, clock)
	a.e.offsets.topic.snapshotBytes = 2 << 10
	both := []string{"a", "b"}
	for p := 0; p < 4; p++ {
		if err := a.e.BecomeLeader(replTopic, replTopicID, p, 1, []string{"a"}, []string{"a"}, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := a.e.Append(context.Background(), replTopic, p, mkBatch(t, "x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.e.BecomeLeader(OffsetsTopic, offsetsTopicID, 0, 1, both, both, 2); err != nil {
		t.Fatal(err)
	}
	if err := b.e.BecomeFollower(OffsetsTopic, offsetsTopicID, 0, 1, "a"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := pumpTopic(t, a, b, OffsetsTopic, offsetsTopicID, 0, 1); err != nil {
				t.Errorf("pump: %v", err)
				return
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	awaitServing(t, a, "g")
	res, err := a.e.JoinGroup("g", "", "c", []string{replTopic}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		out, err := a.e.CommitOffsets("g", res.MemberID, res.Generation, []OffsetCommit{{Topic: replTopic, Partition: i % 4, Offset: 1, Metadata: "g"}})
		if err != nil || out[0].Err != nil {
			t.Fatalf("commit %d: %v %v", i, err, out[0].Err)
		}
	}
	commitStandalone(t, a.e, "solo", 2, 1)
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the deferred close
	ta, _ := a.e.DescribeTopic(OffsetsTopic)
	tb, _ := b.e.DescribeTopic(OffsetsTopic)
	if ta.Partitions[0].LogStartOffset == 0 || tb.Partitions[0].LogStartOffset == 0 {
		t.Fatalf("log start: leader %d follower %d; want both past 0 after snapshots", ta.Partitions[0].LogStartOffset, tb.Partitions[0].LogStartOffset)
	}
	// a steps down: b leads epoch 2.
	if err := a.e.BecomeFollower(OffsetsTopic, offsetsTopicID, 0, 2, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.e.FetchOffsets("g", ""); !errors.Is(err, api.ErrCoordinatorNotAvailable) {
		t.Fatalf("old coordinator: %v, want COORDINATOR_NOT_AVAILABLE", err)
	}
	if err := b.e.BecomeLeader(OffsetsTopic, offsetsTopicID, 0, 2, both, both, 1); err != nil {
		t.Fatal(err)
	}
	awaitServing(t, b, "g")
	for p := 0; p < 4; p++ {
		wantOffset(t, b.e, "g", p, 1)
	}
	wantOffset(t, b.e, "solo", 2, 1)
	if _, err := b.e.Heartbeat("g", res.MemberID, res.Generation, nil); !errors.Is(err, api.ErrFencedGeneration) {
		t.Fatalf("heartbeat of a member of the old coordinator at the new one: %v, want FENCED_GENERATION (join again)", err)
	}
}

// TestLegacyGroupOffsetsImport: the offsets a node stored alone are
// offered once for import in a cluster, then retired.
func TestLegacyGroupOffsetsImport(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	opts.RetentionCheckInterval = -1
	e := openTest(t, opts)
	if _, err := e.CreateTopic(replTopic, 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(context.Background(), replTopic, 1, mkBatch(t, "a", "b")); err != nil {
		t.Fatal(err)
	}
	if out, err := e.CommitOffsets("old", "", -1, []OffsetCommit{{Topic: replTopic, Partition: 1, Offset: 2, Metadata: "m"}}); err != nil || out[0].Err != nil {
		t.Fatal(err, out)
	}
	if e.LegacyGroupOffsets() != nil {
		t.Fatal("a single node offers legacy offsets")
	}
	e.Close()
	opts.Replication = &ReplicationOptions{NodeID: "a"}
	e = openTest(t, opts)
	got := e.LegacyGroupOffsets()
	if len(got["old"]) != 1 || got["old"][0].Offset != 2 || got["old"][0].Metadata != "m" || got["old"][0].TopicID.IsZero() {
		t.Fatalf("legacy offsets: %+v", got)
	}
	if err := e.RetireLegacyGroupOffsets(); err != nil {
		t.Fatal(err)
	}
	if e.LegacyGroupOffsets() != nil {
		t.Fatal("legacy offsets offered after retire")
	}
	e.Close()
	e = openTest(t, opts)
	if got := e.LegacyGroupOffsets(); got != nil {
		t.Fatalf("legacy offsets offered again after a restart: %v", got)
	}
	m, _ := filepath.Glob(filepath.Join(dir, "groups", offsetsFile+".imported-*"))
	if len(m) != 1 {
		t.Fatalf("imported file kept: %v", m)
	}
}

// TestOffsetsTopicCallWaitsForLoad: a group call that reaches a new
// coordinator while it loads waits for the load (here, for the high
// watermark to reach the log end, which takes a follower's fetch) and
// succeeds; one that waits past the bound answers
// COORDINATOR_NOT_AVAILABLE.
func TestOffsetsTopicCallWaitsForLoad(t *testing.T) {
	clock := &testClock{now: time.Unix(1_700_000_000, 0)}
	a := newOffsetsNode(t, "a", 1, clock)
	b := newOffsetsNode(t, "b", 1, clock)
	both := []string{"a", "b"}
	for _, n := range []*replNode{a, b} {
		for p := 0; p < 4; p++ {
			if err := n.e.BecomeLeader(replTopic, replTopicID, p, 1, []string{n.id}, []string{n.id}, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := n.e.Append(context.Background(), replTopic, p, mkBatch(t, "x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	// a leads alone and stores a commit.
	if err := a.e.BecomeLeader(OffsetsTopic, offsetsTopicID, 0, 1, []string{"a"}, []string{"a"}, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.e.BecomeFollower(OffsetsTopic, offsetsTopicID, 0, 1, "a"); err != nil {
		t.Fatal(err)
	}
	awaitServing(t, a, "g")
	commitStandalone(t, a.e, "g", 0, 1)
	// b copies a's log but learns no high watermark.
	res, err := a.e.FetchReplica(context.Background(), ReplicaFetch{Topic: OffsetsTopic, TopicID: offsetsTopicID, Partition: 0, FollowerID: "b",
		LeaderEpoch: 1, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var batches [][]byte
	for _, buf := range res.Bufs {
		for len(buf) > 0 {
			bt, rest, _, err := batch.Split(buf, 0)
			if err != nil {
				t.Fatal(err)
			}
			batches = append(batches, bytes.Clone(bt))
			buf = rest
		}
	}
	res.Release()
	if len(batches) == 0 {
		t.Fatal("no batch fetched from the leader")
	}
	if _, err := b.e.AppendReplica(context.Background(), OffsetsTopic, offsetsTopicID, 0, batches, 0); err != nil {
		t.Fatal(err)
	}
	// b leads epoch 2 with a in sync: its load waits for a's fetch.
	if err := a.e.BecomeFollower(OffsetsTopic, offsetsTopicID, 0, 2, "b"); err != nil {
		t.Fatal(err)
	}
	if err := b.e.BecomeLeader(OffsetsTopic, offsetsTopicID, 0, 2, both, both, 1); err != nil {
		t.Fatal(err)
	}
	b.e.offsets.topic.loadWait = 50 * time.Millisecond
	if _, err := b.e.FetchOffsets("g", ""); !errors.Is(err, api.ErrCoordinatorNotAvailable) {
		t.Fatalf("fetch offsets while the load cannot finish: %v, want COORDINATOR_NOT_AVAILABLE", err)
	}
	b.e.offsets.topic.loadWait = time.Minute
	type result struct {
		offs []OffsetCommit
		err  error
	}
	done := make(chan result, 1)
	go func() {
		offs, err := b.e.FetchOffsets("g", replTopic)
		done <- result{offs, err}
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := pumpTopic(t, b, a, OffsetsTopic, offsetsTopicID, 0, 2); err != nil {
				t.Errorf("pump: %v", err)
				return
			}
		}
	})
	r := <-done
	close(stop)
	wg.Wait()
	if r.err != nil || len(r.offs) != 1 || r.offs[0].Offset != 1 {
		t.Fatalf("fetch offsets during the load: %+v %v, want partition 0 at 1", r.offs, r.err)
	}
}
