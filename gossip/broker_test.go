package gossip

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
)

// The leadership gate of Append, AppendAsync, Fetch, FetchID and
// ListOffsets: served here when this node leads, NOT_LEADER with the
// leader's id and data address when an alive node does,
// LEADER_NOT_AVAILABLE when the leader is dead or there is none,
// UNKNOWN_TOPIC for a topic the metadata does not know.
func TestGate(t *testing.T) {
	m := newFakeMeta(t, "n1", "n2", "n3")
	n := newTestNode(t, m, "n1", "", true)
	m.mustApply(t, placed("t", "n1", "n1", "n2", "n3", ""))
	m.setAlive("n3", false)
	id := m.state0().Topics["t"].ID
	if _, err := n.eng.CreateTopic("local-only", 1, engine.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	calls := map[string]func(topic string, p int) error{
		"Append": func(topic string, p int) error {
			_, err := n.b.Append(ctx, topic, p, mkBatch(t, "x"))
			return err
		},
		"AppendAsync": func(topic string, p int) error {
			pd, err := n.b.AppendAsync(ctx, topic, p, mkBatch(t, "x"), nil)
			if err == nil {
				_, err = pd.Wait(ctx)
			}
			return err
		},
		"Fetch": func(topic string, p int) error {
			r, err := n.b.Fetch(ctx, topic, p, 0, 1<<10, 0)
			if err == nil {
				r.Release()
			}
			return err
		},
		"FetchID": func(topic string, p int) error {
			r, err := n.b.FetchID(ctx, topic, id, p, 0, 1<<10, 0)
			if err == nil {
				r.Release()
			}
			return err
		},
		"ListOffsets": func(topic string, p int) error {
			_, _, err := n.b.ListOffsets(topic, p, -1)
			return err
		},
	}
	cases := []struct {
		name       string
		topic      string
		partition  int
		code       api.Code
		leaderAddr string
	}{
		{"leader here", "t", 0, api.CodeNone, ""},
		{"leader elsewhere, alive", "t", 1, api.CodeNotLeader, "n2:6064"},
		{"leader elsewhere, dead", "t", 2, api.CodeLeaderNotAvailable, ""},
		{"no leader", "t", 3, api.CodeLeaderNotAvailable, ""},
		{"no such partition", "t", 4, api.CodeUnknownPartition, ""},
		{"unknown topic", "nope", 0, api.CodeUnknownTopic, ""},
		{"local topic unknown to the metadata", "local-only", 0, api.CodeUnknownTopic, ""},
	}
	for _, c := range cases {
		for call, f := range calls {
			err := f(c.topic, c.partition)
			want := c.code
			if call == "FetchID" && want == api.CodeUnknownTopic {
				// A request with an id for a name without a topic: its
				// topic was deleted (as in the engine).
				want = api.CodeUnknownTopicID
			}
			if codeOf(err) != want {
				t.Errorf("%s, %s: %v, want %v", c.name, call, err, want)
				continue
			}
			if c.code == api.CodeNotLeader {
				if e := api.AsError(err); e.LeaderID != "n2" || e.LeaderAddr != c.leaderAddr {
					t.Errorf("%s, %s: leader hint %q at %q, want n2 at %q", c.name, call, e.LeaderID, e.LeaderAddr, c.leaderAddr)
				}
			}
		}
	}
	// A stale topic id is refused before leadership is looked at.
	if _, err := n.b.FetchID(ctx, "t", api.NewTopicID(), 1, 0, 1<<10, 0); codeOf(err) != api.CodeUnknownTopicID {
		t.Fatalf("FetchID with another id: %v", err)
	}
	// The first append marked partition 0 as holding data, once.
	if !m.state0().Topics["t"].Partitions[0].HasData || m.count(meta.OpMarkData) != 1 {
		t.Fatalf("mark-data: HasData %v after %d proposals, want true after 1", m.state0().Topics["t"].Partitions[0].HasData, m.count(meta.OpMarkData))
	}
	// When the dead leader returns, its partition is redirected to it.
	m.setAlive("n3", true)
	if err := calls["Fetch"]("t", 2); codeOf(err) != api.CodeNotLeader || api.AsError(err).LeaderAddr != "n3:6064" {
		t.Fatalf("partition of a leader back alive: %v", err)
	}
}

// Concurrent first appends to a partition without data share one
// mark-data proposal and wait for it; a minority side (NO_QUORUM) appends
// nothing.
func TestMarkDataOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newFakeMeta(t, "n1")
		n := newTestNode(t, m, "n1", "", true)
		m.mustApply(t, placed("t", "n1", "n1", "n1"))
		m.gate = make(chan struct{})
		const appenders = 8
		var wg sync.WaitGroup
		errs := make([]error, appenders)
		for i := range appenders {
			wg.Go(func() {
				_, errs[i] = n.b.Append(context.Background(), "t", 0, mkBatch(t, "v"))
			})
		}
		synctest.Wait()
		if d, _ := n.eng.DescribeTopic("t"); d.Partitions[0].LogEndOffset != 0 {
			t.Fatalf("appended before mark-data was committed: %+v", d.Partitions[0])
		}
		close(m.gate)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
		}
		if got := m.count(meta.OpMarkData); got != 1 {
			t.Fatalf("%d mark-data proposals for %d concurrent first appends, want 1", got, appenders)
		}
		if _, err := n.b.Append(context.Background(), "t", 0, mkBatch(t, "w")); err != nil || m.count(meta.OpMarkData) != 1 {
			t.Fatalf("a later append: %v, %d proposals", err, m.count(meta.OpMarkData))
		}
		// Without a quorum the first append to partition 1 fails as its
		// proposal did, and nothing is appended.
		m.mu.Lock()
		m.proposeErr = api.NewError(api.CodeNoQuorum, "no Raft majority")
		m.mu.Unlock()
		if _, err := n.b.Append(context.Background(), "t", 1, mkBatch(t, "x")); codeOf(err) != api.CodeNoQuorum {
			t.Fatalf("first append without a quorum: %v", err)
		}
		if d, _ := n.eng.DescribeTopic("t"); d.Partitions[1].LogEndOffset != 0 || d.Partitions[0].LogEndOffset != appenders+1 {
			t.Fatalf("partitions after the appends: %+v", d.Partitions)
		}
		n.eng.Close()
	})
}

// A waiter whose own context ends stops waiting; the proposal goes on for
// the others.
func TestMarkDataWaiterCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newFakeMeta(t, "n1")
		n := newTestNode(t, m, "n1", "", true)
		m.mustApply(t, placed("t", "n1", "n1"))
		m.gate = make(chan struct{})
		var first error
		done := make(chan struct{})
		go func() {
			_, first = n.b.Append(context.Background(), "t", 0, mkBatch(t, "v"))
			close(done)
		}()
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		var second error
		secondDone := make(chan struct{})
		go func() {
			_, second = n.b.Append(ctx, "t", 0, mkBatch(t, "w"))
			close(secondDone)
		}()
		synctest.Wait()
		cancel()
		<-secondDone
		if !errors.Is(second, context.Canceled) {
			t.Fatalf("cancelled waiter: %v", second)
		}
		close(m.gate)
		<-done
		if first != nil || m.count(meta.OpMarkData) != 1 {
			t.Fatalf("proposer: %v after %d proposals", first, m.count(meta.OpMarkData))
		}
		n.eng.Close()
	})
}

// Topic administration goes through the metadata log and returns once the
// local storage holds the change; refusals and NO_QUORUM come back as
// errors.
func TestBrokerAdmin(t *testing.T) {
	m := newFakeMeta(t, "n1", "n2")
	n1 := newTestNode(t, m, "n1", "", true)
	n2 := newTestNode(t, m, "n2", "", true)
	ti, err := n1.b.CreateTopic("a", 4, engine.TopicConfig{RetentionMs: 60000})
	if err != nil {
		t.Fatal(err)
	}
	mt := m.state0().Topics["a"]
	if ti.ID != mt.ID || ti.PartitionCount != 4 || ti.Config.RetentionMs != 60000 || ti.Config.ReplicationFactor != 2 || len(ti.Partitions) != 4 {
		t.Fatalf("CreateTopic: %+v (metadata %+v)", ti, mt)
	}
	for i, p := range ti.Partitions {
		if p.Leader == "" || len(p.Replicas) != 2 || !reflect.DeepEqual(p.Replicas, mt.Partitions[i].Replicas) {
			t.Fatalf("partition %d placement %+v", i, p)
		}
	}
	for _, n := range []*testNode{n1, n2} {
		d, err := n.eng.DescribeTopic("a")
		if err != nil || d.ID != mt.ID || d.CreatedMs != mt.CreatedMs || d.PartitionCount != 4 {
			t.Fatalf("local copy: %+v %v", d, err)
		}
	}
	if _, err := n2.b.CreateTopic("a", 1, engine.TopicConfig{}); codeOf(err) != api.CodeTopicExists {
		t.Fatalf("second create: %v", err)
	}
	if _, err := n2.b.CreateTopic("b", 1, engine.TopicConfig{ReplicationFactor: 3}); codeOf(err) != api.CodeInvalidConfig {
		t.Fatalf("replication factor above the nodes: %v", err)
	}
	ms := int64(5000)
	if ti, err := n2.b.AlterTopicConfig("a", engine.TopicConfigChange{RetentionMs: &ms}); err != nil || ti.Config.RetentionMs != 5000 || ti.Config.ReplicationFactor != 2 {
		t.Fatalf("AlterTopicConfig: %+v %v", ti.Config, err)
	}
	if d, _ := n1.eng.DescribeTopic("a"); d.Config.RetentionMs != 5000 {
		t.Fatalf("alter not applied on n1: %+v", d.Config)
	}
	if _, err := n1.b.CreatePartitions("a", 4); codeOf(err) != api.CodeInvalidConfig {
		t.Fatalf("CreatePartitions to the same count: %v", err)
	}
	if ti, err := n1.b.CreatePartitions("a", 6); err != nil || ti.PartitionCount != 6 || len(ti.Partitions[5].Replicas) != 2 {
		t.Fatalf("CreatePartitions: %+v %v", ti, err)
	}
	if d, _ := n2.eng.DescribeTopic("a"); d.PartitionCount != 6 {
		t.Fatalf("partitions not added on n2: %d", d.PartitionCount)
	}
	if got := n2.b.ListTopics(); len(got) != 1 || got[0].Name != "a" || got[0].Config.ReplicationFactor != 2 || got[0].PartitionCount != 6 {
		t.Fatalf("ListTopics: %+v", got)
	}
	if err := n2.b.DeleteTopic("a"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*testNode{n1, n2} {
		if _, err := n.eng.DescribeTopic("a"); codeOf(err) != api.CodeUnknownTopic {
			t.Fatalf("deleted topic still local: %v", err)
		}
	}
	if err := n1.b.DeleteTopic("a"); codeOf(err) != api.CodeUnknownTopic {
		t.Fatalf("delete of a deleted topic: %v", err)
	}
	m.mu.Lock()
	m.proposeErr = api.NewError(api.CodeNoQuorum, "no Raft majority")
	m.mu.Unlock()
	if _, err := n1.b.CreateTopic("c", 1, engine.TopicConfig{}); codeOf(err) != api.CodeNoQuorum {
		t.Fatalf("create without a quorum: %v", err)
	}
	if _, err := n1.eng.DescribeTopic("c"); codeOf(err) != api.CodeUnknownTopic {
		t.Fatalf("create without a quorum made the topic locally: %v", err)
	}
}

// A commit is checked against the high watermark only for the partitions
// this node leads: the others' logs are on their leaders.
func TestCommitCheckLeaderOnly(t *testing.T) {
	m := newFakeMeta(t, "n1", "n2")
	n := newTestNode(t, m, "n1", "", true)
	m.mustApply(t, placed("t", "n1", "n1", "n2"))
	res, err := n.b.CommitOffsets("g", "", -1, []engine.OffsetCommit{{Topic: "t", Partition: 0, Offset: 5}, {Topic: "t", Partition: 1, Offset: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if codeOf(res[0].Err) != api.CodeOffsetOutOfRange || res[1].Err != nil {
		t.Fatalf("commits: %v, %v; want OFFSET_OUT_OF_RANGE for the partition led here, none for n2's", res[0].Err, res[1].Err)
	}
}

// Every node describes a topic alike: placement from the metadata, each
// partition's statistics from its leader. An unreachable leader's
// partitions keep zeros and carry LEADER_NOT_AVAILABLE.
func TestDescribeIdenticalAcrossNodes(t *testing.T) {
	m := newFakeMeta(t, "n1", "n2")
	nodes := map[string]*testNode{"n1": newTestNode(t, m, "n1", "", true), "n2": newTestNode(t, m, "n2", "", true)}
	if _, err := nodes["n2"].b.CreateTopic("t", 4, engine.TopicConfig{ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	led := map[string]int{}
	for i, p := range m.state0().Topics["t"].Partitions {
		led[p.Leader]++
		for range i + 1 {
			if _, err := nodes[p.Leader].b.Append(ctx, "t", i, mkBatch(t, "a", "b")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if led["n1"] == 0 || led["n2"] == 0 {
		t.Fatalf("leaders not spread: %v", led)
	}
	d1, err := nodes["n1"].b.DescribeTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	d2, err := nodes["n2"].b.DescribeTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d1, d2) {
		t.Fatalf("describes differ:\nn1 %+v\nn2 %+v", d1, d2)
	}
	for i, p := range d1.Partitions {
		if p.Err != nil || p.LogEndOffset != uint64(2*(i+1)) || p.HighWatermark != p.LogEndOffset || p.SegmentCount == 0 || p.Leader == "" {
			t.Fatalf("partition %d: %+v", i, p)
		}
	}
	m.mu.Lock()
	m.unreachable["n2"] = true
	m.mu.Unlock()
	d, err := nodes["n1"].b.DescribeTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range d.Partitions {
		want := d1.Partitions[i]
		if p.Leader == "n2" {
			if codeOf(p.Err) != api.CodeLeaderNotAvailable || p.LogEndOffset != 0 || p.SizeBytes != 0 {
				t.Fatalf("partition %d of an unreachable leader: %+v", i, p)
			}
			continue
		}
		if !reflect.DeepEqual(p, want) {
			t.Fatalf("partition %d led here: %+v, want %+v", i, p, want)
		}
	}
}

// A leader that has not applied the topic's creation yet answers
// UNKNOWN_TOPIC; the describe asks it again until it has, instead of
// reporting its partitions' statistics as unavailable.
func TestDescribeWaitsForALaggingLeader(t *testing.T) {
	m := newFakeMeta(t, "n1", "n2")
	nodes := map[string]*testNode{"n1": newTestNode(t, m, "n1", "", true), "n2": newTestNode(t, m, "n2", "", true)}
	if _, err := nodes["n1"].b.CreateTopic("t", 4, engine.TopicConfig{ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, p := range m.state0().Topics["t"].Partitions {
		if _, err := nodes[p.Leader].b.Append(ctx, "t", i, mkBatch(t, "a")); err != nil {
			t.Fatal(err)
		}
	}
	m.mu.Lock()
	m.lagFor["n2"] = 3
	m.mu.Unlock()
	d, err := nodes["n1"].b.DescribeTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	n2 := 0
	for i, p := range d.Partitions {
		if p.Err != nil || p.LogEndOffset != 1 {
			t.Fatalf("partition %d (leader %s): %+v, want its leader's statistics", i, p.Leader, p)
		}
		if p.Leader == "n2" {
			n2++
		}
	}
	m.mu.Lock()
	left := m.lagFor["n2"]
	m.mu.Unlock()
	if n2 == 0 || left != 0 {
		t.Fatalf("n2 leads %d partitions, %d lagging answers left: the lagging leader was not asked again", n2, left)
	}
}

// Nodes and ClusterID come from the cluster.
func TestBrokerNodes(t *testing.T) {
	m := newFakeMeta(t, "n1", "n2")
	n := newTestNode(t, m, "n1", "", true)
	m.setAlive("n2", false)
	want := []api.Node{{ID: "n1", DataAddr: "n1:6064", GRPCAddr: "n1:6060", Alive: true}, {ID: "n2", DataAddr: "n2:6064", GRPCAddr: "n2:6060"}}
	if got := n.b.Nodes(); !reflect.DeepEqual(got, want) || n.b.ClusterID() != "test-cluster" {
		t.Fatalf("Nodes %+v, ClusterID %q", got, n.b.ClusterID())
	}
}
