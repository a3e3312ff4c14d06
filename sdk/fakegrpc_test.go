package sdk

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
)

// fakeGrpcCluster is a cluster of in-test gRPC nodes for the gRPC routing
// tests: one topic whose partitions are each led by one node at an
// epoch; DescribeTopic states the leaders, Members every node's gRPC
// address; Publish and Subscribe of a partition a node does not lead
// answer NOT_LEADER naming the leader's id and a data-plane address that
// nothing listens on (so following it needs the Members list), and a
// subscription ends so when its partition moves away.
type fakeGrpcCluster struct {
	topic string
	parts int
	nodes []*fakeGrpcNode

	mu      sync.Mutex
	lead    map[uint32]fakeLead
	refused map[int]int        // NOT_LEADER answers per node
	changed chan struct{}      // closed and replaced on every change
	stored  map[int][][][]byte // node -> partition -> values
	accepts atomic.Int64       // connections the nodes accepted
	id      [16]byte
	acks    []sqv1.Acks // the acks of every publish, in order
}

type fakeGrpcNode struct {
	sqv1.UnimplementedTopicsServer
	sqv1.UnimplementedClusterServer
	sqv1.UnimplementedMessagingServer
	fc   *fakeGrpcCluster
	i    int
	id   string
	addr string
	stop func() // stops the node's server (as a killed node), once
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// newFakeGrpcCluster starts n nodes serving topic with parts partitions,
// partition p led by node p mod n at epoch 1; they stop with the test.
func newFakeGrpcCluster(t *testing.T, n int, topic string, parts int) *fakeGrpcCluster {
	fc := &fakeGrpcCluster{topic: topic, parts: parts, lead: map[uint32]fakeLead{}, refused: map[int]int{},
		changed: make(chan struct{}), stored: map[int][][][]byte{}, id: [16]byte{1, 2, 3}}
	for p := range parts {
		fc.lead[uint32(p)] = fakeLead{node: p % n, epoch: 1}
	}
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		node := &fakeGrpcNode{fc: fc, i: i, id: fmt.Sprintf("node-%d", i), addr: ln.Addr().String()}
		fc.stored[i] = make([][][]byte, parts)
		srv := grpc.NewServer()
		sqv1.RegisterTopicsServer(srv, node)
		sqv1.RegisterClusterServer(srv, node)
		sqv1.RegisterMessagingServer(srv, node)
		done := make(chan struct{})
		go func() { _ = srv.Serve(countingListener{ln, &fc.accepts}); close(done) }()
		node.stop = sync.OnceFunc(func() { srv.Stop(); <-done })
		t.Cleanup(node.stop)
		fc.nodes = append(fc.nodes, node)
	}
	return fc
}

// move makes node lead partition at the next epoch, with the records of
// the former leader (as an in-sync replica would hold them).
func (fc *fakeGrpcCluster) move(partition uint32, node int) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	l := fc.lead[partition]
	fc.stored[node][partition] = append([][]byte(nil), fc.stored[l.node][partition]...)
	fc.lead[partition] = fakeLead{node: node, epoch: l.epoch + 1}
	close(fc.changed)
	fc.changed = make(chan struct{})
}

// values returns what node holds of partition.
func (fc *fakeGrpcCluster) values(node int, partition uint32) []string {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	var out []string
	for _, v := range fc.stored[node][partition] {
		out = append(out, string(v))
	}
	return out
}

func (fc *fakeGrpcCluster) refusals(node int) int {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.refused[node]
}

// gateLocked returns NOT_LEADER unless n leads partition; fc.mu held.
func (n *fakeGrpcNode) gateLocked(partition uint32) error {
	l := n.fc.lead[partition]
	if l.node == n.i {
		return nil
	}
	n.fc.refused[n.i]++
	e := api.NewError(api.CodeNotLeader, "%s does not lead partition %d", n.id, partition)
	e.LeaderID, e.LeaderAddr = n.fc.nodes[l.node].id, "192.0.2.1:6064" // TEST-NET-1: unreachable
	return control.ToStatus(e)
}

func (n *fakeGrpcNode) DescribeTopic(_ context.Context, r *sqv1.DescribeTopicRequest) (*sqv1.DescribeTopicResponse, error) {
	fc := n.fc
	if r.Name != fc.topic {
		return nil, control.ToStatus(api.NewError(api.CodeUnknownTopic, "no topic %q", r.Name))
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	ti := &sqv1.TopicInfo{Name: fc.topic, PartitionCount: int32(fc.parts), TopicId: fc.id[:]}
	for p := range uint32(fc.parts) {
		l := fc.lead[p]
		hw := uint64(len(fc.stored[l.node][p]))
		ti.Partitions = append(ti.Partitions, &sqv1.PartitionInfo{Partition: int32(p), HighWatermark: hw, LogEndOffset: hw,
			Leader: fc.nodes[l.node].id, LeaderEpoch: l.epoch})
	}
	return &sqv1.DescribeTopicResponse{Topic: ti}, nil
}

func (n *fakeGrpcNode) Members(context.Context, *sqv1.MembersRequest) (*sqv1.MembersResponse, error) {
	r := &sqv1.MembersResponse{}
	for _, m := range n.fc.nodes {
		r.Members = append(r.Members, &sqv1.Member{NodeId: m.id, GrpcAddress: m.addr, CapnpAddress: "192.0.2.1:6064", State: "alive", Self: m == n})
	}
	return r, nil
}

func (n *fakeGrpcNode) Publish(_ context.Context, r *sqv1.PublishRequest) (*sqv1.PublishResponse, error) {
	fc := n.fc
	fc.mu.Lock()
	defer fc.mu.Unlock()
	p := uint32(r.Partition)
	if err := n.gateLocked(p); err != nil {
		return nil, err
	}
	base := uint64(len(fc.stored[n.i][p]))
	for _, rec := range r.Records {
		fc.stored[n.i][p] = append(fc.stored[n.i][p], rec.Value)
	}
	close(fc.changed)
	fc.changed = make(chan struct{})
	fc.acks = append(fc.acks, r.Acks)
	// As a leader with three in-sync replicas.
	dur, replicas := sqv1.Durability_DURABILITY_REPLICATED, int32(3)
	if r.Acks == sqv1.Acks_ACKS_LEADER {
		dur, replicas = sqv1.Durability_DURABILITY_SYNCED, 1
	}
	return &sqv1.PublishResponse{Topic: r.Topic, Partition: r.Partition, BaseOffset: base, RecordCount: uint32(len(r.Records)), Durability: dur, Replicas: replicas}, nil
}

// Subscribe streams the partition from the requested offset until the
// client goes or the partition moves to another node (NOT_LEADER).
func (n *fakeGrpcNode) Subscribe(r *sqv1.SubscribeRequest, st grpc.ServerStreamingServer[sqv1.SubscribeResponse]) error {
	fc, p, off := n.fc, uint32(r.Partition), r.Offset
	for {
		fc.mu.Lock()
		if err := n.gateLocked(p); err != nil {
			fc.mu.Unlock()
			return err
		}
		resp := &sqv1.SubscribeResponse{Topic: r.Topic, Partition: r.Partition, TopicId: fc.id[:]}
		for ; off < uint64(len(fc.stored[n.i][p])); off++ {
			resp.Records = append(resp.Records, &sqv1.ConsumedRecord{Offset: off, Value: fc.stored[n.i][p][off]})
		}
		resp.HighWatermark = off
		changed := fc.changed
		fc.mu.Unlock()
		if len(resp.Records) > 0 {
			if err := st.Send(resp); err != nil {
				return err
			}
		}
		select {
		case <-changed:
		case <-st.Context().Done():
			return st.Context().Err()
		}
	}
}
