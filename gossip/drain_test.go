package gossip

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/gossip/meta"
)

func TestDrainNode(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if res, err := nodes[0].ProposeCommand(ctx, createCmd("orders", 6)); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	sameState(t, "orders", nodes...)
	asker, victim := nodes[2], nodes[1]
	before := asker.State().Topics["orders"]
	led := meta.LedBy(asker.State(), victim.ID())
	if len(led) == 0 {
		t.Fatalf("%s leads no partition of %+v", victim.ID(), before.Partitions)
	}

	if _, err := asker.DrainNode(ctx, "nobody"); status.Code(err) != codes.NotFound {
		t.Fatalf("drain of an unknown node: %v, want NotFound", err)
	}
	resp, err := asker.DrainNode(ctx, victim.ID())
	if err != nil {
		t.Fatalf("drain %s: %v", victim.ID(), err)
	}
	if int(resp.MovedPartitions) != len(led) || len(resp.RemainingPartitions) != 0 {
		t.Fatalf("drain moved %d, left %v; %s led %v", resp.MovedPartitions, resp.RemainingPartitions, victim.ID(), led)
	}
	sameState(t, "orders", nodes...)
	after := asker.State().Topics["orders"]
	for i, p := range after.Partitions {
		was := before.Partitions[i]
		switch {
		case p.Leader == victim.ID():
			t.Errorf("partition %d is still led by the drained node", i)
		case was.Leader == victim.ID() && (p.LeaderEpoch != was.LeaderEpoch+1 || !slices.Contains(was.ISR, p.Leader)):
			t.Errorf("partition %d moved to %s at epoch %d (was %d, ISR %v): want an ISR member at the next epoch", i, p.Leader, p.LeaderEpoch, was.LeaderEpoch, was.ISR)
		case was.Leader != victim.ID() && p.LeaderEpoch != was.LeaderEpoch:
			t.Errorf("partition %d, not led by the drained node, changed epoch", i)
		}
	}
	for _, n := range nodes {
		info, err := n.Info(ctx)
		if err != nil || !slices.Equal(info.DrainedNodes, []string{victim.ID()}) {
			t.Fatalf("%s: drained nodes %v, %v", n.ID(), info.GetDrainedNodes(), err)
		}
	}
	members, err := asker.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members.Members {
		if m.Drained != (m.NodeId == victim.ID()) {
			t.Errorf("member %s drained = %v", m.NodeId, m.Drained)
		}
	}

	// A new topic is not led by the drained node.
	if res, err := asker.ProposeCommand(ctx, createCmd("later", 6)); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	if got := meta.LedBy(asker.State(), victim.ID()); len(got) != 0 {
		t.Fatalf("the drained node leads %v", got)
	}

	if _, err := asker.UndrainNode(ctx, victim.ID()); err != nil {
		t.Fatalf("undrain: %v", err)
	}
	sameState(t, "later", nodes...)
	if d := victim.State().DrainedNodes; len(d) != 0 {
		t.Fatalf("still drained after undrain: %v", d)
	}
	if res, err := asker.ProposeCommand(ctx, createCmd("again", 6)); err != nil || res.Err != nil {
		t.Fatalf("create: %v %v", err, res.Err)
	}
	if got := meta.LedBy(asker.State(), victim.ID()); len(got) == 0 {
		t.Fatal("the undrained node leads no partition of a new topic")
	}
}
