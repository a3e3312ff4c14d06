package dataplane

import (
	"capnproto.org/go/capnp/v3"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
)

// ClusterBroker is implemented by a Broker that is part of a cluster (the
// cluster layer's broker; docs/cluster.md). Metadata responses then list
// its nodes and cluster id; a Broker without it is a single node that
// metadata lists alone, alive, at its data-plane address.
type ClusterBroker interface {
	// Nodes returns every node of the cluster with its addresses and
	// whether gossip holds it alive.
	Nodes() []api.Node
	// ClusterID returns the cluster's id (--cluster-id).
	ClusterID() string
}

// brokers returns the nodes and cluster id metadata responses list.
func (s *Server) brokers() ([]api.Node, string) {
	if cb, ok := s.broker.(ClusterBroker); ok {
		return cb.Nodes(), cb.ClusterID()
	}
	return []api.Node{{ID: s.opts.NodeID, DataAddr: s.dataAddress(), Alive: true}}, s.opts.ClusterID
}

// checkReplicationFactor refuses, on a Broker outside a cluster, a
// replication factor above 1 with INVALID_CONFIG: a single node holds one
// replica of each partition. A ClusterBroker checks the factor against its
// nodes itself.
func (s *Server) checkReplicationFactor(rf int32) error {
	if _, ok := s.broker.(ClusterBroker); ok || rf <= 1 {
		return nil
	}
	return api.NewError(api.CodeInvalidConfig, "replication factor %d exceeds the 1 node(s) of this cluster", rf)
}

// checkMinInsync refuses, on a Broker outside a cluster, a
// min.insync.replicas above 1 with INVALID_CONFIG: the one replica there
// is cannot make a larger in-sync set. A ClusterBroker checks it against
// the topic's replication factor itself.
func (s *Server) checkMinInsync(n int32) error {
	if _, ok := s.broker.(ClusterBroker); ok || n <= 1 {
		return nil
	}
	return api.NewError(api.CodeInvalidConfig, "min.insync.replicas %d exceeds the replication factor 1 of a single node", n)
}

// placements returns one PartitionInfo per partition of info carrying its
// placement: info.Partitions when the broker filled them in, else (a bare
// engine, or ListTopics without partitions) this node leads each
// partition, its only replica.
func (s *Server) placements(info engine.TopicInfo) []engine.PartitionInfo {
	if len(info.Partitions) > 0 {
		return info.Partitions
	}
	out := make([]engine.PartitionInfo, info.PartitionCount)
	for i := range out {
		out[i] = engine.PartitionInfo{Partition: i}
	}
	return out
}

// encodePlacement sets p's leader, leader epoch, replicas and in-sync
// replicas from e; a partition without a leader or replicas (a bare
// engine) is led by this node alone.
func (s *Server) encodePlacement(p api.PartitionInfo, e engine.PartitionInfo) error {
	leader, replicas, isr := e.Leader, e.Replicas, e.ISR
	if leader == "" && len(replicas) == 0 {
		self := []string{s.opts.NodeID}
		leader, replicas, isr = s.opts.NodeID, self, self
	}
	if err := p.SetLeader(leader); err != nil {
		return err
	}
	p.SetLeaderEpoch(e.LeaderEpoch)
	if err := setTextList(len(replicas), p.NewReplicas, replicas); err != nil {
		return err
	}
	return setTextList(len(isr), p.NewIsr, isr)
}

// setTextList fills a new Text list of n elements with ss.
func setTextList(n int, newList func(int32) (capnp.TextList, error), ss []string) error {
	l, err := newList(int32(n))
	if err != nil {
		return err
	}
	for i, s := range ss {
		if err := l.Set(i, s); err != nil {
			return err
		}
	}
	return nil
}

// encodeBrokers sets the metadata response's brokers and cluster id.
func (s *Server) encodeBrokers(m api.MetadataResponse) error {
	nodes, clusterID := s.brokers()
	if err := m.SetClusterId(clusterID); err != nil {
		return err
	}
	l, err := m.NewBrokers(int32(len(nodes)))
	if err != nil {
		return err
	}
	for i, n := range nodes {
		b := l.At(i)
		if err := b.SetNodeId(n.ID); err != nil {
			return err
		}
		if err := b.SetDataAddress(n.DataAddr); err != nil {
			return err
		}
		if err := b.SetGrpcAddress(n.GRPCAddr); err != nil {
			return err
		}
		b.SetAlive(n.Alive)
	}
	return nil
}

// encodeMetadataTopic fills t for a metadata response: the topic and, per
// partition, only its placement (no offsets or sizes).
func (s *Server) encodeMetadataTopic(t api.TopicInfo, info engine.TopicInfo) error {
	if err := s.encodeTopic(t, info, false); err != nil {
		return err
	}
	parts := s.placements(info)
	l, err := t.NewPartitionInfos(int32(len(parts)))
	if err != nil {
		return err
	}
	for i, p := range parts {
		pi := l.At(i)
		pi.SetPartition(uint32(p.Partition))
		if err := s.encodePlacement(pi, p); err != nil {
			return err
		}
	}
	return nil
}
