package gossip

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/gossip/meta"
)

// nodeRemoteLog is an engine.RemoteLog with no remote data whose Stats
// name the node that answers: LagSegments is the node's number, Segments
// the partition's.
type nodeRemoteLog int

func (nodeRemoteLog) Bounds(string, api.TopicID, int) (uint64, uint64, bool) { return 0, 0, false }

func (nodeRemoteLog) Fetch(context.Context, string, api.TopicID, int, uint64, int) ([][]byte, error) {
	return nil, api.NewError(api.CodeOffsetOutOfRange, "no remote log")
}

func (n nodeRemoteLog) Stats(_ string, _ api.TopicID, partition int) (engine.RemoteStats, bool) {
	return engine.RemoteStats{LogStartOffset: 10, EndOffset: 20, Segments: partition, Bytes: 1 << 20, LagSegments: int(n), LagBytes: 7}, true
}

// In a cluster the describe shows each partition's remote log stats from
// its leader, whichever node describes: the leader's own storage for the
// partitions it leads, its DescribeLocal for the others.
func TestDescribeRemoteStatsFromLeader(t *testing.T) {
	m := newFakeMeta(t, "n1", "n2")
	nodes := map[string]*testNode{"n1": newTestNode(t, m, "n1", "", true), "n2": newTestNode(t, m, "n2", "", true)}
	number := map[string]int{"n1": 1, "n2": 2}
	for id, n := range nodes {
		n.eng.SetRemoteLog(nodeRemoteLog(number[id]))
	}
	if _, err := nodes["n1"].b.CreateTopic("t", 4, engine.TopicConfig{ReplicationFactor: 2}); err != nil {
		t.Fatal(err)
	}
	led := map[string]int{}
	for _, p := range m.state0().Topics["t"].Partitions {
		led[p.Leader]++
	}
	if led["n1"] == 0 || led["n2"] == 0 {
		t.Fatalf("leaders not spread: %v", led)
	}
	for id, n := range nodes {
		d, err := n.b.DescribeTopic("t")
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range d.Partitions {
			want := engine.RemoteStats{LogStartOffset: 10, EndOffset: 20, Segments: i, Bytes: 1 << 20, LagSegments: number[p.Leader], LagBytes: 7}
			if p.Err != nil || p.Remote == nil || *p.Remote != want {
				t.Fatalf("described on %s: partition %d (leader %s): remote %+v, err %v; want %+v", id, i, p.Leader, p.Remote, p.Err, want)
			}
		}
	}
}

// describingTopics answers every DescribeTopic with topic.
type describingTopics struct {
	sqv1.UnimplementedTopicsServer
	topic *sqv1.TopicInfo
}

func (s describingTopics) DescribeTopic(context.Context, *sqv1.DescribeTopicRequest) (*sqv1.DescribeTopicResponse, error) {
	return &sqv1.DescribeTopicResponse{Topic: s.topic}, nil
}

// PeerDescribe carries a peer's remote log stats over gRPC; a partition
// without them (tiered storage off) has none.
func TestPeerDescribeRemoteStats(t *testing.T) {
	n := mustStart(t, testOptions(t, "n1", t.TempDir()))
	waitReady(t, n)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	id := api.NewTopicID()
	srv := grpc.NewServer()
	sqv1.RegisterTopicsServer(srv, describingTopics{topic: &sqv1.TopicInfo{Name: "t", PartitionCount: 2, TopicId: id.Bytes(), Partitions: []*sqv1.PartitionInfo{
		{Partition: 0, LogEndOffset: 5, Remote: &sqv1.RemoteLogStats{LogStartOffset: 1, EndOffset: 4, Segments: 2, Bytes: 300, LagSegments: 1, LagBytes: 100}},
		{Partition: 1, LogEndOffset: 5},
	}}})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := n.ProposeCommand(ctx, meta.Command{Op: meta.OpRegisterNode, Node: &meta.Node{ID: "peer", GRPCAddr: ln.Addr().String(), DataAddr: ln.Addr().String()}})
	if err != nil || res.Err != nil {
		t.Fatalf("register the peer: %v %v", err, res.Err)
	}
	ti, err := n.BrokerCluster().PeerDescribe(ctx, "peer", "t")
	if err != nil {
		t.Fatal(err)
	}
	want := engine.RemoteStats{LogStartOffset: 1, EndOffset: 4, Segments: 2, Bytes: 300, LagSegments: 1, LagBytes: 100}
	if len(ti.Partitions) != 2 || ti.Partitions[0].Remote == nil || *ti.Partitions[0].Remote != want || ti.Partitions[1].Remote != nil {
		t.Fatalf("described partitions %+v; want partition 0's remote %+v, none for partition 1", ti.Partitions, want)
	}
}
