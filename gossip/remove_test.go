package gossip

import (
	"context"
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

	// A partition the victim leads that holds data cannot move in part 1.
	st := follower.State()
	tp := st.Topics["empty"]
	withData := slices.IndexFunc(tp.Partitions, func(p meta.Partition) bool { return p.Leader == victim.ID() })
	if withData < 0 {
		t.Fatalf("%s leads no partition of %+v", victim.ID(), tp.Partitions)
	}
	if res, err := follower.ProposeCommand(ctx, meta.Command{Op: meta.OpMarkData, Name: "empty", ID: tp.ID, Partition: withData}); err != nil || res.Err != nil {
		t.Fatalf("mark data: %v %v", err, res.Err)
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
	eventually(t, 10*time.Second, "the removed node notices and stops its raft", func() bool {
		err := victim.Ready()
		return err != nil && strings.Contains(err.Error(), "removed") && victim.raft.State() == raft.Shutdown
	})
	if res, err := follower.ProposeCommand(ctx, createCmd("after", 2)); err != nil || res.Err != nil {
		t.Fatalf("create after the removal: %v %v", err, res.Err)
	}
}
