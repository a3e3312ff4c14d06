package control

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
)

// ClusterBackend is the cluster membership and metadata controller of a
// clustered node (gossip.Node implements it; docs/cluster.md). The Cluster
// service delegates Members, Info, RemoveNode, Join and Propose to it;
// their errors are catalog errors (*api.Error: NO_QUORUM, INVALID_REQUEST,
// ...) sent through ToStatus.
type ClusterBackend interface {
	// Members lists the nodes of the cluster with their membership state,
	// Raft role and addresses.
	Members(ctx context.Context) (*sqv1.MembersResponse, error)
	// Info returns the metadata state as this node has applied it.
	Info(ctx context.Context) (*sqv1.ClusterInfoResponse, error)
	// RemoveNode removes nodeID from the cluster through the controller.
	RemoveNode(ctx context.Context, nodeID string) (*sqv1.RemoveNodeResponse, error)
	// Join admits a node that starts with --seeds.
	Join(ctx context.Context, req *sqv1.JoinRequest) (*sqv1.JoinResponse, error)
	// Propose applies one encoded metadata command through the Raft log.
	Propose(ctx context.Context, cmd []byte) (*sqv1.ProposeResponse, error)
	// Ready returns nil once this node has joined the cluster and caught
	// up with the metadata log, else the reason it is not ready (shown in
	// the /readyz body).
	Ready() error
}

// SetCluster attaches the cluster backend: the Cluster service delegates
// Members, Info, RemoveNode, Join and Propose to it, and readiness (/readyz,
// gRPC health) waits for its Ready to return nil. Call it before the node
// is marked ready; a node without one is a single node outside a cluster.
// The Cluster service's calls other than NodeInfo are served from then on
// even before SetEngine, so that peers can join while this node recovers.
func (s *Server) SetCluster(b ClusterBackend) {
	if !s.cluster.CompareAndSwap(nil, &b) {
		s.cluster.Store(&b)
		s.refreshHealth()
		return
	}
	s.refreshHealth()
	go s.watchCluster()
}

// clusterWatchInterval is how often the gRPC health status is brought in
// line with the backend's Ready.
const clusterWatchInterval = 200 * time.Millisecond

// watchCluster follows the backend's readiness in the gRPC health status
// (which, unlike /readyz, is pushed to its watchers) until StartShutdown.
func (s *Server) watchCluster() {
	t := time.NewTicker(clusterWatchInterval)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
			s.refreshHealth()
		}
	}
}

// clusterBackend returns the backend, or nil when SetCluster was not
// called.
func (s *Server) clusterBackend() ClusterBackend {
	if p := s.cluster.Load(); p != nil {
		return *p
	}
	return nil
}

// clusterReady returns the backend's Ready error, nil without a backend.
func (s *Server) clusterReady() error {
	if b := s.clusterBackend(); b != nil {
		return b.Ready()
	}
	return nil
}

// errNotClustered answers the cluster changes of a node without a
// backend.
func errNotClustered() error {
	return status.Error(codes.FailedPrecondition, "this node is not part of a cluster")
}

// clusterService implements sq.v1.Cluster.
type clusterService struct {
	sqv1.UnimplementedClusterServer
	s *Server
}

// NodeInfo implements sq.v1.Cluster.
func (c *clusterService) NodeInfo(context.Context, *sqv1.NodeInfoRequest) (*sqv1.NodeInfoResponse, error) {
	s := c.s
	o := s.opts
	out := &sqv1.NodeInfoResponse{
		NodeId: o.NodeID, ClusterId: o.ClusterID, Version: o.Version,
		UptimeMs:  o.Now().Sub(s.started).Milliseconds(),
		IoBackend: s.eng().BackendName(), DataDir: s.eng().DataDir(),
		GrpcAddress: s.addr("grpc", o.GRPCAddr), CapnpAddress: s.addr("capnp", o.CapnpAddr), HttpAddress: s.addr("http", o.HTTPAddr),
		GrpcMaxMessageBytes: GrpcMaxMessageBytes,
	}
	if total, free, err := diskSpace(s.eng()); err == nil {
		out.DataDirTotalBytes, out.DataDirFreeBytes = total, free
	}
	for _, t := range s.eng().ListTopics() {
		out.TopicCount++
		if ti, err := s.eng().DescribeTopic(t.Name); err == nil {
			for _, p := range ti.Partitions {
				out.DataBytes += p.SizeBytes
			}
		}
	}
	return out, nil
}

// Members implements sq.v1.Cluster: the backend's members, or this node
// alone (alive, the controller of itself) outside a cluster.
func (c *clusterService) Members(ctx context.Context, _ *sqv1.MembersRequest) (*sqv1.MembersResponse, error) {
	s := c.s
	if b := s.clusterBackend(); b != nil {
		return b.Members(ctx)
	}
	o := s.opts
	return &sqv1.MembersResponse{ClusterId: o.ClusterID, Members: []*sqv1.Member{{
		NodeId: o.NodeID, GrpcAddress: s.addr("grpc", o.GRPCAddr), CapnpAddress: s.addr("capnp", o.CapnpAddr),
		HttpAddress: s.addr("http", o.HTTPAddr), State: "alive", Self: true, Voter: true, Controller: true,
	}}}, nil
}

// Info implements sq.v1.Cluster: the backend's metadata state, or outside
// a cluster this node alone: its own controller, with the engine's topics
// and no Raft log (term and indexes 0, no metadata hash).
func (c *clusterService) Info(ctx context.Context, _ *sqv1.ClusterInfoRequest) (*sqv1.ClusterInfoResponse, error) {
	s := c.s
	if b := s.clusterBackend(); b != nil {
		return b.Info(ctx)
	}
	o := s.opts
	out := &sqv1.ClusterInfoResponse{ClusterId: o.ClusterID, NodeId: o.NodeID, ControllerId: o.NodeID,
		MemberCount: 1, VoterCount: 1, Ready: s.Ready()}
	if s.hasEngine() {
		for _, t := range s.eng().ListTopics() {
			out.TopicCount++
			out.PartitionCount += int32(t.PartitionCount)
		}
	}
	return out, nil
}

// RemoveNode implements sq.v1.Cluster through the backend;
// FailedPrecondition outside a cluster.
func (c *clusterService) RemoveNode(ctx context.Context, req *sqv1.RemoveNodeRequest) (*sqv1.RemoveNodeResponse, error) {
	b := c.s.clusterBackend()
	if b == nil {
		return nil, errNotClustered()
	}
	if req.NodeId == "" {
		return nil, invalid("node_id is empty: name the node to remove")
	}
	return b.RemoveNode(ctx, req.NodeId)
}

// Join implements sq.v1.Cluster through the backend; FailedPrecondition
// outside a cluster.
func (c *clusterService) Join(ctx context.Context, req *sqv1.JoinRequest) (*sqv1.JoinResponse, error) {
	b := c.s.clusterBackend()
	if b == nil {
		return nil, errNotClustered()
	}
	return b.Join(ctx, req)
}

// Propose implements sq.v1.Cluster through the backend;
// FailedPrecondition outside a cluster.
func (c *clusterService) Propose(ctx context.Context, req *sqv1.ProposeRequest) (*sqv1.ProposeResponse, error) {
	b := c.s.clusterBackend()
	if b == nil {
		return nil, errNotClustered()
	}
	if len(req.Command) == 0 {
		return nil, invalid("command is empty")
	}
	return b.Propose(ctx, req.Command)
}
