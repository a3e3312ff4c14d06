package gossip

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/gossip/meta"
)

// DrainResult is the outcome of a drain: the leader changes committed
// for the drained node's partitions and the partitions it still leads
// ("topic-partition"; no alive in-sync follower could take them).
type DrainResult struct {
	Moved     []meta.LeaderChange
	Remaining []string
}

// Drain drains node nodeID through the metadata log (meta.OpDrainNode;
// the controller decides the moves with meta.LeadersForDrain): the
// partitions it leads go to alive in-sync followers with new leader
// epochs, and it leads nothing more until Undrain (shutdown: until its
// next registration, and it leaves the in-sync sets it follows). It
// returns once the command is applied on this node, with the changes
// that took effect (epochs as decided: the new epoch is Epoch+1).
// Errors: INVALID_REQUEST (an unknown node), NO_QUORUM, ctx's.
func (n *Node) Drain(ctx context.Context, nodeID string, shutdown bool) (DrainResult, error) {
	before := n.State()
	res, err := n.ProposeCommand(ctx, meta.Command{Op: meta.OpDrainNode, NodeID: nodeID, Shutdown: shutdown})
	if err == nil && res.Err != nil {
		err = res.Err
	}
	if err != nil {
		return DrainResult{}, err
	}
	return drainResult(before, n.State(), nodeID), nil
}

// drainResult compares the partitions node id led in before with after:
// those another node leads now are Moved (with their epoch in before),
// the others Remaining.
func drainResult(before, after *meta.State, id string) DrainResult {
	var out DrainResult
	for name, t := range before.Topics {
		at := after.Topics[name]
		for i, p := range t.Partitions {
			if p.Leader != id || at == nil || at.ID != t.ID || i >= len(at.Partitions) {
				continue
			}
			if q := at.Partitions[i]; q.Leader != id && q.Leader != "" {
				out.Moved = append(out.Moved, meta.LeaderChange{Topic: name, ID: t.ID, Partition: i, Leader: q.Leader, Epoch: q.LeaderEpoch - 1})
			}
		}
	}
	slices.SortFunc(out.Moved, func(a, b meta.LeaderChange) int {
		if c := cmpString(a.Topic, b.Topic); c != 0 {
			return c
		}
		return a.Partition - b.Partition
	})
	out.Remaining = meta.LedBy(after, id)
	return out
}

// Undrain ends node nodeID's drain (meta.OpUndrainNode). Errors:
// INVALID_REQUEST (an unknown node), NO_QUORUM, ctx's.
func (n *Node) Undrain(ctx context.Context, nodeID string) error {
	res, err := n.ProposeCommand(ctx, meta.Command{Op: meta.OpUndrainNode, NodeID: nodeID})
	if err == nil && res.Err != nil {
		err = res.Err
	}
	return err
}

// DrainNode implements the Cluster.DrainNode RPC (control's
// ClusterDrainer) with Drain. Errors: NotFound for a node the metadata
// does not list, else as Drain.
func (n *Node) DrainNode(ctx context.Context, nodeID string) (*sqv1.DrainNodeResponse, error) {
	r, err := n.Drain(ctx, nodeID, false)
	if err != nil {
		return nil, drainStatus(nodeID, n.opts.ClusterID, err)
	}
	n.log.Info("node drained", "node_id", nodeID, "moved_partitions", len(r.Moved), "remaining_partitions", r.Remaining)
	return &sqv1.DrainNodeResponse{MovedPartitions: int32(len(r.Moved)), RemainingPartitions: r.Remaining}, nil
}

// UndrainNode implements the Cluster.UndrainNode RPC (control's
// ClusterDrainer) with Undrain.
func (n *Node) UndrainNode(ctx context.Context, nodeID string) (*sqv1.UndrainNodeResponse, error) {
	if err := n.Undrain(ctx, nodeID); err != nil {
		return nil, drainStatus(nodeID, n.opts.ClusterID, err)
	}
	n.log.Info("node undrained", "node_id", nodeID)
	return &sqv1.UndrainNodeResponse{}, nil
}

// drainStatus turns the metadata's refusal of an unknown node into
// NotFound; other errors pass as they are.
func drainStatus(nodeID, clusterID string, err error) error {
	if errors.Is(err, api.ErrInvalidRequest) {
		return status.Errorf(codes.NotFound, "node %q is not a member of cluster %q", nodeID, clusterID)
	}
	return err
}

// drainedIDs lists the drained nodes of s, sorted.
func drainedIDs(s *meta.State) []string {
	var out []string
	for id := range s.DrainedNodes {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
