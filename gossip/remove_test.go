package gossip

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/gossip/meta"
)

func TestRemoveNode(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if res, err := nodes[0].ProposeCommand(ctx, createCmd("empty", 6)); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	sameState(t, "empty", nodes...)
	eventually(t, 10*time.Second, "a controller", func() bool { return controllerOf(nodes) != nil })
	ctl := controllerOf(nodes)
	var others []*clusterNode
	for _, n := range nodes {
		if n != ctl {
			others = append(others, n)
		}
	}
	// Removed through a node that is not the controller (forwarded).
	follower, victim := others[0], others[1]

	if _, err := follower.RemoveNode(ctx, "nobody"); status.Code(err) != codes.NotFound {
		t.Fatalf("remove of an unknown node: %v, want NotFound", err)
	}

	// A partition the victim leads that holds data, and whose in-sync set
	// is the victim alone, has no replica to move to.
	st := follower.State()
	tp := st.Topics["empty"]
	withData := slices.IndexFunc(tp.Partitions, func(p meta.Partition) bool { return p.Leader == victim.ID() })
	if withData < 0 {
		t.Fatalf("%s leads no partition of %+v", victim.ID(), tp.Partitions)
	}
	if res, err := follower.ProposeCommand(ctx, meta.Command{Op: meta.OpMarkData, Name: "empty", ID: tp.ID, Partition: withData}); err != nil || res.Err != nil {
		t.Fatalf("mark data: %v %v", err, res.Err)
	}
	isr := meta.Command{Op: meta.OpSetISR, Name: "empty", ID: tp.ID, Partition: withData, Epoch: tp.Partitions[withData].LeaderEpoch, ISR: []string{victim.ID()}}
	if res, err := follower.ProposeCommand(ctx, isr); err != nil || res.Err != nil {
		t.Fatalf("set-isr: %v %v", err, res.Err)
	}
	if _, err := follower.RemoveNode(ctx, victim.ID()); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("remove of the leader of a partition with data: %v, want FailedPrecondition", err)
	}

	if res, err := follower.ProposeCommand(ctx, createCmd("empty2", 6)); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	// Delete the topic whose partition holds data first.
	if res, err := follower.ProposeCommand(ctx, meta.Command{Op: meta.OpDeleteTopic, Name: "empty", ID: tp.ID}); err != nil || res.Err != nil {
		t.Fatalf("delete: %v %v", err, res.Err)
	}
	resp, err := follower.RemoveNode(ctx, victim.ID())
	if err != nil {
		t.Fatalf("remove %s: %v", victim.ID(), err)
	}
	if resp.MovedPartitions == 0 {
		t.Errorf("no partition moved off %s", victim.ID())
	}
	rest := []*clusterNode{ctl, follower}
	eventually(t, 10*time.Second, "the removal applied everywhere", func() bool {
		for _, n := range rest {
			if _, ok := n.State().Nodes[victim.ID()]; ok || n.raftServer(victim.ID()) {
				return false
			}
		}
		return true
	})
	for _, p := range follower.State().Topics["empty2"].Partitions {
		if slices.Contains(p.Replicas, victim.ID()) || p.Leader == victim.ID() || p.Leader == "" {
			t.Errorf("partition %+v still placed on %s or leaderless", p, victim.ID())
		}
	}
	eventually(t, 30*time.Second, "the removed node notices and stops its raft", func() bool {
		err := victim.Ready()
		return err != nil && strings.Contains(err.Error(), "removed") && victim.raft.State() == raft.Shutdown
	})
	select {
	case <-victim.Removed():
	case <-time.After(10 * time.Second):
		t.Fatal("Removed not closed on the removed node")
	}
	checkRemovedDir(t, victim.dir)
	if res, err := follower.ProposeCommand(ctx, createCmd("after", 2)); err != nil || res.Err != nil {
		t.Fatalf("create after the removal: %v %v", err, res.Err)
	}
}

// checkRemovedDir checks that node.json of dir records the removal and
// that a start on dir is refused, saying why and what to do.
func checkRemovedDir(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cluster", "node.json"))
	if err != nil {
		t.Fatal(err)
	}
	var id identity
	if err := json.Unmarshal(b, &id); err != nil || id.RemovedAt == "" {
		t.Fatalf("node.json %s: no removed_at (%v)", b, err)
	}
	if _, err := time.Parse(time.RFC3339, id.RemovedAt); err != nil {
		t.Errorf("removed_at %q: %v", id.RemovedAt, err)
	}
	o := testOptions(t, id.NodeID, dir)
	_, err = startTestNode(t, o)
	if err == nil || !IsRemoved(err) {
		t.Fatalf("start on a removed data directory: %v, want the removal", err)
	}
	for _, w := range []string{"removed", "--data-dir", `"` + id.NodeID + `"`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %s", err, w)
		}
	}
}

// A node removed while it was stopped learns it at its restart, from the
// node it rejoins through: it stops, records the removal, and its data
// directory is refused from then on; a join of that data directory is
// refused by the cluster, and a new data directory of the same id joins.
func TestRemovedWhileStopped(t *testing.T) {
	ctl, victim, other := threeNodeRoles(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o := victim.opts
	victim.stop(t)
	eventually(t, 10*time.Second, victim.ID()+" gone at the controller", func() bool { return !ctl.Alive(victim.ID()) })
	if _, err := other.RemoveNode(ctx, victim.ID()); err != nil {
		t.Fatalf("remove %s: %v", victim.ID(), err)
	}
	eventually(t, 10*time.Second, "the metadata lists the removed data directory", func() bool {
		_, ok := other.State().RemovedDataDir(victim.ident.DataDirID)
		return ok
	})

	// A restart without --seeds rejoins through the nodes its Raft state
	// lists, and is told.
	o.Seeds = nil
	back := mustStart(t, o)
	select {
	case <-back.Removed():
	case <-time.After(20 * time.Second):
		t.Fatal("the restarted removed node did not learn of its removal")
	}
	if err := back.Ready(); err == nil || !strings.Contains(err.Error(), "removed") {
		t.Errorf("Ready after the removal: %v", err)
	}
	back.stop(t)
	checkRemovedDir(t, o.DataDir)

	// The same data directory with node.json's mark removed is still
	// refused by the cluster.
	raw, err := os.ReadFile(filepath.Join(o.DataDir, "cluster", "node.json"))
	if err != nil {
		t.Fatal(err)
	}
	var id identity
	if err := json.Unmarshal(raw, &id); err != nil {
		t.Fatal(err)
	}
	id.RemovedAt = ""
	raw, _ = json.Marshal(id)
	if err := os.WriteFile(filepath.Join(o.DataDir, "cluster", "node.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(o.DataDir, "cluster", "raft")); err != nil {
		t.Fatal(err)
	}
	o.Seeds = []string{other.addr}
	_, err = startTestNode(t, o)
	if !IsRemoved(err) || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("join of a removed data directory: %v, want the removal", err)
	}
	if _, ok := ctl.State().Nodes[victim.ID()]; ok {
		t.Fatal("the removed data directory was registered")
	}

	// The same node id on an empty data directory joins.
	fresh := testOptions(t, victim.ID(), t.TempDir())
	fresh.Seeds = []string{other.addr}
	waitReady(t, mustStart(t, fresh))
}

// A node removed while Raft cannot reach it never applies the
// remove-node entry (Raft stops replicating to it once the change is
// appended): it learns of the removal by the probe it sends after
// RemovalProbeAfter without a Raft leader, which the cluster refuses.
func TestRemovedWhileCutOffFromRaft(t *testing.T) {
	_, victim, other := threeNodeRoles(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The victim's Raft listener goes away: the leader's AppendEntries
	// no longer reach it, while its gRPC (the probe's path) still works.
	if err := victim.trans.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, victim.ID()+" without a Raft leader", func() bool {
		leader, _ := victim.raft.LeaderWithID()
		return leader == ""
	})
	if _, err := other.RemoveNode(ctx, victim.ID()); err != nil {
		t.Fatalf("remove %s: %v", victim.ID(), err)
	}
	if _, ok := victim.State().RemovedDataDir(victim.ident.DataDirID); ok {
		t.Fatal("the cut-off node applied its own removal; the test does not reach the probe")
	}
	select {
	case <-victim.Removed():
	case <-time.After(3*victim.opts.RemovalProbeAfter + 20*time.Second):
		t.Fatal("the cut-off removed node did not learn of its removal")
	}
	if err := victim.Ready(); err == nil || !strings.Contains(err.Error(), "removed") {
		t.Errorf("Ready after the removal: %v", err)
	}
	checkRemovedDir(t, victim.dir)
}

// threeNodeRoles starts a 3-node cluster, waits for its controller and
// returns it and the two other nodes.
func threeNodeRoles(t *testing.T) (ctl, victim, other *clusterNode) {
	t.Helper()
	nodes := startCluster(t, 3)
	eventually(t, 10*time.Second, "a controller", func() bool { return controllerOf(nodes) != nil })
	ctl = controllerOf(nodes)
	for _, n := range nodes {
		switch {
		case n == ctl:
		case victim == nil:
			victim = n
		default:
			other = n
		}
	}
	return ctl, victim, other
}
