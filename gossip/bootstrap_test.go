package gossip

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
)

func TestBootstrapImportsLocalTopicsOnce(t *testing.T) {
	dir := t.TempDir()
	local := &meta.Topic{
		Name: "legacy", ID: api.NewTopicID(), Config: engine.TopicConfig{ReplicationFactor: 1}, CreatedMs: 1,
		Partitions: []meta.Partition{{Replicas: []string{"a"}, Leader: "a", ISR: []string{"a"}, HasData: true}},
	}
	var calls atomic.Int32
	o := testOptions(t, "a", dir)
	o.LocalTopics = func() []*meta.Topic { calls.Add(1); return []*meta.Topic{local} }
	var applied atomic.Int32
	o.OnApply = func(prev, next *meta.State) { applied.Add(1) }
	a := mustStart(t, o)
	if err := a.Ready(); err != nil {
		t.Fatalf("a bootstrapped node is not ready when Start returns: %v", err)
	}
	st := a.State()
	if got := st.Topics["legacy"]; got == nil || got.ID != local.ID || !st.Imported {
		t.Fatalf("after the bootstrap: topic %+v imported %v", got, st.Imported)
	}
	if calls.Load() != 1 || applied.Load() < 2 {
		t.Fatalf("LocalTopics called %d times, OnApply %d times", calls.Load(), applied.Load())
	}
	hash := st.Hash()
	a.stop(t)

	applied.Store(0)
	b := mustStart(t, o) // the same data directory
	waitReady(t, b)
	if calls.Load() != 1 {
		t.Fatalf("LocalTopics called again at the restart (%d calls)", calls.Load())
	}
	if got := b.State().Topics["legacy"]; got == nil || got.ID != local.ID {
		t.Fatalf("after the restart: topic %+v", got)
	}
	if applied.Load() == 0 {
		t.Fatal("OnApply not called while the log was replayed")
	}
	// The restart registers the node again (same addresses but new ports).
	if b.State().Hash() == "" || len(b.State().Nodes) != 1 || hash == "" {
		t.Fatalf("state after the restart: %d nodes", len(b.State().Nodes))
	}
}

func TestMetrics(t *testing.T) {
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	oa := testOptions(t, "a", t.TempDir())
	oa.Registerer = regs[0]
	a := mustStart(t, oa)
	ob := testOptions(t, "b", t.TempDir())
	ob.Registerer = regs[1]
	ob.Seeds = []string{a.addr}
	b := mustStart(t, ob)
	waitReady(t, a, b)
	eventually(t, 10*time.Second, "both alive on both", func() bool {
		return a.memberState("b") == StateAlive && b.memberState("a") == StateAlive && len(b.State().Nodes) == 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := b.ProposeCommand(ctx, createCmd("m", 4)); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	sameState(t, "m", a, b)
	controllers := 0.0
	for i, n := range []*clusterNode{a, b} {
		want := `
# HELP sq_cluster_members Nodes of the cluster metadata by membership state as this node's gossip sees them (alive, suspect, dead, left, unknown).
# TYPE sq_cluster_members gauge
sq_cluster_members{state="alive"} 2
sq_cluster_members{state="dead"} 0
sq_cluster_members{state="left"} 0
sq_cluster_members{state="suspect"} 0
sq_cluster_members{state="unknown"} 0
# HELP sq_cluster_leaderless_partitions Partitions whose leader is not alive or that have none (they answer LEADER_NOT_AVAILABLE).
# TYPE sq_cluster_leaderless_partitions gauge
sq_cluster_leaderless_partitions 0
`
		if err := testutil.GatherAndCompare(regs[i], strings.NewReader(want), "sq_cluster_members", "sq_cluster_leaderless_partitions"); err != nil {
			t.Errorf("%s: %v", n.ID(), err)
		}
		mfs, err := regs[i].Gather()
		if err != nil {
			t.Fatal(err)
		}
		vals := map[string]float64{}
		for _, mf := range mfs {
			if len(mf.Metric) == 1 {
				vals[mf.GetName()] = mf.Metric[0].GetGauge().GetValue()
			}
		}
		if vals["sq_cluster_raft_term"] < 1 || vals["sq_cluster_raft_applied_index"] != float64(n.AppliedIndex()) ||
			vals["sq_cluster_raft_commit_index"] < vals["sq_cluster_raft_applied_index"] {
			t.Errorf("%s: raft metrics %v (applied index %d)", n.ID(), vals, n.AppliedIndex())
		}
		controllers += vals["sq_cluster_controller"]
	}
	if controllers != 1 {
		t.Errorf("sq_cluster_controller sums to %v over the nodes, want 1", controllers)
	}
	// Closing unregisters: the registry can take a new node.
	b.stop(t)
	if mfs, _ := regs[1].Gather(); len(mfs) != 0 {
		t.Errorf("%d metric families left after Close", len(mfs))
	}
}

// TestImportAfterAnInterruptedBootstrap: a first start that bootstrapped
// Raft but stopped before the import was committed imports at the next
// start.
func TestImportAfterAnInterruptedBootstrap(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(t, "a", dir)
	o.LocalTopics = func() []*meta.Topic { return nil }
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the bootstrap's proposals fail at once
	first := o
	first.GRPCAddr = "127.0.0.1:1" // registered, never dialled
	if _, err := Start(ctx, first); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a cancelled context: %v, want the bootstrap cut by context.Canceled", err)
	}
	stores, err := openRaftStores(filepath.Join(dir, "cluster"), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	has, err := raft.HasExistingState(stores.bolt, stores.bolt, stores.snaps)
	stores.bolt.Close()
	if err != nil || !has {
		t.Fatalf("no raft state after the cut bootstrap (%v): the test would not test the restart", err)
	}
	local := &meta.Topic{
		Name: "legacy", ID: api.NewTopicID(), Config: engine.TopicConfig{ReplicationFactor: 1}, CreatedMs: 1,
		Partitions: []meta.Partition{{Replicas: []string{"a"}, Leader: "a", ISR: []string{"a"}}},
	}
	o.LocalTopics = func() []*meta.Topic { return []*meta.Topic{local} }
	a := mustStart(t, o)
	waitReady(t, a)
	if st := a.State(); !st.Imported || st.Topics["legacy"] == nil {
		t.Fatalf("after the second start: imported %v, topics %v", st.Imported, st.Topics)
	}
}
