package control

import (
	"context"

	"github.com/seedqueue/sq/api/sqv1"
)

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

// Members implements sq.v1.Cluster: this node alone until clustering
// exists.
func (c *clusterService) Members(context.Context, *sqv1.MembersRequest) (*sqv1.MembersResponse, error) {
	s := c.s
	o := s.opts
	return &sqv1.MembersResponse{ClusterId: o.ClusterID, Members: []*sqv1.Member{{
		NodeId: o.NodeID, GrpcAddress: s.addr("grpc", o.GRPCAddr), CapnpAddress: s.addr("capnp", o.CapnpAddr), State: "alive", Self: true,
	}}}, nil
}
