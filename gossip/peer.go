package gossip

import (
	"context"
	"fmt"

	"google.golang.org/grpc/metadata"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
)

// DescribeLocalHeader is the gRPC request metadata key that asks a node's
// Topics.DescribeTopic for its own storage's statistics only
// (Broker.DescribeLocal), never asking other nodes: the calls one node
// makes to the leaders while describing a topic carry it, so describes
// never recurse between nodes. Its value is "1".
const DescribeLocalHeader = "sq-describe-local"

// BrokerCluster is the Cluster a Broker uses on node n: n's metadata,
// liveness and proposals, and the statistics of partitions led elsewhere
// read from their leaders over gRPC (Topics.DescribeTopic with
// DescribeLocalHeader, through n's connection pool).
func (n *Node) BrokerCluster() Cluster { return nodeCluster{n} }

// nodeCluster adapts a *Node to Cluster: Node's Propose takes the encoded
// command of the gRPC plane (control.ClusterBackend), Cluster's the
// decoded one.
type nodeCluster struct{ *Node }

// Propose implements Cluster with Node.ProposeCommand.
func (c nodeCluster) Propose(ctx context.Context, cmd meta.Command) (meta.Result, error) {
	return c.ProposeCommand(ctx, cmd)
}

// PeerDescribe implements Cluster: topic as node nodeID's own storage
// describes it. Errors: LEADER_NOT_AVAILABLE when the node is not
// registered or has no gRPC address; the peer's catalog error as an
// *api.Error (errors.Is with the api sentinels works: UNKNOWN_TOPIC from
// a peer that lags behind in the metadata log); else the transport's.
func (c nodeCluster) PeerDescribe(ctx context.Context, nodeID, topic string) (engine.TopicInfo, error) {
	s := c.State()
	var addr string
	if s != nil {
		addr = s.Nodes[nodeID].GRPCAddr
	}
	if addr == "" {
		return engine.TopicInfo{}, api.NewError(api.CodeLeaderNotAvailable, "node %s has no known gRPC address", nodeID)
	}
	conn, err := c.conns.conn(addr)
	if err != nil {
		return engine.TopicInfo{}, err
	}
	ctx = metadata.AppendToOutgoingContext(ctx, DescribeLocalHeader, "1")
	r, err := sqv1.NewTopicsClient(conn).DescribeTopic(ctx, &sqv1.DescribeTopicRequest{Name: topic})
	if err != nil {
		// The peer's catalog error (UNKNOWN_TOPIC from a node that has
		// not applied the topic yet, say) stays one, so the describe can
		// tell a lagging leader from an unreachable one.
		return engine.TopicInfo{}, fmt.Errorf("gossip: describe %s on node %s (%s): %w", topic, nodeID, addr, fromStatus(err))
	}
	return topicInfoFrom(r.GetTopic())
}

// topicInfoFrom converts a described topic's identity and partition
// statistics from the gRPC plane.
func topicInfoFrom(t *sqv1.TopicInfo) (engine.TopicInfo, error) {
	id, err := api.TopicIDFromBytes(t.GetTopicId())
	if err != nil {
		return engine.TopicInfo{}, fmt.Errorf("gossip: described topic %q: %w", t.GetName(), err)
	}
	ti := engine.TopicInfo{Name: t.GetName(), ID: id, PartitionCount: int(t.GetPartitionCount())}
	for _, p := range t.GetPartitions() {
		pi := engine.PartitionInfo{Partition: int(p.Partition), LogStartOffset: p.LogStartOffset,
			HighWatermark: p.HighWatermark, LogEndOffset: p.LogEndOffset, SizeBytes: p.SizeBytes, SegmentCount: int(p.SegmentCount)}
		if r := p.GetRemote(); r != nil {
			pi.Remote = &engine.RemoteStats{LogStartOffset: r.LogStartOffset, EndOffset: r.EndOffset, Segments: int(r.Segments),
				Bytes: r.Bytes, LagSegments: int(r.LagSegments), LagBytes: r.LagBytes}
		}
		if p.Error != "" {
			pi.Err = api.NewError(api.CodePartitionFailed, "%s", p.Error)
		}
		ti.Partitions = append(ti.Partitions, pi)
	}
	return ti, nil
}
