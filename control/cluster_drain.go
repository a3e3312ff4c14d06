package control

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
)

// ClusterDrainer is the part of a ClusterBackend that drains nodes
// (gossip.Node implements it; docs/cluster.md "Draining a node"). A
// backend without it answers DrainNode and UndrainNode with Unimplemented.
type ClusterDrainer interface {
	// DrainNode drains nodeID through the controller: its partitions' leadership moves
	// to in-sync followers and it leads nothing more until UndrainNode.
	DrainNode(ctx context.Context, nodeID string) (*sqv1.DrainNodeResponse, error)
	// UndrainNode ends nodeID's drain.
	UndrainNode(ctx context.Context, nodeID string) (*sqv1.UndrainNodeResponse, error)
}

// drainer returns the backend's ClusterDrainer, or the gRPC error to
// answer: FailedPrecondition outside a cluster, Unimplemented for a
// backend that cannot drain, InvalidArgument for an empty node id.
func (c *clusterService) drainer(nodeID string) (ClusterDrainer, error) {
	b := c.s.clusterBackend()
	if b == nil {
		return nil, errNotClustered()
	}
	d, ok := b.(ClusterDrainer)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this node's cluster backend cannot drain nodes")
	}
	if nodeID == "" {
		return nil, invalid("node_id is empty: name the node")
	}
	return d, nil
}

// DrainNode implements sq.v1.Cluster through the backend.
func (c *clusterService) DrainNode(ctx context.Context, req *sqv1.DrainNodeRequest) (*sqv1.DrainNodeResponse, error) {
	d, err := c.drainer(req.NodeId)
	if err != nil {
		return nil, err
	}
	return d.DrainNode(ctx, req.NodeId)
}

// UndrainNode implements sq.v1.Cluster through the backend.
func (c *clusterService) UndrainNode(ctx context.Context, req *sqv1.UndrainNodeRequest) (*sqv1.UndrainNodeResponse, error) {
	d, err := c.drainer(req.NodeId)
	if err != nil {
		return nil, err
	}
	return d.UndrainNode(ctx, req.NodeId)
}
